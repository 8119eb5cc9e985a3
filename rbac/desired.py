"""What a tenant should have, as plain manifests (pure: no API calls).

For each of the tenant's namespaces: the namespace with its tenant and Pod Security labels, role
bindings for admins, researchers and viewers, a GPU ResourceQuota (but where Kueue gates the tenant's
GPU pods: see `has_gpu_backstop`), a ResourceQuota of the tenant's
CPU, memory and pod limits and a LimitRange as a native backstop, baseline NetworkPolicies, and the experiment service account. Cluster-wide: a role that
lets every member read their own Tenant, and (with a namespace prefix) one that lets researchers
create namespaces, which the admission policies then restrict to the prefix.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from labgate.core.queue_config import QueueConfig
from labgate.core.tenant import (
    DEFAULT_PRIORITY_CLASS,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OVER_QUOTA_LABEL,
    PREEMPTIBLE_PRIORITY_CLASS,
    PREEMPTIBLE_PRIORITY_VALUE,
    TENANT_LABEL,
    Subject,
    Tenant,
    TenantLimits,
)
from labgate.core.workload_catalog import SCALABLE_WORKLOADS, resources_by_group
from labgate.gpu_accounting.demand import quantity
from labgate.gpu_accounting.pod_requests import limit_units, quantity_text

Manifest = dict[str, Any]

RESEARCHER_ROLE = "labgate:researcher"
TENANT_ADMIN_ROLE = "labgate:tenant-admin"
# Kubernetes' built-in read-only role (aggregated), what a tenant's viewers are bound to.
VIEWER_ROLE = "view"
GPU_RESOURCE = "nvidia.com/gpu"
# Kubernetes' ResourceQuota behind the webhook's ledger in each tenant namespace (_gpu_quota).
GPU_BACKSTOP_NAME = "labgate-gpu"
# The cloud metadata addresses (policy config metadata_addresses: the reconciler's --gpu-config);
# the baseline egress of a tenant with allowEgress opens IPv4 but these.
METADATA_ADDRESSES = ("169.254.169.254", "fd00:ec2::254")
EXPERIMENT_SERVICE_ACCOUNT = "experiment"

_WORKLOAD_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
_READ_VERBS = ["get", "list", "watch"]
_SECRET_WRITE_VERBS = ["create", "update", "patch", "delete", "deletecollection"]


def _workload_rules() -> list[dict[str, Any]]:
    """Researchers run every workload kind the webhook judges (labgate.core.workload_catalog), one rule
    per API group; tests/e2e/test_rbac_coverage.py fails when a kind they can write is not registered."""
    return [
        {"apiGroups": [group], "resources": resources, "verbs": _WORKLOAD_VERBS}
        for group, resources in resources_by_group().items()
    ]


def _labels(tenant: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, TENANT_LABEL: tenant}


def _meta(name: str, tenant: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": _labels(tenant)}
    if namespace is not None:
        metadata["namespace"] = namespace
    return metadata


def _researcher_rules() -> list[dict[str, Any]]:
    """What a researcher may do in the tenant's namespaces (the tenant admin, this and more)."""
    return [
        {
            "apiGroups": [""],
            "resources": ["pods", "configmaps", "services", "persistentvolumeclaims"],
            "verbs": _WORKLOAD_VERBS,
        },
        # Researchers write Secrets but do not read them back: a Secret restricted to a service
        # account (labgate.io/restricted-to-service-account) is for pods running as it, not for
        # everyone in the namespace. RBAC cannot hide single Secrets from get/list/watch, so
        # researchers have none; admission refuses their updates and deletes of restricted Secrets
        # (the API answers those with the Secret's data). Tenant admins read Secrets.
        {"apiGroups": [""], "resources": ["secrets"], "verbs": _SECRET_WRITE_VERBS},
        {"apiGroups": [""], "resources": ["pods/log", "pods/status"], "verbs": _READ_VERBS},
        {
            "apiGroups": [""],
            "resources": ["pods/exec", "pods/portforward", "pods/attach"],
            "verbs": ["get", "create"],
        },
        # kubectl debug (an ephemeral container: judged like any container by the webhook) and
        # kubectl scale (the pods a new count makes are each judged, and counted, as they are created).
        {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["get", "patch", "update"]},
        {
            "apiGroups": ["apps"],
            "resources": [f"{resource}/scale" for resource in SCALABLE_WORKLOADS],
            "verbs": ["get", "patch", "update"],
        },
        {
            "apiGroups": [""],
            "resources": ["events", "resourcequotas", "limitranges", "serviceaccounts"],
            "verbs": _READ_VERBS,
        },
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": _READ_VERBS},
        # labgate audit's findings about their namespaces (wgpolicyk8s.io PolicyReports, read only).
        {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports"], "verbs": _READ_VERBS},
        # GPUs through Dynamic Resource Allocation: labgate judges the claims and counts them.
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "verbs": _WORKLOAD_VERBS,
        },
        # Kueue (issue 20): members see their LocalQueues and why their Workloads wait; they never
        # write Kueue's objects (Workloads, queues, flavors, priority classes): Kueue and the
        # reconciler do.
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": _READ_VERBS},
        *_workload_rules(),
    ]


def shared_cluster_roles() -> list[Manifest]:
    """The ClusterRoles every tenant's bindings point to (one copy per cluster)."""
    researcher_rules = _researcher_rules()
    admin_rules = [
        *researcher_rules,
        # Admins may author NetworkPolicies (the admission policies keep them inside the tenant)
        # and manage experiment service accounts; they still cannot touch RBAC or quotas.
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": _WORKLOAD_VERBS},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": _WORKLOAD_VERBS},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": _READ_VERBS},
    ]
    labels = {MANAGED_BY_LABEL: MANAGED_BY}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": RESEARCHER_ROLE, "labels": labels},
            "rules": researcher_rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": TENANT_ADMIN_ROLE, "labels": labels},
            "rules": admin_rules,
        },
    ]


def roles_granted_beyond_the_reconciler() -> list[str]:
    """The ClusterRoles the reconciler writes that grant what it does not hold itself (pods, exec,
    the workload kinds): the shared roles. RBAC refuses such a write unless the writer holds
    `escalate` on the role's name, so the chart grants it on these names only. Every other ClusterRole
    the reconciler writes (each tenant's member and namespace-creator roles) grants a part of what
    it holds, and needs neither verb."""
    return [role["metadata"]["name"] for role in shared_cluster_roles()]


def roles_bound_beyond_the_reconciler() -> list[str]:
    """The ClusterRoles the reconciler's RoleBindings name that grant what it does not hold: RBAC
    refuses such a binding unless the writer holds `bind` on the role's name (the chart's grant)."""
    return [*roles_granted_beyond_the_reconciler(), VIEWER_ROLE]


def shared_priority_classes() -> list[Manifest]:
    """The PriorityClass the mutation policy gives pod templates that name none (config
    default_priority_class); it must exist, or the apiserver refuses the pods made from them."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": DEFAULT_PRIORITY_CLASS, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
            "value": 0,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "Research experiments (labgate's default for tenant workloads).",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": PREEMPTIBLE_PRIORITY_CLASS, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
            "value": PREEMPTIBLE_PRIORITY_VALUE,
            "globalDefault": False,
            # The Pod already carries the default policy when the mutation gives it this class, and
            # the apiserver refuses a mismatch; at the lowest priority it preempts nothing anyway.
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "GPU pods admitted beyond their tenant's quota: first to be evicted.",
        },
    ]


def tenant_namespaces(tenant: Tenant, labelled: set[str]) -> list[str]:
    """The tenant's namespaces: the ones it names (labelled for it here), and every namespace that
    carries its label. The label is what makes a namespace the tenant's for the webhook (who may work
    there, whose quota its pods count in): one the Tenant no longer names, still labelled, keeps its
    bindings, quotas and baseline NetworkPolicies until the platform releases it (takes the label
    off), so its running pods are never left unisolated and uncounted in the Tenant's status."""
    return sorted(set(tenant.spec.namespaces.names) | labelled)


def _subjects(members: list[Subject]) -> list[dict[str, str]]:
    return [m.rbac_subject() for m in members]


def _binding(name: str, tenant: str, namespace: str, role: str, members: list[Subject]) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name, tenant, namespace),
        "subjects": _subjects(members),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
    }


POD_HARDENING = "pod-hardening"


def _pod_security_level(tenant: Tenant) -> str:
    # Pod Security admission has no per-control relaxation: a namespace at "baseline" refuses every
    # pod that uses an exception, so a tenant granted one runs its namespaces at "privileged". That
    # opens nothing else: labgate's pod-hardening rule enforces the baseline itself, control by
    # control, and relaxes only the controls the Tenant names. Without exceptions, "baseline".
    # The same when the Tenant puts pod-hardening in warn or dry-run mode: the infra team chose to
    # admit such pods with a warning, and a namespace at "baseline" would refuse every one of them
    # when its controller creates it (a Job admitted with a warning, then FailedCreate for ever).
    if tenant.spec.exceptions.has_any or not tenant.spec.is_enforced(POD_HARDENING):
        return "privileged"
    return "baseline"


def _namespace(tenant: Tenant, namespace: str) -> Manifest:
    level = _pod_security_level(tenant)
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                **_labels(tenant.name),
                # Which of the mutating webhook's entries sees the namespace's pods
                # (webhook.registration.settled_job_pod_expression).
                OVER_QUOTA_LABEL: tenant.spec.gpu.over_quota,
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": "latest",
                # audit, not warn: researchers should read labgate's messages, not a wall of
                # "restricted" advice on every GPU pod; the audit log still shows the gap.
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/audit-version": "latest",
            },
        },
    }


def _gpu_quota(tenant: Tenant, namespace: str, total: int) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(GPU_BACKSTOP_NAME, tenant.name, namespace),
        # A backstop per namespace; the tenant-wide limit across namespaces is the webhook's ledger.
        # Preemptible pods admitted beyond quota (overQuota: preemptible) are not counted.
        "spec": {
            "hard": {f"requests.{GPU_RESOURCE}": str(total)},
            "scopeSelector": {
                "matchExpressions": [
                    {
                        "scopeName": "PriorityClass",
                        "operator": "NotIn",
                        "values": [PREEMPTIBLE_PRIORITY_CLASS],
                    }
                ]
            },
        },
    }


def has_gpu_backstop(tenant: Tenant, queue_config: QueueConfig) -> bool:
    """Whether the tenant's namespaces get the native GPU backstop (`labgate-gpu`): when it has a GPU
    total, unless Kueue gates its GPU pods (queue_config.gates_gpu_pods). A ResourceQuota counts pods
    behind scheduling gates and has no scope for them, so there it would refuse at CREATE a pod that
    should wait in the queue; the queue's gate, `queue-gate` and the ledger's reservation at the
    gate's removal hold the quota instead (docs/architecture.md, "A pod behind Kueue's gate")."""
    return tenant.spec.gpu.total is not None and not queue_config.gates_gpu_pods(tenant)


# The ResourceQuota field of each tenant limit (spec.limits): requests, as the scheduler counts them.
_LIMIT_QUOTA_FIELDS = {"cpu": "requests.cpu", "memory": "requests.memory", "pods": "pods"}


def _limits_quota(tenant: Tenant, namespace: str, limits: TenantLimits) -> Manifest | None:
    """The tenant's CPU, memory and pod limits as a ResourceQuota of one namespace: the native,
    race-free backstop of the tenant-wide tenant-quota rule, whose usage lags the pods by the
    reconciler's settling. Each namespace gets the whole limit, so a burst of pods created across
    namespaces faster than that lag takes at most the limit per namespace (docs/architecture.md).
    None when the tenant has no limit."""
    hard = {
        field: quantity_text(resource, units)
        for resource, field in _LIMIT_QUOTA_FIELDS.items()
        if (units := limit_units(getattr(limits, resource), resource)) is not None
    }
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta("labgate-limits", tenant.name, namespace),
        "spec": {"hard": hard},
    }


def _namespace_objects(
    tenant: Tenant,
    namespace: str,
    limit_defaults: TenantLimits,
    *,
    gpu_backstop: bool,
    metadata_addresses: tuple[str, ...],
) -> list[Manifest]:
    """A namespace's objects in the order they are applied: the restrictions (baseline
    NetworkPolicies, quotas, defaults) before the grants (service account, bindings), so that in a
    new namespace no member can start a pod before what isolates and bounds it exists."""
    name = tenant.name
    members = tenant.spec.members
    objects: list[Manifest] = [
        _namespace(tenant, namespace),
        _ingress_policy(tenant, namespace),
        _egress_policy(tenant, namespace, metadata_addresses),
    ]
    if gpu_backstop and tenant.spec.gpu.total is not None:
        objects.append(_gpu_quota(tenant, namespace, tenant.spec.gpu.total))
    if (
        limits := _limits_quota(tenant, namespace, tenant.spec.limits.with_defaults(limit_defaults))
    ) is not None:
        objects.append(limits)
    return [
        *objects,
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": _meta("labgate-defaults", name, namespace),
            # Defaults so that a pod without requests is still admitted under a quota on requests.
            "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}]},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(EXPERIMENT_SERVICE_ACCOUNT, name, namespace),
            "automountServiceAccountToken": False,
        },
        _binding("labgate-admins", name, namespace, TENANT_ADMIN_ROLE, members.admins),
        _binding("labgate-researchers", name, namespace, RESEARCHER_ROLE, members.researchers),
        _binding("labgate-viewers", name, namespace, VIEWER_ROLE, members.viewers),
    ]


def _tenant_peer(tenant: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant}}}


def _ingress_policy(tenant: Tenant, namespace: str) -> Manifest:
    peers = [_tenant_peer(t) for t in [tenant.name, *sorted(tenant.spec.network.allow_ingress_from_tenants)]]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("labgate-baseline-ingress", tenant.name, namespace),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": peers}]},
    }


def ipv4_exceptions(metadata_addresses: tuple[str, ...]) -> list[str]:
    """The `except` of the baseline's IPv4 egress block: every IPv4 metadata address, as a /32 (the
    block opens no IPv6). Raises ValueError for an entry that is no IP address."""
    addresses = [ipaddress.ip_address(a) for a in metadata_addresses]
    return sorted({f"{a}/32" for a in addresses if a.version == 4})


def _egress_policy(tenant: Tenant, namespace: str, metadata_addresses: tuple[str, ...]) -> Manifest:
    rules: list[dict[str, Any]] = [
        {"to": [_tenant_peer(tenant.name)]},
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
    ]
    if tenant.spec.network.allow_egress:
        block = {"cidr": "0.0.0.0/0", "except": ipv4_exceptions(metadata_addresses)}
        rules.append({"to": [{"ipBlock": block}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("labgate-baseline-egress", tenant.name, namespace),
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": rules},
    }


def _cluster_binding(name: str, tenant: str, subjects: list[dict[str, str]]) -> Manifest:
    """A ClusterRoleBinding of the ClusterRole of the same name."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(name, tenant),
        "subjects": subjects,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
    }


def _member_role(name: str, namespaces: list[str]) -> Manifest:
    namespace_rules = [
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": namespaces, "verbs": ["get"]}
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(f"labgate:tenant:{name}:member", name),
        "rules": [
            {
                # Only their own Tenant: RBAC cannot filter a plain list by object, so `kubectl get
                # tenants` (all of them) is refused; get, and list/watch with
                # --field-selector metadata.name=<tenant>, work (docs/researchers.md).
                "apiGroups": ["labgate.io"],
                "resources": ["tenants"],
                "resourceNames": [name],
                "verbs": ["get", "list", "watch"],
            },
            *(namespace_rules if namespaces else []),
            # Their tenant's ClusterQueue (named as the tenant; rbac/queues.py): its quota and usage.
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["clusterqueues"],
                "resourceNames": [name],
                "verbs": ["get", "list", "watch"],
            },
        ],
    }


def member_cluster_objects(tenant: Tenant, *, namespaces: list[str]) -> list[Manifest]:
    """Cluster-scoped objects: members read their Tenant and its namespaces; with a prefix, researchers
    may create namespaces (the admission policies keep them under the prefix)."""
    name = tenant.name
    objects: list[Manifest] = [
        _member_role(name, namespaces),
        _cluster_binding(f"labgate:tenant:{name}:member", name, _subjects(tenant.spec.members.everyone)),
    ]
    if tenant.spec.namespaces.prefix:
        creators = _subjects([*tenant.spec.members.admins, *tenant.spec.members.researchers])
        objects += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": _meta(f"labgate:tenant:{name}:namespace-creator", name),
                "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]}],
            },
            _cluster_binding(f"labgate:tenant:{name}:namespace-creator", name, creators),
        ]
    return objects


def desired_objects(
    tenant: Tenant,
    *,
    namespaces: list[str],
    limit_defaults: TenantLimits | None = None,
    queue_config: QueueConfig | None = None,
    metadata_addresses: tuple[str, ...] = METADATA_ADDRESSES,
) -> list[Manifest]:
    """Everything `tenant` should have, given its namespaces (see tenant_namespaces); `limit_defaults`:
    the infra team's default limits (policy config tenant_limits) for those its spec leaves unset;
    `queue_config`: the policies' queue config (which tenants' GPU pods Kueue gates);
    `metadata_addresses`: the policy config's, which no baseline egress opens."""
    objects = member_cluster_objects(tenant, namespaces=namespaces)
    gpu_backstop = has_gpu_backstop(tenant, queue_config or QueueConfig())
    for namespace in namespaces:
        objects += _namespace_objects(
            tenant,
            namespace,
            limit_defaults or TenantLimits(),
            gpu_backstop=gpu_backstop,
            metadata_addresses=metadata_addresses,
        )
    return objects


def object_key(obj: Manifest) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name): how the reconciler tells objects apart."""
    metadata = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], metadata.get("namespace", ""), metadata["name"])


# Fields that hold resource quantities, or maps of them: a ResourceQuota's `hard`, a LimitRange's
# limits, a Kueue ClusterQueue's quotas (Kueue's defaulting webhook re-encodes them). The API stores
# a quantity in its canonical form ("1000" reads back "1k", "1024Mi" "1Gi"), so these are compared by
# value: compared as text, every read-back would look like drift, and the reconciler would rewrite
# the quota (and say DriftRepaired) at each of its status updates.
_QUANTITY_FIELDS = frozenset(
    {
        "hard",
        "default",
        "defaultRequest",
        "max",
        "min",
        "maxLimitRequestRatio",
        "nominalQuota",
        "borrowingLimit",
        "lendingLimit",
    }
)


# Label selectors, compared whole: a selector selects what matches every term it has, so a term the
# live copy adds narrows it. A baseline NetworkPolicy whose `podSelector: {}` (every pod) was narrowed
# to `{matchLabels: {app: x}}` leaves every other pod of the namespace open; read as a subset of the
# desired copy it would never be repaired.
_SELECTOR_FIELDS = frozenset({"podSelector", "namespaceSelector", "selector"})


def is_subset(desired: Any, live: Any, *, quantities: bool = False) -> bool:
    """True when every field `desired` sets has the same value in `live` (fields the API adds are
    ignored, but in a label selector, which must be the same whole); `quantities`: the values are
    resource quantities, the same when they are equal in value."""
    if isinstance(desired, dict):
        # The API omits empty lists and maps (a RoleBinding with no subjects has no "subjects").
        return isinstance(live, dict) and all(
            _is_same_part(k, v, live[k], quantities=quantities) if k in live else v in ([], {})
            for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(is_subset(d, x) for d, x in zip(desired, live, strict=True))
        )
    if desired == live:
        return True
    return quantities and _same_quantity(desired, live)


def _is_same_part(field: str, desired: Any, live: Any, *, quantities: bool) -> bool:
    if field in _SELECTOR_FIELDS:
        return bool(_without_empty(desired) == _without_empty(live))
    return is_subset(desired, live, quantities=quantities or field in _QUANTITY_FIELDS)


def _without_empty(value: Any) -> Any:
    """`value` without the empty lists and maps the API omits, at any depth."""
    if isinstance(value, dict):
        kept = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ([], {})}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _same_quantity(desired: Any, live: Any) -> bool:
    """Two quantities of the same value ("1000" and "1k"); never two texts that are not quantities
    (`quantity` reads those as 0)."""
    if not (isinstance(desired, str | int) and isinstance(live, str | int)):
        return False
    value = quantity(desired)
    return value == quantity(live) and value != 0
