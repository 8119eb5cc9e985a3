"""The pods that name a claim being created or deleted (webhook.claims, input.claim_users): the facts
of dra-claim-in-use, gathered only for such requests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.admission.test_serving_volumes import _Inventory
from webhook.claims import ClaimFacts, claim_users
from webhook.facts import FactGatherer
from webhook.request_class import swapped_claim
from webhook.review import AdmissionRequest, parse_request


def _pod(name: str, claims: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": name}, "spec": {"resourceClaims": claims}}
    for key, value in extra.items():
        pod.setdefault(key, {}).update(value)
    return pod


PODS = [
    _pod("train-1", [{"name": "g", "resourceClaimName": "gpus"}], status={"phase": "Pending"}),
    _pod("done", [{"name": "g", "resourceClaimName": "gpus"}], status={"phase": "Succeeded"}),
    _pod(
        "leaving",
        [{"name": "x", "resourceClaimName": "other"}, {"name": "g", "resourceClaimName": "gpus"}],
        metadata={"deletionTimestamp": "2026-12-02T00:00:00Z"},
        status={"phase": "Running"},
    ),
    _pod(
        "templated",
        [{"name": "g", "resourceClaimTemplateName": "gpus"}],
        status={"phase": "Pending", "resourceClaimStatuses": [{"name": "g", "resourceClaimName": "gpus"}]},
    ),
    _pod("unrelated", [{"name": "g", "resourceClaimName": "else"}]),
    {"metadata": {"name": "no-spec"}},
]


def test_the_pods_naming_a_claim_are_listed_with_what_decides_whether_they_are_live() -> None:
    assert claim_users(PODS, "ResourceClaim", "gpus") == {
        "pods": [
            {"name": "done", "field": "spec.resourceClaims[0]", "phase": "Succeeded", "is_deleting": False},
            {"name": "leaving", "field": "spec.resourceClaims[1]", "phase": "Running", "is_deleting": True},
            # a claim generated for it from a template names it in its status only
            {
                "name": "templated",
                "field": "status.resourceClaimStatuses[0]",
                "phase": "Pending",
                "is_deleting": False,
            },
            {"name": "train-1", "field": "spec.resourceClaims[0]", "phase": "Pending", "is_deleting": False},
        ]
    }
    assert claim_users(PODS, "ResourceClaimTemplate", "gpus") == {
        "pods": [
            {"name": "templated", "field": "spec.resourceClaims[0]", "phase": "Pending", "is_deleting": False}
        ]
    }
    assert claim_users(PODS, "ResourceClaim", "nobody") == {"pods": []}


class _Pods:
    def __init__(self, result: list[dict[str, Any]] | Exception):
        self.result = result
        self.listed: list[str | None] = []

    def get(self, kind: Any, name: str, *, namespace: str | None = None, timeout: float = 10) -> Any:
        raise AssertionError("users are listed, not read by name")

    def list(self, kind: Any, *, namespace: str | None = None, label_selector: str | None = None) -> Any:
        assert kind.kind == "Pod"
        self.listed.append(namespace)
        if isinstance(self.result, Exception):
            raise self.result
        return {"items": self.result}


class _UnavailableError(Exception):
    status = 503
    reason = "Service Unavailable"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (PODS[:1], {"pods": [claim_users(PODS[:1], "ResourceClaim", "gpus")["pods"][0]]}),
        (_UnavailableError(), {"error": "the API answered 503 Service Unavailable"}),
        (TimeoutError(), {"error": "listing them failed: TimeoutError"}),
    ],
)
def test_users_are_listed_in_the_claims_namespace_and_a_failure_is_never_no_users(
    result: list[dict[str, Any]] | Exception, expected: dict[str, Any]
) -> None:
    pods = _Pods(result)
    assert asyncio.run(ClaimFacts(pods).users_of("vision", "ResourceClaim", "gpus")) == expected
    assert pods.listed == ["vision"]


def _request(kind: str, operation: str, *, sub_resource: str | None = None) -> AdmissionRequest:
    claim = {"metadata": {"name": "gpus"}, "spec": {}}
    return parse_request(
        {
            "uid": "u",
            "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
            "resource": {"group": "resource.k8s.io", "version": "v1", "resource": kind.lower() + "s"},
            "subResource": sub_resource,
            "namespace": "vision",
            "name": "gpus",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["vision"]},
            "object": None if operation == "DELETE" else claim,
            "oldObject": claim if operation in ("DELETE", "UPDATE") else None,
        }
    )


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (_request("ResourceClaim", "DELETE"), ("ResourceClaim", "gpus")),
        (_request("ResourceClaimTemplate", "CREATE"), ("ResourceClaimTemplate", "gpus")),
        (_request("ResourceClaim", "UPDATE"), None),  # the spec is immutable: nothing to swap
        (_request("ResourceClaim", "UPDATE", sub_resource="status"), None),
    ],
)
def test_users_are_gathered_for_claims_being_created_or_deleted_only(
    request_: AdmissionRequest, expected: tuple[str, str] | None
) -> None:
    assert swapped_claim(request_) == expected


def test_the_gatherer_gives_the_policy_the_users_of_a_claim_being_deleted() -> None:
    pods = _Pods(PODS[:2])
    gatherer = FactGatherer(inventory=_Inventory(), claims=ClaimFacts(pods))
    policy_input, tenant, _ = asyncio.run(gatherer.gather(_request("ResourceClaim", "DELETE")))
    assert tenant == "vision"
    assert [pod["name"] for pod in policy_input["claim_users"]["pods"]] == ["done", "train-1"]
    assert pods.listed == ["vision"]
