"""labgate's ground floor: what the webhook and the reconciler share, imported by every floor above.

labgate's Python is five top-level packages, one folder per floor, from the top (the import-linter
contracts in pyproject.toml keep them so): the dev cluster (`devcluster`, tests and `make run`
only); the command line (`cli`, the `labgate` command); the admission webhook (`webhook`) and the
tenant reconciler (`rbac`), side by side, never importing each other; and this package, which
imports none of them. Inside it, GPU accounting (`labgate.gpu_accounting`: demand, the quota
ledger, its settlement) sits over the shared core (`labgate.core`: the Kubernetes door, the Tenant
model, decisions, amounts, metrics).
"""
