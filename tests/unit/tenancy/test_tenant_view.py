"""What `kubectl get tenant` shows: usage per model against its limit, preemptible GPUs, pending pods."""

from __future__ import annotations

import pytest

from rbac.tenant_view import gpu_summary, pending_pods


@pytest.mark.parametrize(
    ("total", "models", "used_total", "used_by_model", "expected"),
    [
        (16, {"h100": 8, "a100": 8}, 2, {"h100": 2}, "a100 0/8, h100 2/8, total 2/16"),
        (8, {}, 3, {"unspecified": 3}, "unspecified 3/-, total 3/8"),
        (None, {"h100": 4}, 4, {"h100": 4}, "h100 4/4"),
        (None, {}, 0, {}, "0 (no limit)"),
    ],
)
def test_summary_shows_used_of_limit_per_model_then_total(
    total: int | None, models: dict[str, int], used_total: int, used_by_model: dict[str, int], expected: str
) -> None:
    assert (
        gpu_summary(total=total, models=models, used_total=used_total, used_by_model=used_by_model)
        == expected
    )


def test_pending_counts_pods_not_running_and_reservations_without_a_pod() -> None:
    assert pending_pods(["Running", "Pending", "", "Succeeded"], 2) == 4
