"""GPU reservations: a tenant's admitted GPU pods written into its quota ledger by compare-and-swap.

Group commit: the GPU pods of one tenant that arrive while a write is under way wait for the next
batch; a batch is decided against a running ledger (each pod against what the pods before it leave)
and written in one compare-and-swap; a lost race re-reads the ledger and decides the batch again.
Within the headroom the policy returned no further evaluation is needed (`decides_alike`); at the
quota's edge a few. Usages are `GpuAmount`s (hashable: the decisions known per usage are keyed by
them): the facts room puts the usage into the policy input, decision reuse compares decisions by it.

The ledger store and the evaluation door are given (`LedgerAccess`, `Evaluations`): this room
imports no door.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from labgate.core.decisions import Decision
from labgate.core.metrics import LEDGER_CONFLICTS, LEDGER_FULL
from labgate.gpu_accounting.ledger import (
    LEDGER_MAX_BYTES,
    RESERVATION_TTL_SECONDS,
    GpuAmount,
    Ledger,
    LedgerConflictError,
    encoded_size,
    now,
    pod_key,
    with_reservation,
)
from webhook import refusals
from webhook.admission import build_response
from webhook.ledger_sums import LedgerAccess, LedgerSums
from webhook.policy_input import PolicyInput
from webhook.review import AdmissionRequest, AdmissionResponse

log = logging.getLogger(__name__)

# A lost compare-and-swap re-reads the ledger and decides again; this many times at most.
MAX_LEDGER_ATTEMPTS = 8

GPU_QUOTA_RULE = "gpu-quota"


class Evaluations(Protocol):
    """What a batch asks of the evaluation door (webhook.evaluation.Evaluator)."""

    async def decide(self, policy_input: PolicyInput) -> Decision: ...

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]: ...


@dataclass
class DecisionTrace:
    """Filled in while a request is served, for the decision log: the policy decision and the tenant."""

    decision: Decision | None = None
    tenant: str | None = None


def decides_alike(decision: Decision, at: GpuAmount) -> bool:
    """Whether `decision`, made against another usage, is also the decision against usage `at`:
    the policy said the pod fits up to its headroom, and the quota rule (the only one that reads the
    usage) found nothing, so it finds nothing at `at` either and every other finding stays."""
    headroom = decision.gpu_headroom
    if headroom is None or not decision.allowed:
        return False
    if any(f.rule == GPU_QUOTA_RULE for f in (*decision.denials, *decision.warnings, *decision.dry_run)):
        return False
    return at.fits_within(headroom)


def input_usage(policy_input: PolicyInput) -> GpuAmount | None:
    """The GPU usage a policy input carries, comparable; None when it carries none."""
    document = policy_input.get("gpu_usage")
    return None if document is None else GpuAmount.from_document(document)


def holds_at(decision: Decision, decided: Hashable, at: GpuAmount | None) -> bool:
    """Whether `decision`, made at usage `decided`, is also the decision at usage `at`."""
    return decision.gpu_demand.total == 0 or decided == at or (at is not None and decides_alike(decision, at))


@dataclass
class _PendingReservation:
    """A GPU pod waiting for its tenant's next ledger batch: admitted by a first decision against the
    cached usage, it is decided again (in one evaluation with the rest of its batch) against the usage
    the pods before it leave, unless that is the usage it was first decided with."""

    request: AdmissionRequest
    policy_input: PolicyInput
    key: str
    trace: DecisionTrace
    response: asyncio.Future[AdmissionResponse]
    decision: Decision
    decided_usage: GpuAmount
    demand: GpuAmount


def _at_usage(item: _PendingReservation, at: GpuAmount) -> PolicyInput:
    """`item`'s policy input at GPU usage `at`."""
    return {**item.policy_input, "gpu_usage": at.to_document()}


def _asks_beyond_headroom(
    items: list[_PendingReservation],
    known: list[dict[GpuAmount, Decision]],
    working: Ledger,
    running: GpuAmount,
) -> list[tuple[int, GpuAmount]]:
    """The pods to decide beyond their headroom, each at the usage it meets if the pods before it
    that are known or alike to be admitted are: (index in `items`, usage)."""
    overlay: dict[str, GpuAmount] = {}
    at_each = running
    asks: list[tuple[int, GpuAmount]] = []
    for index, item in enumerate(items):
        reserved = working.reservations.get(item.key)
        held = overlay.get(item.key, reserved.gpus if reserved is not None else None)
        at = at_each if held is None else at_each - held
        decided = known[index].get(at)
        if decided is not None:
            if decided.allowed and decided.gpu_demand.total > 0:
                at_each = at + item.demand
                overlay[item.key] = item.demand
            continue
        if decides_alike(item.decision, at):
            at_each = at + item.demand
            overlay[item.key] = item.demand
        else:
            asks.append((index, at))
    return asks


def _asks_of_round(
    items: list[_PendingReservation],
    known: list[dict[GpuAmount, Decision]],
    working: Ledger,
    running: GpuAmount,
    *,
    if_none_admitted: bool,
) -> list[tuple[int, GpuAmount]]:
    """What a round asks: each undecided item against the usage left if every earlier item of the
    round is admitted, and (`if_none_admitted`, or the first item) if none is."""
    overlay: dict[str, GpuAmount] = {}
    if_all = running
    asks: list[tuple[int, GpuAmount]] = []
    for index, item in enumerate(items):
        reserved = working.reservations.get(item.key)
        before = reserved.gpus if reserved is not None else None
        held = overlay.get(item.key, before)
        if_none = running if before is None else running - before
        at_all = if_all if held is None else if_all - held
        for at in dict.fromkeys((at_all, if_none) if if_none_admitted or index == 0 else (at_all,)):
            if at not in known[index] and not decides_alike(item.decision, at):
                asks.append((index, at))
        if_all = at_all + item.demand
        overlay[item.key] = item.demand
    return asks


class GpuReservations:
    """The tenants' GPU reservations of one webhook replica: the batcher, its decisions, its writes."""

    def __init__(
        self,
        ledgers: LedgerAccess,
        sums: LedgerSums,
        evaluations: Evaluations,
        *,
        reservation_seconds: float = RESERVATION_TTL_SECONDS,
        on_decided: Callable[[Decision], None] = lambda decision: None,
    ):
        """`sums`: what the ledgers sum to (shared with the facts, which put the usage into the
        policy input). `on_decided` is told each batch's final decisions (the findings metrics)."""
        self.ledgers = ledgers
        self.evaluations = evaluations
        self.reservation_seconds = reservation_seconds
        self.on_decided = on_decided
        self._pending: dict[str, list[_PendingReservation]] = {}
        self._committing: set[str] = set()
        self.sums = sums
        self._tasks: set[asyncio.Task[None]] = set()

    async def reserve(
        self,
        request: AdmissionRequest,
        policy_input: PolicyInput,
        tenant: str,
        trace: DecisionTrace,
        decision: Decision,
        *,
        key: str,
    ) -> AdmissionResponse:
        """Reserve the GPUs of an admitted pod (under `key`, its RequestClass.reservation_key) by
        compare-and-swap on its tenant's ledger; a lost race
        decides again with the new usage (never two admissions spending the same GPUs).

        Group commit: the GPU pods of one tenant that arrive while a write is under way wait for the
        next batch; a batch is decided against a running ledger (each pod against what the pods
        before it leave) and written in one compare-and-swap. A Job's thousand pods cost a few
        writes and, within the quota's headroom, no further evaluation."""
        future: asyncio.Future[AdmissionResponse] = asyncio.get_running_loop().create_future()
        decided = GpuAmount.from_document(policy_input.get("gpu_usage"))
        self._pending.setdefault(tenant, []).append(
            _PendingReservation(
                request, policy_input, key, trace, future, decision, decided, decision.gpu_demand
            )
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
    ) -> tuple[Ledger, list[AdmissionResponse], GpuAmount, int]:
        """Decide `batch` in order against `ledger`: each pod against the usage the pods before it
        leave (the same answers as deciding them one after the other), and reserve for the admitted
        ones in a working copy of the ledger. Returns that copy, the responses, its usage and size."""
        tenant = ledger.tenant
        working = ledger
        size = self.sums.size(ledger)
        running = self.sums.usage(ledger)
        known: list[dict[GpuAmount, Decision]] = [{item.decided_usage: item.decision} for item in batch]
        responses: list[AdmissionResponse] = []
        refused = False  # at the quota's edge: rounds also ask what is left if no earlier pod is admitted
        while len(responses) < len(batch):
            index = len(responses)
            item = batch[index]
            if item.response.done():
                # Its caller gave up at the deadline and refused: reserving for it now would hold
                # GPUs for a pod the apiserver never creates.
                reason = "the request's deadline passed before its turn"
                responses.append(refusals.engine_unavailable(reason).response(item.request))
                continue
            held = working.reservations.get(item.key)
            at = running if held is None else running - held.gpus
            decision = await self._decision_at(
                at,
                items=batch[index:],
                known=known[index:],
                working=working,
                running=running,
                refused=refused,
            )
            item.trace.decision = decision
            if not decision.allowed or decision.gpu_demand.total == 0:
                refused = refused or not decision.allowed
                responses.append(build_response(request=item.request, decision=decision))
                continue
            demand = decision.gpu_demand
            candidate, added = self._with_reservation(working, item, demand)
            if size + added > LEDGER_MAX_BYTES:
                LEDGER_FULL.labels(tenant).inc()
                responses.append(
                    refusals.ledger_full(tenant, len(working.reservations)).response(item.request)
                )
                continue
            running = at + demand
            size, working = size + added, candidate
            responses.append(build_response(request=item.request, decision=decision))
        return working, responses, running, size

    async def _decision_at(
        self,
        at: GpuAmount,
        *,
        items: list[_PendingReservation],
        known: list[dict[GpuAmount, Decision]],
        working: Ledger,
        running: GpuAmount,
        refused: bool,
    ) -> Decision:
        """The decision of `items[0]` at usage `at`.

        It is known when it was made with exactly that usage, or when the policy said the pod fits up
        to a headroom the usage stays within (the common case: no evaluation at all, only the
        comparison the policy's numbers allow). At the quota's edge, each round asks, in one
        evaluation, for the pods not yet decided, against two usages each: the one left if all the
        pods before it in the round are admitted, and, once a pod of the batch was refused (the
        quota's edge), also the one left if none is: a run of admissions, then a run of refusals,
        each settle in one round. A round always settles at least its first pod, usually all."""
        item = items[0]
        decision = known[0].get(at)
        if decision is None and decides_alike(item.decision, at):
            decision = item.decision
        if decision is None and item.decision.gpu_headroom is not None:
            await self._decide_beyond_headroom(items, known, working, running)
            decision = known[0].get(at)
        if decision is None:
            await self._decide_round(items, known, working, running, if_none_admitted=refused)
            decision = known[0][at]
        return decision

    def _with_reservation(
        self, working: Ledger, item: _PendingReservation, demand: GpuAmount
    ) -> tuple[Ledger, int]:
        """`working` with `item`'s reservation of `demand`, and the bytes the reservation adds."""
        metadata = (item.request.object or {}).get("metadata", {})
        pod = pod_key(item.request.namespace or "", metadata.get("name") or item.request.name or "")
        candidate = with_reservation(
            working, item.key, demand, now=now(), pod=pod, ttl=self.reservation_seconds
        )
        return candidate, encoded_size(item.key, candidate.reservations[item.key])

    async def _decide_beyond_headroom(
        self,
        items: list[_PendingReservation],
        known: list[dict[GpuAmount, Decision]],
        working: Ledger,
        running: GpuAmount,
    ) -> None:
        """At the quota's edge: the pods beyond their headroom are refused by the quota rule and
        leave the usage as it is, so each one's usage is known in advance; they are decided side by
        side (the policy's message quotes that usage). Should one be admitted after all (the rule in
        warn mode), the pods after it are decided again by the next round."""
        asks = _asks_beyond_headroom(items, known, working, running)
        decisions = await asyncio.gather(
            *(self.evaluations.decide(_at_usage(items[i], at)) for i, at in asks)
        )
        for (index, at), decision in zip(asks, decisions, strict=True):
            known[index][at] = decision

    async def _decide_round(
        self,
        items: list[_PendingReservation],
        known: list[dict[GpuAmount, Decision]],
        working: Ledger,
        running: GpuAmount,
        *,
        if_none_admitted: bool,
    ) -> None:
        """One evaluation for the undecided `items`: each against the usage left if every earlier
        item of the round is admitted, and (`if_none_admitted`) if none is; the answers go into
        `known`."""
        asks = _asks_of_round(items, known, working, running, if_none_admitted=if_none_admitted)
        if not asks:
            return
        decisions = await self.evaluations.decide_all([_at_usage(items[i], at) for i, at in asks])
        for (index, at), decision in zip(asks, decisions, strict=True):
            known[index][at] = decision

    async def _commit(self, tenant: str, batch: list[_PendingReservation]) -> None:
        ledgers = self.ledgers
        ledger = ledgers.cached(tenant)
        for attempt in range(MAX_LEDGER_ATTEMPTS):
            working, responses, running, size = await self._decide_batch(ledger, batch)
            if working is not ledger:
                try:
                    working = await ledgers.write_async(working)
                    # The next batch starts from the written ledger: its sums are known already.
                    self.sums.written(working, at=running, size=size)
                except LedgerConflictError:
                    LEDGER_CONFLICTS.labels(tenant).inc()
                    log.info(
                        "ledger of %s changed (attempt %d): deciding %d pods again",
                        tenant,
                        attempt + 1,
                        len(batch),
                    )
                    ledger = await ledgers.fresh_async(tenant)
                    continue
            if working is not ledger:
                abandoned = [i.key for i in batch if i.response.done()]
                await _release_abandoned(ledgers, tenant, abandoned, working)
            for item, response in zip(batch, responses, strict=True):
                if item.trace.decision is not None:
                    self.on_decided(item.trace.decision)
                if not item.response.done():  # its caller may have given up at the deadline
                    item.response.set_result(response)
            return
        busy = refusals.ledger_busy(tenant, MAX_LEDGER_ATTEMPTS)
        for item in batch:
            if not item.response.done():
                item.response.set_result(busy.response(item.request))


async def _release_abandoned(ledgers: LedgerAccess, tenant: str, keys: list[str], written: Ledger) -> None:
    """Drop at once the reservations of requests whose caller gave up at the deadline while their
    batch was being written: the apiserver refused those pods, so their GPUs must not be held."""
    if not (keys := [k for k in keys if k in written.reservations]):
        return
    ledger = written
    for _ in range(MAX_LEDGER_ATTEMPTS):
        kept = {k: v for k, v in ledger.reservations.items() if k not in keys}
        if len(kept) == len(ledger.reservations):
            return
        try:
            await ledgers.write_async(ledger.model_copy(update={"reservations": kept}))
            return
        except LedgerConflictError:
            ledger = await ledgers.fresh_async(tenant)
    log.warning("could not release %d abandoned reservations of %s; they expire", len(keys), tenant)
