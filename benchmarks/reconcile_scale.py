"""Reconciler scale: N tenants x 3 namespaces provisioned from scratch, then a full resync that must
make no writes; and the time from `kubectl apply` of one Tenant to Ready.

    .venv/bin/python -m benchmarks.reconcile_scale [--tenants 500] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import config

from benchmarks.report import replace_section
from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from rbac.reconciler import Reconciler


def tenant(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "members": {
                "admins": [{"kind": "User", "name": f"{name}-admin"}],
                "researchers": [{"kind": "Group", "name": name}],
                "viewers": [{"kind": "Group", "name": f"{name}-viewers"}],
            },
            "namespaces": {"names": [f"{name}-{i}" for i in range(3)]},
            "gpu": {"total": 8},
        },
    }


def wait_for(predicate: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(what)
        time.sleep(0.05)
    return time.monotonic() - started


def ready_count(reconciler: Reconciler, prefix: str) -> int:
    return sum(
        1
        for key, obj in reconciler.cache.select(lambda k, _: k[1] == "Tenant" and k[3].startswith(prefix))
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in obj.get("status", {}).get("conditions", [])
        )
        and obj.get("status", {}).get("observedGeneration") == obj["metadata"].get("generation")
        and key
    )


def run(count: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="labgate-scale-"))
    with LabgateStack(workdir, with_reconciler=False) as stack:
        names = [f"s{i:04d}" for i in range(count)]
        for start in range(0, count, 100):
            batch = "\n---\n".join(json.dumps(tenant(n)) for n in names[start : start + 100])
            stack.admin_kubectl("apply", "-f", "-", stdin=batch)
        reconciler = Reconciler(
            config.new_client_from_config(config_file=str(stack.admin_kubeconfig)),
            namespace=LABGATE_NAMESPACE,
            identity="bench",
            lease_seconds=15,
        )
        reconciler.start()
        try:
            from_scratch = wait_for(lambda: ready_count(reconciler, "s") == count, 1800, "all tenants Ready")
            requests, writes = reconciler.kube.requests, reconciler.kube.writes
            # Let the watch events of our own writes drain, then a full resync must write nothing.
            wait_for(lambda: len(reconciler.queue) == 0, 300, "queue drained")
            before = reconciler.reconciled
            writes_before = reconciler.kube.writes
            resync_started = time.monotonic()
            reconciler.enqueue_all()
            wait_for(
                lambda: reconciler.reconciled >= before + count and len(reconciler.queue) == 0, 600, "resync"
            )
            resync = time.monotonic() - resync_started
            resync_writes = reconciler.kube.writes - writes_before
            # One more tenant, applied the way the infra team does: time from apply to Ready.
            single = []
            for i in range(10):
                name = f"one{i}"
                applied = time.monotonic()
                stack.admin_kubectl("apply", "-f", "-", stdin=json.dumps(tenant(name)))
                wait_for(lambda name=name: ready_count(reconciler, name) == 1, 60, f"{name} Ready")
                single.append(time.monotonic() - applied)
        finally:
            reconciler.stop()
    return {
        "tenants": count,
        "namespaces": count * 3,
        "from_scratch_seconds": round(from_scratch, 1),
        "api_requests": requests,
        "api_writes": writes,
        "resync_seconds": round(resync, 2),
        "resync_writes": resync_writes,
        "apply_to_ready_p50_ms": round(statistics.median(single) * 1000),
        "apply_to_ready_max_ms": round(max(single) * 1000),
    }


def markdown(r: dict[str, Any]) -> str:
    return (
        "| measure | value |\n| --- | ---: |\n"
        f"| tenants x namespaces reconciled from scratch | {r['tenants']} x 3 = {r['namespaces']} |\n"
        f"| time until every Tenant is Ready | {r['from_scratch_seconds']} s |\n"
        f"| API requests (lists, watches, writes) | {r['api_requests']} |\n"
        f"| of which writes | {r['api_writes']} |\n"
        f"| full resync of all tenants | {r['resync_seconds']} s |\n"
        f"| writes during the resync (must be 0) | {r['resync_writes']} |\n"
        f"| one Tenant, `kubectl apply` to Ready (p50 / max of 10) | {r['apply_to_ready_p50_ms']} / {r['apply_to_ready_max_ms']} ms |\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--write", type=Path, help="replace the reconcile section of this markdown file")
    args = parser.parse_args()
    result = run(args.tenants)
    table = markdown(result)
    print(json.dumps(result, indent=2))
    print(table)
    if args.write:
        replace_section(args.write, "reconcile-scale", table)
    return 0 if result["resync_writes"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
