"""The volume-claim-template rule's input: the PersistentVolumes that claim templates name (generic
ephemeral volumes in any pod template, a StatefulSet's volumeClaimTemplates), read for them only."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.admission.test_serving_volumes import _Engine, _Inventory, _Volumes
from webhook.replica import FactSources, admission_server
from webhook.review import AdmissionRequest, parse_request
from webhook.volume_facts import MAX_TEMPLATE_VOLUMES, template_volume_names, template_volumes


def _ephemeral(volume_name: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
    if volume_name is not None:
        spec["volumeName"] = volume_name
    return {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": spec}}}


def _templates(*volumes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"path": "spec.template.spec", "spec": {"containers": [], "volumes": list(volumes)}}]


def _statefulset(*names: str) -> dict[str, Any]:
    return {
        "kind": "StatefulSet",
        "spec": {"volumeClaimTemplates": [{"spec": {"volumeName": n}} for n in names] + [{"spec": {}}]},
    }


def test_names_come_from_ephemeral_volumes_and_statefulset_claim_templates_each_once() -> None:
    templates = _templates(
        {"name": "tmp", "emptyDir": {}}, _ephemeral("pv-a"), _ephemeral(None), _ephemeral("pv-a")
    )
    assert template_volume_names(_statefulset("pv-b", "pv-a"), templates) == ["pv-a", "pv-b"]
    assert template_volume_names(None, _templates(_ephemeral(None))) == []
    # Only a StatefulSet's volumeClaimTemplates become claims.
    assert template_volume_names({**_statefulset("pv-b"), "kind": "Deployment"}, []) == []


def test_volumes_are_read_a_failed_read_left_out_and_the_number_bounded() -> None:
    volumes = _Volumes()
    names = [f"pv-{i}" for i in range(MAX_TEMPLATE_VOLUMES + 4)]
    found = asyncio.run(template_volumes(names, volumes))
    assert sorted(volumes.asked) == sorted(names[:MAX_TEMPLATE_VOLUMES])
    assert set(found) == set(names[:MAX_TEMPLATE_VOLUMES])
    assert asyncio.run(template_volumes(["pv-1"], _Volumes(fails=True))) == {}


def _request(obj: dict[str, Any], kind: str, group: str) -> AdmissionRequest:
    return parse_request(
        {
            "uid": "u",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
            "namespace": "vision",
            "name": "x",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller", "groups": []},
            "object": obj,
        }
    )


def test_the_server_gives_the_rule_the_volumes_a_pods_claim_templates_name() -> None:
    volumes = _Volumes()
    server = admission_server(_Engine(), FactSources(inventory=_Inventory(), volumes=volumes))
    pod = {
        "kind": "Pod",
        "spec": {"containers": [{"name": "m", "image": "i"}], "volumes": [_ephemeral("pv-b")]},
    }
    policy_input, _, _ = asyncio.run(server.facts.gather(_request(pod, "Pod", "")))
    assert policy_input["persistent_volumes"] == {
        "pv-b": {"name": "pv-b", "exists": True, "labels": {"labgate.io/tenant": "nlp"}, "claimRef": None}
    }
    sts = {**_statefulset("pv-c"), "apiVersion": "apps/v1"}
    sts["spec"]["template"] = {"spec": {"containers": [{"name": "m", "image": "i"}]}}
    policy_input, _, _ = asyncio.run(server.facts.gather(_request(sts, "StatefulSet", "apps")))
    assert set(policy_input["persistent_volumes"]) == {"pv-c"}
    assert volumes.asked == ["pv-b", "pv-c"]
    plain = {"kind": "Pod", "spec": {"containers": [{"name": "m", "image": "i"}]}}
    policy_input, _, _ = asyncio.run(server.facts.gather(_request(plain, "Pod", "")))
    assert "persistent_volumes" not in policy_input
    assert volumes.asked == ["pv-b", "pv-c"]


@pytest.mark.parametrize(
    ("obj", "templates"),
    [
        ({"kind": "Pod"}, [{"spec": {"volumes": True}}]),
        ({"kind": "Pod"}, [{"spec": "not a mapping"}]),
        (
            {"kind": "Pod"},
            [{"spec": {"volumes": [True, {"ephemeral": 1}, {"ephemeral": {"volumeClaimTemplate": []}}]}}],
        ),
        ({"kind": "StatefulSet", "spec": {"volumeClaimTemplates": 5}}, []),
        ({"kind": "StatefulSet", "spec": [1]}, []),
        ({"kind": "StatefulSet", "spec": {"volumeClaimTemplates": [{"spec": {"volumeName": 7}}, "x"]}}, []),
    ],
)
def test_claim_templates_of_any_shape_name_no_volume_and_never_fail(
    obj: dict[str, Any], templates: list[dict[str, Any]]
) -> None:
    # Found by the real-OPA fuzz test: `volumes: true` was iterated and made an internal error.
    assert template_volume_names(obj, templates) == []
