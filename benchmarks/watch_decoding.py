"""What reading a watch costs per event: labgate's reader (labgate/core/watch_events.py) against the
Kubernetes client's `Watch` line reader and parser, on the same body of bound-pod events, chunked as
the apiserver sends them (one event a chunk) and in large chunks (a burst read at once).

    .venv/bin/python -m benchmarks.watch_decoding            # a few seconds

Prints microseconds of CPU per event (the best of 5 repeats) for each reader and chunking."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.watch import watch as client_watch

from labgate.core.watch_events import events


def bound_pod(i: int) -> dict[str, Any]:
    """A Job's pod as the scheduler left it (about 2.2 KB of JSON, with managedFields)."""
    uid = f"{i:08d}-0000-4000-8000-000000000000"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"job-r0-{i:05d}",
            "generateName": "job-r0-",
            "namespace": "team-a",
            "uid": uid,
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-12-04T10:00:00Z",
            "labels": {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": "job-r0",
                "controller-uid": uid,
                "job-name": "job-r0",
                "labgate.io/tenant": "team-a",
            },
            "annotations": {"labgate.io/admitted-preemptible": "true"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "job-r0", "uid": uid, "controller": True}
            ],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-12-04T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {f"f:label-{n}": {} for n in range(6)}},
                        "f:spec": {
                            "f:containers": {'k:{"name":"main"}': {f"f:field-{n}": {} for n in range(12)}}
                        },
                    },
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeName": f"kwok-node-{i % 125}",
            "schedulerName": "default-scheduler",
            "nodeSelector": {"labgate.io/pool": "a100"},
            "tolerations": [{"key": "labgate.io/spot", "operator": "Exists", "effect": "NoSchedule"}],
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.lab/train@sha256:" + "a" * 64,
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"},
                        "requests": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"},
                    },
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-04T10:00:01Z"}
            ],
            "qosClass": "Guaranteed",
        },
    }


class _Body:
    """A response body the Kubernetes client's reader accepts (`stream`, as urllib3's)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        return iter(self.chunks)


def client_reader(chunks: list[bytes]) -> int:
    reader = client_watch.Watch()
    count = 0
    for line in client_watch.iter_resp_lines(_Body(chunks)):
        if reader.unmarshal_event(line, "") is not None:
            count += 1
    return count


def labgate_reader(chunks: list[bytes]) -> int:
    return sum(1 for _ in events(chunks))


def per_event_us(read: Callable[[list[bytes]], int], chunks: list[bytes], count: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        assert read(chunks) == count
        best = min(best, time.process_time() - started)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    args = parser.parse_args()
    lines = [
        json.dumps({"type": "MODIFIED", "object": bound_pod(i)}).encode() + b"\n" for i in range(args.events)
    ]
    body = b"".join(lines)
    chunkings = {
        "one event a chunk": lines,
        "64 KiB chunks": [body[i : i + 65536] for i in range(0, len(body), 65536)],
    }
    print(
        f"{args.events} bound-pod events of {len(body) // args.events} bytes each; CPU µs per event (best of 5)"
    )
    print("| chunks | Kubernetes client's Watch | labgate (watch_events) |")
    print("| --- | ---: | ---: |")
    for name, chunks in chunkings.items():
        ours = per_event_us(labgate_reader, chunks, args.events)
        theirs = per_event_us(client_reader, chunks, args.events)
        print(f"| {name} | {theirs:.1f} | {ours:.1f} |")


if __name__ == "__main__":
    main()
