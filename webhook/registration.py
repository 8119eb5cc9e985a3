"""The webhook configurations that register labgate with the apiserver (pure; the chart renders the
same shape from its templates)."""

from __future__ import annotations

import base64
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from labgate.core.tenant import OVER_QUOTA_LABEL, TENANT_LABEL
from labgate.core.workload_catalog import SCALABLE_WORKLOADS
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, WorkloadKind

VALIDATING_WEBHOOK_NAME = "validate.labgate.io"
MUTATING_WEBHOOK_NAME = "mutate.labgate.io"
# The webhooks for cluster-scoped objects (Namespaces, Tenants) beside the ones above, which see
# objects in tenant namespaces only.
VALIDATING_CLUSTER_WEBHOOK_NAME = "validate-cluster.labgate.io"
MUTATING_CLUSTER_WEBHOOK_NAME = "mutate-cluster.labgate.io"
# The mutating webhook for objects in the namespaces of tenants that refuse GPU pods beyond quota
# (labelled OVER_QUOTA_LABEL=refuse), beside MUTATING_WEBHOOK_NAME for every other tenant namespace:
# there it is not called for a Job controller's pod that needs nothing more (settled_job_pod_expression).
MUTATING_REFUSING_WEBHOOK_NAME = "mutate-refusing-tenants.labgate.io"
SETTLED_JOB_POD_CONDITION = "not-a-settled-job-pod"
# The condition of the validating webhook for tenant namespaces: it is not called for the Job
# controller taking its own finalizer off a pod (finalizer_removal_expression).
FINALIZER_REMOVAL_CONDITION = "not-a-job-controller-finalizer-removal"
# What a pod UPDATE changes without changing the pod: the API server's bookkeeping, and the
# finalizers the rest of FINALIZER_REMOVAL_CONDITION checks only ever shrink.
_POD_BOOKKEEPING = ("finalizers", "resourceVersion", "managedFields")
# What policies/labgate/mutations/record writes on an object and on each pod template it mutates.
MUTATION_RECORD_ANNOTATION = "labgate.io/mutations"
# Who creates a Job's pods: the Job controller's own identity (kube-controller-manager with
# --use-service-account-credentials, as kubeadm and kind run it) or the controller manager's.
JOB_CONTROLLER_USERS = ("system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager")
_WRITE = ["CREATE", "UPDATE"]
_MUTATING = "MutatingWebhookConfiguration"
IGNORE_LABEL = "labgate.io/ignore"
# The platform's identities (policies/labgate/config/data.json trusts the same): a Namespace they
# create or change without a tenant label is none of labgate's business, and never reaches it.
PLATFORM_GROUPS = ("system:masters", "system:nodes", "system:serviceaccounts:kube-system")
PLATFORM_USERS = ("system:kube-controller-manager", "system:kube-scheduler")


def _rule(
    group: str, version: str, resources: list[str], operations: list[str], scope: str
) -> dict[str, Any]:
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": resources,
        "operations": operations,
        "scope": scope,
    }


def workload_resources(
    kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
) -> list[tuple[str, str, str]]:
    """(group, version, resource) of Pods and every workload kind, in the order the webhooks list
    them (the chart's templates/_generated.tpl is generated from this)."""
    return [("", "v1", "pods"), *[(k.group, k.version, k.resource) for k in kinds]]


def _workload_rules(kinds: tuple[WorkloadKind, ...], operations: list[str]) -> list[dict[str, Any]]:
    return [_rule(g, v, [r], operations, "Namespaced") for g, v, r in workload_resources(kinds)]


def validating_rules(kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS) -> list[dict[str, Any]]:
    """What the validating webhook sees. Leases, Events and Nodes are never listed: intercepting them
    could stall leader election or the nodes themselves."""
    return [
        *_workload_rules(kinds, _WRITE),
        # An ephemeral container added to a running pod (kubectl debug) is judged like any container:
        # images and hardening, whether or not members hold the RBAC for it today.
        _rule("", "v1", ["pods/ephemeralcontainers"], ["UPDATE"], "Namespaced"),
        # kubectl scale: the Scale of the apps kinds researchers may scale (what the new count makes is
        # judged pod by pod; the Scale is judged for who asks, in which namespace).
        _rule("apps", "v1", [f"{r}/scale" for r in SCALABLE_WORKLOADS], ["UPDATE"], "Namespaced"),
        # DELETE too: the API hands a deleted Secret's data to whoever deletes it (restricted Secrets).
        _rule("", "v1", ["secrets"], [*_WRITE, "DELETE"], "Namespaced"),
        _rule(
            "",
            "v1",
            ["serviceaccounts", "configmaps", "services", "persistentvolumeclaims"],
            _WRITE,
            "Namespaced",
        ),
        _rule("networking.k8s.io", "v1", ["networkpolicies"], [*_WRITE, "DELETE"], "Namespaced"),
        # DELETE too: a claim a live pod names is not swapped under it (dra-claim-in-use).
        _rule(
            "resource.k8s.io",
            "v1",
            ["resourceclaims", "resourceclaimtemplates"],
            [*_WRITE, "DELETE"],
            "Namespaced",
        ),
        _rule("", "v1", ["namespaces"], _WRITE, "Cluster"),
        # A Namespace's labels change through its status and finalize subresources too (their
        # strategies keep only the spec or the status), so the same rules judge them there.
        _rule("", "v1", ["namespaces/status", "namespaces/finalize"], ["UPDATE"], "Cluster"),
        _rule("labgate.io", "v1alpha1", ["tenants"], _WRITE, "Cluster"),
    ]


def mutating_rules(kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS) -> list[dict[str, Any]]:
    """What the mutating webhook sees: what it mutates (policies/labgate/mutation patches nothing
    else): pod templates on CREATE (placement, automount, pull policy, priority), the ephemeral
    containers kubectl debug adds (pull policy) and new namespaces."""
    return [
        *_workload_rules(kinds, ["CREATE"]),
        _rule("", "v1", ["pods/ephemeralcontainers"], ["UPDATE"], "Namespaced"),
        _rule("", "v1", ["namespaces"], ["CREATE"], "Cluster"),
    ]


def _has_label(variable: str, label: str) -> str:
    present = f"has({variable}.metadata.labels) && '{label}' in {variable}.metadata.labels"
    return f"({present})" if variable == "object" else f"({variable} != null && {present})"


def namespace_match_expression() -> str:
    """CEL: whether a Namespace request is labgate's to judge. A namespace with a tenant label, before
    or after the change, always is. One without is only when someone other than the platform asks,
    and the namespace did not opt out with the `labgate.io/ignore` label (a tenant's namespace cannot:
    its tenant label wins). A write to a Namespace's status or finalize subresource by the platform
    (the namespace controller finishing a deletion) never is: it cannot wait on labgate, and the
    policies trust the platform anyway. Other resources of the cluster-scoped webhooks (Tenants)
    always are."""
    groups = ", ".join(f"'{g}'" for g in PLATFORM_GROUPS)
    users = ", ".join(f"'{u}'" for u in PLATFORM_USERS)
    is_platform = (
        f"request.userInfo.username in [{users}] || "
        f"(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in [{groups}]))"
    )
    judged = (
        f"{_has_label('object', TENANT_LABEL)} || {_has_label('oldObject', TENANT_LABEL)} || "
        f"(!({is_platform}) && !{_has_label('oldObject', IGNORE_LABEL)})"
    )
    return (
        "request.resource.resource != 'namespaces' || "
        f"((!has(request.subResource) || request.subResource == '' || !({is_platform})) && ({judged}))"
    )


def match_conditions() -> list[dict[str, str]]:
    """The cluster-scoped webhooks' matchConditions (CEL, GA since Kubernetes 1.30)."""
    return [{"name": "tenant-namespaces-and-tenants", "expression": namespace_match_expression()}]


def _pulls_always(containers: str) -> str:
    return f"{containers}.all(c, has(c.imagePullPolicy) && c.imagePullPolicy == 'Always')"


def settled_job_pod_expression() -> str:
    """CEL: whether a Pod CREATE is one the Job controller makes from a template labgate already
    mutated, whose own patch would be empty in a namespace whose tenant refuses GPU pods beyond quota.

    A Job's template is mutated when the Job is created, and every mutation of a pod but one follows
    from its template: the pool placed on and the model selected (kept once selected), the token
    (automountServiceAccountToken set either way), the pull policy (Always on every container), the
    digests pinned, the priority (already resolved on a Pod). The one that does not is a GPU pod
    beyond quota admitted as preemptible, which reads the tenant's usage at the pod's creation: so
    this holds only in namespaces labelled OVER_QUOTA_LABEL=refuse. The pod is still judged by the
    validating webhook like every other: this spares a request, never a decision. A pod that does
    not say all of this (a Job created before its namespace was a tenant's) is mutated as before."""
    users = ", ".join(f"'{u}'" for u in JOB_CONTROLLER_USERS)
    return (
        "request.resource.group == '' && request.resource.resource == 'pods' && "
        "request.operation == 'CREATE' && "
        f"request.userInfo.username in [{users}] && "
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
        "o.apiVersion == 'batch/v1' && o.kind == 'Job' && has(o.controller) && o.controller) && "
        "has(object.metadata.annotations) && "
        f"'{MUTATION_RECORD_ANNOTATION}' in object.metadata.annotations && "
        "has(object.spec.automountServiceAccountToken) && "
        f"{_pulls_always('object.spec.containers')} && "
        f"(!has(object.spec.initContainers) || {_pulls_always('object.spec.initContainers')})"
    )


def finalizer_removal_expression() -> str:
    """CEL: whether a Pod UPDATE is the Job controller taking finalizers off a pod and changing
    nothing else.

    The Job controller puts `batch.kubernetes.io/job-tracking` on every pod it creates and takes it
    off when the pod ends or is deleted: one UPDATE of every Job pod, which would otherwise reach
    the validating webhook at the end of every copy of every Job (10,000 of them when a 10,000-pod
    Job is deleted). Such an UPDATE cannot make anything labgate judges worse: the spec, labels,
    annotations and owners are as they were admitted, and a finalizer going only lets the pod go.
    Refusing it (a policy tightened since the pod was admitted, an overloaded replica) would keep the
    pod, and the GPUs its node counts for it, from ever going. Only the Job controller's identity is
    spared, never a member's: a member who may write a pod is still judged for any UPDATE, finalizers
    included. The spec is compared whole, not by `metadata.generation`, which API servers before
    Kubernetes 1.34 do not raise for a pod."""
    users = ", ".join(f"'{u}'" for u in JOB_CONTROLLER_USERS)
    kept = ", ".join(f"'{k}'" for k in _POD_BOOKKEEPING)
    return (
        "request.resource.group == '' && request.resource.resource == 'pods' && "
        "(!has(request.subResource) || request.subResource == '') && "
        "request.operation == 'UPDATE' && "
        f"request.userInfo.username in [{users}] && "
        "object.spec == oldObject.spec && "
        f"object.metadata.all(k, k in [{kept}] || "
        "(k in oldObject.metadata && object.metadata[k] == oldObject.metadata[k])) && "
        f"oldObject.metadata.all(k, k in [{kept}] || k in object.metadata) && "
        "(!has(object.metadata.finalizers) || object.metadata.finalizers.all(f, "
        "has(oldObject.metadata.finalizers) && f in oldObject.metadata.finalizers))"
    )


def tenant_namespaces_match_conditions() -> list[dict[str, str]]:
    """VALIDATING_WEBHOOK_NAME's matchConditions: every request but the Job controller taking its
    finalizer off a pod."""
    return [{"name": FINALIZER_REMOVAL_CONDITION, "expression": f"!({finalizer_removal_expression()})"}]


def refusing_tenants_match_conditions() -> list[dict[str, str]]:
    """MUTATING_REFUSING_WEBHOOK_NAME's matchConditions: every request but a settled Job pod's."""
    return [{"name": SETTLED_JOB_POD_CONDITION, "expression": f"!({settled_job_pod_expression()})"}]


class SelectorRequirement(TypedDict):
    """One matchExpressions entry of a label selector."""

    key: str
    operator: Literal["In", "NotIn", "Exists"]
    values: NotRequired[list[str]]


class LabelSelector(TypedDict):
    """A webhook's namespaceSelector, as labgate writes them: expressions only."""

    matchExpressions: list[SelectorRequirement]


def exempt_namespace_selector(
    exempt_namespaces: list[str],
    *,
    tenants_only: bool = False,
    over_quota: Literal["refuse", "other"] | None = None,
) -> LabelSelector:
    """Never intercept kube-system or labgate's own namespace: a broken webhook must not brick the
    cluster. With `tenants_only`, only namespaces labelled for a tenant: an outage of labgate then
    touches the tenants and nothing else. With `over_quota`, only the namespaces labelled
    OVER_QUOTA_LABEL=refuse, or all the others (preemptible, or not labelled yet)."""
    expressions: list[SelectorRequirement] = [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": sorted(set(exempt_namespaces)),
        }
    ]
    if tenants_only:
        expressions.append({"key": TENANT_LABEL, "operator": "Exists"})
    if over_quota is not None:
        expressions.append(
            {
                "key": OVER_QUOTA_LABEL,
                "operator": "In" if over_quota == "refuse" else "NotIn",
                "values": ["refuse"],
            }
        )
    return {"matchExpressions": expressions}


class _Entry(NamedTuple):
    """One webhook of a configuration before its URL and shard: what it sees and where."""

    name: str
    rules: list[dict[str, Any]]
    namespace_selector: LabelSelector
    match_conditions: list[dict[str, str]] | None


def _entries(kind: str, rules: list[dict[str, Any]], exempt_namespaces: list[str]) -> list[_Entry]:
    """A configuration's webhooks: for objects in tenant namespaces (the mutating one split in two by
    OVER_QUOTA_LABEL, disjoint, with the same rules) and for cluster-scoped objects."""
    namespaced, cluster = split_by_scope(rules)
    cluster_entry = _Entry(
        MUTATING_CLUSTER_WEBHOOK_NAME if kind == _MUTATING else VALIDATING_CLUSTER_WEBHOOK_NAME,
        cluster,
        exempt_namespace_selector(exempt_namespaces),
        match_conditions(),
    )
    if kind != _MUTATING:
        tenants = exempt_namespace_selector(exempt_namespaces, tenants_only=True)
        return [
            _Entry(VALIDATING_WEBHOOK_NAME, namespaced, tenants, tenant_namespaces_match_conditions()),
            cluster_entry,
        ]
    return [
        _Entry(
            MUTATING_WEBHOOK_NAME,
            namespaced,
            exempt_namespace_selector(exempt_namespaces, tenants_only=True, over_quota="other"),
            None,
        ),
        _Entry(
            MUTATING_REFUSING_WEBHOOK_NAME,
            namespaced,
            exempt_namespace_selector(exempt_namespaces, tenants_only=True, over_quota="refuse"),
            refusing_tenants_match_conditions(),
        ),
        cluster_entry,
    ]


def _webhook(
    entry: _Entry,
    *,
    name: str,
    url: str,
    ca_bundle_pem: bytes,
    failure_policy: str,
    timeout_seconds: int,
    object_selector: dict[str, Any] | None,
) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_bundle_pem).decode()},
        "rules": entry.rules,
        "namespaceSelector": entry.namespace_selector,
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "NoneOnDryRun",  # the GPU ledger is written only for requests that are not dry runs
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
    }
    if object_selector is not None:
        webhook["objectSelector"] = object_selector
    if entry.match_conditions is not None:
        webhook["matchConditions"] = entry.match_conditions
    return webhook


def split_by_scope(rules: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The namespaced rules (judged in tenant namespaces only) and the cluster-scoped ones."""
    return (
        [r for r in rules if r["scope"] != "Cluster"],
        [r for r in rules if r["scope"] == "Cluster"],
    )


def webhook_configurations(
    *,
    name: str,
    urls: list[str],
    ca_bundle_pem: bytes,
    exempt_namespaces: list[str],
    failure_policy: Literal["Fail", "Ignore"] = "Fail",
    timeout_seconds: int = 3,
    shard_label: str | None = None,
    kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
) -> list[dict[str, Any]]:
    """The Mutating- and ValidatingWebhookConfiguration for webhook replica(s) at `urls`.

    In a cluster one Service spreads requests over the replicas. Locally there is no Service, so with
    several URLs each replica gets its own webhook entry and `shard_label` splits objects between them
    (object i with shard_label=<i>; unlabelled objects go to the first replica).
    """
    configurations = []
    for kind, path, rules in (
        (_MUTATING, "/mutate", mutating_rules(kinds)),
        ("ValidatingWebhookConfiguration", "/validate", validating_rules(kinds)),
    ):
        webhooks = []
        for index, url in enumerate(urls):
            selector = _shard_selector(index, len(urls), shard_label)
            for entry in _entries(kind, rules, exempt_namespaces):
                webhook = _webhook(
                    entry,
                    name=entry.name if index == 0 else f"shard{index}.{entry.name}",
                    url=url.rstrip("/") + path,
                    ca_bundle_pem=ca_bundle_pem,
                    failure_policy=failure_policy,
                    timeout_seconds=timeout_seconds,
                    object_selector=selector,
                )
                if kind == _MUTATING:
                    webhook["reinvocationPolicy"] = "IfNeeded"
                webhooks.append(webhook)
        configurations.append(_configuration(kind, name, webhooks))
    return configurations


def _configuration(kind: str, name: str, webhooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "labgate"}},
        "webhooks": webhooks,
    }


def _shard_selector(index: int, replicas: int, shard_label: str | None) -> dict[str, Any] | None:
    """The objectSelector of replica `index` of `replicas` (None: one replica, or no sharding): object
    i goes to the replica labelled i, unlabelled objects to the first."""
    if replicas <= 1 or shard_label is None:
        return None
    if index == 0:
        others = [str(i) for i in range(replicas) if i != index]
        return {"matchExpressions": [{"key": shard_label, "operator": "NotIn", "values": others}]}
    return {"matchLabels": {shard_label: str(index)}}
