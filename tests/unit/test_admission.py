"""The pure admission helpers: what a researcher reads, and what OPA is asked."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.core.decisions import Decision, Finding
from webhook.admission import (
    MAX_WARNING_LENGTH,
    build_policy_input,
    build_response,
    engine_unavailable_response,
    shorten_warning,
)
from webhook.review import AdmissionRequest


def _request(**overrides: Any) -> AdmissionRequest:
    raw: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "namespace": "vision",
        "name": "sweep",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["vision"]},
        "object": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}},
    }
    raw.update(overrides)
    return AdmissionRequest.model_validate(raw)


def test_denials_become_one_forbidden_message_with_the_uid_echoed() -> None:
    decision = Decision(
        allowed=False,
        denials=[
            Finding(rule="tenant-membership", message="[tenant-membership] no"),
            Finding(rule="gpu-quota", message="[gpu-quota] too many"),
        ],
    )
    response = build_response(request=_request(), decision=decision).to_review()["response"]
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "reason": "Forbidden",
        "message": "[gpu-quota] too many\n[tenant-membership] no",
    }


def test_allowed_decision_carries_warnings_and_no_status() -> None:
    decision = Decision(allowed=True, warnings=[Finding(rule="r", message="[r] heads up", mode="warn")])
    response = build_response(request=_request(), decision=decision).to_review()["response"]
    assert response == {"uid": _request().uid, "allowed": True, "warnings": ["[r] heads up"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("short", "short"),
        ("two\nlines  with   spaces", "two lines with spaces"),
        ("x" * 200, "x" * (MAX_WARNING_LENGTH - 1) + "…"),
    ],
)
def test_warnings_fit_one_kubectl_line(text: str, expected: str) -> None:
    shortened = shorten_warning(text)
    assert shortened == expected
    assert len(shortened) < 120


def test_engine_failure_refuses_and_says_what_to_do() -> None:
    response = engine_unavailable_response(request=_request(), reason="cannot reach OPA").to_review()[
        "response"
    ]
    assert response["allowed"] is False
    assert response["status"]["code"] == 503
    assert response["status"]["message"].startswith(
        "[policy-engine-unavailable] labgate could not evaluate its policies (cannot reach OPA)"
    )


def test_policy_input_keeps_the_wire_form_and_lists_pod_templates() -> None:
    policy_input = build_policy_input(request=_request())
    assert policy_input["request"]["userInfo"] == {"username": "alice", "groups": ["vision"], "extra": {}}
    assert policy_input["request"]["kind"]["kind"] == "Job"
    assert policy_input["pod_templates"] == [
        {
            "path": "spec.template.spec",
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "metadata": {},
            "replicas": 1,
            "synthesized": False,
        }
    ]
