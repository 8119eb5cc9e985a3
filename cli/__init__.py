"""The `labgate` command: serve, reconcile, audit, check, policy, snapshot, generate, decisions verify.

Its floor, among labgate's (pyproject.toml's import contracts): under only the dev cluster
(`devcluster`); over the admission webhook (`webhook`) and the tenant reconciler (`rbac`), which it
starts, and the ground floor below them, GPU accounting (`labgate.gpu_accounting`) and the shared
core (`labgate.core`). Nothing shipped imports it.
"""
