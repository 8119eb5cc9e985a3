"""The in-flight bound shared fairly between tenants (issue 19, finding 8): one tenant's flood takes
at most its share of a replica's slots, and other tenants' requests are still let in."""

from __future__ import annotations

from webhook.admission_gate import NO_TENANT, AdmissionGate, request_namespace
from webhook.review import AdmissionRequest


def _request(namespace: str | None, kind: str = "Pod", name: str = "p") -> AdmissionRequest:
    return AdmissionRequest.model_validate(
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


def test_a_flood_of_one_tenant_leaves_the_rest_of_the_slots_to_the_others() -> None:
    gate = AdmissionGate(8, tenant_limit=4)
    assert [gate.arrive("vision") for _ in range(6)] == [True] * 4 + [False] * 2
    # The flood holds its whole share: another tenant, and requests of no tenant, still get in.
    assert [gate.arrive("nlp") for _ in range(3)] == [True] * 3
    assert gate.arrive(NO_TENANT)
    assert gate.in_flight == 8
    assert not gate.arrive("speech"), "the replica's own bound still holds"
    gate.leave("vision")
    assert gate.arrive("vision"), "room again for the tenant once one of its requests is answered"


def test_the_refusal_names_the_tenant_and_its_share() -> None:
    gate = AdmissionGate(64, tenant_limit=2)
    assert gate.arrive("vision")
    assert gate.arrive("vision")
    assert not gate.arrive("vision")
    refusal = gate.refusal(_request("vision-team"), "vision")
    assert (refusal.rule, refusal.code) == ("admission-overloaded", 429)
    assert refusal.message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 2 requests of tenant 'vision' "
        "at once, the most one tenant may have decided at once (LABGATE_MAX_IN_FLIGHT_PER_TENANT, of "
        "64 in all), with "
    )
    assert refusal.message.endswith(
        "Fix: retry (controllers retry by themselves); if it persists, slow "
        "the client creating objects this fast"
    )
    assert gate.arrive(NO_TENANT)
    assert gate.arrive(NO_TENANT)
    assert not gate.arrive(NO_TENANT)
    unowned = gate.refusal(_request(None, kind="ClusterRole"), NO_TENANT).message
    assert "deciding 2 requests outside any tenant's namespace at once" in unowned


def test_a_full_replica_is_refused_with_the_replica_bound() -> None:
    gate = AdmissionGate(2, tenant_limit=2)
    assert gate.arrive("vision")
    assert gate.arrive("nlp")
    assert not gate.arrive("speech")
    message = gate.refusal(_request("speech"), "speech").message
    assert message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 2 requests at once"
    )


def test_a_share_above_the_bound_is_the_bound() -> None:
    gate = AdmissionGate(3, tenant_limit=10)
    assert [gate.arrive("vision") for _ in range(4)] == [True, True, True, False]
    assert gate.refusal(_request("v"), "vision").message.startswith(
        "[admission-overloaded] this labgate webhook replica is deciding 3 requests at once"
    )


def test_leaving_forgets_tenants_with_nothing_in_flight() -> None:
    gate = AdmissionGate(4, tenant_limit=2)
    for tenant in ("a", "b", "a"):
        assert gate.arrive(tenant)
    for tenant in ("a", "b", "a"):
        gate.leave(tenant)
    assert (gate.in_flight, dict(gate.held)) == (0, {})


def test_the_namespace_that_owns_a_request() -> None:
    assert request_namespace(_request("vision")) == "vision"
    assert request_namespace(_request(None, kind="Namespace", name="vision-2")) == "vision-2"
    assert request_namespace(_request(None, kind="ClusterRole", name="x")) is None
