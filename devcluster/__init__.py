"""A real local Kubernetes control plane for tests and `make run`: etcd, kube-apiserver,
kube-controller-manager, OPA and the labgate webhook, as plain processes on loopback ports.

Nothing here is used by the webhook in production; it lives in the package so that tests,
benchmarks and `make run` share one implementation.
"""
