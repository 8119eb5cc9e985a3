"""The workload kinds labgate judges: where each holds its pod templates and replica counts (pure).

The one list of them. The webhook finds pod templates with it (`webhook/pod_templates.py`) and registers
their resources (`webhook/registration.py`); the reconciler grants researchers the verbs on them
(`rbac/desired.py`); `labgate generate` writes the chart's webhook rules and the policies'
`data.labgate.workloads` from it (see docs/architecture.md, "Generated files"). Built in: a Job, a
CronJob's job template, Deployments, StatefulSets, ReplicaSets, and the training resources labgate
ships entries for (Kubeflow PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob and TrainJob, JobSet,
LeaderWorkerSet, RayJob, RayCluster, Argo Workflow, WorkflowTemplate and CronWorkflow). A "*" in a
path walks every entry of a map or every item of a list.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TemplateLocation(BaseModel):
    """One pod template inside a kind: dot path to the PodTemplateSpec ("*" walks every map entry), and
    the dot path, relative to the same walk, of its replica count (absent: one pod)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    template: str = Field(description='Path to the PodTemplateSpec (metadata + spec), e.g. "spec.template".')
    replicas: str | None = Field(
        default=None, description='Path to the replica count, e.g. "spec.parallelism".'
    )
    default_replicas: int = 1
    shape: Literal["pod-template", "pod-override", "container", "argo-template"] = Field(
        default="pod-template",
        description=(
            "What the path points to: a PodTemplateSpec (metadata + spec), a partial one that the "
            "controller lays over the pod it builds (a TrainJob's podTemplateOverrides), a container whose pod the "
            "controller builds (a TrainJob's trainer), or an Argo template (container, script, "
            "containerSet, sidecars and initContainers, with the workflow's pod-level fields)."
        ),
    )


class WorkloadKind(BaseModel):
    """A kind whose objects hold pod templates."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    group: str
    version: str = Field(description="API version, for the webhook registration.")
    kind: str
    resource: str = Field(description="Plural resource name, for the webhook registration.")
    templates: tuple[TemplateLocation, ...]


def _kind(group: str, version: str, kind: str, resource: str, *templates: TemplateLocation) -> WorkloadKind:
    return WorkloadKind(group=group, version=version, kind=kind, resource=resource, templates=templates)


_REPLICATED = TemplateLocation(template="spec.template", replicas="spec.replicas")

BUILTIN_WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (
    _kind(
        "batch", "v1", "Job", "jobs", TemplateLocation(template="spec.template", replicas="spec.parallelism")
    ),
    _kind(
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        TemplateLocation(
            template="spec.jobTemplate.spec.template", replicas="spec.jobTemplate.spec.parallelism"
        ),
    ),
    _kind("apps", "v1", "Deployment", "deployments", _REPLICATED),
    _kind("apps", "v1", "StatefulSet", "statefulsets", _REPLICATED),
    _kind("apps", "v1", "ReplicaSet", "replicasets", _REPLICATED),
    _kind(
        "kubeflow.org",
        "v1",
        "PyTorchJob",
        "pytorchjobs",
        TemplateLocation(
            template="spec.pytorchReplicaSpecs.*.template", replicas="spec.pytorchReplicaSpecs.*.replicas"
        ),
    ),
    *(
        _kind(
            "kubeflow.org",
            version,
            kind,
            resource,
            TemplateLocation(template=f"spec.{field}.*.template", replicas=f"spec.{field}.*.replicas"),
        )
        for version, kind, resource, field in (
            ("v1", "TFJob", "tfjobs", "tfReplicaSpecs"),
            ("v2beta1", "MPIJob", "mpijobs", "mpiReplicaSpecs"),
            ("v1", "XGBoostJob", "xgboostjobs", "xgbReplicaSpecs"),
            ("v1", "PaddleJob", "paddlejobs", "paddleReplicaSpecs"),
        )
    ),
    _kind(
        "trainer.kubeflow.org",
        "v1alpha1",
        "TrainJob",
        "trainjobs",
        TemplateLocation(template="spec.trainer", replicas="spec.trainer.numNodes", shape="container"),
        TemplateLocation(template="spec.podTemplateOverrides.*", shape="pod-override"),
    ),
    _kind(
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
        "leaderworkersets",
        TemplateLocation(template="spec.leaderWorkerTemplate.leaderTemplate", replicas="spec.replicas"),
        TemplateLocation(template="spec.leaderWorkerTemplate.workerTemplate", replicas="spec.replicas"),
    ),
    _kind(
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
        "jobsets",
        # Each replicated job runs `replicas` Jobs of `parallelism` pods; counted per Job here.
        TemplateLocation(
            template="spec.replicatedJobs.*.template.spec.template",
            replicas="spec.replicatedJobs.*.template.spec.parallelism",
        ),
    ),
    _kind(
        "ray.io",
        "v1",
        "RayCluster",
        "rayclusters",
        TemplateLocation(template="spec.headGroupSpec.template"),
        TemplateLocation(
            template="spec.workerGroupSpecs.*.template", replicas="spec.workerGroupSpecs.*.replicas"
        ),
    ),
    _kind(
        "ray.io",
        "v1",
        "RayJob",
        "rayjobs",
        TemplateLocation(template="spec.rayClusterSpec.headGroupSpec.template"),
        TemplateLocation(
            template="spec.rayClusterSpec.workerGroupSpecs.*.template",
            replicas="spec.rayClusterSpec.workerGroupSpecs.*.replicas",
        ),
        TemplateLocation(template="spec.submitterPodTemplate"),
    ),
    _kind(
        "argoproj.io",
        "v1alpha1",
        "Workflow",
        "workflows",
        TemplateLocation(template="spec.templates.*", shape="argo-template"),
    ),
    _kind(
        "argoproj.io",
        "v1alpha1",
        "WorkflowTemplate",
        "workflowtemplates",
        TemplateLocation(template="spec.templates.*", shape="argo-template"),
    ),
    _kind(
        "argoproj.io",
        "v1alpha1",
        "CronWorkflow",
        "cronworkflows",
        TemplateLocation(template="spec.workflowSpec.templates.*", shape="argo-template"),
    ),
)


def resources_by_group(kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS) -> dict[str, list[str]]:
    """API group -> the plural resources of its workload kinds, in the list's order (for RBAC rules)."""
    by_group: dict[str, list[str]] = {}
    for kind in kinds:
        by_group.setdefault(kind.group, []).append(kind.resource)
    return by_group


# The apps kinds whose scale subresource researchers may write (`kubectl scale`: rbac.desired grants
# it, webhook.registration intercepts it). A new count makes pods, each judged and counted as it is
# created; the Scale object itself carries no pod spec.
SCALABLE_WORKLOADS = ("deployments", "statefulsets", "replicasets")
