"""GPU accounting, one package for the webhook and the reconciler: a pod's GPU demand as the
scheduler counts it (demand, pod_gpus), the tenant's quota ledger and its compare-and-swap store
(ledger, ledger_store), and the reconciler's per-pod records of what it settled (settled_pods)."""
