"""Finding pod specs (and how many pods each makes) inside workload objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from webhook.workloads import (
    BUILTIN_WORKLOAD_KINDS,
    TemplateLocation,
    WorkloadKind,
    find_pod_templates,
    load_workload_kinds,
)

SPEC = {"containers": [{"name": "main", "image": "trainer"}]}
META = {"labels": {"app": "sweep"}}


def template() -> dict[str, Any]:
    return {"metadata": META, "spec": SPEC}


@pytest.mark.parametrize(
    ("group", "kind", "obj", "expected"),
    [
        ("", "Pod", {"metadata": META, "spec": SPEC}, [("spec", 1)]),
        ("batch", "Job", {"spec": {"template": template()}}, [("spec.template.spec", 1)]),
        ("batch", "Job", {"spec": {"parallelism": 64, "template": template()}}, [("spec.template.spec", 64)]),
        (
            "batch",
            "CronJob",
            {"spec": {"jobTemplate": {"spec": {"parallelism": 3, "template": template()}}}},
            [("spec.jobTemplate.spec.template.spec", 3)],
        ),
        (
            "apps",
            "Deployment",
            {"spec": {"replicas": 5, "template": template()}},
            [("spec.template.spec", 5)],
        ),
        ("apps", "StatefulSet", {"spec": {"template": template()}}, [("spec.template.spec", 1)]),
        (
            "kubeflow.org",
            "PyTorchJob",
            {
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": template()},
                        "Worker": {"replicas": 15, "template": template()},
                    }
                }
            },
            [
                ("spec.pytorchReplicaSpecs.Master.template.spec", 1),
                ("spec.pytorchReplicaSpecs.Worker.template.spec", 15),
            ],
        ),
        (
            "ray.io",
            "RayCluster",
            {
                "spec": {
                    "headGroupSpec": {"template": template()},
                    "workerGroupSpecs": [],
                }
            },
            [("spec.headGroupSpec.template.spec", 1)],
        ),
        ("", "ConfigMap", {"data": {"a": "b"}}, []),
        ("batch", "Job", {"spec": {}}, []),
        ("batch", "Job", {"spec": {"template": "not-a-map"}}, []),
        (
            "batch",
            "Job",
            {"spec": {"parallelism": "many", "template": template()}},
            [("spec.template.spec", 1)],
        ),
    ],
)
def test_builtin_kinds(group: str, kind: str, obj: dict[str, Any], expected: list[tuple[str, int]]) -> None:
    found = find_pod_templates(obj, group=group, kind=kind)
    assert [(t.path, t.replicas) for t in found] == expected
    assert all(t.spec == SPEC and t.metadata == META for t in found)


def test_a_configured_training_resource_is_one_more_entry() -> None:
    custom = WorkloadKind(
        group="example.org",
        version="v1",
        kind="Sweep",
        resource="sweeps",
        templates=(TemplateLocation(template="spec.trials.*.pod", replicas="spec.trials.*.count"),),
    )
    obj = {"spec": {"trials": {"a": {"count": 4, "pod": template()}, "b": {"pod": template()}}}}
    found = find_pod_templates(obj, group="example.org", kind="Sweep", kinds=(custom,))
    assert [(t.path, t.replicas) for t in found] == [
        ("spec.trials.a.pod.spec", 4),
        ("spec.trials.b.pod.spec", 1),
    ]


def test_no_object_has_no_templates() -> None:
    assert find_pod_templates(None, group="", kind="Pod") == []


def test_workload_kinds_file_adds_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "kinds.yaml"
    path.write_text(
        "- {group: example.org, version: v1, kind: Sweep, resource: sweeps, templates: [{template: spec.pod}]}\n"
        "- {group: batch, version: v1, kind: Job, resource: jobs, templates: [{template: spec.template, replicas: spec.completions}]}\n"
    )
    kinds = load_workload_kinds(path)
    by_kind = {(k.group, k.kind): k for k in kinds}
    assert ("example.org", "Sweep") in by_kind
    assert by_kind[("batch", "Job")].templates[0].replicas == "spec.completions"
    assert ("apps", "Deployment") in by_kind
    assert load_workload_kinds(None) == BUILTIN_WORKLOAD_KINDS


def test_a_malformed_kinds_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "kinds.yaml"
    path.write_text("- {group: example.org, kind: Sweep}\n")
    with pytest.raises(ValidationError, match="version"):
        load_workload_kinds(path)
