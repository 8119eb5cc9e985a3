"""Where the pod specs are inside an object: a Pod, a Job's template, a CronJob's job template, ...

Pure and table-driven, so that a training resource (PyTorchJob, RayCluster, ...) is one more entry.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# (group, kind) -> paths (dot-separated; "*" walks every value of a map) to pod specs.
BUILTIN_TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): ("spec",),
    ("batch", "Job"): ("spec.template.spec",),
    ("batch", "CronJob"): ("spec.jobTemplate.spec.template.spec",),
    ("apps", "Deployment"): ("spec.template.spec",),
    ("apps", "StatefulSet"): ("spec.template.spec",),
    ("apps", "ReplicaSet"): ("spec.template.spec",),
    ("apps", "DaemonSet"): ("spec.template.spec",),
    ("", "ReplicationController"): ("spec.template.spec",),
}


class PodTemplate(BaseModel):
    """One pod spec found inside an object, with where it was found."""

    model_config = ConfigDict(frozen=True)

    path: str
    spec: dict[str, Any]


def _walk(node: Any, parts: list[str], prefix: str) -> list[PodTemplate]:
    if not parts:
        return [PodTemplate(path=prefix, spec=node)] if isinstance(node, dict) else []
    head, rest = parts[0], parts[1:]
    if not isinstance(node, dict):
        return []
    if head == "*":
        found: list[PodTemplate] = []
        for key in sorted(node):
            found += _walk(node[key], rest, f"{prefix}.{key}" if prefix else key)
        return found
    if head not in node:
        return []
    return _walk(node[head], rest, f"{prefix}.{head}" if prefix else head)


def find_pod_templates(
    obj: dict[str, Any] | None,
    *,
    group: str,
    kind: str,
    extra_paths: dict[tuple[str, str], tuple[str, ...]] | None = None,
) -> list[PodTemplate]:
    """Every pod spec inside `obj`, by the kind's template paths; [] for kinds without pods."""
    if obj is None:
        return []
    paths = {**BUILTIN_TEMPLATE_PATHS, **(extra_paths or {})}.get((group, kind), ())
    found: list[PodTemplate] = []
    for path in paths:
        found += _walk(obj, path.split("."), "")
    return found
