"""What the workload generators share (tests/e2e/test_isolation_generator.py and
test_isolation_generator_kueue.py): when a generated workload's pod has settled, so that a step waits
for the cluster to act before its oracle judges, and no longer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_pod_settled(pod: Mapping[str, Any], *, must_bind: bool) -> bool:
    """Bound, or being deleted, or (unless `must_bind`) reported unschedulable by the scheduler."""
    if pod["spec"].get("nodeName") or pod.get("metadata", {}).get("deletionTimestamp"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    unschedulable = any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)
    return unschedulable and not must_bind
