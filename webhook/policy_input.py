"""The policy input (pure): the one definition of what Python gives Rego as `input`, naming every key
the policies read. Built by `webhook.admission.build_policy_input` (request, pod templates, image
references) and completed by the facts room (`webhook.facts`: secrets, the claimed volume, GPU
usage, resource claims, image facts) or, offline, by `cli.offline_admission`.

A key that is absent is a fact the request does not need (no tenant, no pod templates, ...): the
rules treat it as undefined. `data.labgate.admission.decisions` takes `{"batch": [input, ...]}`.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from labgate.core.gpu_amount import GpuDocument
from labgate.gpu_accounting.pool_capacity import PoolCapacityDocument
from webhook.review import RequestDocument


class PodTemplateDocument(TypedDict):
    """input.pod_templates[_]: one pod spec inside the object (found by `webhook.pod_templates`)."""

    path: str
    spec: dict[str, Any]
    metadata: dict[str, Any]
    replicas: int
    synthesized: bool


class ImageReferenceDocument(TypedDict):
    """input.image_references[image]: what the reference alone says, or why it is not one."""

    registry: str | None
    repository: str | None
    error: str | None


class ScaledWorkloadDocument(TypedDict):
    """input.scaled_workload: the kind and pod templates of the workload a scale call resizes, or the
    kind and why it could not be read (webhook.admission.scaled_workload_document,
    webhook.scaled_workloads)."""

    kind: str
    pod_templates: NotRequired[list[PodTemplateDocument]]
    error: NotRequired[str]


class SecretDocument(TypedDict):
    """input.secrets[name]: a Secret restricted to a service account, its restricting annotation only
    (webhook.inventory.RestrictedSecrets: metadata only, never the data)."""

    annotations: dict[str, str]


class ClaimRefDocument(TypedDict):
    """A PersistentVolume's spec.claimRef as the volume-claim rules read it."""

    namespace: str
    name: str


class VolumeDocument(TypedDict):
    """input.persistent_volume and input.persistent_volumes[name]: what policies see of a
    PersistentVolume (webhook.inventory.volume_document)."""

    name: str
    exists: bool
    labels: dict[str, str]
    claimRef: ClaimRefDocument | None


class HeldDocument(TypedDict):
    """input.gpu_held: what the tenant's admitted pods not yet scheduled hold
    (webhook.admission.unscheduled_holds)."""

    gpus: int
    pods: list[str]
    all_named: bool  # False when the status names only the first MAX_UNSCHEDULED_NAMES of them


class QueuedDocument(TypedDict):
    """input.gpu_queued: what Kueue holds queued of the tenant (webhook.admission.queued_in_kueue)."""

    workloads: int
    gpus: int


class OpenNodesDocument(TypedDict):
    """input.open_nodes: the cluster's nodes as a pod without tolerations sees them
    (webhook.admission.status_open_nodes)."""

    untainted: int
    tainted: int
    taint_keys: list[str]
    more_taint_keys: int


class ClaimFactDocument(TypedDict):
    """input.resource_claims["<kind>/<name>"]: a claim that was read, its ResourceClaimSpec in the wire
    form, or why it could not be (webhook.claims.claim_fact, missing_fact)."""

    found: bool
    spec: NotRequired[dict[str, Any]]
    reason: NotRequired[str]


class ClaimUserDocument(TypedDict):
    """One pod naming a claim being created or deleted (webhook.claims.claim_users)."""

    name: str
    field: str
    phase: str
    is_deleting: bool


class ClaimUsersDocument(TypedDict):
    """input.claim_users: the pods naming the claim, or why they could not be listed."""

    pods: NotRequired[list[ClaimUserDocument]]
    error: NotRequired[str]


class ImageFactDocument(TypedDict):
    """input.images[image]: `webhook.provenance.facts.ImageFact` dumped, with `pinned`
    (registry/repository@digest, or None) that webhook.provenance.admission.with_pinned adds."""

    reference: str
    normalized: str | None
    registry: str | None
    repository: str | None
    tag: str | None
    digest: str | None
    signed_by: list[str]
    error: str | None
    pinned: NotRequired[str | None]


class PolicyInput(TypedDict):
    """`input` of data.labgate.admission.decision and data.labgate.mutation."""

    # The AdmissionRequest in its wire form (camelCase), as parsed from the body
    # (webhook.review.parse_review): kind, operation, userInfo, namespace, name, object, oldObject, ...
    request: RequestDocument
    pod_templates: list[PodTemplateDocument]
    image_references: dict[str, ImageReferenceDocument]
    # On an UPDATE of a workload: how many pods each of the old object's pod templates makes at once,
    # by path (gpu-quota-scale judges a raised count; webhook.admission.replicas_before).
    replicas_before: NotRequired[dict[str, int]]
    # On a scale up (the Scale subresource) in a tenant namespace: the workload it resizes, read live,
    # {"kind", "pod_templates"}, or {"kind", "error"} when it could not be read (gpu-quota-scale then
    # refuses; webhook.scaled_workloads).
    scaled_workload: NotRequired[ScaledWorkloadDocument]
    # The namespace's Secrets restricted to a service account: name -> {"annotations": {...}}.
    secrets: NotRequired[dict[str, SecretDocument]]
    # A claim's spec.volumeName: {name, exists, labels, claimRef} (webhook.inventory.volume_document).
    persistent_volume: NotRequired[VolumeDocument]
    # The volumes that claim templates name (spec.volumeName), by name (volume-claim-template).
    persistent_volumes: NotRequired[dict[str, VolumeDocument]]
    # The tenant's GPUs in use or reserved (a Pod or a workload being created in a tenant namespace).
    gpu_usage: NotRequired[GpuDocument]
    # Of that usage, what admitted pods the scheduler has not bound yet hold, as the Tenant's status
    # last said it: {"gpus", "pods"} (for the refusal's text only; webhook.admission.unscheduled_holds).
    gpu_held: NotRequired[HeldDocument]
    # What Kueue holds queued of the tenant (workloads waiting for quota and the GPUs they ask), as
    # its status last said it: {"workloads", "gpus"} (queue-wait's text; webhook.admission.queued_in_kueue).
    gpu_queued: NotRequired[QueuedDocument]
    # What the nodes of the tenant's pools hold per model, as the Tenant's status last said it:
    # {model: {"gpus", "nodes", "largestNode"}}, the spelling of status.gpu.pools and of
    # tenant_pool_gpus (gpu-quota-node; gpu-quota's Fix; webhook.admission.pool_gpus).
    gpu_pools: NotRequired[PoolCapacityDocument]
    # On a CREATE of pod templates in a tenant namespace: the cluster's nodes as a pod without
    # tolerations sees them, as the Tenant's status last said it, {"untainted", "tainted",
    # "taint_keys", "more_taint_keys"} (placement-no-untainted-node; webhook.admission.open_nodes).
    open_nodes: NotRequired[OpenNodesDocument]
    # On a Tenant CREATE or UPDATE: what the nodes its pools select hold per model, read live,
    # {model: {"gpus", "nodes", "largestNode"}} (pool_capacity.capacity_document; absent when labgate
    # cannot tell or the read failed: tenant-quota-beyond-pools then reads the old object's status).
    tenant_pool_gpus: NotRequired[PoolCapacityDocument]

    # What the tenant's live pods ask, {"cpu": millicores, "memory": bytes, "pods": n}, summed by the
    # reconciler into the ledger (a Pod being created in a tenant namespace; tenant-quota). Absent: 0.
    # The ledger's own `workloads` (gpu_accounting.ledger, a pydantic field), handed as it is: a
    # TypedDict here would only be a cast of it.
    tenant_usage: NotRequired[dict[str, int]]
    # The ResourceClaims / templates the pod templates name, or why one could not be read
    # (webhook.claims.ClaimFacts).
    resource_claims: NotRequired[dict[str, ClaimFactDocument]]
    # For a claim or claim template being created or deleted: the pods of its namespace that name it,
    # {"pods": [{"name", "field", "phase", "is_deleting"}]} or {"error": text} (dra-claim-in-use).
    claim_users: NotRequired[ClaimUsersDocument]
    # Each image's registry, repository, digest and verified signatures (tenants with spec.images;
    # webhook.provenance.admission.ImageGatherer).
    images: NotRequired[dict[str, ImageFactDocument]]


class PolicyBatch(TypedDict):
    """`input` of data.labgate.admission.decisions: several inputs decided in one evaluation."""

    batch: list[PolicyInput]
