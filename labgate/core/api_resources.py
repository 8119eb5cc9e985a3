"""The kinds of Kubernetes object labgate reads and writes, named once (pure: no client library)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TENANT_GROUP = "labgate.io"
TENANT_VERSION = "v1alpha1"
TENANT_PLURAL = "tenants"

Object = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """Where one kind of object lives in the API."""

    kind: str
    group: str
    version: str
    plural: str
    is_namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.is_namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


POD = Kind("Pod", "", "v1", "pods", is_namespaced=True)
SECRET = Kind("Secret", "", "v1", "secrets", is_namespaced=True)
NAMESPACE = Kind("Namespace", "", "v1", "namespaces", is_namespaced=False)
NODE = Kind("Node", "", "v1", "nodes", is_namespaced=False)
PERSISTENT_VOLUME = Kind("PersistentVolume", "", "v1", "persistentvolumes", is_namespaced=False)
SERVICE_ACCOUNT = Kind("ServiceAccount", "", "v1", "serviceaccounts", is_namespaced=True)
RESOURCE_QUOTA = Kind("ResourceQuota", "", "v1", "resourcequotas", is_namespaced=True)
LIMIT_RANGE = Kind("LimitRange", "", "v1", "limitranges", is_namespaced=True)
EVENT = Kind("Event", "", "v1", "events", is_namespaced=True)
ROLE_BINDING = Kind("RoleBinding", "rbac.authorization.k8s.io", "v1", "rolebindings", is_namespaced=True)
CLUSTER_ROLE = Kind("ClusterRole", "rbac.authorization.k8s.io", "v1", "clusterroles", is_namespaced=False)
CLUSTER_ROLE_BINDING = Kind(
    "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1", "clusterrolebindings", is_namespaced=False
)
NETWORK_POLICY = Kind("NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies", is_namespaced=True)
MUTATING_CONFIGURATION = Kind(
    "MutatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    is_namespaced=False,
)
VALIDATING_CONFIGURATION = Kind(
    "ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    is_namespaced=False,
)
PRIORITY_CLASS = Kind("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", is_namespaced=False)
# Kueue's priority of a workload (label kueue.x-k8s.io/priority-class): read where Kueue runs.
WORKLOAD_PRIORITY_CLASS = Kind(
    "WorkloadPriorityClass", "kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", is_namespaced=False
)
LEASE = Kind("Lease", "coordination.k8s.io", "v1", "leases", is_namespaced=True)
TENANT = Kind("Tenant", TENANT_GROUP, TENANT_VERSION, TENANT_PLURAL, is_namespaced=False)
# wgpolicyk8s.io PolicyReport (CRD in the chart): `labgate audit --write-reports` keeps one per namespace.
POLICY_REPORT = Kind("PolicyReport", "wgpolicyk8s.io", "v1alpha2", "policyreports", is_namespaced=True)
RESOURCE_CLAIM = Kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", is_namespaced=True)
RESOURCE_CLAIM_TEMPLATE = Kind(
    "ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", is_namespaced=True
)
# Kueue's objects (kueue.x-k8s.io/v1beta2), which the reconciler keeps when Kueue runs beside labgate.
RESOURCE_FLAVOR = Kind("ResourceFlavor", "kueue.x-k8s.io", "v1beta2", "resourceflavors", is_namespaced=False)
CLUSTER_QUEUE = Kind("ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", is_namespaced=False)
LOCAL_QUEUE = Kind("LocalQueue", "kueue.x-k8s.io", "v1beta2", "localqueues", is_namespaced=True)
WORKLOAD = Kind("Workload", "kueue.x-k8s.io", "v1beta2", "workloads", is_namespaced=True)

KINDS_BY_API = {
    (k.api_version, k.kind): k
    for k in (
        NAMESPACE,
        SERVICE_ACCOUNT,
        RESOURCE_QUOTA,
        LIMIT_RANGE,
        EVENT,
        ROLE_BINDING,
        CLUSTER_ROLE,
        CLUSTER_ROLE_BINDING,
        NETWORK_POLICY,
        PRIORITY_CLASS,
        LEASE,
        TENANT,
        POLICY_REPORT,
        RESOURCE_FLAVOR,
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        WORKLOAD,
    )
}


def kind_of(obj: Object) -> Kind:
    """The Kind of a manifest, from its apiVersion and kind."""
    return KINDS_BY_API[(obj["apiVersion"], obj["kind"])]
