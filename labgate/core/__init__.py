"""What the webhook and the reconciler share: the Kubernetes door (`kube`), kinds, the Tenant model,
the GPU ledger, certificates, metric definitions and the admission decision types. Imports neither
`webhook` nor `rbac`."""
