"""The admission path without a cluster (pure: no API, no door; opa is run as a process): what `labgate check` and `labgate policy test` run.

The same input the webhook builds (webhook.admission.build_policy_input), the same inventory shape
(webhook.inventory.tenant_document / namespace_document, from Tenant and Namespace manifests), the same
two queries (data.labgate.mutation, then data.labgate.admission.decision on the mutated object, as
the apiserver calls the mutating webhook before the validating one) and the same AdmissionResponse
(webhook.admission.build_response), evaluated by the pinned `opa eval` on a policy directory.

Building requests, inventories and what a researcher reads is pure; `OfflineOpa` is the thin door
to the opa binary.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from labgate.core.api_resources import Object
from labgate.core.decisions import Decision, Mutation, PatchOperation
from labgate.core.errors import LabgateError
from labgate.core.tenant import RESTRICTED_SECRET_ANNOTATION, TENANT_LABEL
from labgate.gpu_accounting.ledger import GpuAmount
from labgate.gpu_accounting.pool_capacity import PoolCapacityDocument
from webhook.admission import (
    build_policy_input,
    build_response,
    namespace_document,
    scaled_kind,
    scaled_workload_document,
    status_open_nodes,
    status_pool_gpus,
    tenant_document,
    warning_lines,
)
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, WorkloadKind
from webhook.policy_input import ClaimUsersDocument, ImageFactDocument, PolicyInput, SecretDocument
from webhook.registration import VALIDATING_WEBHOOK_NAME
from webhook.request_class import RequestClass, classify
from webhook.review import AdmissionRequest, AdmissionResponse, Operation, parse_request

# What the OPA server leaves out of policies/ (webhook/devcluster/stack.py, the chart): so must we.
OPA_IGNORES = ("*_test.rego", "samples", "testdata")

DECISION_QUERY = "data.labgate.admission.decision"
MUTATION_QUERY = "data.labgate.mutation"

# Every authenticated user is in this group; the apiserver adds it, so the policies see it.
AUTHENTICATED_GROUP = "system:authenticated"

# Resources of kinds that are not workloads (those come from webhook.pod_templates).
_CORE_RESOURCES = {
    ("", "Pod"): "pods",
    ("", "Namespace"): "namespaces",
    ("", "Secret"): "secrets",
    ("", "ServiceAccount"): "serviceaccounts",
    ("", "ConfigMap"): "configmaps",
    ("networking.k8s.io", "NetworkPolicy"): "networkpolicies",
    ("labgate.io", "Tenant"): "tenants",
}


_M = TypeVar("_M", bound=BaseModel)


# Kinds without a namespace (a request for one carries none).
_CLUSTER_SCOPED = {
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("labgate.io", "Tenant"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "StorageClass"),
}


class OfflineCheckError(LabgateError, RuntimeError):
    """The offline evaluation could not run (bad manifest, policies that do not compile, ...)."""


# --- facts: tenants, namespaces, restricted secrets ---


@dataclass(frozen=True)
class Facts:
    """What the webhook keeps in caches: data.inventory, and restricted Secrets by namespace."""

    inventory: dict[str, Any]
    secrets: dict[str, dict[str, SecretDocument]] = field(default_factory=dict)

    def tenant_of(self, namespace: str) -> str | None:
        """The tenant label of `namespace`, as webhook.inventory.InventorySync.tenant_of reads it."""
        labels = self.inventory["namespaces"].get(namespace, {}).get("labels", {})
        tenant = labels.get(TENANT_LABEL)
        return str(tenant) if tenant else None


def load_manifests(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every YAML document of `paths` (kind List expanded); empty documents skipped."""
    manifests: list[dict[str, Any]] = []
    for path in paths:
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as err:
            raise OfflineCheckError(f"cannot read {path}: {err}") from err
        for document in documents:
            if document is None:
                continue
            if not isinstance(document, dict):
                raise OfflineCheckError(f"{path}: a document is not a Kubernetes object")
            if document.get("kind") == "List":
                manifests.extend(item for item in document.get("items") or [] if isinstance(item, dict))
            else:
                manifests.append(document)
    return manifests


def facts_from_manifests(manifests: Iterable[dict[str, Any]], *, platform_namespace: str) -> Facts:
    """The webhook's view of a cluster holding these Tenants, Namespaces and Secrets.

    Each Tenant's spec.namespaces.names exist, labelled for it (as the reconciler makes them); a
    Namespace manifest given explicitly replaces that (e.g. one kept with the label of a deleted
    tenant). Secrets count only for their restricted-to-service-account annotation (metadata only,
    as webhook.inventory.RestrictedSecrets keeps them).
    """
    tenants: dict[str, dict[str, Any]] = {}
    explicit: dict[str, dict[str, Any]] = {}
    secrets: dict[str, dict[str, SecretDocument]] = {}
    for manifest in manifests:
        kind = manifest.get("kind")
        metadata = manifest.get("metadata") or {}
        name = metadata.get("name")
        if not name:
            raise OfflineCheckError(f"a {kind} without metadata.name")
        if kind == "Tenant":
            tenants[name] = tenant_document(manifest)
        elif kind == "Namespace":
            explicit[name] = namespace_document(manifest)
        elif kind == "Secret":
            annotations = metadata.get("annotations") or {}
            if RESTRICTED_SECRET_ANNOTATION in annotations:
                restricted = {RESTRICTED_SECRET_ANNOTATION: annotations[RESTRICTED_SECRET_ANNOTATION]}
                secrets.setdefault(metadata.get("namespace") or "default", {})[name] = {
                    "annotations": restricted
                }
        else:
            raise OfflineCheckError(
                f"{kind} {name!r}: tenant definitions hold Tenants, Namespaces and Secrets only"
            )
    namespaces: dict[str, dict[str, Any]] = {}
    for tenant_name, tenant in tenants.items():
        for namespace in (tenant["spec"].get("namespaces") or {}).get("names") or []:
            namespaces[namespace] = {"labels": {TENANT_LABEL: tenant_name}, "annotations": {}}
    namespaces.update(explicit)
    inventory = {
        "tenants": tenants,
        "namespaces": namespaces,
        "platform": {"namespace": platform_namespace},
        "revision": 1,
    }
    return Facts(inventory=inventory, secrets=secrets)


def prefix_tenant(facts: Facts, namespace: str) -> str | None:
    """The one tenant whose spec.namespaces.prefix `namespace` starts with, if exactly one."""
    matches = [
        name
        for name, tenant in facts.inventory["tenants"].items()
        if (prefix := (tenant["spec"].get("namespaces") or {}).get("prefix")) and namespace.startswith(prefix)
    ]
    return matches[0] if len(matches) == 1 else None


def with_namespace(facts: Facts, namespace: str) -> Facts:
    """`facts` with `namespace` present: unknown namespaces under exactly one tenant's prefix are
    labelled for it (the mutation policy labels them so when a member creates them)."""
    if namespace in facts.inventory["namespaces"]:
        return facts
    tenant = prefix_tenant(facts, namespace)
    if tenant is None:
        return facts
    inventory = copy.deepcopy(facts.inventory)
    inventory["namespaces"][namespace] = {"labels": {TENANT_LABEL: tenant}, "annotations": {}}
    return Facts(inventory=inventory, secrets=facts.secrets)


# --- the admission request ---


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def resource_of(group: str, kind: str, kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS) -> str:
    """The plural resource the apiserver names for `kind` (a guess for kinds it does not know)."""
    for workload in kinds:
        if (workload.group, workload.kind) == (group, kind):
            return workload.resource
    return _CORE_RESOURCES.get((group, kind), kind.lower() + "s")


def admission_request(
    *,
    obj: dict[str, Any] | None,
    username: str,
    groups: Iterable[str],
    namespace: str | None,
    operation: Operation = "CREATE",
    old_object: dict[str, Any] | None = None,
    uid: str = "labgate-check",
    kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
) -> AdmissionRequest:
    """The AdmissionRequest the apiserver would send for `obj` applied by `username` in `groups`.

    The object gets its namespace filled in (as the apiserver does). A Pod that names no
    priorityClassName gets spec.priority 0, as the apiserver's Priority admission plugin resolves it
    before any webhook runs (labgate's default PriorityClass is not a global default).
    """
    document = obj if obj is not None else old_object
    if document is None:
        raise OfflineCheckError("a request needs an object or an old object")
    group, version = _group_version(str(document.get("apiVersion", "")))
    kind = str(document.get("kind", ""))
    if not version or not kind:
        raise OfflineCheckError("the manifest has no apiVersion or kind")
    metadata = document.get("metadata") or {}
    namespace = _request_namespace(group, kind, namespace, metadata.get("namespace"))

    def fill(source: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if source is None else _as_the_apiserver_sends(source, group, kind, namespace)

    all_groups = list(dict.fromkeys([*groups, AUTHENTICATED_GROUP]))
    return parse_request(
        {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource_of(group, kind, kinds)},
            "name": metadata.get("name") or None,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": username, "groups": all_groups},
            "object": fill(obj) if operation != "DELETE" else None,
            "oldObject": fill(old_object),
        }
    )


def scale_request(
    request: AdmissionRequest,
    workload: dict[str, Any],
    kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
) -> AdmissionRequest:
    """`request`, an UPDATE of a Scale, as the apiserver sends a scale call of `workload`: the
    workload's resource, subresource "scale"."""
    group, version = _group_version(str(workload.get("apiVersion", "")))
    resource = resource_of(group, str(workload.get("kind", "")), kinds)
    gvr = {"group": group, "version": version, "resource": resource}
    return request.with_changes(resource=gvr, subResource="scale")


def _request_namespace(group: str, kind: str, given: str | None, own: str | None) -> str | None:
    """The request's namespace: none for a cluster-scoped kind, else the one given or the manifest's
    (which must agree), else "default"."""
    if (group, kind) in _CLUSTER_SCOPED:
        return None
    if given and own and own != given:
        raise OfflineCheckError(f"the namespace from the manifest ({own!r}) does not match {given!r}")
    return given or own or "default"


def _as_the_apiserver_sends(
    source: dict[str, Any], group: str, kind: str, namespace: str | None
) -> dict[str, Any]:
    """A copy of `source` with its namespace filled in and, for a Pod naming no priorityClassName,
    spec.priority 0 (what the apiserver does before any webhook runs)."""
    filled = copy.deepcopy(source)
    if namespace is not None:
        filled.setdefault("metadata", {})["namespace"] = namespace
    spec = filled.get("spec")
    if (
        (group, kind) == ("", "Pod")
        and isinstance(spec, dict)
        and not spec.get("priorityClassName")
        and spec.get("priority") is None
    ):
        spec["priority"] = 0
    return filled


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(document: dict[str, Any], patch: Iterable[PatchOperation]) -> dict[str, Any]:
    """`document` with a JSON Patch of "add" operations applied (RFC 6902; labgate only adds)."""
    result = copy.deepcopy(document)
    for op in patch:
        tokens = [_unescape(t) for t in op.path.split("/")[1:]]
        parent: Any = result
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        value = copy.deepcopy(op.value)
        if isinstance(parent, list):
            if last == "-":
                parent.append(value)
            else:
                parent.insert(int(last), value)
        else:
            parent[last] = value
    return result


def with_request_object(request: AdmissionRequest, obj: dict[str, Any]) -> AdmissionRequest:
    """`request` with another object (the mutated one)."""
    return request.with_changes(object=obj)


# --- what comes out ---


@dataclass(frozen=True)
class CheckResult:
    """Both webhooks' answers for one request, as the apiserver would combine them."""

    request: AdmissionRequest
    mutation: Mutation
    decision: Decision
    response: AdmissionResponse

    @property
    def is_allowed(self) -> bool:
        return self.response.allowed

    @property
    def warnings(self) -> list[str]:
        """kubectl's warnings: the mutating webhook's, then the validating webhook's."""
        said = self.mutation.warnings if self.mutation.warnings_now is None else self.mutation.warnings_now
        mutation = [line for w in said for line in warning_lines(w)]
        return [*mutation, *(self.response.warnings or [])]

    @property
    def rule_ids(self) -> list[str]:
        """Every rule that found something (enforced, warned or dry-run), sorted."""
        findings = [*self.decision.denials, *self.decision.warnings, *self.decision.dry_run]
        return sorted({f.rule for f in findings})

    @property
    def visible_text(self) -> str:
        """Everything the researcher reads: warnings and the refusal message."""
        message = self.response.status.message if self.response.status else ""
        return "\n".join([*self.warnings, message])


def object_ref(request: AdmissionRequest) -> str:
    """ "Pod/train-1" (or "Pod/train-(generated)" for a generateName)."""
    metadata = (request.object or request.old_object or {}).get("metadata") or {}
    name = request.name or (f"{metadata['generateName']}(generated)" if metadata.get("generateName") else "")
    return f"{request.kind.kind}/{name}"


def researcher_view(result: CheckResult, *, source: str) -> list[str]:
    """The lines kubectl would print for a create: warnings, then the refusal or the creation (with
    what labgate changed)."""
    lines = [f"Warning: {w}" for w in result.warnings]
    response = result.response
    if not response.allowed:
        status = response.status
        reason = status.reason if status else "Forbidden"
        message = status.message if status else ""
        lines.append(
            f'Error from server ({reason}): error when creating "{source}": admission webhook '
            f'"{VALIDATING_WEBHOOK_NAME}" denied the request: {message}'
        )
        return lines
    lines.append(f"{object_ref(result.request)} admitted")
    if result.mutation.patch:
        lines.append("labgate changed it (JSON Patch):")
        lines.extend(
            f"  {op.op} {op.path} = {json.dumps(op.value, sort_keys=True, separators=(',', ':'))}"
            for op in result.mutation.patch
        )
    return lines


def check_json(result: CheckResult) -> dict[str, Any]:
    """One checked manifest for `labgate check -o json`."""
    status = result.response.status
    decision = result.decision
    return {
        "object": object_ref(result.request),
        "namespace": result.request.namespace,
        "allowed": result.is_allowed,
        "message": status.message if status and not result.is_allowed else None,
        "warnings": result.warnings,
        "rules": {
            "enforce": [f.rule for f in decision.denials],
            "warn": [f.rule for f in decision.warnings],
            "dry-run": [f.rule for f in decision.dry_run],
        },
        "dry_run": [f.message for f in decision.dry_run],
        "patch": [op.model_dump() for op in result.mutation.patch],
    }


def dry_run_lines(result: CheckResult) -> list[str]:
    """Dry-run findings: recorded by the webhook, never shown to the researcher."""
    return [f"dry-run: {f.message}" for f in result.decision.dry_run]


# --- the opa binary ---


class OfflineOpa:
    """`opa eval` on a policy directory and a fixed set of facts (one temp inventory file)."""

    def __init__(self, opa: str, policies: Path, facts: Facts):
        self.opa = opa
        self.policies = policies
        self.facts = facts
        self._tmp = tempfile.TemporaryDirectory(prefix="labgate-check-")
        self._inventory_files: dict[str, Path] = {}
        self._count = 0

    def __enter__(self) -> OfflineOpa:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._tmp.cleanup()

    def _inventory_file(self, facts: Facts) -> Path:
        """A data file that puts `facts.inventory` at data.inventory (one per distinct one)."""
        text = json.dumps({"inventory": facts.inventory}, sort_keys=True)
        if text not in self._inventory_files:
            path = Path(self._tmp.name) / f"inventory-{len(self._inventory_files)}.json"
            path.write_text(text)
            self._inventory_files[text] = path
        return self._inventory_files[text]

    def eval(self, query: str, policy_input: PolicyInput, *, facts: Facts | None = None) -> Any:
        """The value of `query` for `policy_input`; OfflineCheckError when undefined or failing."""
        inventory_file = self._inventory_file(facts or self.facts)
        self._count += 1
        input_file = Path(self._tmp.name) / f"input-{self._count}.json"
        input_file.write_text(json.dumps(policy_input))
        argv = [
            self.opa,
            "eval",
            "--format=json",
            *[f"--ignore={pattern}" for pattern in OPA_IGNORES],
            "--data",
            str(self.policies),
            "--data",
            str(inventory_file),
            "--input",
            str(input_file),
            query,
        ]
        completed = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        input_file.unlink()
        if completed.returncode != 0:
            detail = (completed.stderr or completed.stdout).strip()
            raise OfflineCheckError(f"opa eval {query} failed:\n{detail}")
        output = json.loads(completed.stdout or "{}")
        try:
            return output["result"][0]["expressions"][0]["value"]
        except (KeyError, IndexError) as err:
            raise OfflineCheckError(
                f"{query} is undefined: are labgate's policies in {self.policies}?"
            ) from err

    def check(
        self,
        request: AdmissionRequest,
        *,
        gpu_usage: GpuAmount | None = None,
        images: dict[str, Any] | None = None,
        claim_users: ClaimUsersDocument | None = None,
        kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
        tenant_usage: dict[str, int] | None = None,
        tenant_pool_gpus: PoolCapacityDocument | None = None,
        scaled_workload: dict[str, Any] | None = None,
        gpu_pools: dict[str, dict[str, int]] | None = None,
        open_nodes: dict[str, Any] | None = None,
    ) -> CheckResult:
        """Mutate, then decide on the mutated object, as the webhook's two endpoints would.

        A namespace the facts do not hold but that starts with one tenant's prefix counts as that
        tenant's (see `with_namespace`). No registry is asked: `images` are the image facts
        (input.images, as webhook.provenance.facts gathers them) when the caller has any; likewise
        `claim_users` (input.claim_users, the pods naming a claim being created or deleted) and
        `tenant_pool_gpus` (what the nodes of a written Tenant's pools hold; no node is listed) and
        `scaled_workload` (the workload a scale call resizes, as the webhook would read it) and
        `gpu_pools` (what the namespace's Tenant's status says its pools' nodes hold, as
        status.gpu.pools: {model: {gpus, nodes, largestNode}}) and `open_nodes` (what it says of the
        cluster's nodes as a pod without tolerations sees them, as status.nodes)."""
        namespace = request.namespace or (request.name if request.kind.kind == "Namespace" else None)
        facts = with_namespace(self.facts, request.namespace) if request.namespace else self.facts
        tenant = facts.tenant_of(namespace) if namespace else None

        policy_input = functools.partial(
            _request_input,
            secrets=facts.secrets,
            kinds=kinds,
            images=images,
            claim_users=claim_users,
            tenant_pool_gpus=tenant_pool_gpus,
            scaled_workload=scaled_workload,
        )
        mutation = _parsed(Mutation, self.eval(MUTATION_QUERY, policy_input(request)[0], facts=facts))
        mutated = request
        if mutation.patch and request.object is not None:
            mutated = with_request_object(request, apply_patch(request.object, mutation.patch))
        decision_input, request_class = policy_input(mutated)
        _add_gathered_facts(
            decision_input,
            mutated,
            request_class,
            has_tenant=bool(tenant),
            gpu_usage=gpu_usage,
            gpu_pools=gpu_pools,
            tenant_usage=tenant_usage,
            open_nodes=open_nodes,
        )
        decision = _parsed(Decision, self.eval(DECISION_QUERY, decision_input, facts=facts))
        response = build_response(request=mutated, decision=decision)
        return CheckResult(request=mutated, mutation=mutation, decision=decision, response=response)


def _request_input(
    req: AdmissionRequest,
    *,
    secrets: Mapping[str, dict[str, SecretDocument]],
    kinds: tuple[WorkloadKind, ...],
    images: dict[str, ImageFactDocument] | None,
    claim_users: ClaimUsersDocument | None,
    tenant_pool_gpus: PoolCapacityDocument | None,
    scaled_workload: Object | None,
) -> tuple[PolicyInput, RequestClass]:
    """The policy input the webhook builds from the request and the facts read for it (the given
    ones standing for the registry's and the API's answers), and what kind of request it is."""
    built = build_policy_input(request=req, kinds=kinds)
    request_class = classify(req, built["pod_templates"])
    if req.namespace:  # the webhook adds the namespace's restricted Secrets
        built["secrets"] = secrets.get(req.namespace, {})
    if images is not None:
        built["images"] = images
    if claim_users is not None:
        built["claim_users"] = claim_users
    if tenant_pool_gpus is not None and request_class.is_tenant_write:
        built["tenant_pool_gpus"] = tenant_pool_gpus
    if scaled_workload is not None and request_class.is_scale_up and (kind := scaled_kind(req, kinds)):
        built["scaled_workload"] = scaled_workload_document(kind, scaled_workload)
    return built, request_class


def _add_gathered_facts(
    decision_input: PolicyInput,
    mutated: AdmissionRequest,
    request_class: RequestClass,
    *,
    has_tenant: bool,
    gpu_usage: GpuAmount | None,
    gpu_pools: dict[str, dict[str, int]] | None,
    tenant_usage: dict[str, int] | None,
    open_nodes: dict[str, Any] | None,
) -> None:
    """What the webhook gathers for the decision beside the request (webhook.facts): the tenant's
    GPU usage, what its status says, what its live pods ask; each only where the webhook adds it."""
    if (has_tenant and request_class.needs_gpu_usage) or (
        gpu_usage is not None and request_class.is_tenant_update
    ):
        # the webhook adds the tenant's usage from the quota ledger
        decision_input["gpu_usage"] = (gpu_usage or GpuAmount()).to_document()
        pools = None if gpu_pools is None else status_pool_gpus(gpu_pools)
        if pools is not None:  # the webhook's, from the Tenant's status
            decision_input["gpu_pools"] = pools
    if has_tenant and tenant_usage and request_class.is_pod_create:
        decision_input["tenant_usage"] = tenant_usage  # the webhook's, from the reconciler's sum
    nodes = None if open_nodes is None else status_open_nodes(open_nodes)
    if has_tenant and nodes is not None and mutated.operation == "CREATE" and decision_input["pod_templates"]:
        decision_input["open_nodes"] = nodes  # the webhook's, from the Tenant's status


def _parsed(model: type[_M], value: Any) -> _M:
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise OfflineCheckError(f"the policies answered a malformed {model.__name__}: {err}") from err


def run_opa(opa: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`opa <args>` (fmt, check, test), its output captured."""
    return subprocess.run([opa, *args], capture_output=True, text=True, check=False, timeout=300)


def parse_gpu_usage(text: str) -> GpuAmount:
    """ "total=12,h100=4" -> GpuAmount(total=12, by_model={"h100": 4})."""
    total = 0
    by_model: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise ValueError(f"expected name=count, got {part!r}")
        if key.strip() == "total":
            total = int(value)
        else:
            by_model[key.strip()] = int(value)
    return GpuAmount(total=total, by_model=by_model)
