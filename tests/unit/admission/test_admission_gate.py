"""The in-flight bound and the fair line of requests waiting for a slot (issue 19, finding 8; issue
21's overload target), the pure decisions: who enters, who waits, who gets a freed slot, who is
refused and with which numbers."""

from __future__ import annotations

from webhook.admission_gate import NO_TENANT, AdmissionGate, request_namespace
from webhook.review import AdmissionRequest, parse_request


def _request(namespace: str | None, kind: str = "Pod", name: str = "p") -> AdmissionRequest:
    return parse_request(
        {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": namespace,
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": name}},
        }
    )


def test_past_the_bound_a_request_waits_instead_of_being_refused() -> None:
    gate = AdmissionGate(2, max_waiting=10)
    verdicts = [gate.arrive("vision").verdict for _ in range(5)]
    assert verdicts == ["enter", "enter", "wait", "wait", "wait"]
    assert (gate.in_flight, gate.waiting_count) == (2, 3)


def test_a_tenant_alone_may_take_every_slot_up_to_its_share() -> None:
    gate = AdmissionGate(8, tenant_limit=8)
    assert [gate.arrive("vision").verdict for _ in range(9)] == ["enter"] * 8 + ["wait"]
    shared = AdmissionGate(8, tenant_limit=6)
    assert [shared.arrive("vision").verdict for _ in range(7)] == ["enter"] * 6 + ["wait"]
    # The slots past the flood's share stay free: another tenant enters at once.
    assert [shared.arrive("nlp").verdict for _ in range(2)] == ["enter", "enter"]
    assert shared.arrive(NO_TENANT).verdict == "wait", "the replica's own bound still holds"


def test_a_freed_slot_goes_to_the_waiting_tenant_that_holds_the_fewest() -> None:
    gate = AdmissionGate(4, max_waiting=100)
    burst = [gate.arrive("vision") for _ in range(10)]
    other = gate.arrive("nlp")
    assert other.verdict == "wait"
    # The first freed slot goes to nlp (holds none), ahead of the burst's six queued requests.
    assert gate.leave("vision") is other.ticket
    assert dict(gate.held) == {"vision": 3, "nlp": 1}
    # Then to the burst again, oldest first (nlp has nobody left waiting).
    assert gate.leave("vision") is burst[4].ticket
    assert gate.leave("nlp") is burst[5].ticket
    assert gate.in_flight == 4


def test_within_a_tenant_first_come_first_served() -> None:
    gate = AdmissionGate(1, max_waiting=100)
    gate.arrive("vision")
    waiting = [gate.arrive("vision").ticket for _ in range(3)]
    assert [gate.leave("vision") for _ in range(3)] == waiting
    # A newcomer does not overtake its own tenant's waiters even when a slot is free to it.
    freeing = AdmissionGate(2, tenant_limit=1, max_waiting=100)
    freeing.arrive("vision")
    queued = freeing.arrive("vision")
    assert queued.verdict == "wait"
    assert freeing.arrive("vision").verdict == "wait", "behind its tenant's waiter, not before it"


def test_a_full_line_refuses_at_once_with_the_numbers() -> None:
    gate = AdmissionGate(2, max_waiting=3)
    for _ in range(5):
        gate.arrive("vision", now=100.0)
    refused = gate.arrive("vision", now=100.0)
    assert refused.verdict == "refuse"
    assert (gate.in_flight, gate.waiting_count) == (2, 3), "a refused request holds nothing"
    refusal = gate.refusal(refused.ticket, "line-full", now=100.0)
    assert (refusal.rule, refusal.code) == ("admission-overloaded", 429)
    assert refusal.message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 2 requests at once, its bound "
        "(LABGATE_MAX_IN_FLIGHT), with 3 more waiting for a slot and "
    )
    assert "the line of requests waiting for a slot is full (LABGATE_MAX_WAITING_ADMISSIONS)" in (
        refusal.message
    )
    assert refusal.message.endswith(
        "Fix: retry (controllers retry by themselves); if it persists, tell the infra team to add "
        "webhook replicas (webhook.replicas) or slow the client creating objects this fast"
    )


def test_a_full_line_of_one_tenant_makes_room_for_another_tenant() -> None:
    gate = AdmissionGate(2, max_waiting=3)
    for _ in range(2):
        gate.arrive("vision")
    flood = [gate.arrive("vision", now=100.0).ticket for _ in range(3)]
    other = gate.arrive("nlp", now=100.25)
    # nlp waits; vision's newest waiter gives its place up, with the tenant's numbers.
    assert (other.verdict, other.pushed_out) == ("wait", flood[-1])
    assert (gate.waiting_of("vision"), gate.waiting_of("nlp")) == (2, 1)
    message = gate.refusal(flood[-1], "pushed-out", now=100.25).message
    assert message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 2 requests of tenant 'vision' "
        "at once (one tenant may have at most LABGATE_MAX_IN_FLIGHT_PER_TENANT decided at once, of 2 in "
        "all), with 2 more of them waiting for a slot"
    )
    assert "this one, after waiting 250 ms, gave its place up to another tenant's request" in message
    assert message.endswith(
        "Fix: retry (controllers retry by themselves); if it persists, slow the client creating objects this fast"
    )
    # The tenant with the most waiting is not made to give a place up to itself.
    assert gate.arrive("vision").verdict == "refuse"


def test_waiting_past_the_bound_refuses_with_the_time_waited() -> None:
    gate = AdmissionGate(1, max_waiting=10)
    gate.arrive("vision", now=10.0)
    waiter = gate.arrive("nlp", now=10.0).ticket
    assert gate.withdraw(waiter)
    assert (gate.waiting_count, gate.waiting) == (0, {})
    message = gate.refusal(waiter, "waited", now=11.0).message
    assert message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 1 requests at once, its bound "
        "(LABGATE_MAX_IN_FLIGHT), with 0 more waiting for a slot"
    )
    assert (
        "this one waited 1000 ms for a slot, the most it may (LABGATE_MAX_ADMISSION_WAIT_SECONDS)" in message
    )


def test_a_tenant_held_back_by_its_share_is_told_so() -> None:
    gate = AdmissionGate(64, tenant_limit=2, max_waiting=10)
    gate.arrive("vision", now=5.0)
    gate.arrive("vision", now=5.0)
    waiter = gate.arrive("vision", now=5.0).ticket
    gate.withdraw(waiter)
    message = gate.refusal(waiter, "waited", now=5.5).message
    assert message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 2 requests of tenant 'vision' at "
        "once (one tenant may have at most LABGATE_MAX_IN_FLIGHT_PER_TENANT decided at once, of 64 in "
        "all), with 0 more of them waiting for a slot"
    )
    assert "this one waited 500 ms for a slot" in message
    unowned = AdmissionGate(64, tenant_limit=1)
    unowned.arrive(NO_TENANT)
    stranger = unowned.arrive(NO_TENANT).ticket
    assert (
        "deciding 1 requests outside any tenant's namespace at once"
        in unowned.refusal(stranger, "waited").message
    )


def test_a_withdrawn_or_granted_ticket_is_not_withdrawn_twice() -> None:
    gate = AdmissionGate(1, max_waiting=10)
    first = gate.arrive("vision").ticket
    waiter = gate.arrive("vision").ticket
    assert not gate.withdraw(first), "a request holding a slot is not waiting"
    assert gate.leave("vision") is waiter
    assert not gate.withdraw(waiter), "granted: it holds the slot now"
    assert (gate.in_flight, dict(gate.held), gate.waiting_count) == (1, {"vision": 1}, 0)


def test_leaving_forgets_tenants_with_nothing_in_flight() -> None:
    gate = AdmissionGate(4, tenant_limit=2)
    for tenant in ("a", "b", "a"):
        assert gate.arrive(tenant).verdict == "enter"
    for tenant in ("a", "b", "a"):
        assert gate.leave(tenant) is None
    assert (gate.in_flight, dict(gate.held), gate.waiting) == (0, {}, {})


def test_the_namespace_that_owns_a_request() -> None:
    assert request_namespace(_request("vision")) == "vision"
    assert request_namespace(_request(None, kind="Namespace", name="vision-2")) == "vision-2"
    assert request_namespace(_request(None, kind="ClusterRole", name="x")) is None
