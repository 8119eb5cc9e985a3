"""Where one webhook replica's latency turns: concurrent /validate requests (as the apiserver sends
them, with its client certificate) at rising concurrency, with the in-flight bound
(LABGATE_MAX_IN_FLIGHT) in place. Below the knee every request is decided and latency is flat; above
it, requests past the bound wait for a slot (LABGATE_MAX_ADMISSION_WAIT_SECONDS) and those that get
none in time are refused with [admission-overloaded] instead of queueing towards the apiserver's 3 s
timeout. The concurrency where p50 turns up while answers per second stop rising is what one replica
has in flight at the rate it sustains: the bound is sized from it (docs/operations.md).

    PYTHONPATH=. .venv/bin/python -m benchmarks.overload_knee [--max-in-flight 64] [--seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from devcluster.stack import LabgateStack


def review(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "bench", "groups": ["bench"]},
            "object": {
                "metadata": {"name": "p", "namespace": namespace, "uid": str(uuid.uuid4())},
                "spec": {"containers": [{"name": "c", "image": "registry.lab.example/research/trainer:v1"}]},
            },
        },
    }


async def level(url: str, verify: Any, namespace: str, concurrency: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    overloaded = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(verify=verify, timeout=10, limits=limits) as http:

        async def worker() -> None:
            nonlocal overloaded
            while time.monotonic() < deadline:
                started = time.perf_counter()
                answer = (await http.post(url, json=review(namespace))).json()["response"]
                latencies.append((time.perf_counter() - started) * 1000)
                message = (answer.get("status") or {}).get("message", "")
                overloaded += message.startswith("[admission-overloaded]")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    ordered = sorted(latencies)
    return {
        "concurrency": concurrency,
        "rate": len(latencies) / seconds,
        "p50": statistics.median(ordered),
        "p99": ordered[int(len(ordered) * 0.99) - 1],
        "overloaded": overloaded / len(latencies),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--levels", default="8,32,64,128,256")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as workdir,
        LabgateStack(Path(workdir), with_reconciler=False) as stack,
    ):
        url = stack.start_webhook(
            opa_url=stack.opa_url, extra_env={"LABGATE_MAX_IN_FLIGHT": str(args.max_in_flight)}
        )
        stack.admin_kubectl("create", "namespace", "bench")
        verify = stack.webhook_client_context()
        print("| concurrent clients | answers/s | p50 ms | p99 ms | refused [admission-overloaded] |")
        print("| --- | --- | --- | --- | --- |")
        for concurrency in (int(c) for c in args.levels.split(",")):
            row = asyncio.run(level(f"{url}/validate", verify, "bench", concurrency, args.seconds))
            print(
                f"| {row['concurrency']} | {row['rate']:.0f} | {row['p50']:.0f} | {row['p99']:.0f} "
                f"| {row['overloaded']:.0%} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
