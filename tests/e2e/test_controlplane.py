"""The local control plane is a real one: real versions, real x509 users, RBAC, native controllers,
and processes that are gone when it stops."""

from __future__ import annotations

import json
import os
import re
import urllib.request
import uuid
from pathlib import Path

import pytest

from devcluster.__main__ import where_things_are
from devcluster.controlplane import LocalControlPlane
from devcluster.demo import EXAMPLE_MEMBERS, run_demo
from devcluster.kubectl import kubectl
from devcluster.nodes import POOLS_DIR, load_pools
from devcluster.stack import LabgateStack, NodeSimulation
from devcluster.tools import pinned_versions

pytestmark = pytest.mark.controlplane


def test_server_and_client_report_the_pinned_version(stack: LabgateStack) -> None:
    versions = json.loads(stack.admin_kubectl("version", "-o", "json"))
    pinned = pinned_versions()["KUBERNETES_VERSION"]
    assert versions["serverVersion"]["gitVersion"] == pinned
    assert versions["clientVersion"]["gitVersion"] == pinned


def test_client_certificate_users_carry_their_groups(stack: LabgateStack) -> None:
    alice = stack.kubeconfig_for("alice", ("team-a", "gpu-users"))
    who = json.loads(kubectl(alice, "auth", "whoami", "-o", "json").stdout)
    assert who["status"]["userInfo"]["username"] == "alice"
    assert {"team-a", "gpu-users", "system:authenticated"} <= set(who["status"]["userInfo"]["groups"])


def test_rbac_is_enforced_for_researchers(stack: LabgateStack) -> None:
    nobody = stack.kubeconfig_for("mallory", ("outsiders",))
    result = kubectl(nobody, "get", "pods", "-n", "default")
    assert result.returncode == 1
    assert 'User "mallory" cannot list resource "pods"' in result.stderr


def test_native_controllers_delete_namespaces_and_fill_quota_status(stack: LabgateStack) -> None:
    name = f"cp-{uuid.uuid4().hex[:6]}"
    stack.admin_kubectl("create", "namespace", name)
    stack.admin_kubectl("label", "namespace", name, "labgate.io/e2e=true")
    stack.admin_kubectl("create", "quota", "q", "-n", name, "--hard=pods=5,requests.nvidia.com/gpu=4")
    # The resourcequota controller computes usage; without it status.used never appears.
    stack.admin_kubectl(
        "wait", "-n", name, "--for=jsonpath={.status.used.pods}=0", "--timeout=60s", "quota/q"
    )
    # The namespace controller finalizes deletion; without it the namespace stays Terminating forever.
    stack.admin_kubectl("delete", "namespace", name, "--wait=true", "--timeout=90s")
    assert stack.cluster_kubectl("get", "namespace", name).returncode == 1


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_second_control_plane_runs_beside_and_stops_without_leftovers(
    stack: LabgateStack, tmp_path: Path
) -> None:
    with LocalControlPlane(tmp_path / "second") as second:
        assert second.server != stack.cluster.server
        pids = [p.pid for p in second.processes]
        assert len(pids) == 3
        assert all(_is_running(pid) for pid in pids)
        nodes = kubectl(second.admin_kubeconfig, "get", "namespaces", "-o", "name")
        assert "namespace/kube-system" in nodes.stdout.split()
    assert not any(_is_running(pid) for pid in pids)
    # The first control plane is untouched.
    assert "namespace/kube-system" in stack.admin_kubectl("get", "namespaces", "-o", "name").split()


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_the_make_run_demo_shows_an_accepted_and_two_refused_applies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the README's first command shows, on a stack of its own with the simulated node pools of
    `make run` (the demo's tenants are named like the policy samples'): alice's experiment is
    accepted, her GPU pod runs on a spot node of her pool, the next one waits for capacity and
    `kubectl describe` says why, her sweep that could never fit is refused by labgate with its rule
    and fix, and team-b's namespace is closed to her."""
    with LabgateStack(tmp_path, nodes=NodeSimulation(pools=load_pools(POOLS_DIR / "lab.yaml"))) as own:
        run_demo(own)
        # One kubeconfig per example member, each defaulting to its tenant's namespace (issue 22 item 9).
        for user, groups, tenant, _ in EXAMPLE_MEMBERS:
            path = own.kubeconfig_for(user, groups)
            namespace = kubectl(path, "config", "view", "--minify", "-o", "jsonpath={..namespace}")
            assert namespace.stdout.strip() == tenant, (user, namespace.stdout)
            assert kubectl(path, "get", "pods").returncode == 0, user  # no -n needed
        addresses = where_things_are(own, tmp_path)
        # Every address `make run` prints answers (issue 22 item 14): the webhook's health and metrics,
        # OPA, the reconciler's metrics; the decision log it names is being written.
        urls = {u: line for line in addresses for u in re.findall(r"http://[^ ;,)]+", line)}
        assert any(u.endswith("/readyz") for u in urls), addresses
        assert any(u.endswith("/v1/policies") for u in urls), addresses
        reconciler_metrics = [u for u, line in urls.items() if "reconciler" in line]
        assert reconciler_metrics, addresses
        for url in urls:
            with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 (loopback)
                assert answer.status == 200, url
                body = answer.read()
            if url in reconciler_metrics:
                assert b"labgate_reconcile" in body, url
        decision_log = Path(
            next(line for line in addresses if "decision log:" in line).split(": ", 1)[1].strip()
        )
        assert decision_log.is_file(), addresses
        assert decision_log.stat().st_size > 0
    shown = capsys.readouterr().out
    assert "Kubeconfigs of the example members" in shown
    assert "--as <user> --as-group <group>" in shown
    gpu_steps = shown.split("# alice runs ")[1:]
    assert len(gpu_steps) == 2, shown
    assert "labgate placed pod on spot pool" in gpu_steps[0], gpu_steps[0]
    wide = gpu_steps[0].split("-o wide")[1]
    assert "Running" in wide
    assert "team-a-spot-0" in wide, wide
    assert "Pending" in gpu_steps[1], gpu_steps[1]
    assert "FailedScheduling" in gpu_steps[1], gpu_steps[1]
    assert "Insufficient nvidia.com/gpu" in gpu_steps[1], gpu_steps[1]
    steps = shown.split("# alice applies ")[1:]
    assert len(steps) == 3, shown
    assert "pod/hello-experiment created" in steps[0], steps[0]
    assert "(exit code 0: accepted)" in steps[0]
    # The first example, a pod without GPUs, is bound: to the lab's untainted CPU pool.
    assert "shared-cpu-0" in steps[0].split("-o wide")[1], steps[0]
    assert "[gpu-quota-unfit]" in steps[1], steps[1]
    assert "Fix:" in steps[1]
    assert "(exit code 1: refused)" in steps[1]
    assert "forbidden" in steps[2].lower(), steps[2]
    assert "(exit code 1: refused)" in steps[2]
