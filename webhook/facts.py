"""Gathering the facts of one admission request: the policy input and the tenant that owns it.

Nothing here waits for the API in the common case: namespaces, tenants and restricted secrets come
from watch-fed caches, the GPU usage from the ledger cache. What is read through (a namespace not
seen yet, a claimed PersistentVolume, DRA claims, image facts, the nodes of a Tenant's pools when a
Tenant is written) is rare or cached behind its source;
claims and images, the two that may each take a round trip, are fetched at the same time.
The sources are given (the Protocols below): this room imports no door.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, cast

from labgate.gpu_accounting.pool_capacity import PoolCapacityDocument
from webhook.admission import build_policy_input, scaled_kind
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, WorkloadKind
from webhook.policy_input import (
    ClaimFactDocument,
    ClaimUsersDocument,
    ImageFactDocument,
    PolicyInput,
    ScaledWorkloadDocument,
    SecretDocument,
    VolumeDocument,
)
from webhook.read_shares import Read, ReadShares
from webhook.references import (
    DEFAULT_MAX_REFERENCES,
    References,
    TooManyReferencesError,
    claim_references,
    pull_credential_references,
)
from webhook.request_class import RequestClass, classify
from webhook.review import AdmissionRequest
from webhook.tenant_facts import TenantFacts
from webhook.volume_facts import template_volume_names, template_volumes

log = logging.getLogger(__name__)

# The most a Tenant write waits for the nodes of its pools (only a warning depends on them).
POOL_NODES_SECONDS = 2.0
# The most a scale up waits for the workload it resizes (then it is refused: gpu-quota-scale).
SCALED_WORKLOAD_SECONDS = 1.5


class InventoryState(Protocol):
    @property
    def is_synced(self) -> bool: ...

    def ensure_namespace(self, name: str) -> None: ...

    def is_known(self, name: str) -> bool: ...

    def tenant_of(self, namespace: str) -> str | None: ...

    def push_all(self) -> None: ...

    def tenant_spec(self, name: str) -> dict[str, Any] | None: ...


class ImageFactSource(Protocol):
    async def images_for(
        self,
        *,
        namespace: str,
        tenant_spec: dict[str, Any],
        pod_templates: list[dict[str, Any]],
        timeout: float,
    ) -> dict[str, ImageFactDocument] | None: ...


class ClaimSource(Protocol):
    async def for_templates(
        self, namespace: str, pod_templates: list[dict[str, Any]], *, read: Read = ...
    ) -> dict[str, ClaimFactDocument]: ...

    async def users_of(self, namespace: str, kind: str, name: str) -> ClaimUsersDocument: ...


class SecretFacts(Protocol):
    @property
    def is_synced(self) -> bool: ...

    def in_namespace(self, namespace: str) -> dict[str, SecretDocument]: ...


class VolumeFacts(Protocol):
    def volume(self, name: str) -> VolumeDocument: ...


class PoolNodeFacts(Protocol):
    """What the nodes a Tenant object's pools select hold per model, read live
    (webhook.pool_nodes.PoolNodes); None when labgate cannot tell; raises when the API cannot say."""

    def capacity_of(self, tenant: Mapping[str, Any]) -> PoolCapacityDocument | None: ...


class ScaledWorkloadFacts(Protocol):
    """The pod templates of a workload being scaled, read live (webhook.scaled_workloads.ScaledWorkloads):
    {"kind", "pod_templates"}, or {"kind", "error"} when it could not be read."""

    def fact(self, kind: WorkloadKind, namespace: str, name: str) -> ScaledWorkloadDocument: ...


class Gathered(NamedTuple):
    """What FactGatherer.gather hands on: the policy input, the request's tenant (None outside any)
    and what kind of request it is."""

    policy_input: PolicyInput
    tenant: str | None
    request_class: RequestClass


class FactGatherer:
    """The policy input of a request, from the sources one webhook replica holds."""

    def __init__(
        self,
        *,
        inventory: InventoryState,
        secrets: SecretFacts | None = None,
        tenant_facts: TenantFacts | None = None,
        workload_kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
        images: ImageFactSource | None = None,
        image_timeout: float = 1.0,
        volumes: VolumeFacts | None = None,
        claims: ClaimSource | None = None,
        max_references: int = DEFAULT_MAX_REFERENCES,
        pool_nodes: PoolNodeFacts | None = None,
        scaled_workloads: ScaledWorkloadFacts | None = None,
        reads: ReadShares | None = None,
    ):
        """`reads`: the tenants' shares of the reads through to the API (READS_PER_TENANT each
        without one). `tenant_facts`: what the caches say of the tenant (None: none of it)."""
        self.inventory = inventory
        self.tenant_facts = tenant_facts or TenantFacts()
        self.scaled_workloads = scaled_workloads
        self.pool_nodes = pool_nodes
        self.secrets = secrets
        self.workload_kinds = workload_kinds
        self.images = images
        self.image_timeout = image_timeout
        self.volumes = volumes
        self.claims = claims
        self.max_references = max_references
        self.reads = reads if reads is not None else ReadShares()

    async def gather(self, request: AdmissionRequest) -> Gathered:
        """The policy input, the tenant that owns the request's namespace, and what kind of request
        it is (classified once, here, where its pod templates are found). Raises
        TooManyReferencesError, before reading any of them, when the request's templates name more
        objects to read than `max_references`."""
        namespace = request.namespace or (request.name if request.kind.kind == "Namespace" else None)
        tenant = None
        if namespace:
            if not self.inventory.is_known(namespace):  # the common case costs no thread hop
                await asyncio.to_thread(self.inventory.ensure_namespace, namespace)
            tenant = self.inventory.tenant_of(namespace)
        policy_input = build_policy_input(request=request, kinds=self.workload_kinds)
        request_class = classify(request, policy_input["pod_templates"])
        if request.namespace and self.secrets is not None:
            policy_input["secrets"] = self.secrets.in_namespace(request.namespace)
        volume_name = request_class.claimed_volume
        if volume_name is not None and self.volumes is not None:
            try:
                policy_input["persistent_volume"] = await asyncio.to_thread(self.volumes.volume, volume_name)
            except Exception:  # the rule refuses a claim whose volume it could not see
                log.exception("could not read PersistentVolume %s", volume_name)
        swapped = request_class.swapped_claim
        if tenant and request.namespace and swapped is not None and self.claims is not None:
            policy_input["claim_users"] = await self.claims.users_of(request.namespace, *swapped)
        templates_doc = cast(list[dict[str, Any]], policy_input["pod_templates"])
        template_names = template_volume_names(request.object, templates_doc)
        if tenant:
            self._bound_references(tenant, policy_input, template_names)
        if tenant and template_names and self.volumes is not None:  # claim templates (volume-claim-template)
            policy_input["persistent_volumes"] = await template_volumes(
                template_names, self.volumes, read=self.reads.of(tenant)
            )
        self.tenant_facts.add(request, request_class, policy_input, tenant)
        await self._add_tenant_pool_gpus(request, request_class, policy_input)
        await self._add_scaled_workload(request, request_class, policy_input, tenant)
        if tenant and request.namespace and policy_input["pod_templates"]:
            # The claims and image readers read templates as plain documents (they are, at run time).
            templates = cast(list[dict[str, Any]], policy_input["pod_templates"])
            claims, images = await self._claims_and_images(tenant, request.namespace, templates)
            if claims:
                policy_input["resource_claims"] = claims
            if images is not None:
                policy_input["images"] = images
        return Gathered(policy_input, tenant, request_class)

    async def _add_tenant_pool_gpus(
        self, request: AdmissionRequest, request_class: RequestClass, policy_input: PolicyInput
    ) -> None:
        """On a Tenant write, what the nodes of its pools hold (tenant-quota-beyond-pools), read live
        within POOL_NODES_SECONDS. Only for a warning: a slow or failed read leaves it out, never refuses."""
        if self.pool_nodes is None or not request_class.is_tenant_write:
            return
        pool_nodes = self.pool_nodes
        try:
            capacity = await asyncio.wait_for(
                asyncio.to_thread(pool_nodes.capacity_of, request.object or {}), timeout=POOL_NODES_SECONDS
            )
        except Exception:
            log.warning(
                "no nodes of the pools of Tenant %s: its quota is not compared", request.name, exc_info=True
            )
            return
        if capacity is not None:
            policy_input["tenant_pool_gpus"] = capacity

    async def _add_scaled_workload(
        self,
        request: AdmissionRequest,
        request_class: RequestClass,
        policy_input: PolicyInput,
        tenant: str | None,
    ) -> None:
        """On a scale up in a tenant namespace, the workload's pod templates (gpu-quota-scale), read
        live within SCALED_WORKLOAD_SECONDS; a slow read is said in the fact, and the policy refuses."""
        kind = scaled_kind(request, self.workload_kinds)
        if self.scaled_workloads is None or kind is None or not request_class.is_scale_up:
            return
        if not tenant or not request.namespace or not request.name:
            return
        reader = self.scaled_workloads
        try:
            policy_input["scaled_workload"] = await asyncio.wait_for(
                asyncio.to_thread(reader.fact, kind, request.namespace, request.name),
                timeout=SCALED_WORKLOAD_SECONDS,
            )
        except TimeoutError:
            log.warning(
                "no %s %s/%s within the bound to judge its scale", kind.kind, request.namespace, request.name
            )
            error = f"the API did not answer within {SCALED_WORKLOAD_SECONDS:g} s"
            policy_input["scaled_workload"] = {"kind": kind.kind, "error": error}

    def _bound_references(self, tenant: str, policy_input: PolicyInput, template_names: list[str]) -> None:
        """Raise TooManyReferencesError when the request names more objects to read than the bound
        (images count for tenants with image rules, the only ones whose images are read)."""
        templates = cast(list[dict[str, Any]], policy_input["pod_templates"])
        spec = self.inventory.tenant_spec(tenant) if self.images is not None else None
        reads_images = bool(spec and spec.get("images"))
        references = References(
            claims=len(claim_references(templates)) if self.claims is not None else 0,
            volumes=len(template_names) if self.volumes is not None else 0,
            images=len(policy_input["image_references"]) if reads_images else 0,
            credentials=len(pull_credential_references(templates)) if reads_images else 0,
        )
        if references.total > self.max_references:
            raise TooManyReferencesError(references, self.max_references)

    async def _claims_and_images(
        self, tenant: str, namespace: str, pod_templates: list[dict[str, Any]]
    ) -> tuple[dict[str, ClaimFactDocument] | None, dict[str, ImageFactDocument] | None]:
        """The DRA claims the templates name and their images' facts, fetched at the same time.
        A failure of either is raised once both are done (the claims' first)."""
        claims = asyncio.ensure_future(self._claims(tenant, namespace, pod_templates))
        images = asyncio.ensure_future(self._images(tenant, namespace, pod_templates))
        await asyncio.gather(claims, images, return_exceptions=True)  # cancelled together, too
        return claims.result(), images.result()

    async def _claims(
        self, tenant: str, namespace: str, pod_templates: list[dict[str, Any]]
    ) -> dict[str, ClaimFactDocument] | None:
        """Claims (Dynamic Resource Allocation) count against the GPU quota: the policy needs them.
        Read within the tenant's share of the pool."""
        if self.claims is None:
            return None
        return await self.claims.for_templates(namespace, pod_templates, read=self.reads.of(tenant))

    async def _images(
        self, tenant: str, namespace: str, pod_templates: list[dict[str, Any]]
    ) -> dict[str, ImageFactDocument] | None:
        """The images' facts, for tenants with `spec.images` (None: none to gather)."""
        if self.images is None or (spec := self.inventory.tenant_spec(tenant)) is None:
            return None
        return await self.images.images_for(
            namespace=namespace, tenant_spec=spec, pod_templates=pod_templates, timeout=self.image_timeout
        )
