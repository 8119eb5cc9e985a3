"""What receiving a pod's watch event costs a process that follows pods as the reconciler does
(labgate's `Reflector`, labgate/core/kube.py), end to end from a real kube-apiserver: the socket,
TLS, the HTTP chunks, parsing. And what the same process spends when its watch is of another
namespace, so that the apiserver never sends it those events.

    .venv/bin/python -m benchmarks.watch_receive      # about a minute

One local control plane (etcd, kube-apiserver, kube-controller-manager). For each case a reader
process of its own lists and watches pods (cluster-wide, or in one namespace where no pod is
created) and counts the events; this process then creates `--pods` pods (a Job's pod with its
labels and annotations, about 3 KB of JSON as the watch sends it) at `--rate` a second in a fresh
namespace. Prints µs of the reader's CPU (user + system) per pod created, the best of the rounds.
The cluster-wide watch is measured twice: read an event at a time, and a burst at a time as the
reconciler reads its pod watch (`Reflector(batch_seconds=...)`, `Pacing.watch_batch_seconds`).
benchmarks/watch_decoding.py measures the parsing alone, on bytes in memory."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.cluster_sim import client_of
from devcluster.controlplane import LocalControlPlane
from labgate.core.api_resources import Kind
from labgate.core.kube import KubeApi, Reflector, api_client
from rbac.reconciler import PACING

POD = Kind("Pod", "", "v1", "pods", is_namespaced=True)
# The namespace the scoped reader watches: no pod is ever created there.
QUIET_NAMESPACE = "quiet"


def read(kubeconfig: Path, namespace: str | None, events: int, batch_seconds: float) -> None:
    """The reader: follow pods until `events` events came or a line "stop" arrives on stdin, then
    print the events seen and the CPU seconds spent since "go"."""
    kube = KubeApi(api_client(kubeconfig), field_manager="benchmark")
    seen = 0
    enough = threading.Event()

    def on_event(_: str, __: Any) -> None:
        nonlocal seen
        seen += 1
        if seen >= events:
            enough.set()

    reflector = Reflector(
        "pods",
        kube.api,
        kube.lister(POD, namespace=namespace),
        on_list=lambda _: None,
        on_event=on_event,
        batch_seconds=batch_seconds,
    )
    reflector.start()
    reflector.has_synced.wait(30)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    started = time.process_time()

    def until_stop() -> None:
        sys.stdin.readline()
        enough.set()

    threading.Thread(target=until_stop, daemon=True).start()
    enough.wait(300)
    spent = time.process_time() - started
    print(json.dumps({"events": seen, "cpu_seconds": spent}), flush=True)
    reflector.stop()


def pod(index: int) -> dict[str, Any]:
    """A Job's pod as the Job controller creates it: labels, an annotation record, a GPU limit."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{index:05d}",
            "labels": {
                "batch.kubernetes.io/job-name": "train",
                "job-name": "train",
                "batch.kubernetes.io/controller-uid": "6f1c2a34-0000-4000-8000-000000000000",
                "controller-uid": "6f1c2a34-0000-4000-8000-000000000000",
                "labgate.io/tenant": "team-a",
            },
            "annotations": {f"example.com/note-{n}": "x" * 80 for n in range(12)},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train@sha256:" + "0" * 64,
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


@dataclass(frozen=True)
class Case:
    """One reader: its watch of another namespace (`scoped`) or cluster-wide, read a burst at a time
    (`batch_seconds` > 0) or an event at a time."""

    title: str
    scoped: bool
    batch_seconds: float


CASES = (
    Case("cluster-wide, an event at a time", scoped=False, batch_seconds=0.0),
    Case(
        f"cluster-wide, a burst at a time ({PACING.watch_batch_seconds * 1000:.0f} ms: the reconciler's)",
        scoped=False,
        batch_seconds=PACING.watch_batch_seconds,
    ),
    Case("of another namespace", scoped=True, batch_seconds=0.0),
)


def one_run(
    control_plane: LocalControlPlane, case: Case, *, pods: int, rate: float, namespace: str
) -> tuple[int, float]:
    """(events the reader saw, µs of its CPU per pod created)."""
    scoped = case.scoped
    watched = QUIET_NAMESPACE if scoped else ""
    reader = subprocess.Popen(
        [
            *(sys.executable, "-m", "benchmarks.watch_receive", "--pods", str(pods)),
            *("--read", str(control_plane.admin_kubeconfig), watched, str(case.batch_seconds)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if reader.stdin is None or reader.stdout is None:
        raise RuntimeError("the reader's pipes did not open")
    try:
        if reader.stdout.readline().strip() != "ready":
            raise RuntimeError("the reader did not sync")
        admin = client_of(control_plane.admin_kubeconfig, control_plane.server)
        created = admin.post("/api/v1/namespaces", json={"metadata": {"name": namespace}})
        created.raise_for_status()
        reader.stdin.write("go\n")
        reader.stdin.flush()
        began = time.monotonic()
        for index in range(pods):
            admin.post(f"/api/v1/namespaces/{namespace}/pods", json=pod(index)).raise_for_status()
            ahead = began + (index + 1) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        if scoped:  # it will see none of them: give the apiserver its moment, then stop it
            time.sleep(2)
            reader.stdin.write("stop\n")
            reader.stdin.flush()
        result = json.loads(reader.stdout.readline())
        return int(result["events"]), float(result["cpu_seconds"]) / pods * 1e6
    finally:
        reader.terminate()
        reader.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=300.0, help="pods created a second")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--read", nargs=3, metavar=("KUBECONFIG", "NAMESPACE", "BATCH_SECONDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.read:
        kubeconfig, namespace, batch_seconds = args.read
        read(Path(kubeconfig), namespace or None, args.pods, float(batch_seconds))
        return
    with tempfile.TemporaryDirectory() as directory, LocalControlPlane(Path(directory)) as control_plane:
        best = dict.fromkeys(CASES, float("inf"))
        seen = dict.fromkeys(CASES, 0)
        run = 0
        for _ in range(args.rounds):
            for case in CASES:
                run += 1
                events, cost = one_run(
                    control_plane, case, pods=args.pods, rate=args.rate, namespace=f"load-{run}"
                )
                best[case], seen[case] = min(best[case], cost), events
        print(f"{args.pods} pods created at {args.rate:.0f}/s, best of {args.rounds} rounds")
        print("| the reader's pod watch | events it received | µs of its CPU a pod created |")
        print("| --- | ---: | ---: |")
        for case in CASES:
            print(f"| {case.title} | {seen[case]} | {best[case]:.0f} |")


if __name__ == "__main__":
    main()
