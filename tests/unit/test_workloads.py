"""Finding pod specs inside workload objects."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.workloads import find_pod_templates

SPEC = {"containers": [{"name": "main", "image": "trainer"}]}


@pytest.mark.parametrize(
    ("group", "kind", "obj", "paths"),
    [
        ("", "Pod", {"spec": SPEC}, ["spec"]),
        ("batch", "Job", {"spec": {"template": {"spec": SPEC}}}, ["spec.template.spec"]),
        (
            "batch",
            "CronJob",
            {"spec": {"jobTemplate": {"spec": {"template": {"spec": SPEC}}}}},
            ["spec.jobTemplate.spec.template.spec"],
        ),
        ("apps", "Deployment", {"spec": {"template": {"spec": SPEC}}}, ["spec.template.spec"]),
        ("", "ConfigMap", {"data": {"a": "b"}}, []),
        ("batch", "Job", {"spec": {}}, []),
        ("batch", "Job", {"spec": {"template": "not-a-map"}}, []),
    ],
)
def test_builtin_kinds(group: str, kind: str, obj: dict[str, Any], paths: list[str]) -> None:
    found = find_pod_templates(obj, group=group, kind=kind)
    assert [t.path for t in found] == paths
    assert all(t.spec == SPEC for t in found)


def test_replica_maps_are_walked_for_training_resources() -> None:
    pytorch_job = {
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"template": {"spec": SPEC}},
                "Master": {"template": {"spec": SPEC}},
            }
        }
    }
    found = find_pod_templates(
        pytorch_job,
        group="kubeflow.org",
        kind="PyTorchJob",
        extra_paths={("kubeflow.org", "PyTorchJob"): ("spec.pytorchReplicaSpecs.*.template.spec",)},
    )
    assert [t.path for t in found] == [
        "spec.pytorchReplicaSpecs.Master.template.spec",
        "spec.pytorchReplicaSpecs.Worker.template.spec",
    ]


def test_no_object_has_no_templates() -> None:
    assert find_pod_templates(None, group="", kind="Pod") == []
