"""Requests waiting for a slot of the gate (issue 21's overload target): a Job's burst is answered,
not refused; another tenant's request gets the first slot freed during the burst; a waiter that
runs out of time is refused with what it waited; a waiter whose caller goes away keeps no slot and
gives back none it never held."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from webhook.admission_gate import AdmissionGate
from webhook.admission_line import AdmissionLine
from webhook.refusals import Refusal


class _Replica:
    """The webhook's use of the line: take a slot, decide (a few ms), give the slot back; records
    the order requests got their slots in and the most decided at once."""

    def __init__(self, line: AdmissionLine):
        self.line = line
        self.entered: list[str] = []
        self.deciding = 0
        self.most_deciding = 0
        self.release = asyncio.Event()
        self.release.set()

    async def admit(self, tenant: str, name: str, decision_seconds: float = 0.003) -> Refusal | None:
        refusal = await self.line.enter(tenant)
        if refusal is not None:
            return refusal
        try:
            self.entered.append(name)
            self.deciding += 1
            self.most_deciding = max(self.most_deciding, self.deciding)
            await self.release.wait()
            await asyncio.sleep(decision_seconds)
            return None
        finally:
            self.deciding -= 1
            self.line.leave(tenant)


def _overloaded(cause: str) -> float:
    """The webhook's /metrics count of [admission-overloaded] refusals of `cause` so far."""
    return REGISTRY.get_sample_value("labgate_admission_overloaded_total", {"cause": cause}) or 0.0


async def _until(condition: object, what: str) -> None:
    for _ in range(10_000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never: {what}")


def test_a_burst_of_one_tenant_is_all_answered_within_the_bound() -> None:
    async def burst() -> tuple[list[Refusal | None], _Replica, AdmissionGate]:
        gate = AdmissionGate(64, tenant_limit=64, max_waiting=500)
        replica = _Replica(AdmissionLine(gate, max_wait_seconds=60))
        answers = await asyncio.gather(*(replica.admit("vision", f"p-{i}") for i in range(500)))
        return answers, replica, gate

    answers, replica, gate = asyncio.run(burst())
    assert [a.message for a in answers if a is not None] == [], "none refused"
    assert len(replica.entered) == 500, "every one decided"
    assert replica.most_deciding == 64, "the burst used every slot, never more"
    assert (gate.in_flight, gate.waiting_count, dict(gate.held)) == (0, 0, {})


def test_another_tenants_request_gets_the_first_slot_freed_during_a_burst() -> None:
    async def burst() -> list[str]:
        gate = AdmissionGate(64, tenant_limit=64, max_waiting=500)
        replica = _Replica(AdmissionLine(gate, max_wait_seconds=60))
        replica.release.clear()  # the burst's first 64 hold their slots until released
        flood = [asyncio.ensure_future(replica.admit("vision", f"vision-{i}")) for i in range(300)]
        await _until(lambda: gate.waiting_count == 300 - 64, "the burst queued")
        other = asyncio.ensure_future(replica.admit("nlp", "nlp-0"))
        await _until(lambda: gate.waiting_of("nlp") == 1, "nlp queued")
        replica.release.set()
        answers = await asyncio.gather(*flood, other)
        assert [a for a in answers if a is not None] == []
        return replica.entered

    entered = asyncio.run(burst())
    assert entered[64] == "nlp-0", f"after the first 64: {entered[60:70]}"
    assert entered[65] == "vision-64", "then the burst, in its order"


def test_a_waiter_past_its_bound_is_refused_with_what_it_waited() -> None:
    async def late() -> tuple[Refusal | None, AdmissionGate]:
        gate = AdmissionGate(1, max_waiting=10)
        line = AdmissionLine(gate, max_wait_seconds=0.05)
        assert await line.enter("vision") is None
        refusal = await line.enter("nlp")
        return refusal, gate

    before = _overloaded("waited")
    refusal, gate = asyncio.run(late())
    assert refusal is not None
    assert _overloaded("waited") == before + 1
    assert refusal.message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 1 requests at once, its bound "
        "(LABGATE_MAX_IN_FLIGHT), with 0 more waiting for a slot"
    )
    waited = int(refusal.message.split("this one waited ")[1].split(" ms")[0])
    assert waited >= 50
    assert (gate.in_flight, gate.waiting_count, dict(gate.held)) == (1, 0, {"vision": 1})


def test_a_full_line_refuses_at_once() -> None:
    async def full() -> Refusal | None:
        gate = AdmissionGate(1, max_waiting=0)
        line = AdmissionLine(gate, max_wait_seconds=60)
        assert await line.enter("vision") is None
        return await asyncio.wait_for(line.enter("vision"), timeout=5)

    before = _overloaded("line-full")
    refusal = asyncio.run(full())
    assert refusal is not None
    assert "the line of requests waiting for a slot is full" in refusal.message
    assert _overloaded("line-full") == before + 1


def test_a_waiter_cancelled_while_waiting_holds_nothing_and_frees_nothing() -> None:
    async def cancelled() -> AdmissionGate:
        gate = AdmissionGate(1, max_waiting=10)
        line = AdmissionLine(gate, max_wait_seconds=60)
        assert await line.enter("vision") is None
        waiter = asyncio.ensure_future(line.enter("nlp"))
        await _until(lambda: gate.waiting_count == 1, "nlp queued")
        waiter.cancel()  # the apiserver hung up
        await asyncio.gather(waiter, return_exceptions=True)
        assert waiter.cancelled()
        assert (gate.in_flight, gate.waiting_count, dict(gate.held)) == (1, 0, {"vision": 1})
        line.leave("vision")
        return gate

    gate = asyncio.run(cancelled())
    assert (gate.in_flight, gate.waiting_count, dict(gate.held), gate.waiting) == (0, 0, {}, {})


def test_a_waiter_cancelled_just_after_it_was_handed_a_slot_passes_the_slot_on() -> None:
    async def raced() -> tuple[AdmissionGate, Refusal | None]:
        gate = AdmissionGate(1, max_waiting=10)
        line = AdmissionLine(gate, max_wait_seconds=60)
        assert await line.enter("vision") is None
        handed = asyncio.ensure_future(line.enter("nlp"))
        after = asyncio.ensure_future(line.enter("speech"))
        await _until(lambda: gate.waiting_count == 2, "both queued")
        line.leave("vision")  # the slot goes to nlp's waiter...
        handed.cancel()  # ...whose caller hangs up before it runs again
        await asyncio.gather(handed, return_exceptions=True)
        # speech holds the slot nlp's waiter never used; nothing else is held.
        answer = await asyncio.wait_for(after, timeout=5)
        assert (gate.in_flight, dict(gate.held)) == (1, {"speech": 1})
        line.leave("speech")
        return gate, answer

    gate, answer = asyncio.run(raced())
    assert answer is None
    assert (gate.in_flight, gate.waiting_count, dict(gate.held)) == (0, 0, {})


def test_a_waiter_that_gives_its_place_up_is_answered_at_once() -> None:
    async def pushed() -> tuple[Refusal | None, Refusal | None]:
        gate = AdmissionGate(1, max_waiting=2)
        line = AdmissionLine(gate, max_wait_seconds=60)
        assert await line.enter("vision") is None
        flood = [asyncio.ensure_future(line.enter("vision")) for _ in range(2)]
        await _until(lambda: gate.waiting_count == 2, "the flood queued")
        other = asyncio.ensure_future(line.enter("nlp"))
        newest = await asyncio.wait_for(flood[1], timeout=5)
        line.leave("vision")  # the first slot to the flood's oldest (it came before nlp)...
        assert await asyncio.wait_for(flood[0], timeout=5) is None
        line.leave("vision")  # ...the next to nlp
        return newest, await asyncio.wait_for(other, timeout=5)

    before = _overloaded("pushed-out")
    newest, other = asyncio.run(pushed())
    assert newest is not None
    assert "gave its place up to another tenant's request" in newest.message
    assert _overloaded("pushed-out") == before + 1
    assert other is None, "nlp got a slot"
