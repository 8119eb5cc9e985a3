"""What the reconciler wants a tenant to have (pure)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from devcluster.tools import REPO_ROOT
from labgate.core.queue_config import QueueConfig
from labgate.core.tenant import Tenant, TenantLimits
from rbac.desired import desired_objects, is_subset, object_key, shared_cluster_roles, tenant_namespaces


def tenant(**spec: Any) -> Tenant:
    base: dict[str, Any] = {
        "members": {
            "admins": [{"kind": "User", "name": "ann"}],
            "researchers": [{"kind": "Group", "name": "vision"}],
            "viewers": [{"kind": "ServiceAccount", "name": "dash", "namespace": "ops"}],
        },
        "namespaces": {"names": ["vision"], "prefix": "vision-"},
    }
    return Tenant.from_object({"metadata": {"name": "vision", "generation": 3}, "spec": {**base, **spec}})


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {object_key(o): o for o in objects}


def test_namespaces_are_the_named_ones_plus_every_one_labelled_for_the_tenant() -> None:
    # `labelled`: the namespaces labelled for this tenant (the webhook's view of what is its).
    assert tenant_namespaces(tenant(), {"vision-sweep", "vision"}) == ["vision", "vision-sweep"]
    # Dropped from names (or labelled by the platform) and still labelled: still the tenant's, so its
    # bindings, quotas and NetworkPolicies stay until the label is taken off.
    no_prefix = tenant(namespaces={"names": ["vision"]})
    assert tenant_namespaces(no_prefix, {"vision-sweep"}) == ["vision", "vision-sweep"]
    assert tenant_namespaces(no_prefix, set()) == ["vision"]


def test_every_namespace_gets_bindings_policies_defaults_and_an_experiment_account() -> None:
    objects = by_key(desired_objects(tenant(gpu={"total": 16}), namespaces=["vision", "vision-a"]))
    for ns in ("vision", "vision-a"):
        researchers = objects[("rbac.authorization.k8s.io/v1", "RoleBinding", ns, "labgate-researchers")]
        assert researchers["subjects"] == [
            {"kind": "Group", "name": "vision", "apiGroup": "rbac.authorization.k8s.io"}
        ]
        viewers = objects[("rbac.authorization.k8s.io/v1", "RoleBinding", ns, "labgate-viewers")]
        assert viewers["subjects"] == [{"kind": "ServiceAccount", "name": "dash", "namespace": "ops"}]
        quota = objects[("v1", "ResourceQuota", ns, "labgate-gpu")]
        assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}
        assert ("v1", "LimitRange", ns, "labgate-defaults") in objects
        assert ("v1", "ServiceAccount", ns, "experiment") in objects
        labels = objects[("v1", "Namespace", "", ns)]["metadata"]["labels"]
        assert labels["labgate.io/tenant"] == "vision"
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    member_role = objects[("rbac.authorization.k8s.io/v1", "ClusterRole", "", "labgate:tenant:vision:member")]
    assert member_role["rules"][1]["resourceNames"] == ["vision", "vision-a"]
    assert (
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        "",
        "labgate:tenant:vision:namespace-creator",
    ) in objects


@pytest.mark.parametrize("over_quota", [None, "refuse", "preemptible"])
def test_every_namespace_says_whether_its_tenant_admits_gpu_pods_beyond_quota(over_quota: str | None) -> None:
    """The mutating webhook entry a namespace's pods reach is chosen by this label: only where it
    says refuse is a Job controller's settled pod spared the call."""
    gpu: dict[str, object] = {"total": 16} | ({"overQuota": over_quota} if over_quota else {})
    objects = by_key(desired_objects(tenant(gpu=gpu), namespaces=["vision", "vision-a"]))
    for ns in ("vision", "vision-a"):
        labels = objects[("v1", "Namespace", "", ns)]["metadata"]["labels"]
        assert labels["labgate.io/gpu-over-quota"] == (over_quota or "refuse")


def test_no_gpu_total_means_no_native_quota_and_no_prefix_means_no_namespace_creation() -> None:
    objects = by_key(desired_objects(tenant(namespaces={"names": ["vision"]}), namespaces=["vision"]))
    assert not any(k[1] == "ResourceQuota" for k in objects)
    assert not any(k[3].endswith("namespace-creator") for k in objects)


def test_egress_off_keeps_only_tenant_and_dns() -> None:
    objects = by_key(desired_objects(tenant(network={"allowEgress": False}), namespaces=["vision"]))
    egress = objects[("networking.k8s.io/v1", "NetworkPolicy", "vision", "labgate-baseline-egress")]
    assert len(egress["spec"]["egress"]) == 2
    on = by_key(desired_objects(tenant(), namespaces=["vision"]))
    rules = on[("networking.k8s.io/v1", "NetworkPolicy", "vision", "labgate-baseline-egress")]["spec"][
        "egress"
    ]
    assert rules[-1] == {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}]}


def test_every_configured_ipv4_metadata_address_is_excepted_from_the_open_egress() -> None:
    """The policy config's metadata_addresses, not one address written in the code: a cloud whose
    metadata service answers elsewhere (here 100.100.100.200) is closed the same."""
    addresses = ("169.254.169.254", "100.100.100.200", "fd00:ec2::254")
    objects = by_key(desired_objects(tenant(), namespaces=["vision"], metadata_addresses=addresses))
    egress = objects[("networking.k8s.io/v1", "NetworkPolicy", "vision", "labgate-baseline-egress")]
    block = egress["spec"]["egress"][-1]["to"][0]["ipBlock"]
    # The block opens IPv4 only, so the IPv6 address needs no exception.
    assert block == {"cidr": "0.0.0.0/0", "except": ["100.100.100.200/32", "169.254.169.254/32"]}
    with pytest.raises(ValueError, match=re.escape("169.254.0.0/16")):
        desired_objects(tenant(), namespaces=["vision"], metadata_addresses=("169.254.0.0/16",))


def test_a_namespaces_restrictions_are_applied_before_its_grants() -> None:
    """In a new namespace no member can start a pod before its baseline NetworkPolicies and quotas
    exist: they come first in the order the reconciler applies."""
    kinds = [
        o["kind"]
        for o in desired_objects(tenant(gpu={"total": 8}, limits={"pods": 10}), namespaces=["vision"])
        if o["metadata"].get("namespace") == "vision" or o["kind"] == "Namespace"
    ]
    restrictions = {"NetworkPolicy", "ResourceQuota", "LimitRange"}
    first_grant = kinds.index("ServiceAccount")
    assert kinds[0] == "Namespace"
    assert set(kinds[1:first_grant]) == restrictions
    assert set(kinds[first_grant:]) == {"ServiceAccount", "RoleBinding"}


def test_ingress_from_allowed_tenants() -> None:
    objects = by_key(
        desired_objects(tenant(network={"allowIngressFromTenants": ["audio"]}), namespaces=["vision"])
    )
    ingress = objects[("networking.k8s.io/v1", "NetworkPolicy", "vision", "labgate-baseline-ingress")]
    selected = [
        p["namespaceSelector"]["matchLabels"]["labgate.io/tenant"]
        for p in ingress["spec"]["ingress"][0]["from"]
    ]
    assert selected == ["vision", "audio"]


@pytest.mark.parametrize(
    ("exceptions", "level"),
    [
        ({}, "baseline"),
        ({"hostPath": False, "capabilities": []}, "baseline"),
        ({"hostPath": True}, "privileged"),
        ({"hostIPC": True}, "privileged"),
        ({"capabilities": ["NET_ADMIN"]}, "privileged"),
        ({"sysctls": ["net.core.somaxconn"]}, "privileged"),
        ({"seccompUnconfined": True}, "privileged"),
    ],
)
def test_pod_security_stays_baseline_unless_an_exception_needs_more(
    exceptions: dict[str, Any], level: str
) -> None:
    objects = by_key(desired_objects(tenant(exceptions=exceptions), namespaces=["vision"]))
    labels = objects[("v1", "Namespace", "", "vision")]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == level
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_researchers_write_secrets_without_reading_them_and_admins_read_them() -> None:
    roles = {r["metadata"]["name"]: r["rules"] for r in shared_cluster_roles()}

    def verbs(role: str) -> set[str]:
        return {v for rule in roles[role] if "secrets" in rule["resources"] for v in rule["verbs"]}

    assert verbs("labgate:researcher") == {"create", "update", "patch", "delete", "deletecollection"}
    assert {"get", "list", "watch"} <= verbs("labgate:tenant-admin")


@pytest.mark.parametrize(
    ("desired", "live", "expected"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"subjects": []}, {}, True),
        ({"subjects": [{"n": 1}]}, {}, False),
        ({"l": [1, 2]}, {"l": [1]}, False),
        ({"l": [{"a": 1}]}, {"l": [{"a": 1, "x": 0}]}, True),
        ({"m": {"k": "v"}}, {"m": {"k": "v", "other": "w"}}, True),
        # A quota's quantities as the API reads them back, in canonical form: the same value.
        (
            {"spec": {"hard": {"requests.nvidia.com/gpu": "1000"}}},
            {"spec": {"hard": {"requests.nvidia.com/gpu": "1k"}}},
            True,
        ),
        (
            {"spec": {"hard": {"requests.memory": "1024Mi", "pods": "2000"}}},
            {"spec": {"hard": {"requests.memory": "1Gi", "pods": "2k"}}},
            True,
        ),
        ({"spec": {"hard": {"requests.cpu": "1500m"}}}, {"spec": {"hard": {"requests.cpu": "1500m"}}}, True),
        (
            {"spec": {"limits": [{"default": {"memory": "2048Mi"}}]}},
            {"spec": {"limits": [{"default": {"memory": "2Gi"}}]}},
            True,
        ),
        (
            {
                "spec": {
                    "resourceGroups": [
                        {"flavors": [{"resources": [{"name": "gpu", "nominalQuota": "1000"}]}]}
                    ]
                }
            },
            {
                "spec": {
                    "resourceGroups": [{"flavors": [{"resources": [{"name": "gpu", "nominalQuota": "1k"}]}]}]
                }
            },
            True,
        ),
        # A different value, or text that is no quantity, is drift all the same.
        (
            {"spec": {"hard": {"requests.nvidia.com/gpu": "1000"}}},
            {"spec": {"hard": {"requests.nvidia.com/gpu": "999"}}},
            False,
        ),
        ({"spec": {"hard": {"pods": "many"}}}, {"spec": {"hard": {"pods": "lots"}}}, False),
        # Elsewhere text is text: a label "1000" is not "1k".
        ({"metadata": {"labels": {"size": "1000"}}}, {"metadata": {"labels": {"size": "1k"}}}, False),
        # A label selector is the same whole: a baseline NetworkPolicy narrowed to some pods (or to
        # some namespaces' pods) is drift, though every term the desired copy sets is still there.
        ({"spec": {"podSelector": {}}}, {"spec": {"podSelector": {"matchLabels": {"app": "x"}}}}, False),
        (
            {"spec": {"podSelector": {}}},
            {"spec": {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}},
            False,
        ),
        (
            {"namespaceSelector": {"matchLabels": {"labgate.io/tenant": "vision"}}},
            {"namespaceSelector": {"matchLabels": {"labgate.io/tenant": "vision", "extra": "y"}}},
            False,
        ),
        # ... and as the API reads it back (empty parts omitted) it is the same selector.
        ({"spec": {"podSelector": {}}}, {"spec": {"podSelector": {"matchLabels": {}}}}, True),
        ({"spec": {"podSelector": {}}}, {"spec": {}}, True),
        (
            {"namespaceSelector": {"matchLabels": {"labgate.io/tenant": "vision"}}},
            {"namespaceSelector": {"matchLabels": {"labgate.io/tenant": "vision"}}},
            True,
        ),
    ],
)
def test_is_subset(desired: Any, live: Any, expected: bool) -> None:
    assert is_subset(desired, live) is expected


def test_members_read_only_their_own_tenant_by_name() -> None:
    from labgate.core.tenant import Tenant
    from rbac.desired import member_cluster_objects

    tenant = Tenant.from_object(
        {
            "apiVersion": "labgate.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": "vision", "generation": 1},
            "spec": {"members": {"researchers": [{"kind": "Group", "name": "vision"}]}},
        }
    )
    role = next(
        o for o in member_cluster_objects(tenant, namespaces=["vision"]) if o["kind"] == "ClusterRole"
    )
    tenant_rules = [r for r in role["rules"] if r["resources"] == ["tenants"]]
    # list/watch restricted by resourceNames serve only `--field-selector metadata.name=vision`.
    assert tenant_rules == [
        {
            "apiGroups": ["labgate.io"],
            "resources": ["tenants"],
            "resourceNames": ["vision"],
            "verbs": ["get", "list", "watch"],
        }
    ]


# Issue 22 item 4: with pod-hardening in warn mode a privileged Job was admitted with a warning, then
# every pod was refused by Pod Security (the namespace at baseline), looping on FailedCreate.
@pytest.mark.parametrize(
    ("enforcement", "level"),
    [
        ({}, "baseline"),
        ({"pod-hardening": "enforce"}, "baseline"),
        ({"pod-hardening": "off"}, "baseline"),  # unknown: the admission enforces, so does Pod Security
        ({"pod-hardening": "warn"}, "privileged"),
        ({"pod-hardening": "dry-run"}, "privileged"),
        ({"gpu-quota": "warn"}, "baseline"),
    ],
)
def test_pod_security_follows_the_mode_of_pod_hardening(enforcement: dict[str, str], level: str) -> None:
    objects = by_key(desired_objects(tenant(enforcement=enforcement), namespaces=["vision"]))
    labels = objects[("v1", "Namespace", "", "vision")]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == level
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_tenant_limits_are_a_resource_quota_in_every_namespace_defaults_filling_the_gaps() -> None:
    """The native backstop of tenant-quota: each namespace gets the tenant's whole CPU, memory and
    pod limits as a ResourceQuota on requests; a limit the Tenant leaves unset is the infra team's
    default (config tenant_limits)."""
    defaults = TenantLimits(cpu="100", memory="1Ti", pods=500)
    limited = tenant(limits={"cpu": "64", "pods": 100})
    objects = by_key(desired_objects(limited, namespaces=["vision", "vision-a"], limit_defaults=defaults))
    for ns in ("vision", "vision-a"):
        quota = objects[("v1", "ResourceQuota", ns, "labgate-limits")]
        assert quota["spec"] == {"hard": {"requests.cpu": "64", "requests.memory": "1024Gi", "pods": "100"}}
        assert quota["metadata"]["labels"]["labgate.io/tenant"] == "vision"
    half = by_key(desired_objects(tenant(limits={"cpu": "500m"}), namespaces=["vision"]))
    assert half[("v1", "ResourceQuota", "vision", "labgate-limits")]["spec"]["hard"] == {
        "requests.cpu": "500m"
    }


def test_no_limit_and_no_default_means_no_limits_quota() -> None:
    objects = by_key(desired_objects(tenant(), namespaces=["vision"], limit_defaults=TenantLimits()))
    assert ("v1", "ResourceQuota", "vision", "labgate-limits") not in objects


def test_members_read_their_queues_and_workloads_and_write_nothing_of_kueue() -> None:
    """Issue 20: researchers see why their workloads wait; Kueue's objects are Kueue's and labgate's."""
    roles = {r["metadata"]["name"]: r["rules"] for r in shared_cluster_roles()}
    for role in ("labgate:researcher", "labgate:tenant-admin"):
        kueue_rules = [rule for rule in roles[role] if "kueue.x-k8s.io" in rule["apiGroups"]]
        granted = {(res, verb) for rule in kueue_rules for res in rule["resources"] for verb in rule["verbs"]}
        assert granted == {
            (res, verb) for res in ("localqueues", "workloads") for verb in ("get", "list", "watch")
        }
        assert all(rule["apiGroups"] != ["*"] and "*" not in rule["resources"] for rule in roles[role])


def test_members_read_their_own_clusterqueue_by_name_only() -> None:
    member_role = next(
        o
        for o in desired_objects(tenant(), namespaces=["vision"])
        if o["metadata"]["name"] == "labgate:tenant:vision:member"
    )
    queue_rules = [r for r in member_role["rules"] if "kueue.x-k8s.io" in r["apiGroups"]]
    assert queue_rules == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "resourceNames": ["vision"],
            "verbs": ["get", "list", "watch"],
        }
    ]


def _gpu_backstops(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["namespace"] for o in objects if o["metadata"]["name"] == "labgate-gpu")


@pytest.mark.parametrize(
    ("config", "spec_queue", "has_backstop"),
    [
        # Kueue gates the tenant's GPU pods: every tenant managed, or this one by its spec.queue.
        (QueueConfig(managed_by_kueue=True, pod_integration=True), False, False),
        (QueueConfig(managed_by_kueue=False, pod_integration=True), True, False),
        # Anything less keeps the backstop: Kueue's Jobs only, or a tenant Kueue does not manage.
        (QueueConfig(managed_by_kueue=True, pod_integration=False), True, True),
        (QueueConfig(managed_by_kueue=False, pod_integration=True), False, True),
        (QueueConfig(), False, True),
    ],
    ids=["every-tenant-gated", "spec-queue-gated", "jobs-only", "unmanaged-tenant", "no-kueue"],
)
def test_the_gpu_backstop_is_left_out_only_where_kueue_gates_the_tenants_gpu_pods(
    config: QueueConfig, spec_queue: bool, has_backstop: bool
) -> None:
    spec: dict[str, Any] = {"gpu": {"total": 16}, **({"queue": {}} if spec_queue else {})}
    objects = desired_objects(tenant(**spec), namespaces=["vision", "vision-a"], queue_config=config)
    assert _gpu_backstops(objects) == (["vision", "vision-a"] if has_backstop else [])
    # The CPU, memory and pod limits' quota stays either way (Kueue does not hold those limits).
    limited = desired_objects(tenant(**spec, limits={"pods": 10}), namespaces=["vision"], queue_config=config)
    assert [o["metadata"]["name"] for o in limited if o["kind"] == "ResourceQuota"][-1] == "labgate-limits"


def test_the_policies_queue_config_reads_as_the_reconcilers_and_gates_nothing() -> None:
    shipped = REPO_ROOT / "policies" / "labgate" / "config" / "queue" / "data.json"
    config = QueueConfig.model_validate_json(shipped.read_text())
    assert config.pod_integration is False
    assert not config.gates_gpu_pods(tenant(queue={}))
    with pytest.raises(ValueError, match="extra"):
        QueueConfig.model_validate({"pod_integraton": True})
