"""`python -m devcluster up --real-node` and `down`: a person's real node, started detached (its processes
outlive the command) and stopped by another command, which leaves nothing of it on the machine.

Skipped, with the reason, where a node cannot run (not root, packages missing, cgroup v2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devcluster.kubectl import kubectl
from devcluster.node import node_problem
from devcluster.node_cgroups import NodeCgroups
from devcluster.node_network import NodeNetwork
from devcluster.tools import REPO_ROOT

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]


def devcluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devcluster", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def processes_naming(path: Path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in text:
            found.append(f"{cmdline.parent.name}: {text[:120]}")
    return found


def test_up_starts_a_ready_node_that_outlives_it_and_down_leaves_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if (problem := node_problem()) is not None:
        pytest.skip(f"a real node cannot run here: {problem}")
    workdir = tmp_path_factory.mktemp("up")  # short: the node's unix sockets live below it
    up = devcluster("up", "--real-node", "--workdir", str(workdir))
    try:
        assert up.returncode == 0, up.stderr
        network = NodeNetwork(**json.loads((workdir / "node-network.json").read_text()))
        assert f"real node {network.name} ready" in up.stdout
        # The command has exited; the node it started still answers, Ready.
        nodes = kubectl(workdir / "controlplane" / "kubeconfigs" / "labgate-admin.kubeconfig", "get", "nodes")
        assert nodes.returncode == 0, nodes.stderr
        assert f"{network.name}   Ready" in nodes.stdout
        assert processes_naming(workdir) != []
    finally:
        down = devcluster("down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stderr
    for name in ("kubelet", "kube-proxy", "containerd", "kube-apiserver", "etcd", "registry"):
        assert f"{name} (pid" in down.stdout
    assert processes_naming(workdir) == []
    assert network.leftovers() == []
    assert NodeCgroups(f"/{network.name}").existing() == []
    assert str(workdir) not in Path("/proc/self/mountinfo").read_text()
    assert not (workdir / "node" / "state").exists()
    assert "stopped nothing" in devcluster("down", "--workdir", str(workdir)).stdout  # idempotent
