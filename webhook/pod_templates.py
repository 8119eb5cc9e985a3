"""Where the pod specs are inside an object, and how many pods each makes at once (pure).

Pure and table-driven: a Pod, and every kind of `labgate.core.workload_catalog.BUILTIN_WORKLOAD_KINDS`
(Jobs, CronJobs, Deployments, the training resources). A "*" in a path walks every entry of a map or
every item of a list. A cluster adds another training resource with one more WorkloadKind (see
`load_workload_kinds`).

Kinds whose pods are not described by a PodTemplateSpec (an Argo template's container, script or
containerSet; a TrainJob's trainer) are turned into the pod spec their controller would build, marked
`synthesized`: the validation judges them like any pod spec, the mutation leaves them alone (its
patches address real fields; the pods themselves are mutated when their controller creates them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

# The kinds are listed once, in labgate.core (the reconciler's RBAC and the chart derive from them too).
from labgate.core.workload_catalog import BUILTIN_WORKLOAD_KINDS, TemplateLocation, WorkloadKind
from webhook.policy_input import PodTemplateDocument as PodTemplate

__all__ = [
    "BUILTIN_WORKLOAD_KINDS",
    "PodTemplate",
    "TemplateLocation",
    "WorkloadKind",
    "find_pod_templates",
    "load_workload_kinds",
]


def _template(
    path: str, spec: dict[str, Any], metadata: dict[str, Any], replicas: int = 1, *, synthesized: bool = False
) -> PodTemplate:
    """One pod spec found inside an object, as the policies read it (`input.pod_templates[_]`): where,
    its spec and metadata (the object's own dicts, not copies), how many pods it makes, and whether it
    was built from an object that holds no PodSpec at `path` (see the module doc)."""
    return {
        "path": path,
        "spec": spec,
        "metadata": metadata,
        "replicas": replicas,
        "synthesized": synthesized,
    }


def _children(node: Any, head: str) -> list[tuple[str, Any]]:
    """(key, child) of a map or list for one path part: "*" is every entry, a number a list index."""
    if isinstance(node, dict):
        return sorted(node.items()) if head == "*" else ([(head, node[head])] if head in node else [])
    if isinstance(node, list):
        if head == "*":
            return [(str(i), item) for i, item in enumerate(node)]
        if head.isdigit() and int(head) < len(node):
            return [(head, node[int(head)])]
    return []


def _walk(node: Any, parts: list[str], prefix: str) -> list[tuple[str, Any]]:
    """(concrete path, value) for every match of a dot path with "*" wildcards (map keys, list items)."""
    if not parts:
        return [(prefix, node)]
    head, rest = parts[0], parts[1:]
    found: list[tuple[str, Any]] = []
    for key, child in _children(node, head):
        found += _walk(child, rest, f"{prefix}.{key}" if prefix else key)
    return found


def _merge_named(base: list[Any], patch: list[Any]) -> list[Any]:
    """Lists of named items (containers, volumes) merge by name, as a strategic merge patch does."""
    if not all(isinstance(i, dict) and "name" in i for i in [*base, *patch]):
        return patch
    merged = {i["name"]: i for i in base}
    for item in patch:
        merged[item["name"]] = _merge(merged.get(item["name"], {}), item)
    return list(merged.values())


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        return {k: _merge(base[k], v) if k in base else v for k, v in {**base, **patch}.items()}
    if isinstance(base, list) and isinstance(patch, list):
        return _merge_named(base, patch)
    return patch


# Pod-level fields an Argo template (or its workflow's spec, as the default) gives the pod it runs.
_ARGO_POD_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "securityContext",
    "serviceAccountName",
    "automountServiceAccountToken",
    "priorityClassName",
    "schedulerName",
    "hostAliases",
    "hostNetwork",
    "dnsPolicy",
    "dnsConfig",
    "runtimeClassName",
    "imagePullSecrets",
    "volumes",
)


def _argo_pod_spec(template: dict[str, Any], workflow_spec: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec Argo runs for a template, or None for templates that run no pod of their own
    (steps, dag, suspend, resource, http, plugin)."""
    containers: list[Any] = []
    if isinstance(template.get("container"), dict):
        containers.append({"name": "main", **template["container"]})
    if isinstance(template.get("script"), dict):
        script = {k: v for k, v in template["script"].items() if k != "source"}
        containers.append({"name": "main", **script})
    container_set = template.get("containerSet")
    if isinstance(container_set, dict):
        containers += [c for c in container_set.get("containers") or [] if isinstance(c, dict)]
    if not containers:
        return None
    spec: dict[str, Any] = {k: workflow_spec[k] for k in _ARGO_POD_FIELDS if k in workflow_spec}
    spec.update({k: template[k] for k in _ARGO_POD_FIELDS if k in template})
    spec["containers"] = containers + [s for s in template.get("sidecars") or [] if isinstance(s, dict)]
    if template.get("initContainers"):
        spec["initContainers"] = list(template["initContainers"])
    for patch_text in (workflow_spec.get("podSpecPatch"), template.get("podSpecPatch")):
        if isinstance(patch_text, str) and patch_text.strip():
            # Argo applies it to the pod spec: judge the pod it gives. One Argo cannot read runs no pod.
            try:
                patch = yaml.safe_load(patch_text)
            except yaml.YAMLError:
                continue
            if isinstance(patch, dict):
                spec = _merge(spec, patch)
    return spec


def _synthesized(
    obj: dict[str, Any], location: TemplateLocation, path: str, node: dict[str, Any]
) -> PodTemplate | None:
    if location.shape == "container":
        container = {"name": "trainer", **{k: v for k, v in node.items() if k in _CONTAINER_FIELDS}}
        if "resourcesPerNode" in node:
            container["resources"] = node["resourcesPerNode"]
        spec: dict[str, Any] | None = {"containers": [container]}
    else:
        owner = _walk(obj, path.split(".")[:-2], "")  # the workflow spec holding `templates`
        workflow_spec = owner[0][1] if owner and isinstance(owner[0][1], dict) else {}
        spec = _argo_pod_spec(node, workflow_spec)
    if spec is None:
        return None
    return _template(path, spec, node.get("metadata") or {}, _replicas(obj, location, path), synthesized=True)


_CONTAINER_FIELDS = ("image", "command", "args", "env", "envFrom", "volumeMounts", "resources")


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
        return [_template("spec", spec, metadata)] if isinstance(spec, dict) else []
    found: list[PodTemplate] = []
    for workload in kinds:
        if (workload.group, workload.kind) != (group, kind):
            continue
        for location in workload.templates:
            for path, template in _walk(obj, location.template.split("."), ""):
                if location.shape in ("container", "argo-template"):
                    if isinstance(template, dict) and (made := _synthesized(obj, location, path, template)):
                        found.append(made)
                    continue
                if isinstance(template, dict) and isinstance(template.get("spec"), dict):
                    found.append(
                        _template(
                            f"{path}.spec",
                            template["spec"],
                            template.get("metadata") or {},
                            _replicas(obj, location, path),
                            synthesized=location.shape == "pod-override",
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
