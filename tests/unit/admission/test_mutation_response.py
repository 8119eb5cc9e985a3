"""The /mutate answer (webhook.admission.build_mutation_response): the patch as a base64 JSON Patch,
the mutation's notes as kubectl warnings, the uid echoed."""

from __future__ import annotations

import base64
import json

from labgate.core.decisions import Mutation, PatchOperation
from tests.unit.admission.test_admission import _request
from webhook.admission import MAX_WARNING_LENGTH, build_mutation_response


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
