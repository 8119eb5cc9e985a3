"""GPU reservations: a tenant's admitted GPU pods written into its quota ledger by compare-and-swap.

Group commit: the GPU pods of one tenant that arrive while a write is under way wait for the next
batch; the batch is decided (webhook.reservation_batch.BatchDecision: what it decides at a usage,
pure) with the evaluations it asks for, and written in one compare-and-swap; a lost race re-reads
the ledger and decides the batch again. This room is the asynchronous part: the waiting pods, the
evaluations, the writes.

The ledger store and the evaluation door are given (`LedgerAccess`, `Evaluations`): this room
imports no door.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from labgate.core.decisions import Decision
from labgate.core.metrics import LEDGER_CONFLICTS, LEDGER_FULL
from labgate.gpu_accounting.ledger import (
    RESERVATION_TTL_SECONDS,
    GpuAmount,
    Ledger,
    LedgerConflictError,
    now,
)
from webhook import refusals
from webhook.ledger_sums import LedgerAccess, LedgerSums
from webhook.policy_input import PolicyInput
from webhook.reservation_batch import Asks, BatchDecision, PendingReservation, Settled
from webhook.review import AdmissionRequest

log = logging.getLogger(__name__)

# A lost compare-and-swap re-reads the ledger and decides again; this many times at most.
MAX_LEDGER_ATTEMPTS = 8


class Evaluations(Protocol):
    """What a batch asks of the evaluation door (webhook.evaluation.Evaluator)."""

    async def decide(self, policy_input: PolicyInput) -> Decision: ...

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]: ...


@dataclass
class _Waiting:
    """A pending reservation and its caller, who waits for the response (and may give up at the
    deadline: then the response is done before its batch answers it)."""

    reservation: PendingReservation
    response: asyncio.Future[Settled]


class GpuReservations:
    """The tenants' GPU reservations of one webhook replica: the batcher (the pods waiting for their
    tenant's next batch), the evaluations a batch asks for, the ledger writes."""

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
        self._pending: dict[str, list[_Waiting]] = {}
        self._committing: set[str] = set()
        self.sums = sums
        self._tasks: set[asyncio.Task[None]] = set()

    async def reserve(
        self,
        request: AdmissionRequest,
        policy_input: PolicyInput,
        tenant: str,
        decision: Decision,
        *,
        key: str,
    ) -> Settled:
        """Reserve the GPUs of an admitted pod (under `key`, its RequestClass.reservation_key) by
        compare-and-swap on its tenant's ledger; a lost race
        decides again with the new usage (never two admissions spending the same GPUs).

        Group commit: the GPU pods of one tenant that arrive while a write is under way wait for the
        next batch; a batch is decided against a running ledger (each pod against what the pods
        before it leave) and written in one compare-and-swap. A Job's thousand pods cost a few
        writes and, within the quota's headroom, no further evaluation.

        Returns the response and the decision it answers by: the batch's, at the usage the pods
        before it left (the first decision when that usage is the one it was made at)."""
        future: asyncio.Future[Settled] = asyncio.get_running_loop().create_future()
        decided = GpuAmount.from_document(policy_input.get("gpu_usage"))
        pending = PendingReservation(request, policy_input, key, decision, decided, decision.gpu_demand)
        self._pending.setdefault(tenant, []).append(_Waiting(pending, future))
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

    async def _decide_batch(self, ledger: Ledger, batch: list[_Waiting]) -> BatchDecision:
        """Decide `batch` in order against `ledger` (webhook.reservation_batch.BatchDecision), making
        the evaluations it asks for."""
        decided = BatchDecision(
            ledger,
            [waiting.reservation for waiting in batch],
            usage=self.sums.usage(ledger),
            size=self.sums.size(ledger),
            reservation_seconds=self.reservation_seconds,
        )
        while not decided.is_done:
            waiting = batch[len(decided.settled)]
            if waiting.response.done():  # its caller gave up at the deadline, and refused
                decided.abandon()
                continue
            decision = decided.known_decision()
            while decision is None:
                asks = decided.asks()
                decided.learn(asks, await self._evaluate(decided, asks))
                decision = decided.known_decision()
            if decided.settle(decision, now=now()) == "ledger-full":
                LEDGER_FULL.labels(ledger.tenant).inc()
        return decided

    async def _evaluate(self, decided: BatchDecision, asks: Asks) -> list[Decision]:
        """The decisions `asks` waits for: side by side, one evaluation each, or all in one."""
        inputs = decided.inputs(asks)
        if asks.side_by_side:
            return list(await asyncio.gather(*(self.evaluations.decide(i) for i in inputs)))
        return await self.evaluations.decide_all(inputs) if inputs else []

    async def _commit(self, tenant: str, batch: list[_Waiting]) -> None:
        ledgers = self.ledgers
        ledger = ledgers.cached(tenant)
        decided: BatchDecision | None = None
        for attempt in range(MAX_LEDGER_ATTEMPTS):
            decided = await self._decide_batch(ledger, batch)
            working = decided.working
            if working is not ledger:
                try:
                    working = await ledgers.write_async(working)
                    # The next batch starts from the written ledger: its sums are known already.
                    self.sums.written(working, at=decided.running, size=decided.size)
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
                abandoned = [i.reservation.key for i in batch if i.response.done()]
                await _release_abandoned(ledgers, tenant, abandoned, working)
            for item, settled in zip(batch, decided.settled, strict=True):
                self.on_decided(settled.decision)
                if not item.response.done():  # its caller may have given up at the deadline
                    item.response.set_result(settled)
            return
        busy = refusals.ledger_busy(tenant, MAX_LEDGER_ATTEMPTS)
        last = decided.settled if decided is not None else []
        for item, settled in zip(batch, last, strict=True):
            if not item.response.done():  # refused, with the decision of the last attempt
                item.response.set_result(Settled(busy.response(item.reservation.request), settled.decision))


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
