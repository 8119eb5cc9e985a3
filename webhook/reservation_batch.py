"""What a batch of pending GPU reservations decides at a given usage (pure: no I/O, no awaiting).

A tenant's GPU pods that wait for its next ledger write are decided in order against a running
ledger: each pod against the usage the pods before it leave (the same answers as deciding them one
after the other), and the admitted ones reserved in a working copy of the ledger. Within the
headroom the policy returned no further evaluation is needed (`decides_alike`); at the quota's edge
a few, which `BatchDecision` names (`asks`) and learns (`learn`) without making them: the group
commit (webhook.reservations) asks the evaluation door and writes the ledger. Usages are
`GpuAmount`s (hashable: the decisions known per usage are keyed by them).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from labgate.core.decisions import Decision
from labgate.gpu_accounting.ledger import (
    LEDGER_MAX_BYTES,
    GpuAmount,
    Ledger,
    encoded_size,
    pod_key,
    with_reservation,
)
from webhook import refusals
from webhook.admission import build_response
from webhook.policy_input import PolicyInput
from webhook.review import AdmissionRequest, AdmissionResponse

GPU_QUOTA_RULE = "gpu-quota"


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


@dataclass(frozen=True)
class PendingReservation:
    """A GPU pod waiting for its tenant's next ledger batch: admitted by a first decision against the
    cached usage, it is decided again (in one evaluation with the rest of its batch) against the usage
    the pods before it leave, unless that is the usage it was first decided with."""

    request: AdmissionRequest
    policy_input: PolicyInput
    key: str  # its reservation's key in the ledger (RequestClass.reservation_key)
    decision: Decision
    decided_usage: GpuAmount
    demand: GpuAmount


def at_usage(item: PendingReservation, at: GpuAmount) -> PolicyInput:
    """`item`'s policy input at GPU usage `at`."""
    return {**item.policy_input, "gpu_usage": at.to_document()}


def asks_beyond_headroom(
    items: list[PendingReservation],
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


def asks_of_round(
    items: list[PendingReservation],
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


class Asks(NamedTuple):
    """The evaluations a batch waits for: (index in the batch, usage) each. `side_by_side`: one
    evaluation each (the pods beyond their headroom, whose usages are known in advance), else one
    evaluation for all (a round)."""

    at: list[tuple[int, GpuAmount]]
    side_by_side: bool


class Settled(NamedTuple):
    """A pod of the batch answered: its response and the decision it was answered by."""

    response: AdmissionResponse
    decision: Decision


Outcome = Literal["admitted", "refused", "ledger-full"]


class BatchDecision:
    """One batch decided in order against one version of the tenant's ledger: which pod is next,
    the usage it meets, what its decision waits for, and the working ledger with the reservations of
    the pods admitted so far. A lost compare-and-swap starts a new one from the ledger read again."""

    def __init__(
        self,
        ledger: Ledger,
        items: list[PendingReservation],
        *,
        usage: GpuAmount,
        size: int,
        reservation_seconds: float,
    ):
        """`usage` and `size`: what `ledger` sums to (webhook.ledger_sums.LedgerSums)."""
        self.items = items
        self.working = ledger
        self.running = usage
        self.size = size
        self.reservation_seconds = reservation_seconds
        self.settled: list[Settled] = []
        # Per pod: the decisions known at each usage, its first decision to begin with.
        self.known: list[dict[GpuAmount, Decision]] = [{item.decided_usage: item.decision} for item in items]
        # Once a pod was refused (the quota's edge), rounds also ask what is left if no earlier pod is.
        self._refused = False
        # What was asked for the next pod: the pods beyond their headroom, a round.
        self._asked_beyond_headroom = self._asked_round = False

    @property
    def is_done(self) -> bool:
        return len(self.settled) == len(self.items)

    @property
    def next(self) -> PendingReservation:
        """The pod to decide next."""
        return self.items[len(self.settled)]

    @property
    def at(self) -> GpuAmount:
        """The usage the next pod meets: what the pods before it leave, less its own reservation."""
        held = self.working.reservations.get(self.next.key)
        return self.running if held is None else self.running - held.gpus

    def known_decision(self) -> Decision | None:
        """The next pod's decision at its usage when it is known without an evaluation: made with
        exactly that usage, or the policy said the pod fits up to a headroom the usage stays within
        (the common case: only the comparison the policy's numbers allow)."""
        index, at = len(self.settled), self.at
        decision = self.known[index].get(at)
        if decision is None and decides_alike(self.items[index].decision, at):
            decision = self.items[index].decision
        return decision

    def asks(self) -> Asks:
        """What the next pod's decision waits for. A pod with a headroom first: the pods beyond their
        headroom are refused by the quota rule and leave the usage as it is, so each one's usage is
        known in advance and they are decided side by side (the policy's message quotes that usage);
        should one be admitted after all (the rule in warn mode), a round decides the pods after it.
        A round asks for the pods not yet decided, against two usages each: the one left if all the
        pods before it in the round are admitted, and, once a pod of the batch was refused (the
        quota's edge), also the one left if none is: a run of admissions, then a run of refusals,
        each settle in one round. A round always settles at least its first pod, usually all."""
        index = len(self.settled)
        items, known = self.items[index:], self.known[index:]
        if not self._asked_beyond_headroom and items[0].decision.gpu_headroom is not None:
            self._asked_beyond_headroom = True
            asks = asks_beyond_headroom(items, known, self.working, self.running)
            return Asks([(index + i, at) for i, at in asks], side_by_side=True)
        if self._asked_round:
            raise LookupError(f"a round left {items[0].key} undecided at {self.at}")
        self._asked_round = True
        asks = asks_of_round(items, known, self.working, self.running, if_none_admitted=self._refused)
        return Asks([(index + i, at) for i, at in asks], side_by_side=False)

    def inputs(self, asks: Asks) -> list[PolicyInput]:
        """The policy inputs `asks` are evaluated with, in its order."""
        return [at_usage(self.items[index], at) for index, at in asks.at]

    def learn(self, asks: Asks, decisions: list[Decision]) -> None:
        """The answers to `asks`, in its order."""
        for (index, at), decision in zip(asks.at, decisions, strict=True):
            self.known[index][at] = decision

    def abandon(self) -> None:
        """The next pod's caller gave up at the deadline and refused: reserving for it now would
        hold GPUs for a pod the apiserver never creates."""
        item = self.next
        reason = "the request's deadline passed before its turn"
        self._settle(refusals.engine_unavailable(reason).response(item.request), item.decision)

    def settle(self, decision: Decision, *, now: float) -> Outcome:
        """Answer the next pod by `decision` (its decision at its usage): an admitted GPU pod is
        reserved in the working ledger, unless its reservation would take the ledger past its size."""
        item, at = self.next, self.at
        if not decision.allowed or decision.gpu_demand.total == 0:
            self._refused = self._refused or not decision.allowed
            self._settle(build_response(request=item.request, decision=decision), decision)
            return "admitted" if decision.allowed else "refused"
        demand = decision.gpu_demand
        candidate, added = self._with_reservation(item, demand, now=now)
        if self.size + added > LEDGER_MAX_BYTES:
            full = refusals.ledger_full(self.working.tenant, len(self.working.reservations))
            self._settle(full.response(item.request), decision)
            return "ledger-full"
        self.running = at + demand
        self.size, self.working = self.size + added, candidate
        self._settle(build_response(request=item.request, decision=decision), decision)
        return "admitted"

    def _settle(self, response: AdmissionResponse, decision: Decision) -> None:
        self.settled.append(Settled(response, decision))
        self._asked_beyond_headroom = self._asked_round = False

    def _with_reservation(
        self, item: PendingReservation, demand: GpuAmount, *, now: float
    ) -> tuple[Ledger, int]:
        """The working ledger with `item`'s reservation of `demand`, and the bytes it adds."""
        metadata = (item.request.object or {}).get("metadata", {})
        pod = pod_key(item.request.namespace or "", metadata.get("name") or item.request.name or "")
        candidate = with_reservation(
            self.working, item.key, demand, now=now, pod=pod, ttl=self.reservation_seconds
        )
        return candidate, encoded_size(item.key, candidate.reservations[item.key])
