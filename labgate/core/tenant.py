"""The Tenant (labgate.io/v1alpha1) as the reconciler reads it (pure).

The CRD's structural schema is the first line of validation (the apiserver enforces it at apply time);
this model ignores fields it does not use, so a newer CRD never breaks an older reconciler.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Names the policies use too: `labgate generate` writes them into policies/labgate/config/ (and the
# chart's templates/_generated.tpl); tests/unit/cli/test_generated.py fails when those copies are stale.
TENANT_LABEL = "labgate.io/tenant"
# The PriorityClasses the reconciler creates (rbac.desired.shared_priority_classes). Pods admitted
# beyond their tenant's GPU quota (spec.gpu.overQuota: preemptible) get the preemptible class and label.
DEFAULT_PRIORITY_CLASS = "research-default"
PREEMPTIBLE_PRIORITY_CLASS = "research-preemptible"
PREEMPTIBLE_PRIORITY_VALUE = -100
PREEMPTIBLE_LABEL = "labgate.io/preemptible"
# On a tenant's namespace (the reconciler writes it): the Tenant's spec.gpu.overQuota, "refuse" or
# "preemptible". Where it says refuse, no pod's mutation depends on the tenant's GPU usage, so the
# mutating webhook is not called for a Job controller's pod that needs nothing more
# (webhook.registration.settled_job_pod_expression).
OVER_QUOTA_LABEL = "labgate.io/gpu-over-quota"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "labgate"
FINALIZER = "labgate.io/cleanup"
# status.gpu.unscheduledPods names at most this many of the pods that hold quota unscheduled.
MAX_UNSCHEDULED_NAMES = 10
# On a Secret: only pods running as this service account (of the same namespace) may use it.
RESTRICTED_SECRET_ANNOTATION = "labgate.io/restricted-to-service-account"  # noqa: S105 - an annotation key


class _Spec(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class Subject(_Spec):
    """A member: a user, a group, or a service account (with its namespace)."""

    kind: Literal["User", "Group", "ServiceAccount"]
    name: str
    namespace: str | None = None

    def rbac_subject(self) -> dict[str, str]:
        """The subject as RBAC bindings write it."""
        if self.kind == "ServiceAccount":
            return {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace or "default"}
        return {"kind": self.kind, "name": self.name, "apiGroup": "rbac.authorization.k8s.io"}


class Members(_Spec):
    admins: list[Subject] = Field(default_factory=list)
    researchers: list[Subject] = Field(default_factory=list)
    viewers: list[Subject] = Field(default_factory=list)

    @property
    def everyone(self) -> list[Subject]:
        return [*self.admins, *self.researchers, *self.viewers]


class Namespaces(_Spec):
    names: list[str] = Field(default_factory=list)
    prefix: str | None = None
    keep_on_delete: bool = Field(default=True, alias="keepOnDelete")
    max_count: int | None = Field(
        default=None, alias="maxCount", description="Most namespaces; None: the cluster's default."
    )


class GpuQuota(_Spec):
    total: int | None = None
    models: dict[str, int] = Field(default_factory=dict)
    over_quota: Literal["refuse", "preemptible"] = Field(default="refuse", alias="overQuota")


class Toleration(_Spec):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    def manifest(self) -> dict[str, str]:
        """The toleration as the API writes it (unset fields left out)."""
        return {k: v for k, v in self.model_dump(exclude_none=True).items() if v}


class NodePool(_Spec):
    """A node pool the tenant's GPU pods run on: how to select its nodes and tolerate their taints."""

    name: str
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[Toleration] = Field(default_factory=list)
    spot: bool = False


class Placement(_Spec):
    node_pools: list[NodePool] = Field(default_factory=list, alias="nodePools")
    allow_on_demand: bool = Field(default=False, alias="allowOnDemand")


class Queue(_Spec):
    """How the tenant's queue is set up where Kueue runs beside labgate. Its presence also makes the
    tenant Kueue-managed in the policies (lib.kueue.managed_tenant) where they do not manage every
    tenant: set it only where Kueue runs (see the CRD's description)."""

    cohort: str | None = None
    borrowing_limit: int | None = Field(default=None, alias="borrowingLimit")
    lending_limit: int | None = Field(default=None, alias="lendingLimit")
    cpu: str | None = None
    memory: str | None = None


# A resource quantity as Kubernetes writes it: "500m", "8", 8, "64Gi".
Quantity = str | int


class TenantLimits(_Spec):
    """Tenant-wide limits across all of the tenant's namespaces, on what its live pods ask (the
    scheduler's effective requests): CPU, memory and the number of pods. Unset: the infra team's
    default (policy config `tenant_limits`), else no limit."""

    cpu: Quantity | None = None
    memory: Quantity | None = None
    pods: int | None = None

    def with_defaults(self, defaults: TenantLimits) -> TenantLimits:
        """These limits, each unset one taken from `defaults`."""
        return TenantLimits(
            cpu=self.cpu if self.cpu is not None else defaults.cpu,
            memory=self.memory if self.memory is not None else defaults.memory,
            pods=self.pods if self.pods is not None else defaults.pods,
        )


class Network(_Spec):
    allow_egress: bool = Field(default=True, alias="allowEgress")
    allow_ingress_from_tenants: list[str] = Field(default_factory=list, alias="allowIngressFromTenants")
    allow_service_types: list[Literal["LoadBalancer", "NodePort", "ExternalName"]] = Field(
        default_factory=list, alias="allowServiceTypes"
    )


class Exceptions(_Spec):
    """Pod-hardening exceptions: one per Pod Security baseline control but the hosts of probes and
    lifecycle handlers, which none relaxes (the admission policy relaxes exactly the control named)."""

    host_path: bool = Field(default=False, alias="hostPath")
    host_network: bool = Field(default=False, alias="hostNetwork")
    host_pid: bool = Field(default=False, alias="hostPID")
    host_ipc: bool = Field(default=False, alias="hostIPC")
    privileged: bool = False
    host_ports: bool = Field(default=False, alias="hostPorts")
    capabilities: list[str] = Field(default_factory=list)
    sysctls: list[str] = Field(default_factory=list)
    seccomp_unconfined: bool = Field(default=False, alias="seccompUnconfined")
    app_armor_unconfined: bool = Field(default=False, alias="appArmorUnconfined")
    se_linux: bool = Field(default=False, alias="seLinux")
    proc_mount: bool = Field(default=False, alias="procMount")
    windows_host_process: bool = Field(default=False, alias="windowsHostProcess")

    @property
    def has_any(self) -> bool:
        """Whether any control is relaxed: each is one the Pod Security baseline level refuses."""
        return any(bool(value) for value in self.model_dump().values())


class Scheduling(_Spec):
    """What the tenant's pods may ask of the scheduler beyond the cluster's defaults."""

    priority_classes: list[str] = Field(default_factory=list, alias="priorityClasses")
    max_priority: int | None = Field(default=None, alias="maxPriority")
    runtime_classes: list[str] = Field(default_factory=list, alias="runtimeClasses")
    schedulers: list[str] = Field(default_factory=list)


class TenantSpec(_Spec):
    members: Members = Field(default_factory=Members)
    namespaces: Namespaces = Field(default_factory=Namespaces)
    gpu: GpuQuota = Field(default_factory=GpuQuota)
    limits: TenantLimits = Field(default_factory=TenantLimits)
    network: Network = Field(default_factory=Network)
    exceptions: Exceptions = Field(default_factory=Exceptions)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    # Rule id -> enforce, warn or dry-run (the admission applies it; the reconciler keeps Pod Security
    # in step with pod-hardening's).
    enforcement: dict[str, str] = Field(default_factory=dict)
    placement: Placement = Field(default_factory=Placement)
    queue: Queue = Field(default_factory=Queue)

    @property
    def has_queue(self) -> bool:
        """Whether the Tenant sets spec.queue (even {}): the policies then treat it as Kueue-managed
        whatever queue.managed_by_kueue says (lib.kueue.managed_tenant)."""
        return "queue" in self.model_fields_set

    def is_enforced(self, rule_id: str) -> bool:
        """Whether the Tenant leaves `rule_id` enforced: no mode, or one the admission does not know
        (it falls back to enforce), as labgate.admission reads spec.enforcement."""
        return self.enforcement.get(rule_id) not in ("warn", "dry-run")


class Tenant(_Spec):
    """A Tenant object: its name, generation and spec."""

    name: str
    generation: int = 0
    spec: TenantSpec
    is_deleting: bool = False
    finalizers: tuple[str, ...] = ()

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Tenant:
        metadata = obj.get("metadata", {})
        return cls(
            name=metadata["name"],
            generation=metadata.get("generation", 0),
            spec=TenantSpec.model_validate(obj.get("spec") or {}),
            is_deleting=bool(metadata.get("deletionTimestamp")),
            finalizers=tuple(metadata.get("finalizers") or ()),
        )
