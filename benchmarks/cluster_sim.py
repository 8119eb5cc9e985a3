"""A large research lab on this machine: KWOK node pools, the real kube-scheduler, labgate, bursts.

    .venv/bin/python -m benchmarks.cluster_sim --nodes 1000 --tenants 50 --write docs/benchmarks.md

Starts the local stack with simulated nodes (kube-scheduler, every default controller, KWOK with slow
node Leases), gives each of N tenants a spot pool of nodes x 8 GPUs and a quota below the pool's
size, and has every tenant's researchers submit a realistic mix in bursts, through the apiserver
with their own client certificates: many 1-8 GPU pods that finish after 20-90 s, 1-GPU sweeps and
64-GPU distributed training as Jobs, notebooks as Deployments, and CPU pods. It measures admission
latency (p50/p99, CPU and GPU pods), GPU admissions per second, time from create to bound, GPUs
bound per tenant against its quota at every pod event (tests/cluster_truth.py, independent of
labgate), how long labgate's reported usage takes to match what is bound, and the memory of each
process. Not a test: nothing here asserts; the figures go into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import ssl
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from benchmarks.report import replace_section
from devcluster.controlplane import LocalControlPlane
from devcluster.nodes import RUN_FOR_ANNOTATION, NodePool, tenant_placement
from devcluster.processes import ManagedProcess
from devcluster.stack import LabgateStack, NodeSimulation
from tests.cluster_truth import effective_gpu_request, holds_gpus, is_preemptible

IMAGE = "registry.lab.example/research/trainer:v1"
GPUS_PER_NODE = 8


def client_of(kubeconfig: Path, server: str) -> httpx.Client:
    """An HTTP client that authenticates as the kubeconfig's user (its embedded client certificate)."""
    config = yaml.safe_load(kubeconfig.read_text())
    user = config["users"][0]["user"]
    cluster = config["clusters"][0]["cluster"]
    # Beside the kubeconfig, in the run's work directory (not one more folder in /tmp per client).
    folder = kubeconfig.parent / f"{kubeconfig.stem}-tls"
    folder.mkdir(exist_ok=True)
    files = {}
    for key, name in (("client-certificate-data", "tls.crt"), ("client-key-data", "tls.key")):
        files[name] = folder / name
        files[name].write_bytes(base64.b64decode(user[key]))
    ca = folder / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    # One SSL context with both: httpx 0.28 ignores `cert=` when `verify=` is a path, and the
    # apiserver then sees system:anonymous.
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(files["tls.crt"]), str(files["tls.key"]))
    return httpx.Client(
        base_url=server,
        verify=context,
        timeout=30,
        limits=httpx.Limits(max_connections=16),
    )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Tenant:
    name: str
    quota: int
    client: httpx.Client | None = None


@dataclass
class Truth:
    """Pods as a cluster-wide watch shows them, and the worst in-quota overshoot ever seen."""

    quotas: dict[str, int]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    bound_seen: dict[tuple[str, str], float] = field(default_factory=dict)
    bound: Counter[str] = field(default_factory=Counter)
    worst_overshoot: Counter[str] = field(default_factory=Counter)
    peak_bound: Counter[str] = field(default_factory=Counter)
    events: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def _held(pod: dict[str, Any]) -> tuple[str, int, bool]:
        """(tenant namespace, GPUs, bound) of a pod that counts against a quota."""
        ns = pod["metadata"]["namespace"]
        if not holds_gpus(pod) or is_preemptible(pod):
            return ns, 0, False
        return ns, sum(effective_gpu_request(pod["spec"]).values()), bool(pod["spec"].get("nodeName"))

    def apply(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            self.events += 1
            old = self.pods.pop(uid, None)
            if old is not None:
                ns, gpus, was_bound = self._held(old)
                if was_bound:
                    self.bound[ns] -= gpus
            if kind != "DELETED":
                self.pods[uid] = pod
                ns, gpus, is_bound = self._held(pod)
                if is_bound:
                    self.bound[ns] += gpus
                    key = (ns, pod["metadata"]["name"])
                    self.bound_seen.setdefault(key, time.monotonic())
                    self.peak_bound[ns] = max(self.peak_bound[ns], self.bound[ns])
                    quota = self.quotas.get(ns)
                    if quota is not None:
                        self.worst_overshoot[ns] = max(self.worst_overshoot[ns], self.bound[ns] - quota)

    def held(self, ns: str) -> int:
        """Bound + admitted-not-yet-bound in-quota GPUs of a namespace (what labgate should report)."""
        with self.lock:
            return sum(self._held(p)[1] for p in self.pods.values() if p["metadata"]["namespace"] == ns)


def sample_load(samples: list[float], stop: threading.Event) -> None:
    """The 1-minute load average every 5 s: the machine is shared, the figures depend on it."""
    while not stop.is_set():
        samples.append(os.getloadavg()[0])
        stop.wait(5)


def watch_pods(admin: httpx.Client, truth: Truth, stop: threading.Event) -> None:
    listed = admin.get("/api/v1/pods").json()
    for pod in listed["items"]:
        truth.apply("ADDED", pod)
    rv = listed["metadata"]["resourceVersion"]
    while not stop.is_set():
        try:
            with admin.stream(
                "GET", f"/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=60", timeout=None
            ) as response:
                for line in response.iter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        break
                    truth.apply(event["type"], event["object"])
                    rv = event["object"]["metadata"]["resourceVersion"]
                    if stop.is_set():
                        return
        except httpx.HTTPError:
            time.sleep(0.5)


def _pod(name: str, gpus: int, run_for: int | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {RUN_FOR_ANNOTATION: f"{run_for}s"} if run_for else {},
        },
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


def _job(name: str, gpus: int, parallelism: int, run_for: int) -> dict[str, Any]:
    template = _pod("x", gpus, run_for)
    del template["metadata"]["name"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 1000,
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }


def _notebook(name: str) -> dict[str, Any]:
    spec = _pod("x", 1, None)["spec"] | {"restartPolicy": "Always"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


@dataclass
class Submission:
    tenant: Tenant
    path: str
    body: dict[str, Any]
    kind: str  # "cpu", "gpu", "job", "deployment"


def plan(tenants: list[Tenant], *, scale: float, rng: random.Random) -> list[list[Submission]]:
    """Three bursts of each tenant's work, interleaved across tenants within a burst."""
    bursts: list[list[Submission]] = [[], [], []]
    for index, tenant in enumerate(tenants):
        ns = tenant.name
        pods = f"/api/v1/namespaces/{ns}/pods"
        jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
        bursts[0].append(
            Submission(
                tenant, f"/apis/apps/v1/namespaces/{ns}/deployments", _notebook("notebook"), "deployment"
            )
        )
        if index % 5 == 0:
            bursts[1].append(
                Submission(tenant, jobs, _job("sweep", 1, max(1, round(100 * scale)), 60), "job")
            )
        if index % 10 == 0:
            bursts[2].append(Submission(tenant, jobs, _job("ddp", 8, 8, 90), "job"))
        asked = 0
        for i in range(10**6):
            if asked > 1.3 * tenant.quota * scale:
                break
            gpus = rng.choice([1, 1, 2, 2, 4, 8])
            asked += gpus
            bursts[i % 3].append(
                Submission(tenant, pods, _pod(f"train-{i}", gpus, rng.randint(20, 90)), "gpu")
            )
        for i in range(max(1, round(6 * scale))):
            bursts[i % 3].append(Submission(tenant, pods, _pod(f"cpu-{i}", 0, rng.randint(20, 90)), "cpu"))
    for burst in bursts:
        rng.shuffle(burst)
    return bursts


@dataclass
class Outcome:
    kind: str
    tenant: str
    name: str
    seconds: float
    status: int
    started: float
    detail: str = ""  # the apiserver's message, for answers other than created or refused by policy


def submit(item: Submission) -> Outcome:
    assert item.tenant.client is not None
    started = time.monotonic()
    response = item.tenant.client.post(item.path, json=item.body)
    return Outcome(
        item.kind,
        item.tenant.name,
        item.body["metadata"]["name"],
        time.monotonic() - started,
        response.status_code,
        started,
        "" if response.status_code in (201, 403) else response.text[:300],
    )


def _memory_mb(process: ManagedProcess) -> tuple[float, float]:
    """(current, peak) resident memory in MB."""
    fields = {}
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()

    def mb(key: str) -> float:
        return int(fields.get(key, "0 kB").split()[0]) / 1024

    return mb("VmRSS"), mb("VmHWM")


def _create_tenants(stack: LabgateStack, pools: list[NodePool], names: list[str], quota: int) -> list[Tenant]:
    """One Tenant per pool with its researchers' HTTP clients, once every Tenant is Ready."""
    tenants = [Tenant(n, quota) for n in names]
    documents = []
    for t in tenants:
        documents.append(
            {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": "Tenant",
                "metadata": {"name": t.name},
                "spec": {
                    "members": {"researchers": [{"kind": "Group", "name": f"{t.name}-researchers"}]},
                    "namespaces": {"names": [t.name]},
                    "gpu": {"total": quota, "models": {"h100": quota}},
                    "placement": tenant_placement(pools, t.name),
                },
            }
        )
    stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
    for t in tenants:
        stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=180s", f"tenant/{t.name}")
        t.client = client_of(
            stack.kubeconfig_for(f"r-{t.name}", (f"{t.name}-researchers",)), stack.cluster.server
        )
    return tenants


def _wait_settled(
    admin: httpx.Client, truth: Truth, names: list[str], timeout: float
) -> tuple[float | None, dict[str, tuple[int, int]]]:
    """Seconds until every tenant's reported usage equals bound + pending (None if not within
    `timeout`), and the tenants that still differ (reported, truth)."""
    settle_started = time.monotonic()
    settled_after = None
    mismatched: dict[str, tuple[int, int]] = {}
    while time.monotonic() - settle_started < timeout:
        statuses = {
            t["metadata"]["name"]: int(t.get("status", {}).get("gpu", {}).get("used") or 0)
            for t in admin.get("/apis/labgate.io/v1alpha1/tenants").json()["items"]
        }
        mismatched = {
            n: (statuses.get(n, 0), truth.held(n)) for n in names if statuses.get(n, 0) != truth.held(n)
        }
        if not mismatched:
            settled_after = time.monotonic() - settle_started
            break
        time.sleep(1)
    return settled_after, mismatched


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)  # noqa: S311 - a reproducible workload, not a secret
    nodes_per_tenant = max(1, args.nodes // args.tenants)
    workdir = Path(tempfile.mkdtemp(prefix="labgate-cluster-sim-"))
    simulation = NodeSimulation(lease_seconds=args.lease_seconds)
    results: dict[str, Any] = {"nodes": nodes_per_tenant * args.tenants, "tenants": args.tenants}
    with LabgateStack(workdir, nodes=simulation, webhook_replicas=1) as stack:
        results["stack_start_s"] = stack.start_seconds
        assert stack.kwok is not None
        names = [f"lab-{i:02d}" for i in range(args.tenants)]
        pools = [
            NodePool(name=f"{n}-spot", tenant=n, spot=True, nodes=nodes_per_tenant, gpu_product="h100")
            for n in names
        ]
        started = time.monotonic()
        stack.kwok.add_pools(pools, timeout=max(120.0, args.nodes * 0.5))
        results["nodes_ready_s"] = time.monotonic() - started
        # Quotas below each pool's size: only labgate keeps a tenant within its quota.
        quota = int(nodes_per_tenant * GPUS_PER_NODE * 0.75)
        tenants = _create_tenants(stack, pools, names, quota)
        admin = client_of(stack.admin_kubeconfig, stack.cluster.server)
        truth = Truth(quotas={t.name: t.quota for t in tenants})
        stop = threading.Event()
        watcher = threading.Thread(target=watch_pods, args=(admin, truth, stop), daemon=True)
        watcher.start()
        load: list[float] = []
        results["load_before"] = os.getloadavg()[0]
        threading.Thread(target=sample_load, args=(load, stop), daemon=True).start()
        outcomes: list[Outcome] = []
        burst_started = time.monotonic()
        for i, burst in enumerate(plan(tenants, scale=args.scale, rng=rng)):
            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                outcomes += list(pool.map(submit, burst))
            print(
                f"burst {i + 1}: {len(burst)} submissions, {time.monotonic() - burst_started:.1f}s in",
                flush=True,
            )
            if i < 2:
                time.sleep(args.pause)
        burst_seconds = time.monotonic() - burst_started
        # Usage settles: every tenant's reported usage equals bound + pending (in quota).
        settled_after, mismatched = _wait_settled(admin, truth, names, args.settle_timeout)
        stop.set()
        processes = list(stack.processes)
        if isinstance(stack.cluster, LocalControlPlane):
            processes += stack.cluster.processes
        memory = {p.name: _memory_mb(p) for p in processes if p.is_running()}
    gpu = [o for o in outcomes if o.kind == "gpu"]
    cpu = [o for o in outcomes if o.kind == "cpu"]
    admitted_gpu = [o for o in gpu if o.status == 201]
    to_bound = [
        truth.bound_seen[(o.tenant, o.name)] - o.started
        for o in admitted_gpu
        if (o.tenant, o.name) in truth.bound_seen
    ]
    per_tenant_rate = Counter(o.tenant for o in admitted_gpu)
    results.update(
        {
            "gpus": results["nodes"] * GPUS_PER_NODE,
            "quota_per_tenant": tenants[0].quota,
            "submissions": len(outcomes),
            "gpu_pods": len(gpu),
            "gpu_admitted": len(admitted_gpu),
            "gpu_refused": sum(1 for o in gpu if o.status == 403),
            "gpu_other": dict(Counter(o.status for o in gpu if o.status not in (201, 403))),
            "other_examples": sorted({f"{o.status} {o.detail}" for o in outcomes if o.detail})[:10],
            "cpu_pods": len(cpu),
            "gpu_p50_ms": 1000 * statistics.median([o.seconds for o in gpu]),
            "gpu_p99_ms": 1000 * _percentile([o.seconds for o in gpu], 0.99),
            "cpu_p50_ms": 1000 * statistics.median([o.seconds for o in cpu]) if cpu else float("nan"),
            "cpu_p99_ms": 1000 * _percentile([o.seconds for o in cpu], 0.99),
            "burst_seconds": burst_seconds,
            "gpu_admissions_per_s": len(admitted_gpu) / burst_seconds,
            "gpu_admissions_per_s_per_tenant_max": max(per_tenant_rate.values(), default=0) / burst_seconds,
            "to_bound_p50_s": statistics.median(to_bound) if to_bound else float("nan"),
            "to_bound_p99_s": _percentile(to_bound, 0.99),
            "bound_pods": len(to_bound),
            "max_overshoot": max(truth.worst_overshoot.values(), default=0),
            "peak_bound_min_max": (
                min(truth.peak_bound.values(), default=0),
                max(truth.peak_bound.values(), default=0),
            ),
            "pod_events": truth.events,
            "settle_s": settled_after,
            "unsettled": mismatched,
            "memory_mb": memory,
            "load_mean_max": (
                statistics.mean(load) if load else float("nan"),
                max(load, default=float("nan")),
            ),
        }
    )
    shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs: hundreds of MB
    return results


def table(r: dict[str, Any], args: argparse.Namespace) -> str:
    memory = r["memory_mb"]

    def mem(name: str) -> str:
        current, peak = memory.get(name, (float("nan"), float("nan")))
        return f"{current:.0f} / {peak:.0f}"

    settle = (
        "not within {:.0f} s: {}".format(args.settle_timeout, r["unsettled"])
        if r["settle_s"] is None
        else f"{r['settle_s']:.1f} s"
    )
    rows = [
        ("KWOK nodes (GPUs)", f"{r['nodes']} ({r['gpus']})"),
        (
            "tenants, quota each (pool size)",
            f"{r['tenants']}, {r['quota_per_tenant']} ({r['gpus'] // r['tenants']})",
        ),
        ("nodes created to all Ready", f"{r['nodes_ready_s']:.1f} s"),
        (
            "submissions in 3 bursts (GPU pods / CPU pods / Jobs + Deployments)",
            f"{r['submissions']} ({r['gpu_pods']} / {r['cpu_pods']} / {r['submissions'] - r['gpu_pods'] - r['cpu_pods']})",
        ),
        (
            "GPU pods admitted / refused (quota) / other",
            f"{r['gpu_admitted']} / {r['gpu_refused']} / {r['gpu_other'] or 0}",
        ),
        (
            "admission through the apiserver, GPU pod p50 / p99",
            f"{r['gpu_p50_ms']:.0f} / {r['gpu_p99_ms']:.0f} ms",
        ),
        (
            "admission through the apiserver, CPU pod p50 / p99",
            f"{r['cpu_p50_ms']:.0f} / {r['cpu_p99_ms']:.0f} ms",
        ),
        (
            "GPU admissions per second, total (busiest tenant)",
            f"{r['gpu_admissions_per_s']:.1f} ({r['gpu_admissions_per_s_per_tenant_max']:.2f})",
        ),
        (
            "create to bound, p50 / p99 (bare GPU pods)",
            f"{r['to_bound_p50_s']:.2f} / {r['to_bound_p99_s']:.2f} s ({r['bound_pods']} pods)",
        ),
        ("bound in-quota GPUs vs quota: max overshoot (must be 0)", str(r["max_overshoot"])),
        (
            "peak bound GPUs per tenant (min / max)",
            f"{r['peak_bound_min_max'][0]} / {r['peak_bound_min_max'][1]}",
        ),
        ("reported usage == bound + pending, after the last burst", settle),
        ("memory MB now / peak: webhook, OPA", f"{mem('webhook-0')}, {mem('opa')}"),
        (
            "memory MB now / peak: apiserver, etcd, scheduler, kwok",
            f"{mem('kube-apiserver')}, {mem('etcd')}, {mem('kube-scheduler')}, {mem('kwok')}",
        ),
    ]
    rows.append(
        (
            "load average (1 min) before / mean / max during bursts and settling",
            f"{r['load_before']:.1f} / {r['load_mean_max'][0]:.1f} / {r['load_mean_max'][1]:.1f}",
        )
    )
    lines = ["| measure | value |", "| --- | ---: |", *[f"| {k} | {v} |" for k, v in rows]]
    lines.append("")
    lines.append(
        f"Measured {datetime.now(UTC).date()} on {os.cpu_count()} cores, one run, `--nodes {args.nodes} --tenants {args.tenants} "
        f"--scale {args.scale} --concurrency {args.concurrency} --lease-seconds {args.lease_seconds}`."
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full workload per tenant")
    parser.add_argument("--concurrency", type=int, default=8, help="researchers submitting at once")
    parser.add_argument("--lease-seconds", type=int, default=240, help="KWOK node Lease duration")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds between bursts")
    parser.add_argument("--settle-timeout", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--write", type=Path, help="replace the cluster-sim table in this Markdown file")
    args = parser.parse_args()
    results = run(args)
    print(json.dumps(results, indent=2, default=str))
    rendered = table(results, args)
    print(rendered)
    if args.write:
        replace_section(args.write, "cluster-sim", rendered)


if __name__ == "__main__":
    main()
