"""Pure admission logic: the policy input for a request, and the AdmissionResponse for a decision."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from labgate.core import json_bytes
from labgate.core.api_resources import Object
from labgate.core.decisions import Decision, Finding, Mutation
from labgate.core.tenant import MAX_UNSCHEDULED_NAMES
from labgate.gpu_accounting.pool_capacity import (
    PoolCapacityDocument,
    capacity_document,
    capacity_from_document,
)
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, WorkloadKind, find_pod_templates
from webhook.policy_input import (
    HeldDocument,
    ImageReferenceDocument,
    OpenNodesDocument,
    PolicyInput,
    QueuedDocument,
    ScaledWorkloadDocument,
)
from webhook.provenance.reference import InvalidReferenceError, parse_reference, spec_images
from webhook.review import AdmissionRequest, AdmissionResponse, ResponseStatus

MAX_WARNING_LENGTH = 119  # kubectl shows warnings whole; keep them on one line


def build_policy_input(
    *, request: AdmissionRequest, kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS
) -> PolicyInput:
    """The `input` document for data.labgate.admission.decision.

    `input.request` is the AdmissionRequest in its wire form (camelCase, as Kubernetes docs show it);
    `input.pod_templates` lists the pod specs inside the object, so rules need not know every kind;
    `input.image_references` says where each image comes from, read from the reference alone (no
    registry is asked), so registry allowlists hold for every tenant.
    """
    pod_templates = find_pod_templates(
        request.object, group=request.kind.group, kind=request.kind.kind, kinds=kinds
    )
    document: PolicyInput = {
        "request": request.document,
        "pod_templates": pod_templates,
        "image_references": image_references(pod_templates),
    }
    if pod_templates and (before := replicas_before(request, kinds)) is not None:
        document["replicas_before"] = before
    return document


def replicas_before(request: AdmissionRequest, kinds: tuple[WorkloadKind, ...]) -> dict[str, int] | None:
    """`input.replicas_before`: on an UPDATE of a workload, how many pods each pod template of the old
    object makes at once, by path, so that a raised replica count is judged against what the tenant
    has free (gpu-quota-scale); None for anything else."""
    if request.operation != "UPDATE" or request.sub_resource or request.old_object is None:
        return None
    if (request.kind.group, request.kind.kind) == ("", "Pod"):
        return None
    old = find_pod_templates(
        request.old_object, group=request.kind.group, kind=request.kind.kind, kinds=kinds
    )
    return {t["path"]: t["replicas"] for t in old}


def scaled_kind(request: AdmissionRequest, kinds: tuple[WorkloadKind, ...]) -> WorkloadKind | None:
    """The workload kind whose Scale the request writes (its resource among `kinds`), or None."""
    for kind in kinds:
        if (kind.group, kind.resource) == (request.resource.group, request.resource.resource):
            return kind
    return None


def scaled_workload_document(kind: WorkloadKind, workload: Object) -> ScaledWorkloadDocument:
    """`input.scaled_workload`: the kind and pod templates of the workload a scale call resizes, as
    read from the API ({"kind", "error"} says instead why it could not be read)."""
    pod_templates = find_pod_templates(workload, group=kind.group, kind=kind.kind, kinds=(kind,))
    return {"kind": kind.kind, "pod_templates": pod_templates}


_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def image_references(pod_templates: Sequence[Mapping[str, Any]]) -> dict[str, ImageReferenceDocument]:
    """Every image of the templates (containers and image volumes), as written -> {registry,
    repository, error}: what the reference alone tells (Docker's normalisation), or why it is not a
    reference."""
    references: dict[str, ImageReferenceDocument] = {}
    for template in pod_templates:
        for image in spec_images(template.get("spec")):
            if image in references:
                continue
            try:
                parsed = parse_reference(image)
            except InvalidReferenceError as err:
                references[image] = {"registry": None, "repository": None, "error": str(err)}
                continue
            references[image] = {"registry": parsed.registry, "repository": parsed.repository, "error": None}
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


MUTATION_WARNINGS_ANNOTATION = "labgate.io/mutation-warnings"


def mutation_warnings(request: AdmissionRequest) -> list[str]:
    """What labgate's mutation changed, as the mutating webhook left it on a created object
    (annotation labgate.io/mutation-warnings, a JSON list of lines): said only with an admission, so
    a refused object is never told it was placed. Anything else there is not a list of lines: none."""
    if request.operation != "CREATE" or not isinstance(request.object, dict):
        return []
    metadata = request.object.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    text = annotations.get(MUTATION_WARNINGS_ANNOTATION) if isinstance(annotations, dict) else None
    try:
        lines = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return []
    if not isinstance(lines, list):
        return []
    return [line for w in lines if isinstance(w, str) for line in warning_lines(w)]


def build_response(*, request: AdmissionRequest, decision: Decision) -> AdmissionResponse:
    """The AdmissionResponse for `decision`: uid echoed, all refusals in one message, warnings (with
    those of labgate's mutation when it admits)."""
    warnings = [line for f in decision.warnings for line in warning_lines(f.message)]
    if decision.denials:
        return AdmissionResponse(
            uid=request.uid,
            allowed=False,
            status=ResponseStatus(code=403, reason="Forbidden", message=refusal_message(decision.denials)),
            warnings=warnings or None,
        )
    return AdmissionResponse(
        uid=request.uid, allowed=True, warnings=[*mutation_warnings(request), *warnings] or None
    )


def build_mutation_response(*, request: AdmissionRequest, mutation: Mutation) -> AdmissionResponse:
    """The AdmissionResponse for `mutation`: uid echoed, admitted, the notes it says now as warnings
    (the others travel on the object: `mutation_warnings`), its patch as a base64 JSON Patch (none
    when there is nothing to patch)."""
    said = mutation.warnings if mutation.warnings_now is None else mutation.warnings_now
    warnings = [line for w in said for line in warning_lines(w)] or None
    if not mutation.patch:
        return AdmissionResponse(uid=request.uid, allowed=True, warnings=warnings)
    patch = json_bytes.dumps([op.model_dump() for op in mutation.patch])
    return AdmissionResponse(
        uid=request.uid,
        allowed=True,
        warnings=warnings,
        patch_type="JSONPatch",
        patch=base64.b64encode(patch).decode(),
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


def workload_priority_class_document(priority_class: Object) -> dict[str, Any]:
    """What policies see of a Kueue WorkloadPriorityClass: its value (queue-priority)."""
    return {"value": priority_class.get("value", 0)}


def unscheduled_holds(tenant: Object) -> HeldDocument | None:
    """What the Tenant's status says admitted pods not yet scheduled hold: {"gpus", "pods"}, or None
    (the reconciler writes status.gpu.heldByUnscheduled and unscheduledPods; rbac.tenant_status)."""
    gpu = (tenant.get("status") or {}).get("gpu") or {}
    held, pods = gpu.get("heldByUnscheduled"), gpu.get("unscheduledPods")
    if not isinstance(held, int) or held <= 0 or not isinstance(pods, list) or not pods:
        return None
    # The status names at most MAX_UNSCHEDULED_NAMES of them: a full list may be the first of more.
    return {"gpus": held, "pods": [str(p) for p in pods], "all_named": len(pods) < MAX_UNSCHEDULED_NAMES}


def queued_in_kueue(tenant: Object) -> QueuedDocument | None:
    """What the Tenant's status says Kueue holds queued of it: {"workloads", "gpus"}, or None (the
    reconciler writes status.gpu.queuedWorkloads and queuedGpus from Kueue's Workloads, with Kueue
    only; rbac.tenant_status)."""
    gpu = (tenant.get("status") or {}).get("gpu") or {}
    workloads, gpus = gpu.get("queuedWorkloads"), gpu.get("queuedGpus")
    if not isinstance(workloads, int) or not isinstance(gpus, int):
        return None
    return {"workloads": workloads, "gpus": gpus}


def pool_gpus(tenant: Object) -> PoolCapacityDocument | None:
    """What the Tenant's status says the nodes of its pools hold, per model: {"gpus", "nodes",
    "largestNode"}, or None (the reconciler writes status.gpu.pools; rbac.tenant_status). Only a
    status of the current spec counts: pools just changed are not judged by the old ones' nodes."""
    metadata, status = tenant.get("metadata") or {}, tenant.get("status") or {}
    pools = (status.get("gpu") or {}).get("pools")
    if not isinstance(pools, dict) or status.get("observedGeneration") != metadata.get("generation"):
        return None
    return status_pool_gpus(pools)


def status_pool_gpus(pools: Mapping[str, Any]) -> PoolCapacityDocument | None:
    """status.gpu.pools ({model: {gpus, nodes, largestNode}}) as the policies read it (input.gpu_pools,
    the same spelling as input.tenant_pool_gpus), read through `ModelCapacity`; None when it says
    nothing (models whose numbers are not positive integers are left out)."""
    return capacity_document(capacity_from_document(pools)) or None


def open_nodes(tenant: Object) -> OpenNodesDocument | None:
    """What the Tenant's status says of the cluster's nodes as a pod without tolerations sees them
    (the reconciler writes status.nodes; rbac.node_taints), as the policies read it (input.open_nodes);
    None when it says nothing (the cluster's fact: no generation to match)."""
    nodes = (tenant.get("status") or {}).get("nodes")
    return status_open_nodes(nodes) if isinstance(nodes, dict) else None


def status_open_nodes(nodes: Mapping[str, Any]) -> OpenNodesDocument | None:
    """status.nodes ({untainted, tainted, taintKeys, moreTaintKeys}) as the policies read it
    (input.open_nodes: {"untainted", "tainted", "taint_keys", "more_taint_keys"}); None when it
    does not say all of that."""
    counts = [
        nodes.get(k, 0 if k == "moreTaintKeys" else None) for k in ("untainted", "tainted", "moreTaintKeys")
    ]
    keys = nodes.get("taintKeys") or []
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    untainted, tainted, more = counts
    return {"untainted": untainted, "tainted": tainted, "taint_keys": keys, "more_taint_keys": more}


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
