"""The pure admission helpers: what a researcher reads, and what OPA is asked."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.core.decisions import Decision, Finding
from webhook.admission import (
    MAX_WARNING_LENGTH,
    build_policy_input,
    build_response,
    warning_lines,
)
from webhook.refusals import engine_unavailable
from webhook.review import AdmissionRequest, MalformedReviewError, parse_request


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
    return parse_request(raw)


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
        ("short", ["short"]),
        ("two\nlines  with   spaces", ["two lines with spaces"]),
    ],
)
def test_short_warnings_stay_one_kubectl_line(text: str, expected: list[str]) -> None:
    assert warning_lines(text) == expected


def test_a_long_warn_mode_finding_keeps_its_rule_id_and_fix_on_every_line() -> None:
    # Regression: warn-mode findings were cut at 120 characters, before their "Fix:".
    message = (
        '[image-registry] Pod "train" spec.containers[0] ("main") runs image "docker.io/x/miner:v1" '
        '(docker.io/x/miner), which is not under a registry tenant "vision" allows (registry.lab.example). '
        "Fix: use an image from one of those, or ask the infra team to add its registry to spec.images.registries"
    )
    decision = Decision(allowed=True, warnings=[Finding(rule="image-registry", message=message, mode="warn")])
    warnings = build_response(request=_request(), decision=decision).warnings or []
    assert len(warnings) > 1
    assert all(len(line) < 120 for line in warnings)
    assert all(line.startswith("[image-registry] ") for line in warnings)
    assert " ".join(line.removeprefix("[image-registry] ...").strip() for line in warnings) == message
    assert any("Fix: use an image" in line for line in warnings)


def test_a_word_longer_than_a_line_is_cut_into_pieces_without_losing_text() -> None:
    lines = warning_lines("[r] " + "x" * 300)
    assert all(len(line) <= MAX_WARNING_LENGTH and line.startswith("[r] ") for line in lines)
    assert sum(line.count("x") for line in lines) == 300


def test_engine_failure_refuses_and_says_what_to_do() -> None:
    response = engine_unavailable("cannot reach OPA").response(_request()).to_review()["response"]
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


def test_the_policy_input_request_is_the_parsed_wire_form_with_its_defaults() -> None:
    """What the policies read as `input.request`: Kubernetes' camelCase, the defaults filled in,
    fields sent as null left out, unknown fields dropped; the typed view shares its dicts."""
    obj = {"metadata": {"annotations": {"a": None}}, "spec": {"x": [None, {"y": None}]}}
    request = _request(
        kind={"version": "v1", "kind": "Job"},
        userInfo={"username": "alice", "uid": None},
        name=None,
        subResource=None,
        object=obj,
        somethingNew="ignored",
    )
    document = build_policy_input(request=request)["request"]
    assert document == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "namespace": "vision",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": [], "extra": {}},
        "object": obj,
        "dryRun": False,
    }
    assert document is request.document
    assert document.get("object") is request.object, "the view and the document share the object"
    assert (request.name, request.sub_resource, request.user_info.groups) == (None, None, ())


def test_a_request_with_changes_is_parsed_again() -> None:
    update = _request().with_changes(operation="UPDATE", oldObject={"spec": {}}, dryRun=True)
    assert (update.operation, update.old_object, update.dry_run) == ("UPDATE", {"spec": {}}, True)
    assert update.document["operation"] == "UPDATE"
    assert _request().with_changes(object=None).document.get("object", "absent") == "absent"
    with pytest.raises(MalformedReviewError) as raised:
        _request().with_changes(operation="PATCH")
    assert raised.value.reason.startswith("request.operation: ")


def test_policy_input_says_where_every_image_comes_from_without_asking_a_registry() -> None:
    # The registry allowlist is decided from the reference alone, for every tenant (Rego:
    # labgate.rules.image reads input.image_references).
    obj = {
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "i", "image": "nginx"}],
                    "containers": [{"name": "c", "image": "Registry.Lab.Example/vision/train:v1"}],
                    "ephemeralContainers": [{"name": "e", "image": "NOT A REFERENCE"}],
                    "volumes": [
                        {"name": "weights", "image": {"reference": "ghcr.io/lab/weights:v3"}},
                        {"name": "scratch", "emptyDir": {}},
                    ],
                }
            }
        }
    }
    references = build_policy_input(request=_request(object=obj))["image_references"]
    assert references["nginx"] == {"registry": "docker.io", "repository": "library/nginx", "error": None}
    assert references["Registry.Lab.Example/vision/train:v1"] == {
        "registry": "registry.lab.example",
        "repository": "vision/train",
        "error": None,
    }
    assert references["NOT A REFERENCE"]["registry"] is None
    assert references["NOT A REFERENCE"]["error"]
    # An image volume's image is an image the pod runs (its files), judged like a container's.
    assert references["ghcr.io/lab/weights:v3"] == {
        "registry": "ghcr.io",
        "repository": "lab/weights",
        "error": None,
    }
