"""Where the pod specs are inside an object, and how many pods each makes at once.

Pure and table-driven: a Pod, a Job's template, a CronJob's job template, Deployments, and the
training resources labgate ships entries for (Kubeflow PyTorchJob, JobSet, RayJob, RayCluster). A
cluster adds another training resource with one more WorkloadKind (see `workload_kinds_from_config`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class TemplateLocation(BaseModel):
    """One pod template inside a kind: dot path to the PodTemplateSpec ("*" walks every map entry), and
    the dot path, relative to the same walk, of its replica count (absent: one pod)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    template: str = Field(description='Path to the PodTemplateSpec (metadata + spec), e.g. "spec.template".')
    replicas: str | None = Field(
        default=None, description='Path to the replica count, e.g. "spec.parallelism".'
    )
    default_replicas: int = 1


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
    ),
)


class PodTemplate(BaseModel):
    """One pod spec found inside an object: where, its spec and metadata, and how many pods it makes."""

    model_config = ConfigDict(frozen=True)

    path: str
    spec: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    replicas: int = 1


def _walk(node: Any, parts: list[str], prefix: str) -> list[tuple[str, Any]]:
    """(concrete path, value) for every match of a dot path with "*" wildcards."""
    if not parts:
        return [(prefix, node)]
    if not isinstance(node, dict):
        return []
    head, rest = parts[0], parts[1:]
    keys = sorted(node) if head == "*" else ([head] if head in node else [])
    found: list[tuple[str, Any]] = []
    for key in keys:
        found += _walk(node[key], rest, f"{prefix}.{key}" if prefix else key)
    return found


def _replicas(obj: dict[str, Any], location: TemplateLocation, template_path: str) -> int:
    if location.replicas is None:
        return location.default_replicas
    # Resolve the replica path with the same wildcard choices as the template path.
    concrete = location.replicas.split(".")
    chosen = template_path.split(".")
    for i, part in enumerate(location.template.split(".")):
        if part == "*" and i < len(concrete) and concrete[i] == "*":
            concrete[i] = chosen[i]
    matches = _walk(obj, concrete, "")
    value = matches[0][1] if matches else None
    return value if isinstance(value, int) and value >= 0 else location.default_replicas


def find_pod_templates(
    obj: dict[str, Any] | None,
    *,
    group: str,
    kind: str,
    kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
) -> list[PodTemplate]:
    """Every pod spec inside `obj`; [] for kinds without pods."""
    if obj is None:
        return []
    if (group, kind) == ("", "Pod"):
        spec = obj.get("spec")
        metadata = obj.get("metadata") or {}
        return [PodTemplate(path="spec", spec=spec, metadata=metadata)] if isinstance(spec, dict) else []
    found: list[PodTemplate] = []
    for workload in kinds:
        if (workload.group, workload.kind) != (group, kind):
            continue
        for location in workload.templates:
            for path, template in _walk(obj, location.template.split("."), ""):
                if isinstance(template, dict) and isinstance(template.get("spec"), dict):
                    found.append(
                        PodTemplate(
                            path=f"{path}.spec",
                            spec=template["spec"],
                            metadata=template.get("metadata") or {},
                            replicas=_replicas(obj, location, path),
                        )
                    )
    return found


def load_workload_kinds(path: Path | None) -> tuple[WorkloadKind, ...]:
    """The built-in kinds plus those listed in a YAML file (a list of WorkloadKind), e.g. a training
    operator the cluster runs. A file entry for a built-in group/kind replaces it."""
    if path is None:
        return BUILTIN_WORKLOAD_KINDS
    extra = TypeAdapter(list[WorkloadKind]).validate_python(yaml.safe_load(path.read_text()) or [])
    overridden = {(k.group, k.kind) for k in extra}
    return (*[k for k in BUILTIN_WORKLOAD_KINDS if (k.group, k.kind) not in overridden], *extra)
