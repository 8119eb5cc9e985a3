"""What a batch of pending GPU reservations decides at a given usage (webhook/reservation_batch.py),
alone: no event loop, no ledger store. The evaluations it asks for are answered here, synchronously,
by the quota rule's stand-in of tests/unit/gpu/test_gpu_batch.py."""

from __future__ import annotations

import pytest

from labgate.core.decisions import Decision
from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.ledger import LEDGER_MAX_BYTES, Ledger
from tests.unit.gpu.test_gpu_batch import TENANT, QuotaPolicy, request, sequential
from webhook.admission import build_policy_input
from webhook.policy_input import PolicyInput
from webhook.reservation_batch import BatchDecision, Outcome, PendingReservation, decides_alike, holds_at

NOTHING = GpuAmount(total=0, by_model={})


def pending(index: int, model: str, gpus: int, policy: QuotaPolicy, at: GpuAmount) -> PendingReservation:
    """A pod admitted by a first decision at the cached usage `at`, waiting for its batch."""
    req = request(index, model, gpus)
    policy_input: PolicyInput = {**build_policy_input(request=req), "gpu_usage": at.to_document()}
    decision = policy._decide(policy_input)
    return PendingReservation(req, policy_input, f"uid-{index}", decision, at, decision.gpu_demand)


def decide(
    batch: BatchDecision, policy: QuotaPolicy, *, now: float = 0.0
) -> tuple[list[Outcome], list[bool]]:
    """Decide `batch` to its end, each ask answered by `policy`: the outcomes, and for each ask
    whether it was side by side."""
    outcomes: list[Outcome] = []
    side_by_side: list[bool] = []
    while not batch.is_done:
        decision = batch.known_decision()
        while decision is None:
            asks = batch.asks()
            side_by_side.append(asks.side_by_side)
            batch.learn(asks, [policy._decide(i) for i in batch.inputs(asks)])
            decision = batch.known_decision()
        outcomes.append(batch.settle(decision, now=now))
    return outcomes, side_by_side


def batch_of(
    pods: list[tuple[str, int]], policy: QuotaPolicy, *, ledger: Ledger | None = None, size: int = 0
) -> BatchDecision:
    """The batch of `pods`, each first decided at the empty usage (the cached one)."""
    items = [pending(i, model, count, policy, NOTHING) for i, (model, count) in enumerate(pods)]
    return BatchDecision(
        ledger or Ledger(tenant=TENANT, resource_version="1"),
        items,
        usage=NOTHING,
        size=size,
        reservation_seconds=10.0,
    )


def test_within_the_headroom_a_batch_asks_for_nothing() -> None:
    policy = QuotaPolicy(16, {"h100": 8})
    batch = batch_of([("h100", 2)] * 4, policy)
    first = policy.evaluations
    outcomes, asked = decide(batch, policy)
    assert outcomes == ["admitted"] * 4
    assert asked == []
    assert policy.evaluations == first  # the first decisions stand
    assert batch.running == GpuAmount(total=8, by_model={"h100": 8})
    assert sorted(batch.working.reservations) == [f"uid-{i}" for i in range(4)]


def test_at_the_quota_s_edge_the_refused_pods_are_decided_side_by_side_at_their_own_usage() -> None:
    policy = QuotaPolicy(8, {})
    batch = batch_of([("h100", 4)] * 4, policy)
    outcomes, asked = decide(batch, policy)
    assert outcomes == ["admitted", "admitted", "refused", "refused"]
    assert asked == [True]  # one ask: the two pods beyond their headroom, each at usage 8
    refused = batch.settled[2].decision
    assert [f.message for f in refused.denials] == ["[gpu-quota] uses 8"]
    assert not batch.settled[3].response.allowed
    assert sorted(batch.working.reservations) == ["uid-0", "uid-1"]


@pytest.mark.parametrize(
    ("pods", "total", "models"),
    [
        ([("h100", 4)] * 4, 8, {}),
        ([("h100", 3), ("a100", 6), ("h100", 2), ("a100", 1)], 8, {"h100": 4}),
        ([("h100", 8), ("h100", 1), ("a100", 1)], 8, {}),
        ([("h100", 1)] * 10, 5, {"h100": 3}),
    ],
    ids=["one-model", "per-model-limit", "full-at-once", "long-burst"],
)
@pytest.mark.parametrize("headroom", [True, False], ids=["headroom", "rounds"])
def test_a_batch_decides_as_if_one_after_the_other(
    pods: list[tuple[str, int]], total: int, models: dict[str, int], *, headroom: bool
) -> None:
    policy = QuotaPolicy(total, models, headroom=headroom)
    batch = batch_of(pods, policy)
    decide(batch, policy)
    assert [s.response.allowed for s in batch.settled] == sequential(pods, total, models)
    admitted = [count for (_, count), s in zip(pods, batch.settled, strict=True) if s.response.allowed]
    assert batch.running.total == sum(admitted) <= total


def test_without_a_headroom_a_round_asks_for_all_the_pods_at_once() -> None:
    policy = QuotaPolicy(8, {}, headroom=False)
    batch = batch_of([("h100", 2)] * 3, policy)
    asks = batch.asks()
    assert not asks.side_by_side
    # The first pod at what the ledger says; each next one at what the pods before it leave.
    assert [(i, at.total) for i, at in asks.at] == [(1, 2), (2, 4)]  # the first's is known already
    batch.learn(asks, [policy._decide(i) for i in batch.inputs(asks)])
    with pytest.raises(LookupError):  # a round settles its first pod, or the batch cannot be decided
        batch.asks()


def test_a_reservation_the_ledger_cannot_hold_is_refused_and_not_reserved() -> None:
    policy = QuotaPolicy(16, {})
    batch = batch_of([("h100", 2)], policy, size=LEDGER_MAX_BYTES)
    ledger = batch.working
    outcomes, _ = decide(batch, policy)
    assert outcomes == ["ledger-full"]
    status = batch.settled[0].response.status
    assert status is not None
    assert status.message.startswith("[gpu-ledger-full]")
    assert batch.working is ledger
    assert batch.running == NOTHING


def test_a_pod_whose_caller_gave_up_is_refused_and_leaves_the_usage_to_the_next() -> None:
    policy = QuotaPolicy(4, {})
    batch = batch_of([("h100", 4), ("h100", 4)], policy)
    batch.abandon()
    assert not batch.settled[0].response.allowed
    assert batch.settled[0].decision is batch.items[0].decision  # its first decision, for the metrics
    outcomes, _ = decide(batch, policy)
    assert outcomes == ["admitted"]  # the GPUs the first would have held
    assert list(batch.working.reservations) == ["uid-1"]


def test_a_pod_reserved_before_meets_the_usage_without_its_own_reservation() -> None:
    policy = QuotaPolicy(4, {})
    first = batch_of([("h100", 4)], policy)
    decide(first, policy)
    # The same pod again (a gate removal retried): its reservation is replaced, not counted twice.
    again = BatchDecision(
        first.working, first.items, usage=first.running, size=first.size, reservation_seconds=10.0
    )
    assert again.at == NOTHING
    assert decide(again, policy)[0] == ["admitted"]


def _allowed(headroom: GpuAmount | None, *, rule: str | None = None) -> Decision:
    denials = [] if rule is None else [{"rule": rule, "message": f"[{rule}] no"}]
    return Decision.model_validate(
        {
            "allowed": rule is None,
            "denials": denials,
            "gpu_demand": {"total": 2, "by_model": {"h100": 2}},
            "gpu_headroom": None if headroom is None else headroom.to_document(),
        }
    )


@pytest.mark.parametrize(
    ("decision", "at", "alike"),
    [
        (_allowed(GpuAmount(total=6, by_model={})), GpuAmount(total=6, by_model={}), True),
        (_allowed(GpuAmount(total=6, by_model={})), GpuAmount(total=7, by_model={}), False),
        (_allowed(None), NOTHING, False),  # no headroom: only its own usage
        (_allowed(GpuAmount(total=6, by_model={}), rule="gpu-quota"), NOTHING, False),
    ],
    ids=["within", "beyond", "no-headroom", "refused"],
)
def test_a_decision_holds_at_another_usage_within_its_headroom(
    decision: Decision, at: GpuAmount, *, alike: bool
) -> None:
    assert decides_alike(decision, at) is alike
    assert holds_at(decision, NOTHING, NOTHING)  # at the usage it was made at, always
    assert holds_at(decision, NOTHING, at) is (alike or at == NOTHING)
