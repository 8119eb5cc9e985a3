"""The reconciler's pod index (rbac.settlement_controller.PodIndex) reads every pod of the cluster,
from every watch event and list: a pod asking a quantity in a form the apiserver accepts must be
indexed like any other, and must not stop the index for the pods listed with it. (Memory written
"1E", exa, was read as a decimal exponent and raised: the list raised for every pod, and the
settlement then dropped the GPUs of pods it no longer saw.)"""

from __future__ import annotations

from typing import Any

import pytest

from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pod_requests import pod_requests
from rbac import settlement_controller
from rbac.runtime import ObjectCache
from rbac.settlement_controller import PodIndex


def _pod(uid: str, requests: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": f"p-{uid}", "namespace": "team-a"},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "resources": {"requests": requests}}]},
        "status": {"phase": "Running"},
    }


def test_a_pod_asking_exa_bytes_is_indexed_beside_the_others() -> None:
    index = PodIndex(ObjectCache(), GpuCounting(), on_tenant=lambda _: None)
    gpu_pod = _pod("gpu", {"nvidia.com/gpu": "8", "cpu": "1"})
    index.on_list([gpu_pod, _pod("exa", {"memory": "1E"}), _pod("exbi", {"memory": "1Ei"})])
    known = index.known({"gpu", "exa", "exbi"})
    assert set(known) == {"gpu", "exa", "exbi"}
    assert known["gpu"].gpus.total == 8
    assert (known["exa"].requests["memory"], known["exbi"].requests["memory"]) == (10**18, 2**60)
    index.on_event("MODIFIED", _pod("exa", {"memory": "2E"}))
    assert index.known({"exa"})["exa"].requests["memory"] == 2 * 10**18


def test_a_pod_whose_spec_cannot_be_read_is_kept_present_and_stops_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever form of a field the facts' reading does not foresee: the pod stays known, with its
    phase (so its settled GPUs are not dropped as if it were gone), and every other pod is indexed."""

    def unforeseen(pod: Any) -> dict[str, int]:
        if pod["metadata"]["uid"] == "odd":
            raise ValueError("an unforeseen quantity")
        return pod_requests(pod)

    monkeypatch.setattr(settlement_controller, "pod_requests", unforeseen)
    index = PodIndex(ObjectCache(), GpuCounting(), on_tenant=lambda _: None)
    index.on_list([_pod("odd", {"cpu": "1"}), _pod("gpu", {"nvidia.com/gpu": "8"})])
    index.on_event("MODIFIED", _pod("odd", {"cpu": "2"}))
    index.on_event("ADDED", _pod("late", {"nvidia.com/gpu": "2"}))
    known = index.known({"odd", "gpu", "late"})
    assert (known["odd"].phase, known["odd"].is_scheduled) == ("Running", True)
    assert (known["gpu"].gpus.total, known["late"].gpus.total) == (8, 2)
