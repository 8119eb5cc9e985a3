"""Pure admission logic: the policy input for a request, and the AdmissionResponse for a decision."""

from __future__ import annotations

import re
from typing import Any

from labgate.core.decisions import Decision, Finding
from labgate.core.kinds import Object
from webhook.provenance.reference import InvalidReferenceError, parse_reference
from webhook.review import AdmissionRequest, AdmissionResponse, ResponseStatus
from webhook.workloads import BUILTIN_WORKLOAD_KINDS, WorkloadKind, find_pod_templates

MAX_WARNING_LENGTH = 119  # kubectl shows warnings whole; keep them on one line


def build_policy_input(
    *, request: AdmissionRequest, kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS
) -> dict[str, Any]:
    """The `input` document for data.labgate.admission.decision.

    `input.request` is the AdmissionRequest in its wire form (camelCase, as Kubernetes docs show it);
    `input.pod_templates` lists the pod specs inside the object, so rules need not know every kind;
    `input.image_references` says where each image comes from, read from the reference alone (no
    registry is asked), so registry allowlists hold for every tenant.
    """
    templates = find_pod_templates(
        request.object, group=request.kind.group, kind=request.kind.kind, kinds=kinds
    )
    pod_templates = [t.model_dump() for t in templates]
    return {
        "request": request.model_dump(by_alias=True, exclude_none=True),
        "pod_templates": pod_templates,
        "image_references": image_references(pod_templates),
    }


_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def needs_gpu_usage(request: AdmissionRequest, pod_templates: list[dict[str, Any]]) -> bool:
    """Whether the policies get the tenant's GPU usage (`input.gpu_usage`): a Pod being created (the
    quota is checked and reserved), and a workload with pod templates being created (its pods that
    will wait for GPUs are announced at apply time; on an update its own pods are counted already)."""
    return request.operation == "CREATE" and (
        (request.kind.group == "" and request.kind.kind == "Pod") or bool(pod_templates)
    )


def image_references(pod_templates: list[dict[str, Any]]) -> dict[str, dict[str, str | None]]:
    """Every image of the templates, as written -> {registry, repository, error}: what the reference
    alone tells (Docker's normalisation), or why it is not a reference."""
    references: dict[str, dict[str, str | None]] = {}
    for template in pod_templates:
        spec = template.get("spec") or {}
        for field in _CONTAINER_LISTS:
            containers = spec.get(field)
            # Not a list: the apiserver would refuse the object; decide it rather than fail on it.
            for container in containers if isinstance(containers, list) else []:
                image = container.get("image") if isinstance(container, dict) else None
                if not isinstance(image, str) or image in references:
                    continue
                try:
                    parsed = parse_reference(image)
                except InvalidReferenceError as err:
                    references[image] = {"registry": None, "repository": None, "error": str(err)}
                    continue
                references[image] = {
                    "registry": parsed.registry,
                    "repository": parsed.repository,
                    "error": None,
                }
    return references


_RULE_ID = re.compile(r"^\[([a-z0-9][a-z0-9-]*)\] ")


def warning_lines(text: str) -> list[str]:
    """A warning as kubectl lines under 120 characters, nothing cut: a long one is split at spaces
    into several lines, each after the first starting with the rule id (`[rule-id] ...`) so that
    every line says which rule it belongs to, and the `Fix:` is always shown."""
    single_line = " ".join(text.split())
    if len(single_line) <= MAX_WARNING_LENGTH:
        return [single_line] if single_line else []
    match = _RULE_ID.match(single_line)
    marker = f"[{match.group(1)}] ..." if match else "..."
    lines: list[str] = []
    current = ""
    for word in single_line.split(" "):
        if not current:
            current = f"{marker} {word}" if lines else word
        elif len(current) + 1 + len(word) <= MAX_WARNING_LENGTH or len(word) > MAX_WARNING_LENGTH // 2:
            current = f"{current} {word}"
        else:
            lines.append(current)
            current = f"{marker} {word}"
        while len(current) > MAX_WARNING_LENGTH:  # a word longer than a line is cut in pieces
            lines.append(current[:MAX_WARNING_LENGTH])
            current = f"{marker} {current[MAX_WARNING_LENGTH:]}"
    lines.append(current)
    return lines


def refusal_message(denials: list[Finding]) -> str:
    """All refusals in one message, one per line, in a stable order."""
    return "\n".join(f.message for f in sorted(denials, key=lambda f: (f.rule, f.message)))


def build_response(*, request: AdmissionRequest, decision: Decision) -> AdmissionResponse:
    """The AdmissionResponse for `decision`: uid echoed, all refusals in one message, warnings."""
    warnings = [line for f in decision.warnings for line in warning_lines(f.message)] or None
    if decision.denials:
        return AdmissionResponse(
            uid=request.uid,
            allowed=False,
            status=ResponseStatus(code=403, reason="Forbidden", message=refusal_message(decision.denials)),
            warnings=warnings,
        )
    return AdmissionResponse(uid=request.uid, allowed=True, warnings=warnings)


def engine_unavailable_response(*, request: AdmissionRequest, reason: str) -> AdmissionResponse:
    """Refuse when no policy decision could be had: an error must never admit by accident."""
    message = (
        f"[policy-engine-unavailable] labgate could not evaluate its policies ({reason}), so the request "
        "was refused to stay safe. Fix: retry in a minute; if it persists, tell the infra team"
    )
    return AdmissionResponse(
        uid=request.uid,
        allowed=False,
        status=ResponseStatus(code=503, reason="ServiceUnavailable", message=message),
    )


def namespace_document(namespace: Object) -> dict[str, Any]:
    """What policies see of a Namespace."""
    metadata = namespace.get("metadata", {})
    return {"labels": metadata.get("labels") or {}, "annotations": metadata.get("annotations") or {}}


def priority_class_document(priority_class: Object) -> dict[str, Any]:
    """What policies see of a PriorityClass: the priority its pods run at and whether they preempt."""
    return {
        "value": priority_class.get("value", 0),
        "preemptionPolicy": priority_class.get("preemptionPolicy") or "PreemptLowerPriority",
        "globalDefault": bool(priority_class.get("globalDefault")),
    }


def tenant_document(tenant: Object) -> dict[str, Any]:
    """What policies see of a Tenant: identity and spec (status changes often and decides nothing)."""
    metadata = tenant.get("metadata", {})
    return {
        "metadata": {
            "name": metadata.get("name", ""),
            "labels": metadata.get("labels") or {},
            "generation": metadata.get("generation", 0),
        },
        "spec": tenant.get("spec") or {},
    }


def _size_text(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.0f} KiB"
    return f"{size} bytes"


def request_too_large_response(
    *, request: AdmissionRequest, size: int, limit: int, deadline: float | None
) -> AdmissionResponse:
    """Refuse a request too large to decide (above `limit`), or too complex to decide within
    `deadline`: a retry would fail the same way, so the message says how to make it smaller."""
    kind = request.kind.kind
    metadata = (request.object or {}).get("metadata") or {}
    name = request.name or metadata.get("name") or metadata.get("generateName") or ""
    if deadline is None:
        what = (
            f"is {_size_text(size)} as an admission request; labgate decides requests up to "
            f"{_size_text(limit)}"
        )
    else:
        what = (
            f"is {_size_text(size)} as an admission request and could not be decided within "
            f"{deadline:.1f}s; requests above {_size_text(limit)} may be too complex to decide in time"
        )
    message = (
        f'[request-too-large] {kind} "{name}" {what}. Fix: split it into smaller objects (fewer pod '
        "templates, containers, env entries or volumes each; bulky data belongs in a volume, not in "
        "the spec), or ask the infra team about the limit"
    )
    return AdmissionResponse(
        uid=request.uid,
        allowed=False,
        status=ResponseStatus(code=413, reason="RequestEntityTooLarge", message=message),
    )
