"""Serving one admission request, through rooms that each do one job, entered once each in order:
gather its facts (webhook.facts), ask the policy engine (webhook.evaluation, behind decision reuse),
reserve a GPU pod's GPUs (webhook.reservations), build the response (webhook.admission). The rooms
are built and handed over by webhook.replica; the server builds none."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from labgate.core.decisions import Decision
from labgate.core.metrics import RULE_FINDINGS
from webhook import refusals
from webhook.admission import build_mutation_response, build_response
from webhook.decision_reuse import DecisionReuse
from webhook.evaluation import Evaluator
from webhook.facts import FactGatherer, Gathered, InventoryState
from webhook.ledger_sums import LedgerSums
from webhook.policy_input import PolicyInput
from webhook.references import TooManyReferencesError
from webhook.reservation_batch import GPU_QUOTA_RULE
from webhook.reservations import GpuReservations
from webhook.review import AdmissionRequest, AdmissionResponse
from webhook.usage_recount import Recount

__all__ = ["AdmissionServer", "Answer", "InventoryState", "WatchedFacts"]

log = logging.getLogger(__name__)


def count_findings(decision: Decision) -> None:
    """The findings of a final decision, in the metrics (and dry-run ones in the log)."""
    tenant = decision.tenant or ""
    for finding in [*decision.denials, *decision.warnings, *decision.dry_run]:
        RULE_FINDINGS.labels(finding.rule, finding.mode, tenant).inc()
    for finding in decision.dry_run:
        log.info("dry-run finding for tenant %s: %s", tenant, finding.message)


class UsageRecountSource(Protocol):
    """A tenant's GPU usage counted from the API (webhook.usage_recount.UsageRecount)."""

    async def recount(self, tenant: str) -> Recount | None: ...

    async def recount_after_release(self, earlier: Recount) -> Recount | None: ...


def _is_refused_for_quota_alone(decision: Decision) -> bool:
    """Refused, and by the GPU quota only: a lower usage could admit it."""
    rules = {finding.rule for finding in decision.denials}
    return not decision.allowed and rules == {GPU_QUOTA_RULE}


def _is_refused_for_unlisted_pods(decision: Decision, recount: Recount) -> bool:
    """Refused for the quota alone at `recount`, and admitted without its reservations of pods the
    API did not list (the policy's headroom says so): one of them may be a pod that is gone."""
    headroom = decision.gpu_headroom
    return (
        _is_refused_for_quota_alone(decision)
        and bool(recount.unlisted)
        and headroom is not None
        and (recount.usage - recount.unlisted).fits_within(headroom)
    )


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered one request, with what the decision log, the metrics and the
    PolicyReports say of it: the tenant that owns the request (None outside any, or when the answer
    came before its facts) and the policy's decision it answers by (None when there was none: a
    refusal of labgate's own, a mutation)."""

    response: AdmissionResponse
    tenant: str | None = None
    decision: Decision | None = None


class Synced(Protocol):
    """A watch-fed cache: whether it has listed what it watches."""

    @property
    def is_synced(self) -> bool: ...


@dataclass(frozen=True)
class WatchedFacts:
    """The watch-fed caches a request's facts come from (the inventory, the ledgers, the restricted
    secrets): whether each has synced, and `age()`, how long ago the API last proved the stalest one
    current; past `max_age` every request is refused with [facts-stale]."""

    inventory: InventoryState
    ledgers: Synced | None = None
    secrets: Synced | None = None
    age: Callable[[], float] | None = None
    max_age: float = float("inf")


class AdmissionServer:
    """One replica's answer to the apiserver: a request through the rooms it is handed (built by
    webhook.replica), each entered once, in order.

    `watched` says whether the watch-fed facts can be trusted; `facts` gathers the policy input;
    `reuse` decides it (a Job's copies reuse a decision made moments before) through `evaluator`,
    the evaluation door; `reservations` reserve an admitted GPU pod's GPUs (None: no ledger); a pod
    refused for the GPU quota alone is decided again at the usage `usage_recount` counts from the
    live pods."""

    def __init__(
        self,
        *,
        watched: WatchedFacts,
        facts: FactGatherer,
        reuse: DecisionReuse,
        evaluator: Evaluator,
        reservations: GpuReservations | None,
        usage_recount: UsageRecountSource | None = None,
    ):
        self.watched, self.facts, self.reuse, self.evaluator = watched, facts, reuse, evaluator
        self.reservations, self.usage_recount = reservations, usage_recount

    @property
    def inventory(self) -> InventoryState:
        return self.watched.inventory

    @property
    def caches_synced(self) -> dict[str, bool]:
        watched = self.watched
        return {
            "inventory": watched.inventory.is_synced,
            "ledgers": watched.ledgers is None or watched.ledgers.is_synced,
            "secrets": watched.secrets is None or watched.secrets.is_synced,
            "facts_fresh": self.stale_facts_age() is None,
        }

    def stale_facts_age(self) -> float | None:
        """The age of the watch-fed facts when it is past the bound, else None."""
        if self.watched.age is None:
            return None
        age = self.watched.age()
        return age if age > self.watched.max_age else None

    async def _gather(self, request: AdmissionRequest) -> Gathered | Answer:
        """The request's facts and tenant, or the refusal when they cannot be trusted or read:
        facts too old, or more objects to read than the bound."""
        if (age := self.stale_facts_age()) is not None:
            return Answer(refusals.facts_stale(age=age, bound=self.watched.max_age).response(request))
        try:
            return await self.facts.gather(request)
        except TooManyReferencesError as err:
            refusal = refusals.too_many_references(
                kind=request.kind.kind,
                name=refusals.request_name(request),
                counts=err.references.counts(),
                bound=err.bound,
            )
            return Answer(refusal.response(request), self.inventory.tenant_of(request.namespace or ""))

    async def validate(self, request: AdmissionRequest) -> Answer:
        """The validating webhook's answer, with the tenant and the policy's decision."""
        gathered = await self._gather(request)
        if isinstance(gathered, Answer):
            return gathered
        policy_input, tenant, request_class = gathered
        # Every request is decided at once against the cached usage, side by side with the others;
        # only a pod that this admits and that asks for GPUs waits for its tenant's next ledger batch.
        decision = await self.reuse.decide(policy_input)
        if tenant and _is_refused_for_quota_alone(decision) and request_class.takes_gpus_now:
            policy_input, decision = await self._decide_at_live_count(tenant, policy_input, decision)
        reserves = decision.allowed and decision.gpu_demand.total > 0 and not request.dry_run
        if tenant and reserves and request_class.takes_gpus_now:
            if self.reservations is None:
                refusal = refusals.engine_unavailable("no GPU quota ledger to reserve in")
                return Answer(refusal.response(request), tenant, decision)
            key = request_class.reservation_key
            reserved = await self.reservations.reserve(request, policy_input, tenant, decision, key=key)
            return Answer(reserved.response, tenant, reserved.decision)
        count_findings(decision)
        return Answer(build_response(request=request, decision=decision), tenant, decision)

    async def _decide_at_live_count(
        self, tenant: str, policy_input: PolicyInput, decision: Decision
    ) -> tuple[PolicyInput, Decision]:
        """A pod refused for the quota alone, decided again at the usage counted from the API: the
        ledger may still count pods whose deletion the API has finished (webhook.usage_recount).
        Its reservation, if admitted now, is a compare-and-swap on the ledger version counted at.
        Still refused only by reservations of pods the API did not list, it is counted again once the
        ledger changes (the reconciler releases a pod it saw go at once), within the count's bound."""
        if self.usage_recount is None or self.reservations is None:
            return policy_input, decision
        decided = policy_input, decision
        recount = await self.usage_recount.recount(tenant)
        while recount is not None:
            decided = await self._decide_at(recount, policy_input, decision, self.reservations.sums)
            if not _is_refused_for_unlisted_pods(decided[1], recount):
                break
            recount = await self.usage_recount.recount_after_release(recount)
        return decided

    async def _decide_at(
        self, recount: Recount, policy_input: PolicyInput, decision: Decision, sums: LedgerSums
    ) -> tuple[PolicyInput, Decision]:
        """The request decided at the usage `recount` counted (that ledger version decides at it)."""
        if recount.usage.to_document() == policy_input.get("gpu_usage"):
            return policy_input, decision
        sums.correct(recount.ledger, recount.usage)
        log.info(
            "tenant %s: the ledger counts %s, its live pods %s",
            recount.ledger.tenant,
            policy_input.get("gpu_usage"),
            recount.usage,
        )
        at_count: PolicyInput = {**policy_input, "gpu_usage": recount.usage.to_document()}
        return at_count, await self.evaluator.decide(at_count)

    async def mutate(self, request: AdmissionRequest) -> Answer:
        """The mutating webhook's answer, with the tenant (a mutation is no decision to record)."""
        gathered = await self._gather(request)
        if isinstance(gathered, Answer):
            return gathered
        mutation = await self.reuse.mutate(gathered.policy_input)
        return Answer(build_mutation_response(request=request, mutation=mutation), gathered.tenant)
