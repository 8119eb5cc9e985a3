"""The door to OPA for the decision query: labgate's own session against opa-python-client's.

    .venv/bin/python -m benchmarks.opa_door [--requests 2000] [--clients 1,16] [--rounds 3] [--json out.json]

One OPA server (the pinned `opa run --server`) with the repository's policies and one GPU pod's
decision input (a policy sample, built as `benchmarks.opa_bench` builds it); then the same
decision query, `data.labgate.admission.decision`, asked `--requests` times from `--clients`
concurrent callers on one event loop, through each door in turn:

- `session`: `webhook.policy_engine.OpaSession`, what the webhook uses (one keep-alive aiohttp
  session, the body encoded with orjson, no retries);
- `opa-python-client`: `opa_client.AsyncOpaClient.query_rule` (aiohttp too; the body encoded by
  aiohttp with the standard library's json; retries 0 as labgate would set them).

Rounds alternate the doors so that a busy machine slows both alike. Prints a Markdown table of
requests per second and latency percentiles per door and client count; the median over the rounds.
Needs only the pinned `opa` (found as `labgate policy test` finds it), no cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from opa_client import AsyncOpaClient

from benchmarks.opa_bench import decision_inputs
from cli.offline_admission import OPA_IGNORES
from cli.opa_binary import find_opa
from devcluster.processes import ManagedProcess, free_port, wait_until
from webhook.policy_engine import OpaSession

# The sample asked: a GPU pod admitted within its quota (every GPU rule evaluates on it).
SAMPLE = "gpu_quota/pod-of-one-node-admitted"
PACKAGE = "labgate/admission"
RULE = "decision"

Ask = Callable[[], Awaitable[Any]]


@dataclass(frozen=True)
class DoorRun:
    """One round of one door at one client count."""

    door: str
    clients: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float


def _pick_input(policies: Path, opa: str) -> tuple[Any, dict[str, Any]]:
    inputs = decision_inputs(opa, policies)
    chosen = next((i for i in inputs if i.name == SAMPLE), None)
    if chosen is None:
        raise SystemExit(f"no policy sample {SAMPLE!r}: samples are {[i.name for i in inputs]}")
    return chosen.policy_input, chosen.inventory


def _start_opa(
    opa: str, policies: Path, inventory: dict[str, Any], workdir: Path
) -> tuple[ManagedProcess, int]:
    port = free_port()
    data = workdir / "inventory.json"
    data.write_text(json.dumps({"inventory": inventory}))
    argv = [
        opa,
        "run",
        "--server",
        f"--addr=127.0.0.1:{port}",
        *[f"--ignore={pattern}" for pattern in OPA_IGNORES],
        str(policies),
        str(data),
    ]
    process = ManagedProcess("opa", argv, workdir / "opa.log")
    process.start()
    wait_until(lambda: _is_healthy(port), what="OPA answering /health", timeout=30, watch=[process])
    return process, port


def _is_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def _drive(ask: Ask, *, requests: int, clients: int) -> tuple[float, list[float]]:
    """`requests` calls of `ask` from `clients` concurrent callers: wall seconds and each latency."""
    latencies: list[float] = []
    remaining = requests

    async def caller() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            began = time.perf_counter()
            result = await ask()
            latencies.append(time.perf_counter() - began)
            if not result:
                raise RuntimeError("OPA gave no decision")

    began = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(clients)))
    return time.perf_counter() - began, latencies


def _run(door: str, clients: int, wall: float, latencies: list[float]) -> DoorRun:
    ordered = sorted(latencies)
    return DoorRun(
        door=door,
        clients=clients,
        requests_per_s=len(ordered) / wall,
        p50_ms=ordered[len(ordered) // 2] * 1000,
        p99_ms=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    )


async def _rounds(
    port: int, policy_input: Any, *, requests: int, clients: list[int], rounds: int
) -> list[DoorRun]:
    session = OpaSession(f"http://127.0.0.1:{port}", timeout=5, connections=32)
    client = AsyncOpaClient(host="127.0.0.1", port=port, retries=0, timeout=5)
    await client._init_session()  # what `async with` does; the session lives for every round
    path = f"/v1/data/{PACKAGE}/{RULE}"

    async def by_session() -> Any:
        return (await session.request("POST", path, document={"input": policy_input})).body["result"]

    async def by_client() -> Any:
        return (await client.query_rule(policy_input, PACKAGE, RULE))["result"]

    doors: dict[str, Ask] = {"session": by_session, "opa-python-client": by_client}
    runs: list[DoorRun] = []
    try:
        for ask in doors.values():  # warm both: connections open, OPA's caches filled
            await _drive(ask, requests=200, clients=max(clients))
        for _ in range(rounds):
            for count in clients:
                for door, ask in doors.items():
                    wall, latencies = await _drive(ask, requests=requests, clients=count)
                    runs.append(_run(door, count, wall, latencies))
    finally:
        await session.close()
        await client.close_connection()
    return runs


def table(runs: list[DoorRun]) -> str:
    """Median over rounds, per door and client count."""
    lines = [
        "| clients | door | requests/s | p50 ms | p99 ms |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for count in sorted({r.clients for r in runs}):
        for door in dict.fromkeys(r.door for r in runs):
            mine = [r for r in runs if r.door == door and r.clients == count]
            lines.append(
                f"| {count} | {door} | {statistics.median(r.requests_per_s for r in mine):.0f} "
                f"| {statistics.median(r.p50_ms for r in mine):.2f} "
                f"| {statistics.median(r.p99_ms for r in mine):.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="policies")
    parser.add_argument(
        "--opa", default=None, help="the opa binary (default: as `labgate policy test` finds it)"
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests per door per round")
    parser.add_argument("--clients", default="1,16", help="concurrent callers, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="write every round's figures to this file")
    args = parser.parse_args(argv)
    policies = Path(args.policies)
    opa = find_opa(args.opa)
    policy_input, inventory = _pick_input(policies, opa)
    clients = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory(prefix="labgate-door-") as tmp:
        process, port = _start_opa(opa, policies, inventory, Path(tmp))
        try:
            runs = asyncio.run(
                _rounds(port, policy_input, requests=args.requests, clients=clients, rounds=args.rounds)
            )
        finally:
            process.stop()
    print(f"data.labgate.admission.decision on one GPU pod ({SAMPLE}), {args.rounds} rounds, median:\n")
    print(table(runs))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in runs], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
