"""labgate's Python packages, by floor (the import-linter contracts in pyproject.toml keep them so).

From the top: the dev cluster (`devcluster`, tests and `make run` only) and the command line
(`labgate.cli`); the admission webhook (`webhook`) and the tenant reconciler (`rbac`), side by side,
never importing each other; GPU accounting (`labgate.gpu_accounting`: demand, the quota ledger, its
settlement); and the shared core (`labgate.core`: the Kubernetes door, Tenant model, decisions,
amounts, metrics), imported by everything above it.
"""
