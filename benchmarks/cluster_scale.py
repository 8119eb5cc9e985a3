"""What labgate holds per node: the same tenants on a cluster of 100 KWOK nodes and of 4,000, in one run.

    .venv/bin/python -m benchmarks.cluster_scale [--nodes 100,4000] [--tenants 10] [--write docs/benchmarks.md]

For each size, one after the other on this machine: the local stack with that many simulated 8-GPU
nodes (kube-scheduler, every default controller, KWOK with slow node Leases), split into one spot
pool per tenant, and a Tenant per pool. Once every Tenant is Ready and its status counts its pool's
nodes, it measures:

  - the resident memory of the webhook, OPA, the reconciler and kube-apiserver (now and peak);
  - the size of OPA's data.inventory (what the webhook pushes) and of one Tenant's status (what the
    reconciler writes and the webhook keeps aside for the refusals);
  - a node change: one node added to the first tenant's pool, and the seconds until that Tenant's
    status counts it (the reconciler's node watch to its status write), and whether OPA's inventory
    changed with it;
  - admission: a member's CPU pod in a pooled tenant, every one unlike the others (nothing reused),
    and a one-GPU pod (in a tenant without pools whose quota the calls never reach), sent straight
    to /validate at a fixed rate (vegeta, the apiserver's client certificate): p50 / p99 and the
    share answered.

Not a test: nothing here asserts; the figures go into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import yaml

from benchmarks.cluster_sim import client_of
from benchmarks.report import replace_section
from benchmarks.side_by_side import (
    MEMBER_GROUP,
    Tls,
    attack,
    judge_review,
    load_average,
    review,
)
from benchmarks.side_by_side import tenant as unplaced_tenant
from devcluster.controlplane import LocalControlPlane
from devcluster.nodes import NodePool, tenant_placement
from devcluster.processes import ManagedProcess, wait_until
from devcluster.stack import LabgateStack, NodeSimulation
from devcluster.tools import tool

GPUS_PER_NODE = 8
PROCESSES = ("webhook-0", "opa", "reconciler-0", "kube-apiserver")
GPU_TENANT = "bench"  # no pools, a quota the direct GPU calls never reach


def memory_mb(process: ManagedProcess) -> tuple[float, float]:
    """(current, peak) resident memory in MB."""
    fields = dict(
        line.partition(":")[::2] for line in Path(f"/proc/{process.pid}/status").read_text().splitlines()
    )
    return tuple(int(fields.get(k, "0 kB").split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def tenant(name: str, pools: list[NodePool], quota: int) -> dict[str, Any]:
    return {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "members": {"researchers": [{"kind": "Group", "name": MEMBER_GROUP}]},
            "namespaces": {"names": [name]},
            "gpu": {"total": quota, "models": {"h100": quota}},
            "placement": tenant_placement(pools, name),
        },
    }


def pool_nodes(admin: httpx.Client, name: str) -> int:
    """How many nodes the Tenant's status counts in its pools (status.gpu.pools.h100.nodes)."""
    status = admin.get(f"/apis/labgate.io/v1alpha1/tenants/{name}").json().get("status") or {}
    return int((((status.get("gpu") or {}).get("pools") or {}).get("h100") or {}).get("nodes") or 0)


def opa_inventory(opa_url: str) -> bytes:
    with urllib.request.urlopen(f"{opa_url}/v1/data/inventory", timeout=30) as answer:  # noqa: S310 - loopback
        return bytes(answer.read())


def measure(size: int, tenants: int, args: argparse.Namespace) -> dict[str, Any]:
    """One stack of `size` nodes in `tenants` pools, measured as the module says."""
    per_pool = max(1, size // tenants)
    workdir = Path(tempfile.mkdtemp(prefix=f"labgate-cluster-scale-{size}-"))
    simulation = NodeSimulation(lease_seconds=args.lease_seconds)
    result: dict[str, Any] = {"nodes": per_pool * tenants, "tenants": tenants, "load_before": load_average()}
    try:
        with LabgateStack(workdir, nodes=simulation, webhook_replicas=1) as stack:
            assert stack.kwok is not None
            names = [f"lab-{i:02d}" for i in range(tenants)]
            pools = [
                NodePool(name=f"{n}-spot", tenant=n, spot=True, nodes=per_pool, gpu_product="h100")
                for n in names
            ]
            started = time.monotonic()
            stack.kwok.add_pools(pools, timeout=max(120.0, size * 0.5))
            result["nodes_ready_s"] = time.monotonic() - started
            quota = per_pool * GPUS_PER_NODE
            stack.admin_kubectl(
                "apply",
                "-f",
                "-",
                stdin=yaml.safe_dump_all(
                    [*(tenant(n, pools, quota) for n in names), unplaced_tenant(GPU_TENANT, gpus=1_000_000)]
                ),
            )
            stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=600s", "tenant", "--all")
            admin = client_of(stack.admin_kubeconfig, stack.cluster.server)
            wait_until(
                lambda: all(pool_nodes(admin, n) == per_pool for n in names),
                what="every Tenant's status counting its pool's nodes",
                timeout=600,
                interval=1,
            )
            result["settled_s"] = time.monotonic() - started
            inventory = opa_inventory(stack.opa_url)
            result["inventory_bytes"] = len(inventory)
            first = admin.get(f"/apis/labgate.io/v1alpha1/tenants/{names[0]}").json()
            result["tenant_status_bytes"] = len(json.dumps(first.get("status") or {}, separators=(",", ":")))
            # A node joins the first tenant's pool (its pool's labels, a name of its own).
            node = pools[0].node_manifests()[0]
            node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = (
                f"{names[0]}-joined"
            )
            changed = time.monotonic()
            stack.admin_kubectl("create", "-f", "-", stdin=yaml.safe_dump(node))
            wait_until(
                lambda: pool_nodes(admin, names[0]) == per_pool + 1,
                what="the Tenant's status counting the new node",
                timeout=300,
                interval=0.2,
            )
            result["node_change_to_status_s"] = time.monotonic() - changed
            result["inventory_changed_by_node"] = opa_inventory(stack.opa_url) != inventory
            result["admission"] = admissions(stack, workdir, {"cpu": names[0], "gpu": GPU_TENANT}, args)
            processes = list(stack.processes)
            if isinstance(stack.cluster, LocalControlPlane):
                processes += stack.cluster.processes
            result["memory_mb"] = {
                p.name: memory_mb(p) for p in processes if p.name in PROCESSES and p.is_running()
            }
            result["load_after"] = load_average()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs
    return result


def admissions(
    stack: LabgateStack, workdir: Path, namespaces: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    """/validate straight from vegeta (the apiserver's client certificate) at --rate for --seconds:
    CPU pods no two alike in a pooled tenant's namespace, then one-GPU pods in a tenant whose quota
    they never reach (each direct call leaves a reservation no pod comes for)."""
    tls = Tls(
        workdir / "webhook-pki" / "ca.crt",
        workdir / "pki" / "webhook-client.crt",
        workdir / "pki" / "webhook-client.key",
    )
    url = f"{stack.webhook_urls[0]}/validate"
    count = int(args.rate * args.seconds)
    answers: dict[str, Any] = {}
    for label, gpus in (("cpu", 0), ("gpu", 1)):
        bodies = [
            json.dumps(review(namespaces[label], gpus=gpus, distinct=True)).encode() for _ in range(count)
        ]
        # Warm: connections and the compiled query.
        attack(url, bodies[:50], rate=50, seconds=1, tls=tls, judge=judge_review, workdir=workdir)
        hit = attack(
            url, bodies, rate=args.rate, seconds=args.seconds, tls=tls, judge=judge_review, workdir=workdir
        )
        answers[label] = {
            "p50_ms": hit.percentile(0.5),
            "p99_ms": hit.percentile(0.99),
            "answered": hit.answered,
            "requests": hit.requests,
        }
    return answers


def table(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    sizes = [r["nodes"] for r in results]

    def row(label: str, cell: Any) -> str:
        return f"| {label} | " + " | ".join(cell(r) for r in results) + " |\n"

    def mem(name: str) -> Any:
        return lambda r: "{:.0f} / {:.0f}".format(*r["memory_mb"].get(name, (float("nan"),) * 2))

    def admitted(kind: str) -> Any:
        def cell(r: dict[str, Any]) -> str:
            a = r["admission"][kind]
            return (
                f"{a['p50_ms']:.1f} / {a['p99_ms']:.1f} ({100 * a['answered'] / max(1, a['requests']):.0f} %)"
            )

        return cell

    text = "| measured | " + " | ".join(f"{n:,} nodes" for n in sizes) + " |\n"
    text += "| --- |" + " ---: |" * len(results) + "\n"
    text += row("nodes Ready after create (s)", lambda r: f"{r['nodes_ready_s']:.0f}")
    text += row("every Tenant's status counting its nodes (s from create)", lambda r: f"{r['settled_s']:.0f}")
    text += row("webhook RSS now / peak (MB)", mem("webhook-0"))
    text += row("OPA RSS now / peak (MB)", mem("opa"))
    text += row("reconciler RSS now / peak (MB)", mem("reconciler-0"))
    text += row("kube-apiserver RSS now / peak (MB)", mem("kube-apiserver"))
    text += row("OPA's data.inventory (bytes)", lambda r: f"{r['inventory_bytes']:,}")
    text += row("one Tenant's status (bytes)", lambda r: f"{r['tenant_status_bytes']:,}")
    text += row(
        "a node added: until its Tenant's status counts it (s)",
        lambda r: f"{r['node_change_to_status_s']:.1f}",
    )
    text += row(
        "a node added: OPA's inventory pushed again",
        lambda r: "yes" if r["inventory_changed_by_node"] else "no",
    )
    text += row(f"/validate, CPU pod (no two alike), {args.rate}/s: p50 / p99 ms (answered)", admitted("cpu"))
    text += row(f"/validate, one-GPU pod, {args.rate}/s: p50 / p99 ms (answered)", admitted("gpu"))
    text += row("load average before / after", lambda r: f"{r['load_before']} / {r['load_after']}")
    text += (
        f"\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, "
        f"{results[0]['tenants']} tenants (one spot pool of 8-GPU nodes each), KWOK node Leases of "
        f"{args.lease_seconds} s, {args.seconds:g} s of /validate per row.\n"
    )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,4000", help="cluster sizes, comma-separated")
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--lease-seconds", type=int, default=240, help="KWOK node Lease duration")
    parser.add_argument("--rate", type=int, default=50, help="/validate requests per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--write", type=Path, help="replace the cluster-scale table in this Markdown file")
    args = parser.parse_args()
    if not tool("vegeta").is_built:
        raise SystemExit("vegeta is not built: run toolchain/build.sh vegeta")
    results = []
    for size in (int(n) for n in args.nodes.split(",")):
        results.append(measure(size, args.tenants, args))
        print(json.dumps(results[-1], indent=2), flush=True)
    text = table(results, args)
    print(text)
    if args.write:
        replace_section(args.write, "cluster-scale", text)


if __name__ == "__main__":
    main()
