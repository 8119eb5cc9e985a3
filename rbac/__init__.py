"""The tenant reconciler: provisions each Tenant (namespaces, RBAC, quotas, NetworkPolicies, Pod
Security, Kueue queues), repairs drift, settles the GPU quota ledger and writes Tenant status.

Its floor, among labgate's (pyproject.toml's import contracts): under the dev cluster
(`devcluster`) and the command line (`cli`), the only packages that import it; beside the
admission webhook (`webhook`), which it never imports; over GPU accounting
(`labgate.gpu_accounting`) and the shared core (`labgate.core`).
"""
