"""The volume-claim rule's input: the PersistentVolume a claim names, read through only for such claims."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labgate.core.decisions import Decision, Mutation
from webhook.inventory import volume_document
from webhook.policy_input import PolicyInput, VolumeDocument
from webhook.replica import FactSources, admission_server
from webhook.review import AdmissionRequest, parse_request


class _Inventory:
    is_synced = True

    def ensure_namespace(self, name: str) -> None: ...

    def is_known(self, name: str) -> bool:
        return True

    def tenant_of(self, namespace: str) -> str | None:
        return "vision"

    def push_all(self) -> None: ...

    def tenant_spec(self, name: str) -> dict[str, Any] | None:
        return {}


class _Engine:
    async def decide(self, policy_input: PolicyInput) -> Decision:
        raise AssertionError("not asked")

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]:
        raise AssertionError("not asked")

    async def mutate(self, policy_input: PolicyInput) -> Mutation:
        raise AssertionError("not asked")

    async def is_healthy(self) -> bool:
        return True


class _Volumes:
    def __init__(self, *, fails: bool = False):
        self.asked: list[str] = []
        self.fails = fails

    def volume(self, name: str) -> VolumeDocument:
        self.asked.append(name)
        if self.fails:
            raise OSError("apiserver unreachable")
        return {"name": name, "exists": True, "labels": {"labgate.io/tenant": "nlp"}, "claimRef": None}


def _claim(spec: dict[str, Any], kind: str = "PersistentVolumeClaim") -> AdmissionRequest:
    return parse_request(
        {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "namespace": "vision",
            "name": "data",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["vision"]},
            "object": {"spec": spec},
        }
    )


def _gather(volumes: _Volumes, request: AdmissionRequest) -> PolicyInput:
    server = admission_server(_Engine(), FactSources(inventory=_Inventory(), volumes=volumes))
    policy_input, _, _ = asyncio.run(server.facts.gather(request))
    return policy_input


def test_a_claim_naming_a_volume_gets_the_volume() -> None:
    volumes = _Volumes()
    policy_input = _gather(volumes, _claim({"volumeName": "pv-1"}))
    assert policy_input["persistent_volume"]["labels"] == {"labgate.io/tenant": "nlp"}
    assert volumes.asked == ["pv-1"]


@pytest.mark.parametrize(
    "request_",
    [_claim({"storageClassName": "fast"}), _claim({"volumeName": "pv-1"}, kind="ConfigMap")],
)
def test_other_requests_read_no_volume(request_: AdmissionRequest) -> None:
    volumes = _Volumes()
    assert "persistent_volume" not in _gather(volumes, request_)
    assert volumes.asked == []


def test_an_unreadable_volume_is_left_out_and_the_rule_refuses() -> None:
    assert "persistent_volume" not in _gather(_Volumes(fails=True), _claim({"volumeName": "pv-1"}))


def test_volume_document_keeps_labels_and_the_claim() -> None:
    pv = {
        "metadata": {"name": "pv-1", "labels": {"a": "b"}, "uid": "x"},
        "spec": {"claimRef": {"namespace": "nlp", "name": "db", "uid": "y"}, "hostPath": {"path": "/"}},
    }
    assert volume_document(pv) == {
        "name": "pv-1",
        "exists": True,
        "labels": {"a": "b"},
        "claimRef": {"namespace": "nlp", "name": "db"},
    }
