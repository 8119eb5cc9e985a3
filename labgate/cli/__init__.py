"""The `labgate` command: serve, reconcile, check, policy test, decisions verify."""
