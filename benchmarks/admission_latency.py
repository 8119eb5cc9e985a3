"""Admission latency and throughput, labgate side by side with a no-op webhook and OPA alone, in one run.

    .venv/bin/python -m benchmarks.admission_latency [--requests 1000] [--concurrency 8] [--write docs/benchmarks.md]

Starts the real local stack (etcd, kube-apiserver, controllers, OPA, one webhook replica, reconciler),
a no-op webhook with the same TLS and server, and measures:
  - direct HTTPS POSTs of the same AdmissionReview to each target (sequential for latency, then
    `--concurrency` clients for throughput);
  - pod creation through the real apiserver with labgate's webhooks, against a namespace they exempt.
Everything runs on loopback and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config

from benchmarks.report import replace_section
from devcluster.processes import free_port, spawn, wait_until
from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from devcluster.tools import REPO_ROOT, binary, pinned_versions
from webhook.admission import build_policy_input
from webhook.review import parse_request


@dataclass
class Result:
    name: str
    latencies_ms: list[float]
    throughput: float

    def row(self) -> str:
        lat = sorted(self.latencies_ms)
        p50 = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        return f"| {self.name} | {len(lat)} | {p50:.2f} | {p99:.2f} | {self.throughput:.0f} |"


def review(namespace: str, user: str, groups: list[str], *, gpus: int = 0) -> dict[str, Any]:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    container: dict[str, Any] = {"name": "main", "image": "registry.lab.example/research/trainer:v1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": [*groups, "system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": [container]},
            },
        },
    }


async def measure_http(
    name: str,
    url: str,
    make_body: Callable[[], dict[str, Any]],
    *,
    verify: ssl.SSLContext | bool,
    requests: int,
    concurrency: int,
) -> Result:
    async with httpx.AsyncClient(verify=verify, timeout=10) as http:
        for _ in range(50):  # warm up connections, caches and OPA's compiled plan
            (await http.post(url, json=make_body())).raise_for_status()
        latencies = []
        for _ in range(requests):
            body = make_body()
            started = time.perf_counter()
            response = await http.post(url, json=body)
            latencies.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
        remaining = requests

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                (await http.post(url, json=make_body())).raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        throughput = requests / (time.perf_counter() - started)
    return Result(name, latencies, throughput)


def measure_pod_creates(name: str, api: client.CoreV1Api, namespace: str, *, requests: int) -> Result:
    latencies = []
    started_all = time.perf_counter()
    for _ in range(requests):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "bench-"},
            "spec": {"containers": [{"name": "main", "image": "registry.lab.example/research/trainer:v1"}]},
        }
        started = time.perf_counter()
        api.create_namespaced_pod(namespace, pod)
        latencies.append((time.perf_counter() - started) * 1000)
    return Result(name, latencies, requests / (time.perf_counter() - started_all))


LARGE_LEDGER_PODS = 8000


def create_pods(stack: LabgateStack, tenant: str, *, pods: int, workdir: Path, parallel: int = 4) -> None:
    """Create `pods` one-GPU pods in the tenant's namespace through the apiserver and labgate, as a
    member would; without a kubelet they stay Pending, which is all the reconciler needs to settle
    them."""
    kubeconfig = stack.kubeconfig_for("alice", (tenant,))
    batches = []
    for part in range(parallel):
        items = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"sweep-{i:05d}", "namespace": tenant},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.lab.example/research/trainer:v1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            }
            for i in range(part, pods, parallel)
        ]
        path = workdir / f"pods-{tenant}-{part}.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        batches.append(path)
    kubectl_bin = binary("kubectl")
    procs = [
        subprocess.Popen(
            [kubectl_bin, f"--kubeconfig={kubeconfig}", "create", "-f", str(path), "-o", "name"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in batches
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"creating the benchmark's pods failed: {err.strip()[-500:]}")


def gpu_used(stack: LabgateStack, tenant: str) -> int | None:
    found = json.loads(stack.admin_kubectl("get", "tenant", tenant, "-o", "json"))
    used = found.get("status", {}).get("gpu", {}).get("used")
    return used if isinstance(used, int) else None


def run(requests: int, concurrency: int, workdir: Path) -> tuple[list[Result], dict[str, str]]:
    results: list[Result] = []
    with LabgateStack(workdir) as stack:
        tenant: dict[str, Any] = {
            "apiVersion": "labgate.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": "bench"},
            "spec": {
                "members": {"researchers": [{"kind": "Group", "name": "bench"}]},
                "namespaces": {"names": ["bench"]},
                "gpu": {"total": 1000000},
            },
        }
        stack.admin_kubectl("apply", "-f", "-", stdin=json.dumps(tenant))
        big = {**tenant, "metadata": {"name": "bench-big"}}
        big["spec"] = {
            **tenant["spec"],
            "members": {"researchers": [{"kind": "Group", "name": "bench-big"}]},
            "namespaces": {"names": ["bench-big"]},
        }
        stack.admin_kubectl("apply", "-f", "-", stdin=json.dumps(big))
        stack.admin_kubectl(
            "wait", "--for=condition=Ready", "--timeout=60s", "tenant/bench", "tenant/bench-big"
        )
        started = time.monotonic()
        create_pods(stack, "bench-big", pods=LARGE_LEDGER_PODS, workdir=workdir)
        print(f"created {LARGE_LEDGER_PODS} pods in {time.monotonic() - started:.0f}s", file=sys.stderr)
        wait_until(
            lambda: gpu_used(stack, "bench-big") == LARGE_LEDGER_PODS,
            what="the large tenant's pods settled",
            timeout=600,
            interval=2,
        )
        pki = workdir / "webhook-pki"
        context = ssl.create_default_context(cadata=(pki / "ca.crt").read_text())
        noop_port = free_port()
        noop = spawn(
            workdir,
            "noop-webhook",
            [
                sys.executable,
                "-m",
                "benchmarks.noop_webhook",
                str(noop_port),
                str(pki / "tls.crt"),
                str(pki / "tls.key"),
            ],
            env={"PYTHONPATH": str(REPO_ROOT)},
        )
        try:
            wait_until(
                lambda: (
                    httpx.get(f"https://127.0.0.1:{noop_port}/healthz", verify=context).status_code == 200
                ),
                what="no-op webhook",
                timeout=30,
                watch=[noop],
            )

            def member() -> dict[str, Any]:
                return review("bench", "alice", ["bench"])

            def gpu_pod() -> dict[str, Any]:
                return review("bench", "alice", ["bench"], gpus=1)

            def gpu_pod_of_large_tenant() -> dict[str, Any]:
                return review("bench-big", "alice", ["bench-big"], gpus=1)

            def opa_body() -> dict[str, Any]:
                body = build_policy_input(request=parse_request(member()["request"]))
                body["gpu_usage"] = {"total": 0, "by_model": {}}
                return {"input": body}

            webhook = stack.webhook_urls[0]
            # labgate answers callers with the apiserver's client certificate only.
            apiserver = stack.webhook_client_context()
            # (row, url, body, TLS verification, requests): all in one run, in this order.
            targets: list[tuple[str, str, Callable[[], dict[str, Any]], ssl.SSLContext | bool, int]] = [
                (
                    "no-op webhook (FastAPI, TLS)",
                    f"https://127.0.0.1:{noop_port}/validate",
                    member,
                    context,
                    requests,
                ),
                (
                    "OPA alone (decision query)",
                    f"{stack.opa_url}/v1/data/labgate/admission/decision",
                    opa_body,
                    False,
                    requests,
                ),
                ("labgate /validate, pod without GPUs", f"{webhook}/validate", member, apiserver, requests),
                (
                    "labgate /validate, GPU pod (ledger write)",
                    f"{webhook}/validate",
                    gpu_pod,
                    apiserver,
                    requests // 2,
                ),
                (
                    f"labgate /validate, GPU pod, tenant already holding {LARGE_LEDGER_PODS:,} pods",
                    f"{webhook}/validate",
                    gpu_pod_of_large_tenant,
                    apiserver,
                    requests // 2,
                ),
                ("labgate /mutate, pod", f"{webhook}/mutate", member, apiserver, requests),
            ]
            for name, url, make_body, verify, count in targets:
                results.append(
                    asyncio.run(
                        measure_http(
                            name, url, make_body, verify=verify, requests=count, concurrency=concurrency
                        )
                    )
                )
            api = client.CoreV1Api(config.new_client_from_config(config_file=str(stack.admin_kubeconfig)))
            creates = min(requests, 300)
            results.append(
                measure_pod_creates(
                    "apiserver pod create, namespace labgate exempts",
                    api,
                    LABGATE_NAMESPACE,
                    requests=creates,
                )
            )
            results.append(
                measure_pod_creates(
                    "apiserver pod create, through labgate (mutate + validate)",
                    api,
                    "bench",
                    requests=creates,
                )
            )
        finally:
            noop.stop()
    versions = pinned_versions()
    facts = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": f"{os.cpu_count()} cores",
        "python": platform.python_version(),
        "kubernetes": versions["KUBERNETES_VERSION"],
        "opa": versions["OPA_VERSION"],
    }
    return results, facts


def markdown(results: list[Result], facts: dict[str, str], *, requests: int, concurrency: int) -> str:
    lines = [
        f"| target | requests | p50 ms | p99 ms | throughput (req/s, {concurrency} clients) |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[r.row() for r in results],
    ]
    return "\n".join(lines) + (
        f"\n\nMeasured {facts['date']} on {facts['cpu']}, Python {facts['python']}, Kubernetes {facts['kubernetes']}, "
        f"OPA {facts['opa']}; {requests} sequential requests per target for latency (50 warm-up requests first), "
        "then the same number again from concurrent clients for throughput. Apiserver rows are sequential only "
        "(throughput = 1 / mean latency).\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--write", type=Path, help="replace the results section of this markdown file")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="labgate-bench-"))
    try:
        results, facts = run(args.requests, args.concurrency, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs
    table = markdown(results, facts, requests=args.requests, concurrency=args.concurrency)
    print(table)
    if args.write:
        replace_section(args.write, "admission-latency", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
