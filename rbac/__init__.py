"""The tenant reconciler: provisions each Tenant (namespaces, RBAC, quotas, NetworkPolicies, Pod
Security, Kueue queues), repairs drift, settles the GPU quota ledger and writes Tenant status.

It sits beside the admission webhook (`webhook`) over GPU accounting (`labgate.gpu_accounting`) and
the shared core (`labgate.core`); it never imports the webhook, and only `labgate.cli` and the dev
cluster import it.
"""
