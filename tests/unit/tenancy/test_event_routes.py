"""The reconciler's routing table: which queues a change to a watched object reaches."""

from __future__ import annotations

import copy

import pytest

from labgate.core.api_resources import NAMESPACE, RESOURCE_FLAVOR, TENANT, WORKLOAD, Kind, Object
from labgate.core.tenant import TENANT_LABEL
from rbac.event_routes import NOWHERE, Queue, Route, former_route, route_of

ROLE_BINDING = Kind("RoleBinding", "rbac.authorization.k8s.io", "v1", "rolebindings", is_namespaced=True)
PROVISION_AND_SETTLE = frozenset({Queue.PROVISIONING, Queue.SETTLEMENT})


def tenant(name: str = "vision", *, gpus: int = 8, status: Object | None = None) -> Object:
    return {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name, "generation": 3, "labels": {}, "annotations": {}},
        "spec": {"quota": {"gpus": gpus}},
        "status": status or {},
    }


def labelled(name: str, tenant_name: str | None) -> Object:
    labels = {} if tenant_name is None else {TENANT_LABEL: tenant_name}
    return {"metadata": {"name": name, "namespace": "vision-train", "labels": labels}}


def test_a_tenant_whose_status_alone_changed_goes_to_its_status_only() -> None:
    before = tenant(status={"gpus": {"used": 2}})
    after = tenant(status={"gpus": {"used": 4}})
    assert route_of(TENANT, after, old=before, is_event=True) == Route("vision", frozenset({Queue.STATUS}))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("spec", {"quota": {"gpus": 16}}),
        ("generation", 4),
        ("finalizers", ["labgate.io/tenant"]),
        ("deletionTimestamp", "2026-12-04T10:00:00Z"),
        ("labels", {"lab/cost-center": "cv"}),
        ("annotations", {"labgate.io/note": "x"}),
    ],
)
def test_a_tenant_change_provisioning_reads_is_provisioned_and_settled(field: str, value: object) -> None:
    before = tenant()
    after = copy.deepcopy(before)
    if field == "spec":
        after["spec"] = value
    else:
        after["metadata"][field] = value
    assert route_of(TENANT, after, old=before, is_event=True) == Route("vision", PROVISION_AND_SETTLE)


def test_a_listed_or_deleted_tenant_is_provisioned_and_settled() -> None:
    # A list and a deletion carry no previous copy: provisioning decides what is left to do.
    assert route_of(TENANT, tenant()) == Route("vision", PROVISION_AND_SETTLE)
    assert route_of(TENANT, tenant(), old=tenant(), is_event=False) == Route("vision", PROVISION_AND_SETTLE)


def test_a_tenant_seen_first_by_an_event_is_provisioned() -> None:
    assert route_of(TENANT, tenant(), old=None, is_event=True) == Route("vision", PROVISION_AND_SETTLE)


def test_a_tenant_namespace_changes_which_pods_count_so_it_is_settled_too() -> None:
    assert route_of(NAMESPACE, labelled("vision-train", "vision")) == Route("vision", PROVISION_AND_SETTLE)


def test_a_managed_object_goes_to_its_tenants_provisioning_only() -> None:
    route = route_of(ROLE_BINDING, labelled("labgate-researchers", "vision"), is_event=True)
    assert route == Route("vision", frozenset({Queue.PROVISIONING}))


@pytest.mark.parametrize("label", [None, ""])
def test_an_object_of_no_tenant_goes_nowhere(label: str | None) -> None:
    assert route_of(NAMESPACE, labelled("kube-system", label)) == NOWHERE
    assert route_of(ROLE_BINDING, labelled("someone-elses", label)) == NOWHERE


def test_an_object_without_metadata_goes_nowhere_rather_than_failing_the_watch() -> None:
    assert route_of(NAMESPACE, {}) == NOWHERE


@pytest.mark.parametrize("kind", [WORKLOAD, RESOURCE_FLAVOR])
def test_kueues_objects_go_to_the_kueue_routes_which_find_their_tenant(kind: Kind) -> None:
    workload = labelled("job-train-1", "vision")  # a label does not decide a Workload's tenant
    assert route_of(kind, workload, is_event=True) == Route(None, frozenset({Queue.KUEUE}))


@pytest.mark.parametrize("now", [None, "", "other"])
def test_a_namespace_leaving_its_tenant_reaches_the_tenant_it_left(now: str | None) -> None:
    before = labelled("vision-train", "vision")
    assert former_route(NAMESPACE, labelled("vision-train", now), old=before) == Route(
        "vision", PROVISION_AND_SETTLE
    )
    relabelled = former_route(ROLE_BINDING, labelled("labgate-researchers", now), old=labelled("x", "vision"))
    assert relabelled == Route("vision", frozenset({Queue.PROVISIONING}))


def test_no_former_route_when_the_label_stayed_or_nothing_came_before() -> None:
    same = labelled("vision-train", "vision")
    assert former_route(NAMESPACE, same, old=copy.deepcopy(same)) == NOWHERE
    assert former_route(NAMESPACE, same, old=None) == NOWHERE
    assert former_route(NAMESPACE, same, old=labelled("vision-train", None)) == NOWHERE
    assert former_route(WORKLOAD, labelled("w", None), old=labelled("w", "vision")) == NOWHERE
