"""The /mutate answer (webhook.admission.build_mutation_response): the patch as a base64 JSON Patch,
the mutation's notes as kubectl warnings, the uid echoed."""

from __future__ import annotations

import base64
import json

from labgate.core.decisions import Decision, Finding, Mutation, PatchOperation
from tests.unit.admission.test_admission import _request
from webhook.admission import MAX_WARNING_LENGTH, build_mutation_response, build_response
from webhook.review import AdmissionRequest


def test_a_patch_is_a_base64_json_patch_with_the_uid_echoed() -> None:
    patch = [PatchOperation(op="add", path="/spec/priorityClassName", value="research")]
    response = build_mutation_response(request=_request(), mutation=Mutation(patch=patch))
    answer = response.to_review()["response"]
    assert answer["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert answer["allowed"] is True
    assert answer["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["patch"])) == [
        {"op": "add", "path": "/spec/priorityClassName", "value": "research"}
    ]


def test_nothing_to_patch_is_an_admission_without_a_patch() -> None:
    answer = build_mutation_response(request=_request(), mutation=Mutation()).to_review()["response"]
    assert answer["allowed"] is True
    assert "patch" not in answer
    assert "patchType" not in answer
    assert "warnings" not in answer


def test_the_mutations_notes_are_warnings_under_120_characters() -> None:
    note = "[gpu-preemptible] pod sweep runs preemptible: the tenant is beyond its GPU quota " * 3
    response = build_mutation_response(request=_request(), mutation=Mutation(warnings=[note]))
    assert response.warnings
    assert len(response.warnings) > 1
    assert all(len(line) <= MAX_WARNING_LENGTH for line in response.warnings)
    assert all(line.startswith("[gpu-preemptible]") for line in response.warnings)


# --- issue 22 item 5: what labgate changed is said only when the object is admitted ---

PLACED = 'labgate placed pod on spot pool "h100-spot"'


def _placed_pod(operation: str = "CREATE", annotation: object = None) -> AdmissionRequest:
    text = json.dumps([PLACED]) if annotation is None else annotation
    return _request(
        operation=operation,
        object={
            "metadata": {"name": "train", "annotations": {"labgate.io/mutation-warnings": text}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )


def test_warnings_that_travel_on_the_object_are_not_said_by_the_mutating_webhook() -> None:
    mutation = Mutation(warnings=[PLACED], warnings_now=[])
    assert build_mutation_response(request=_request(), mutation=mutation).warnings is None
    # Policies that do not say which (before issue 22): all of them, at once.
    assert build_mutation_response(request=_request(), mutation=Mutation(warnings=[PLACED])).warnings == [
        PLACED
    ]


def test_the_validating_webhook_says_them_when_it_admits() -> None:
    admitted = Decision(allowed=True, warnings=[Finding(rule="r", message="[r] note", mode="warn")])
    assert build_response(request=_placed_pod(), decision=admitted).warnings == [PLACED, "[r] note"]


def test_a_refused_object_is_not_told_it_was_placed() -> None:
    refused = Decision(
        allowed=False, denials=[Finding(rule="gpu-quota-unfit", message="[gpu-quota-unfit] no")]
    )
    assert build_response(request=_placed_pod(), decision=refused).warnings is None


def test_only_a_created_object_carries_them_and_only_as_a_list_of_lines() -> None:
    admitted = Decision(allowed=True)
    assert build_response(request=_placed_pod("UPDATE"), decision=admitted).warnings is None
    for garbage in ("not json", json.dumps({"a": 1}), json.dumps([1, None])):
        assert build_response(request=_placed_pod(annotation=garbage), decision=admitted).warnings is None
