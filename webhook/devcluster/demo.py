"""What `make run` shows: example tenants, then a researcher's accepted and refused `kubectl apply`."""

from __future__ import annotations

from webhook.devcluster.kubectl import kubectl
from webhook.devcluster.stack import LabgateStack
from webhook.devcluster.tools import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def run_demo(stack: LabgateStack) -> None:
    """Create the example tenants and show alice (team-a) applying into her namespace and into team-b's."""
    stack.admin_kubectl("apply", "-f", str(EXAMPLES / "tenants.yaml"))
    stack.admin_kubectl("apply", "-f", str(EXAMPLES / "namespaces.yaml"))
    stack.admin_kubectl("apply", "-f", str(EXAMPLES / "open-rbac.yaml"))
    alice = stack.kubeconfig_for("alice", ("team-a",))
    pod = str(EXAMPLES / "experiment-pod.yaml")
    print("\nExample tenants team-a (alice is a researcher) and team-b are created.")
    for namespace in ("team-a", "team-b"):
        print(f"\n$ kubectl --kubeconfig {alice} apply -n {namespace} -f examples/experiment-pod.yaml")
        result = kubectl(alice, "apply", "-n", namespace, "-f", pod)
        print((result.stdout + result.stderr).rstrip())
        print(f"(exit code {result.returncode}: {'accepted' if result.returncode == 0 else 'refused'})")
