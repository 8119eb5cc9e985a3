"""Finding pod specs (and how many pods each makes) inside workload objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from webhook.pod_templates import (
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
        (
            "ray.io",
            "RayCluster",
            {
                "spec": {
                    "headGroupSpec": {"template": template()},
                    "workerGroupSpecs": [
                        {"replicas": 2, "template": template()},
                        {"replicas": 8, "template": template()},
                    ],
                }
            },
            [
                ("spec.headGroupSpec.template.spec", 1),
                ("spec.workerGroupSpecs.0.template.spec", 2),
                ("spec.workerGroupSpecs.1.template.spec", 8),
            ],
        ),
        (
            "jobset.x-k8s.io",
            "JobSet",
            {
                "spec": {
                    "replicatedJobs": [
                        {"name": "driver", "template": {"spec": {"template": template()}}},
                        {"name": "workers", "template": {"spec": {"parallelism": 4, "template": template()}}},
                    ]
                }
            },
            [
                ("spec.replicatedJobs.0.template.spec.template.spec", 1),
                ("spec.replicatedJobs.1.template.spec.template.spec", 4),
            ],
        ),
        (
            "leaderworkerset.x-k8s.io",
            "LeaderWorkerSet",
            {
                "spec": {
                    "replicas": 3,
                    "leaderWorkerTemplate": {"leaderTemplate": template(), "workerTemplate": template()},
                }
            },
            [
                ("spec.leaderWorkerTemplate.leaderTemplate.spec", 3),
                ("spec.leaderWorkerTemplate.workerTemplate.spec", 3),
            ],
        ),
        *[
            (
                "kubeflow.org",
                kind,
                {"spec": {field: {"Worker": {"replicas": 6, "template": template()}}}},
                [(f"spec.{field}.Worker.template.spec", 6)],
            )
            for kind, field in (
                ("TFJob", "tfReplicaSpecs"),
                ("MPIJob", "mpiReplicaSpecs"),
                ("XGBoostJob", "xgbReplicaSpecs"),
                ("PaddleJob", "paddleReplicaSpecs"),
            )
        ],
        (
            "ray.io",
            "RayJob",
            {"spec": {"submitterPodTemplate": template()}},
            [("spec.submitterPodTemplate.spec", 1)],
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
    assert [(t["path"], t["replicas"]) for t in found] == expected
    assert all(t["spec"] == SPEC and t["metadata"] == META for t in found)


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
    assert [(t["path"], t["replicas"]) for t in found] == [
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


def test_argo_templates_are_the_pods_argo_would_run() -> None:
    workflow = {
        "spec": {
            "serviceAccountName": "runner",
            "hostNetwork": True,
            "volumes": [{"name": "v", "emptyDir": {}}],
            "templates": [
                {"name": "main", "steps": [[{"name": "a", "template": "train"}]]},
                {
                    "name": "train",
                    "container": {"image": "trainer"},
                    "sidecars": [{"name": "log", "image": "fluent"}],
                    "nodeSelector": {"pool": "a"},
                    "podSpecPatch": '{"containers": [{"name": "main", "securityContext": {"privileged": true}}]}',
                },
                {
                    "name": "prep",
                    "script": {"image": "python", "source": "print(1)"},
                    "serviceAccountName": "own",
                },
                {"name": "set", "containerSet": {"containers": [{"name": "x", "image": "a"}]}},
            ],
        }
    }
    found = find_pod_templates(workflow, group="argoproj.io", kind="Workflow")
    assert [t["path"] for t in found] == ["spec.templates.1", "spec.templates.2", "spec.templates.3"]
    assert all(t["synthesized"] for t in found)
    train, prep, container_set = (t["spec"] for t in found)
    assert train["containers"] == [
        {"name": "main", "image": "trainer", "securityContext": {"privileged": True}},
        {"name": "log", "image": "fluent"},
    ]
    assert (train["hostNetwork"], train["serviceAccountName"], train["nodeSelector"]) == (
        True,
        "runner",
        {"pool": "a"},
    )
    assert train["volumes"] == [{"name": "v", "emptyDir": {}}]
    assert prep["containers"] == [{"name": "main", "image": "python"}]
    assert prep["serviceAccountName"] == "own"
    assert container_set["containers"] == [{"name": "x", "image": "a"}]
    cron = find_pod_templates(
        {"spec": {"workflowSpec": workflow["spec"]}}, group="argoproj.io", kind="CronWorkflow"
    )
    assert [t["spec"] for t in cron] == [t["spec"] for t in found]


def test_trainjob_trainer_and_overrides() -> None:
    trainjob = {
        "spec": {
            "trainer": {
                "image": "trainer",
                "numNodes": 4,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}},
            },
            "podTemplateOverrides": [
                {
                    "targetJobs": [{"name": "node"}],
                    "spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]},
                }
            ],
        }
    }
    trainer, override = find_pod_templates(trainjob, group="trainer.kubeflow.org", kind="TrainJob")
    assert (trainer["path"], trainer["replicas"], trainer["synthesized"]) == ("spec.trainer", 4, True)
    assert trainer["spec"] == {
        "containers": [
            {"name": "trainer", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": 8}}}
        ]
    }
    assert (override["path"], override["synthesized"]) == ("spec.podTemplateOverrides.0.spec", True)
    assert override["spec"]["volumes"][0]["hostPath"] == {"path": "/"}


def test_a_template_is_the_objects_own_spec_not_a_copy_of_it() -> None:
    # The policy input of a Pod CREATE holds its spec once: a copy per request was a deep copy of
    # every pod spec a thousand-copy Job sends (about 37 us each, measured on 2026-12-04).
    job = {"spec": {"template": template()}}
    (found,) = find_pod_templates(job, group="batch", kind="Job")
    assert found["spec"] is job["spec"]["template"]["spec"]
    assert found["metadata"] is job["spec"]["template"]["metadata"]
