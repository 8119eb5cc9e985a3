"""What `make run` shows: example tenants provisioned by the reconciler, then a researcher's accepted
and refused `kubectl apply`."""

from __future__ import annotations

from devcluster.kubectl import kubectl
from devcluster.stack import LabgateStack
from devcluster.tools import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def run_demo(stack: LabgateStack) -> None:
    """Create the example tenants, then show alice (team-a) applying three things."""
    stack.admin_kubectl("apply", "-f", str(EXAMPLES / "tenants.yaml"))
    for tenant in ("team-a", "team-b"):
        stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=60s", f"tenant/{tenant}")
    print("\nTenants team-a (alice is a researcher) and team-b are provisioned:")
    print(stack.admin_kubectl("get", "tenants").rstrip())
    alice = stack.kubeconfig_for("alice", ("team-a",))
    steps = [
        ("her first experiment, in her team's namespace", "team-a", "experiment-pod.yaml"),
        ("a sweep that could never fit her team's 8 H100 GPUs", "team-a", "gpu-sweep-job.yaml"),
        (
            "the same experiment in team-b's namespace (RBAC labgate provisioned)",
            "team-b",
            "experiment-pod.yaml",
        ),
    ]
    for what, namespace, example in steps:
        print(f"\n# alice applies {what}:")
        print(f"$ kubectl --kubeconfig {alice} apply -n {namespace} -f examples/{example}")
        result = kubectl(alice, "apply", "-n", namespace, "-f", str(EXAMPLES / example))
        print((result.stdout + result.stderr).rstrip().replace(str(EXAMPLES), "examples"))
        print(f"(exit code {result.returncode}: {'accepted' if result.returncode == 0 else 'refused'})")
