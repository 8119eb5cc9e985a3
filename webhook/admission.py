"""Pure admission logic: the policy input for a request, and the AdmissionResponse for a decision."""

from __future__ import annotations

from typing import Any

from labgate.core.decisions import Decision, Finding
from labgate.core.kinds import Object
from webhook.review import AdmissionRequest, AdmissionResponse, ResponseStatus
from webhook.workloads import BUILTIN_WORKLOAD_KINDS, WorkloadKind, find_pod_templates

MAX_WARNING_LENGTH = 119  # kubectl shows warnings whole; keep them on one line


def build_policy_input(
    *, request: AdmissionRequest, kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS
) -> dict[str, Any]:
    """The `input` document for data.labgate.admission.decision.

    `input.request` is the AdmissionRequest in its wire form (camelCase, as Kubernetes docs show it);
    `input.pod_templates` lists the pod specs inside the object, so rules need not know every kind.
    """
    templates = find_pod_templates(
        request.object, group=request.kind.group, kind=request.kind.kind, kinds=kinds
    )
    return {
        "request": request.model_dump(by_alias=True, exclude_none=True),
        "pod_templates": [t.model_dump() for t in templates],
    }


def shorten_warning(text: str) -> str:
    """A warning that fits on one line of kubectl output (under 120 characters)."""
    single_line = " ".join(text.split())
    if len(single_line) <= MAX_WARNING_LENGTH:
        return single_line
    return single_line[: MAX_WARNING_LENGTH - 1].rstrip() + "…"


def refusal_message(denials: list[Finding]) -> str:
    """All refusals in one message, one per line, in a stable order."""
    return "\n".join(f.message for f in sorted(denials, key=lambda f: (f.rule, f.message)))


def build_response(*, request: AdmissionRequest, decision: Decision) -> AdmissionResponse:
    """The AdmissionResponse for `decision`: uid echoed, all refusals in one message, warnings."""
    warnings = [shorten_warning(f.message) for f in decision.warnings] or None
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
