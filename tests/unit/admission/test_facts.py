"""Gathering a request's facts (webhook/facts.py): a pod's DRA claims and its images' facts, the two
facts that may each cost a round trip, are fetched at the same time, not one after the other."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.admission.test_serving_volumes import _Inventory
from webhook.facts import FactGatherer
from webhook.policy_input import PolicyInput
from webhook.read_shares import Read, unshared
from webhook.review import AdmissionRequest

# Long enough never to fire when both sources run together; short enough to fail fast when not.
MEETING_TIMEOUT = 2.0


class _Meeting:
    """Two sources that each wait, inside their fetch, for the other to have started: fetched one
    after the other, the first waits for ever (here: for MEETING_TIMEOUT, then fails)."""

    def __init__(self) -> None:
        self.claims_started = asyncio.Event()
        self.images_started = asyncio.Event()

    async def for_templates(
        self, namespace: str, pod_templates: list[dict[str, Any]], *, read: Read = unshared
    ) -> dict[str, dict[str, Any]]:
        self.claims_started.set()
        await asyncio.wait_for(self.images_started.wait(), MEETING_TIMEOUT)
        return {"gpu-claim": {"found": True}}

    async def images_for(
        self,
        *,
        namespace: str,
        tenant_spec: dict[str, Any],
        pod_templates: list[dict[str, Any]],
        timeout: float,
    ) -> dict[str, dict[str, Any]] | None:
        self.images_started.set()
        await asyncio.wait_for(self.claims_started.wait(), MEETING_TIMEOUT)
        return {"registry.lab.example/vision/train:v1": {"digest": "sha256:aa"}}


class _FailingClaims:
    async def for_templates(
        self, namespace: str, pod_templates: list[dict[str, Any]], *, read: Read = unshared
    ) -> dict[str, dict[str, Any]]:
        raise OSError("apiserver unreachable")


def _pod() -> AdmissionRequest:
    return AdmissionRequest.model_validate(
        {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "vision",
            "name": "train",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["vision"]},
            "object": {
                "metadata": {"name": "train"},
                "spec": {
                    "containers": [{"name": "main", "image": "registry.lab.example/vision/train:v1"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
                },
            },
        }
    )


def test_claims_and_images_are_fetched_at_the_same_time() -> None:
    async def run() -> PolicyInput:
        meeting = _Meeting()
        gatherer = FactGatherer(inventory=_Inventory(), claims=meeting, images=meeting)
        policy_input, tenant = await gatherer.gather(_pod())
        assert tenant == "vision"
        return policy_input

    policy_input = asyncio.run(run())
    assert policy_input["resource_claims"] == {"gpu-claim": {"found": True}}
    assert policy_input["images"] == {"registry.lab.example/vision/train:v1": {"digest": "sha256:aa"}}


def test_a_failure_to_read_the_claims_is_raised() -> None:
    async def run() -> None:
        images = _Meeting()
        images.claims_started.set()  # the images need not wait for claims that never come
        gatherer = FactGatherer(inventory=_Inventory(), claims=_FailingClaims(), images=images)
        await gatherer.gather(_pod())

    with pytest.raises(OSError, match="apiserver unreachable"):
        asyncio.run(run())
