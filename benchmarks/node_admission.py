"""Admission as a researcher meets it: labgate installed by Helm on a real node (called through the
chart's Service) against labgate as host processes (the `make run` stack), at the same rate, in one run.

    .venv/bin/python -m benchmarks.node_admission [--rate 10] [--seconds 60] [--write docs/benchmarks.md]

Both clusters run two webhook replicas, the Tenants of examples/tenants.yaml and the same stream: a
server-side dry run (`POST .../pods?dryRun=All`, both webhooks called, nothing stored) of
examples/experiment-pod.yaml as alice in team-a, one call at a time at `--rate` calls a second, timed
by the client from request to answer. Beside it, the same stream as the admin in kube-system, which
labgate's webhooks exempt: the apiserver's own share of each call, so that the difference is what the
webhooks cost. The clusters run one after the other (two at once would measure each other); the load
average is recorded with each row. Not part of `make test`: the node needs root (see CONTRIBUTING.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.report import replace_section
from devcluster.admission_stream import AdmissionStream
from devcluster.image import build
from devcluster.kubectl import kubectl
from devcluster.node import node_problem
from devcluster.node_chart import install_chart
from devcluster.node_cluster import NodeCluster
from devcluster.stack import LabgateStack
from devcluster.tools import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
ALICE = ("alice", ("team-a",))


@dataclass(frozen=True)
class Row:
    """One stream: where it ran, what it met, and its latencies in milliseconds."""

    cluster: str
    path: str
    calls: int
    not_admitted: int
    p50_ms: float
    p99_ms: float
    load: float


@dataclass(frozen=True)
class Load:
    """The stream every row sends: calls a second, for how long, and where its files go."""

    rate: float
    seconds: float
    workdir: Path


def stream_row(
    load: Load, cluster: str, path: str, *, kubeconfig: Path, namespace: str, seconds: float
) -> Row:
    pod: dict[str, Any] = yaml.safe_load((EXAMPLES / "experiment-pod.yaml").read_text())
    with AdmissionStream(kubeconfig, namespace, {"pod": pod}, load.workdir, rate=load.rate) as stream:
        time.sleep(seconds)  # the stream runs this long: the measurement's length, not a wait for a state
    calls = list(stream.calls)
    took = sorted(c.took * 1000 for c in calls)
    cuts = statistics.quantiles(took, n=100, method="inclusive")
    not_admitted = sum(not c.is_admitted for c in calls)
    return Row(cluster, path, len(calls), not_admitted, cuts[49], cuts[98], os.getloadavg()[0])


def both_paths(load: Load, cluster: str, *, admin: Path, alice: Path) -> list[Row]:
    """Warm the tenant's path for a few seconds, then measure it and the exempt one."""
    applied = kubectl(admin, "apply", "-f", str(EXAMPLES / "tenants.yaml"))
    if applied.returncode != 0:
        raise RuntimeError(applied.stderr)
    waited = kubectl(admin, "wait", "--for=condition=Ready", "--timeout=180s", "tenant/team-a")
    if waited.returncode != 0:
        raise RuntimeError(waited.stderr)
    stream_row(load, cluster, "warm-up", kubeconfig=alice, namespace="team-a", seconds=5)
    tenant = "team-a (labgate's webhooks)"
    exempt = "kube-system (exempt: no webhook)"
    return [
        stream_row(load, cluster, tenant, kubeconfig=alice, namespace="team-a", seconds=load.seconds),
        stream_row(load, cluster, exempt, kubeconfig=admin, namespace="kube-system", seconds=load.seconds),
    ]


def run(load: Load) -> list[Row]:
    problem = node_problem()
    if problem is not None:
        raise SystemExit(f"a real node cannot run here: {problem}")
    archive = build().archive
    rows: list[Row] = []
    with NodeCluster(load.workdir / "node-cluster") as cluster:
        release = install_chart(cluster, archive, load.workdir)
        print(f"helm install to ready: {release.seconds} s", file=sys.stderr)
        plane = cluster.control_plane
        alice = plane.kubeconfig_for(*ALICE)
        rows += both_paths(load, "chart on a real node (Service)", admin=plane.admin_kubeconfig, alice=alice)
    with LabgateStack(load.workdir / "stack", webhook_replicas=2) as stack:
        alice = stack.kubeconfig_for(*ALICE)
        rows += both_paths(load, "host processes (make run)", admin=stack.admin_kubeconfig, alice=alice)
    return rows


def markdown(rows: list[Row], *, rate: float, seconds: float) -> str:
    lines = [
        f"Run {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores), {rate:g} dry-run pod "
        f"creates a second for {seconds:g} s per row, one at a time, timed by the client:",
        "",
        "| cluster | namespace | calls | not admitted | p50 ms | p99 ms | load |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.cluster} | {r.path} | {r.calls} | {r.not_admitted} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.load:.1f} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=10.0, help="calls a second (default 10)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each measured stream")
    parser.add_argument("--write", type=Path, help="replace the node-admission section of this markdown file")
    args = parser.parse_args()
    load = Load(args.rate, args.seconds, Path(tempfile.mkdtemp(prefix="labgate-node-bench-")))
    try:
        table = markdown(run(load), rate=args.rate, seconds=args.seconds)
    finally:
        shutil.rmtree(load.workdir, ignore_errors=True)  # the node's state and the logs
    print(table)
    if args.write:
        replace_section(args.write, "node-admission", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
