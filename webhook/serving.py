"""Serving one admission request: gather facts, ask OPA once, reserve GPUs, build the response.

Async orchestration lives here; deciding lives in Rego, and building inputs and responses in the
pure helpers of webhook.admission.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from labgate.core import json_bytes
from labgate.core.decisions import Decision, Mutation
from labgate.core.metrics import DECISIONS_REUSED, LEDGER_CONFLICTS, LEDGER_FULL, RULE_FINDINGS
from labgate.gpu_accounting.ledger import (
    LEDGER_MAX_BYTES,
    RESERVATION_TTL_SECONDS,
    GpuAmount,
    Ledger,
    LedgerConflictError,
    encoded_size,
    now,
    pod_key,
    stored_size,
    usage,
    with_reservation,
)
from webhook import refusals
from webhook.admission import (
    build_policy_input,
    build_response,
    needs_gpu_usage,
    warning_lines,
)
from webhook.decision_reuse import ReuseCache, is_clean_admission, pod_create_key
from webhook.policy_engine import PolicyEngineUnavailableError
from webhook.review import AdmissionRequest, AdmissionResponse
from webhook.volume_facts import template_volume_names, template_volumes
from webhook.workloads import BUILTIN_WORKLOAD_KINDS, WorkloadKind

log = logging.getLogger("labgate.webhook")

# A lost compare-and-swap re-reads the ledger and decides again; this many times at most.
MAX_LEDGER_ATTEMPTS = 8


class DecisionSource(Protocol):
    async def decide(self, policy_input: dict[str, Any]) -> Decision: ...

    async def decide_all(self, policy_inputs: list[dict[str, Any]]) -> list[Decision]: ...

    async def mutate(self, policy_input: dict[str, Any]) -> Mutation: ...

    async def is_healthy(self) -> bool: ...


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
    ) -> dict[str, dict[str, Any]] | None: ...


class LedgerAccess(Protocol):
    @property
    def is_synced(self) -> bool: ...

    def cached(self, tenant: str) -> Ledger: ...

    def fresh(self, tenant: str) -> Ledger: ...

    def write(self, ledger: Ledger) -> Ledger: ...


class ClaimSource(Protocol):
    async def for_templates(
        self, namespace: str, pod_templates: list[dict[str, Any]]
    ) -> dict[str, dict[str, Any]]: ...


class SecretFacts(Protocol):
    @property
    def is_synced(self) -> bool: ...

    def in_namespace(self, namespace: str) -> dict[str, dict[str, Any]]: ...


class VolumeFacts(Protocol):
    def volume(self, name: str) -> dict[str, Any]: ...


def _claimed_volume(request: AdmissionRequest) -> str | None:
    """The PersistentVolume a claim names (spec.volumeName), for the volume-claim rule."""
    if (request.kind.group, request.kind.kind) != ("", "PersistentVolumeClaim"):
        return None
    name = ((request.object or {}).get("spec") or {}).get("volumeName")
    return name if isinstance(name, str) and name else None


def _is_pod_create(request: AdmissionRequest) -> bool:
    return request.kind.group == "" and request.kind.kind == "Pod" and request.operation == "CREATE"


def reservation_key(request: AdmissionRequest) -> str:
    """What a GPU pod's reservation is keyed by: the uid the apiserver gave the pod it is creating.
    Never the pod's name: a CREATE of a name that exists is validated before the apiserver finds the
    name taken, and must not touch the reservation or record of the pod that holds it. (Without a uid,
    which a real apiserver always sends to validating webhooks, a key no pod can ever have.)"""
    uid = (request.object or {}).get("metadata", {}).get("uid")
    return str(uid) if uid else f"no-pod-uid/{request.uid}"


# A GPU usage in a comparable form: total, and the models with a non-zero count, sorted.
UsageKey = tuple[int, tuple[tuple[str, int], ...]]


def usage_key(amount: GpuAmount) -> UsageKey:
    return amount.total, tuple(sorted((m, c) for m, c in amount.by_model.items() if c))


def usage_document(key: UsageKey) -> dict[str, Any]:
    """input.gpu_usage for a usage."""
    return {"total": key[0], "by_model": dict(key[1])}


GPU_QUOTA_RULE = "gpu-quota"


def decides_alike(decision: Decision, at: UsageKey) -> bool:
    """Whether `decision`, made against another usage, is also the decision against usage `at`:
    the policy said the pod fits up to its headroom, and the quota rule (the only one that reads the
    usage) found nothing, so it finds nothing at `at` either and every other finding stays."""
    headroom = decision.gpu_headroom
    if headroom is None or not decision.allowed:
        return False
    if any(f.rule == GPU_QUOTA_RULE for f in (*decision.denials, *decision.warnings, *decision.dry_run)):
        return False
    total, by_model = at[0], dict(at[1])
    if headroom.total is not None and total > headroom.total:
        return False
    return all(by_model.get(model, 0) <= room for model, room in headroom.by_model.items())


def _input_usage(policy_input: dict[str, Any]) -> UsageKey | None:
    """The GPU usage a policy input carries, comparable; None when it carries none."""
    document = policy_input.get("gpu_usage")
    return None if document is None else usage_key(GpuAmount.model_validate(document))


def _holds_at(decision: Decision, decided: Hashable, at: UsageKey | None) -> bool:
    """Whether `decision`, made at usage `decided`, is also the decision at usage `at`."""
    return decision.gpu_demand.total == 0 or decided == at or (at is not None and decides_alike(decision, at))


def _plus(a: UsageKey, b: GpuAmount, sign: int = 1) -> UsageKey:
    by_model = dict(a[1])
    for model, count in b.by_model.items():
        by_model[model] = by_model.get(model, 0) + sign * count
    return a[0] + sign * b.total, tuple(sorted((m, c) for m, c in by_model.items() if c))


@dataclass
class _PendingReservation:
    """A GPU pod waiting for its tenant's next ledger batch: admitted by a first decision against the
    cached usage, it is decided again (in one evaluation with the rest of its batch) against the usage
    the pods before it leave, unless that is the usage it was first decided with."""

    request: AdmissionRequest
    policy_input: dict[str, Any]
    key: str
    trace: DecisionTrace
    response: asyncio.Future[AdmissionResponse]
    decision: Decision
    decided_usage: UsageKey
    demand: GpuAmount


@dataclass
class DecisionTrace:
    """Filled in while a request is served, for the decision log: the policy decision and the tenant."""

    decision: Decision | None = None
    tenant: str | None = None


class AdmissionServer:
    """Everything one webhook replica needs to answer the apiserver."""

    def __init__(
        self,
        *,
        engine: DecisionSource,
        inventory: InventoryState,
        ledgers: LedgerAccess | None,
        secrets: SecretFacts | None,
        workload_kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
        images: ImageFactSource | None = None,
        image_timeout: float = 1.0,
        reservation_seconds: float = RESERVATION_TTL_SECONDS,
        facts_age: Callable[[], float] | None = None,
        facts_max_age: float = float("inf"),
        volumes: VolumeFacts | None = None,
        claims: ClaimSource | None = None,
        decision_reuse_seconds: float = 0.0,
        facts_version: Callable[[], Hashable] | None = None,
    ):
        """`facts_age()` tells how long ago the API last proved the stalest watch-fed fact current;
        past `facts_max_age` every request is refused with [facts-stale]. `claims` reads the DRA
        claims a request's pod templates name.

        `decision_reuse_seconds` > 0: a Pod CREATE identical to one decided moments before, but for
        the pod's name and uid, gets that decision again without a policy evaluation (a Job's copies;
        webhook/decision_reuse.py), for as long as `facts_version()` (what OPA holds: the inventory
        writes, the policy revision) stays the same, and at most that many seconds."""
        self.volumes = volumes
        self.claims = claims
        self.workload_kinds = workload_kinds
        self.reservation_seconds = reservation_seconds
        self.facts_age = facts_age
        self.facts_max_age = facts_max_age
        self._pending: dict[str, list[_PendingReservation]] = {}
        self._committing: set[str] = set()
        self._usage_memo: dict[str, tuple[Ledger, UsageKey]] = {}
        self._size_memo: dict[str, tuple[Ledger, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.images = images
        self.image_timeout = image_timeout
        self.engine = engine
        self.inventory = inventory
        self.ledgers = ledgers
        self.secrets = secrets
        self.facts_version = facts_version
        self._reused_decisions: ReuseCache[Decision] = ReuseCache(decision_reuse_seconds)
        self._reused_mutations: ReuseCache[Mutation] = ReuseCache(decision_reuse_seconds)
        self._deciding: dict[bytes, asyncio.Future[None]] = {}

    @property
    def caches_synced(self) -> dict[str, bool]:
        return {
            "inventory": self.inventory.is_synced,
            "ledgers": self.ledgers is None or self.ledgers.is_synced,
            "secrets": self.secrets is None or self.secrets.is_synced,
            "facts_fresh": self.stale_facts_age() is None,
        }

    def stale_facts_age(self) -> float | None:
        """The age of the watch-fed facts when it is past the bound, else None."""
        if self.facts_age is None:
            return None
        age = self.facts_age()
        return age if age > self.facts_max_age else None

    async def _gather(self, request: AdmissionRequest) -> tuple[dict[str, Any], str | None]:
        """The policy input and the tenant that owns the request's namespace."""
        namespace = request.namespace or (request.name if request.kind.kind == "Namespace" else None)
        tenant = None
        if namespace:
            if not self.inventory.is_known(namespace):  # the common case costs no thread hop
                await asyncio.to_thread(self.inventory.ensure_namespace, namespace)
            tenant = self.inventory.tenant_of(namespace)
        policy_input = build_policy_input(request=request, kinds=self.workload_kinds)
        if request.namespace and self.secrets is not None:
            policy_input["secrets"] = self.secrets.in_namespace(request.namespace)
        volume_name = _claimed_volume(request)
        if volume_name is not None and self.volumes is not None:
            try:
                policy_input["persistent_volume"] = await asyncio.to_thread(self.volumes.volume, volume_name)
            except Exception:  # the rule refuses a claim whose volume it could not see
                log.exception("could not read PersistentVolume %s", volume_name)
        template_names = template_volume_names(request.object, policy_input["pod_templates"])
        if tenant and template_names and self.volumes is not None:  # claim templates (volume-claim-template)
            policy_input["persistent_volumes"] = await template_volumes(template_names, self.volumes)
        if tenant and self.ledgers is not None and needs_gpu_usage(request, policy_input["pod_templates"]):
            # Both webhooks see the tenant's GPU usage: the mutation marks pods beyond quota
            # preemptible (when the tenant allows it); the validation decides and reserves, and warns
            # at apply time about a workload's pods that will wait for GPUs.
            excluding = reservation_key(request) if _is_pod_create(request) else None
            policy_input["gpu_usage"] = usage_document(self._usage(self.ledgers.cached(tenant), excluding))
        if tenant and request.namespace and self.claims is not None and policy_input["pod_templates"]:
            # Claims (Dynamic Resource Allocation) count against the GPU quota: the policy needs them.
            claims = await self.claims.for_templates(request.namespace, policy_input["pod_templates"])
            if claims:
                policy_input["resource_claims"] = claims
        if tenant and request.namespace and self.images is not None and policy_input["pod_templates"]:
            spec = self.inventory.tenant_spec(tenant)
            if spec is not None:
                images = await self.images.images_for(
                    namespace=request.namespace,
                    tenant_spec=spec,
                    pod_templates=policy_input["pod_templates"],
                    timeout=self.image_timeout,
                )
                if images is not None:
                    policy_input["images"] = images
        return policy_input, tenant

    def _usage(self, ledger: Ledger, excluding: str | None = None) -> UsageKey:
        """The ledger's usage, summed once per version of the ledger (not once per request)."""
        memo = self._usage_memo.get(ledger.tenant)
        if memo is None or memo[0] is not ledger:
            memo = (ledger, usage_key(usage(ledger)))
            self._usage_memo[ledger.tenant] = memo
        held = ledger.reservations.get(excluding) if excluding is not None else None
        return memo[1] if held is None else _plus(memo[1], held.gpus, -1)

    def _size(self, ledger: Ledger) -> int:
        """The stored size of the ledger's reservations, encoded once per version of the ledger."""
        memo = self._size_memo.get(ledger.tenant)
        if memo is None or memo[0] is not ledger:
            memo = (ledger, stored_size(ledger))
            self._size_memo[ledger.tenant] = memo
        return memo[1]

    async def validate(
        self, request: AdmissionRequest, trace: DecisionTrace | None = None
    ) -> AdmissionResponse:
        trace = trace if trace is not None else DecisionTrace()
        if (age := self.stale_facts_age()) is not None:
            return refusals.facts_stale(age=age, bound=self.facts_max_age).response(request)
        policy_input, tenant = await self._gather(request)
        trace.tenant = tenant
        # Every request is decided at once against the cached usage, side by side with the others;
        # only a pod that this admits and that asks for GPUs waits for its tenant's next ledger batch.
        decision = await self._decide_or_reuse(policy_input)
        trace.decision = decision
        if (
            tenant
            and _is_pod_create(request)
            and decision.allowed
            and decision.gpu_demand.total > 0
            and not request.dry_run
        ):
            return await self._reserve(request, policy_input, tenant, trace, decision)
        self._count(decision)
        return build_response(request=request, decision=decision)

    def _reuse_key(self, cache: ReuseCache[Any], policy_input: dict[str, Any]) -> bytes | None:
        if not cache.enabled:
            return None
        return pod_create_key(policy_input, self.facts_version() if self.facts_version else None)

    async def _decide_or_reuse(self, policy_input: dict[str, Any]) -> Decision:
        """The decision of an identical pod decided moments before (or being decided now: copies
        arriving together wait for the first one's evaluation), when it holds at this pod's GPU usage
        (it asks none, the same usage, or one within the headroom the policy returned); else one policy
        query, kept for the next identical pod when it is a clean admission."""
        key = self._reuse_key(self._reused_decisions, policy_input)
        if key is None:
            return await self._decide(policy_input)
        at = _input_usage(policy_input)
        if (held := self._reused_decisions.get(key)) is None and (first := self._deciding.get(key)):
            await asyncio.wait([first])
            held = self._reused_decisions.get(key)
        if held is not None and _holds_at(held.value, held.usage, at):
            DECISIONS_REUSED.labels("validate").inc()
            return held.value
        if key in self._deciding:
            return await self._decide(policy_input)
        deciding = asyncio.get_running_loop().create_future()
        self._deciding[key] = deciding
        try:
            decision = await self._decide(policy_input)
            if is_clean_admission(decision):
                self._reused_decisions.put(key, decision, at)
            return decision
        finally:
            del self._deciding[key]
            deciding.set_result(None)

    async def _mutate_or_reuse(self, policy_input: dict[str, Any]) -> Mutation:
        """The mutation of an identical pod mutated moments before, when its patch does not read the
        GPU usage or this pod's usage is the same; else one policy query."""
        key = self._reuse_key(self._reused_mutations, policy_input)
        at = _input_usage(policy_input)
        held = self._reused_mutations.get(key) if key is not None else None
        if held is not None and (not held.value.reads_gpu_usage or held.usage == at):
            DECISIONS_REUSED.labels("mutate").inc()
            return held.value
        mutation = await self.engine.mutate(policy_input)
        if mutation.inventory_revision is None and self.inventory.is_synced:
            await asyncio.to_thread(self.inventory.push_all)
            mutation = await self.engine.mutate(policy_input)
            if mutation.inventory_revision is None:
                raise PolicyEngineUnavailableError("OPA does not keep labgate's inventory of tenants")
        if key is not None and mutation.inventory_revision is not None:
            self._reused_mutations.put(key, mutation, at)
        return mutation

    async def _decide(self, policy_input: dict[str, Any]) -> Decision:
        """One policy query; if OPA lost the inventory (it drops pushed data when it reloads its
        policies), push it again and ask once more, rather than decide without tenants."""
        decision = await self.engine.decide(policy_input)
        if decision.inventory_revision is None and self.inventory.is_synced:
            log.warning("OPA has no inventory (policies reloaded?); pushing it again")
            await asyncio.to_thread(self.inventory.push_all)
            decision = await self.engine.decide(policy_input)
            if decision.inventory_revision is None:
                raise PolicyEngineUnavailableError("OPA does not keep labgate's inventory of tenants")
        return decision

    @staticmethod
    def _count(decision: Decision) -> None:
        tenant = decision.tenant or ""
        for finding in [*decision.denials, *decision.warnings, *decision.dry_run]:
            RULE_FINDINGS.labels(finding.rule, finding.mode, tenant).inc()
        for finding in decision.dry_run:
            log.info("dry-run finding for tenant %s: %s", tenant, finding.message)

    async def _reserve(
        self,
        request: AdmissionRequest,
        policy_input: dict[str, Any],
        tenant: str,
        trace: DecisionTrace,
        decision: Decision,
    ) -> AdmissionResponse:
        """Reserve the GPUs of an admitted pod by compare-and-swap on its tenant's ledger; a lost race
        decides again with the new usage (never two admissions spending the same GPUs).

        Group commit: the GPU pods of one tenant that arrive while a write is under way wait for the
        next batch; a batch is decided against a running ledger (each pod against what the pods
        before it leave) and written in one compare-and-swap. A Job's thousand pods cost a few
        writes and, within the quota's headroom, no further evaluation."""
        if self.ledgers is None:
            return refusals.engine_unavailable("no GPU quota ledger to reserve in").response(request)
        key = reservation_key(request)
        future: asyncio.Future[AdmissionResponse] = asyncio.get_running_loop().create_future()
        demand = GpuAmount(total=decision.gpu_demand.total, by_model=dict(decision.gpu_demand.by_model))
        decided = usage_key(GpuAmount.model_validate(policy_input.get("gpu_usage") or {}))
        self._pending.setdefault(tenant, []).append(
            _PendingReservation(request, policy_input, key, trace, future, decision, decided, demand)
        )
        if tenant not in self._committing:
            self._committing.add(tenant)
            task = asyncio.create_task(self._commit_batches(tenant))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _commit_batches(self, tenant: str) -> None:
        try:
            while batch := self._pending.pop(tenant, []):
                try:
                    await self._commit(tenant, batch)
                except Exception as err:  # no decision for this batch: each of its requests refuses
                    for item in batch:
                        if not item.response.done():
                            item.response.set_exception(err)
        finally:
            self._committing.discard(tenant)

    async def _decide_batch(
        self, ledger: Ledger, batch: list[_PendingReservation]
    ) -> tuple[Ledger, list[AdmissionResponse], UsageKey, int]:
        """Decide `batch` in order against `ledger`: each pod against the usage the pods before it
        leave (the same answers as deciding them one after the other).

        A pod's decision is known when it was made with exactly that usage, or when the policy said the
        pod fits up to a headroom the usage stays within (the common case: no evaluation at all, only
        the comparison the policy's numbers allow). At the quota's edge, each round asks, in one
        evaluation, for the pods not yet decided, against two usages each: the one left if all the
        pods before it in the round are admitted, and, once a pod of the batch was refused (the
        quota's edge), also the one left if none is: a run of admissions, then a run of refusals,
        each settle in one round. A round always settles at least its first pod, usually all."""
        assert self.ledgers is not None
        tenant = ledger.tenant
        working = ledger
        size = self._size(ledger)
        running = self._usage(ledger)
        known: list[dict[UsageKey, Decision]] = [{item.decided_usage: item.decision} for item in batch]
        responses: list[AdmissionResponse] = []
        refused = False  # at the quota's edge: rounds also ask what is left if no earlier pod is admitted

        def own(item: _PendingReservation) -> GpuAmount | None:
            held = working.reservations.get(item.key)
            return held.gpus if held is not None else None

        def exact(item: _PendingReservation) -> UsageKey:
            held = own(item)
            return running if held is None else _plus(running, held, -1)

        while len(responses) < len(batch):
            index = len(responses)
            item = batch[index]
            if item.response.done():
                # Its caller gave up at the deadline and refused: reserving for it now would hold
                # GPUs for a pod the apiserver never creates.
                reason = "the request's deadline passed before its turn"
                responses.append(refusals.engine_unavailable(reason).response(item.request))
                continue
            at = exact(item)
            decision = known[index].get(at)
            if decision is None and decides_alike(item.decision, at):
                decision = item.decision
            if decision is None and item.decision.gpu_headroom is not None:
                await self._decide_beyond_headroom(batch[index:], known[index:], working, running)
                decision = known[index].get(at)
            if decision is None:
                await self._decide_round(
                    batch[index:], known[index:], working, running, if_none_admitted=refused
                )
                decision = known[index][at]
            item.trace.decision = decision
            if not decision.allowed or decision.gpu_demand.total == 0:
                refused = refused or not decision.allowed
                responses.append(build_response(request=item.request, decision=decision))
                continue
            demand = GpuAmount(total=decision.gpu_demand.total, by_model=dict(decision.gpu_demand.by_model))
            metadata = (item.request.object or {}).get("metadata", {})
            pod = pod_key(item.request.namespace or "", metadata.get("name") or item.request.name or "")
            candidate = with_reservation(
                working, item.key, demand, now=now(), pod=pod, ttl=self.reservation_seconds
            )
            added = encoded_size(item.key, candidate.reservations[item.key])
            if size + added > LEDGER_MAX_BYTES:
                LEDGER_FULL.labels(tenant).inc()
                responses.append(
                    refusals.ledger_full(tenant, len(working.reservations)).response(item.request)
                )
                continue
            running = _plus(at, demand)
            size, working = size + added, candidate
            responses.append(build_response(request=item.request, decision=decision))
        return working, responses, running, size

    async def _decide_beyond_headroom(
        self,
        items: list[_PendingReservation],
        known: list[dict[UsageKey, Decision]],
        working: Ledger,
        running: UsageKey,
    ) -> None:
        """At the quota's edge: the pods beyond their headroom are refused by the quota rule and
        leave the usage as it is, so each one's usage is known in advance; they are decided side by
        side (the policy's message quotes that usage). Should one be admitted after all (the rule in
        warn mode), the pods after it are decided again by the next round."""
        overlay: dict[str, GpuAmount] = {}
        at_each = running
        asks: list[tuple[int, UsageKey]] = []
        for index, item in enumerate(items):
            reserved = working.reservations.get(item.key)
            held = overlay.get(item.key, reserved.gpus if reserved is not None else None)
            at = at_each if held is None else _plus(at_each, held, -1)
            decided = known[index].get(at)
            if decided is not None:
                if decided.allowed and decided.gpu_demand.total > 0:
                    at_each = _plus(at, item.demand)
                    overlay[item.key] = item.demand
                continue
            if decides_alike(item.decision, at):
                at_each = _plus(at, item.demand)
                overlay[item.key] = item.demand
            else:
                asks.append((index, at))
        decisions = await asyncio.gather(
            *(self._decide({**items[i].policy_input, "gpu_usage": usage_document(at)}) for i, at in asks)
        )
        for (index, at), decision in zip(asks, decisions, strict=True):
            known[index][at] = decision

    async def _decide_round(
        self,
        items: list[_PendingReservation],
        known: list[dict[UsageKey, Decision]],
        working: Ledger,
        running: UsageKey,
        *,
        if_none_admitted: bool,
    ) -> None:
        """One evaluation for the undecided `items`: each against the usage left if every earlier
        item of the round is admitted, and (`if_none_admitted`) if none is; the answers go into
        `known`."""
        overlay: dict[str, GpuAmount] = {}
        if_all = running
        asks: list[tuple[int, UsageKey]] = []
        for index, item in enumerate(items):
            reserved = working.reservations.get(item.key)
            before = reserved.gpus if reserved is not None else None
            held = overlay.get(item.key, before)
            if_none = running if before is None else _plus(running, before, -1)
            at_all = if_all if held is None else _plus(if_all, held, -1)
            for at in dict.fromkeys((at_all, if_none) if if_none_admitted or index == 0 else (at_all,)):
                if at not in known[index] and not decides_alike(item.decision, at):
                    asks.append((index, at))
            if_all = _plus(at_all, item.demand)
            overlay[item.key] = item.demand
        if not asks:
            return
        inputs = [{**items[index].policy_input, "gpu_usage": usage_document(at)} for index, at in asks]
        decisions = await self.engine.decide_all(inputs)
        if any(d.inventory_revision is None for d in decisions) and self.inventory.is_synced:
            log.warning("OPA has no inventory (policies reloaded?); pushing it again")
            await asyncio.to_thread(self.inventory.push_all)
            decisions = await self.engine.decide_all(inputs)
            if any(d.inventory_revision is None for d in decisions):
                raise PolicyEngineUnavailableError("OPA does not keep labgate's inventory of tenants")
        for (index, at), decision in zip(asks, decisions, strict=True):
            known[index][at] = decision

    async def _commit(self, tenant: str, batch: list[_PendingReservation]) -> None:
        ledgers = self.ledgers
        assert ledgers is not None
        ledger = ledgers.cached(tenant)
        for attempt in range(MAX_LEDGER_ATTEMPTS):
            working, responses, running, size = await self._decide_batch(ledger, batch)
            if working is not ledger:
                try:
                    working = await asyncio.to_thread(ledgers.write, working)
                    # The next batch starts from the written ledger: its sums are known already.
                    self._usage_memo[tenant] = (working, running)
                    self._size_memo[tenant] = (working, size)
                except LedgerConflictError:
                    LEDGER_CONFLICTS.labels(tenant).inc()
                    log.info(
                        "ledger of %s changed (attempt %d): deciding %d pods again",
                        tenant,
                        attempt + 1,
                        len(batch),
                    )
                    ledger = await asyncio.to_thread(ledgers.fresh, tenant)
                    continue
            if working is not ledger:
                await self._release_abandoned(tenant, [i.key for i in batch if i.response.done()], working)
            for item, response in zip(batch, responses, strict=True):
                if item.trace.decision is not None:
                    self._count(item.trace.decision)
                if not item.response.done():  # its caller may have given up at the deadline
                    item.response.set_result(response)
            return
        busy = refusals.ledger_busy(tenant, MAX_LEDGER_ATTEMPTS)
        for item in batch:
            if not item.response.done():
                item.response.set_result(busy.response(item.request))

    async def _release_abandoned(self, tenant: str, keys: list[str], written: Ledger) -> None:
        """Drop at once the reservations of requests whose caller gave up at the deadline while their
        batch was being written: the apiserver refused those pods, so their GPUs must not be held."""
        ledgers = self.ledgers
        if ledgers is None or not (keys := [k for k in keys if k in written.reservations]):
            return
        ledger = written
        for _ in range(MAX_LEDGER_ATTEMPTS):
            kept = {k: v for k, v in ledger.reservations.items() if k not in keys}
            if len(kept) == len(ledger.reservations):
                return
            try:
                await asyncio.to_thread(ledgers.write, ledger.model_copy(update={"reservations": kept}))
                return
            except LedgerConflictError:
                ledger = await asyncio.to_thread(ledgers.fresh, tenant)
        log.warning("could not release %d abandoned reservations of %s; they expire", len(keys), tenant)

    async def mutate(
        self, request: AdmissionRequest, trace: DecisionTrace | None = None
    ) -> AdmissionResponse:
        if (age := self.stale_facts_age()) is not None:
            return refusals.facts_stale(age=age, bound=self.facts_max_age).response(request)
        policy_input, tenant = await self._gather(request)
        if trace is not None:
            trace.tenant = tenant
        mutation = await self._mutate_or_reuse(policy_input)
        warnings = [line for w in mutation.warnings for line in warning_lines(w)] or None
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
