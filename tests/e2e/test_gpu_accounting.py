"""GPU accounting is the scheduler's: the escape-matrix rows for GPUs hidden from labgate's counting
(init containers, native sidecars, other vendors' and MIG resources, unknown vendor resources,
Dynamic Resource Allocation claims), each paired with the legitimate action it must not break,
through the real kubectl as a researcher and as a tenant admin, on CREATE and UPDATE. The quota is
then checked on what the apiserver holds: the pods that exist, counted here independently.

A module of its own (same shape as test_escape_matrix.py): its tenants' quotas are filled on purpose.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devcluster.stack import LabgateStack
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest, tenant_pool
from tests.unit.gpu.test_gpu_demand import reference_request

pytestmark = [pytest.mark.quota, pytest.mark.tenancy]

IMAGE = "registry.lab.example/research/trainer:v1"
MODEL = {"nvidia.com/gpu.product": "h100"}


@dataclass(frozen=True)
class Arena:
    a: TenantUnderTest
    b: TenantUnderTest
    stack: LabgateStack

    def actor(self, who: str) -> Researcher:
        return {"researcher": self.a.researcher, "admin": self.a.admin}[who]


def claim_template(name: str, device_class: str, count: int = 1, mode: str = "ExactCount") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


@pytest.fixture(scope="module")
def arena(stack: LabgateStack) -> Iterator[Arena]:
    factory = TenantFactory(stack)
    try:
        suffix = uuid.uuid4().hex[:4]
        a_name, b_name = f"gpu-a-{suffix}", f"gpu-b-{suffix}"
        a = factory.create(
            name=a_name,
            spec_extra={
                "gpu": {"total": 8, "models": {"h100": 8, "mig-1g.10gb": 2}},
                "placement": {"nodePools": [tenant_pool(a_name)]},
            },
        )
        b = factory.create(
            name=b_name, spec_extra={"gpu": {"total": 8}, "placement": {"nodePools": [tenant_pool(b_name)]}}
        )
        # Claim templates the platform made (a cluster admin is trusted): one per device class used below.
        for template in (
            claim_template("one-gpu", "gpu.nvidia.com", 1),
            claim_template("nine-gpus", "gpu.nvidia.com", 9),
            claim_template("mig-profile", "mig.nvidia.com", 1),
        ):
            stack.admin_kubectl("apply", "-n", a.namespace, "-f", "-", stdin=json.dumps(template))
        yield Arena(a=a, b=b, stack=stack)
    finally:
        factory.cleanup()


# -- manifests -------------------------------------------------------------------------------------


def gpus(resource: str, n: int) -> dict[str, str]:
    return {resource: str(n)}


def pod(
    name: str, *, init: list[Any] | None = None, main: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    main_container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if main:
        main_container["resources"] = {"limits": main}
    body: dict[str, Any] = {"containers": [main_container], "nodeSelector": dict(MODEL), **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def init_container(limits: dict[str, str], *, sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": "sidecar" if sidecar else "warmup",
        "image": IMAGE,
        "resources": {"limits": limits},
    }
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def dra_pod(name: str, template: str) -> dict[str, Any]:
    manifest = pod(name, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": template}])
    manifest["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return manifest


def deployment(name: str, template_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
        },
    }


H100 = "nvidia.com/gpu"

Build = Callable[[Arena, str], dict[str, Any]]


@dataclass(frozen=True)
class Attempt:
    """An attempt (refused with `rule`) and the legitimate action it mirrors (admitted)."""

    id: str
    rule: str
    attempt: Build
    allowed: Build


ATTEMPTS: list[Attempt] = [
    Attempt(
        "gpus-in-an-init-container-over-quota",
        "gpu-quota",
        lambda _, n: pod(n, init=[init_container(gpus(H100, 9))]),
        lambda _, n: pod(n, init=[init_container(gpus(H100, 1))]),
    ),
    Attempt(
        "gpus-in-a-native-sidecar-over-quota",
        "gpu-quota",
        lambda _, n: pod(n, main=gpus(H100, 4), init=[init_container(gpus(H100, 5), sidecar=True)]),
        lambda _, n: pod(n, main=gpus(H100, 1), init=[init_container(gpus(H100, 1), sidecar=True)]),
    ),
    Attempt(
        "init-container-gpus-on-another-tenants-pool",
        "placement-pool",
        lambda ar, n: pod(
            n,
            init=[init_container(gpus(H100, 1))],
            nodeSelector={**MODEL, "labgate.io/node-pool": f"{ar.b.name}-spot"},
        ),
        lambda ar, n: pod(
            n,
            init=[init_container(gpus(H100, 1))],
            nodeSelector={**MODEL, "labgate.io/node-pool": f"{ar.a.name}-spot"},
        ),
    ),
    Attempt(
        "sidecar-gpus-of-an-unlisted-model",
        "gpu-model-unknown",
        lambda _, n: pod(
            n,
            init=[init_container(gpus(H100, 1), sidecar=True)],
            nodeSelector={"nvidia.com/gpu.product": "b200"},
        ),
        lambda _, n: pod(n, init=[init_container(gpus(H100, 1), sidecar=True)]),
    ),
    Attempt(
        "amd-gpus-over-quota",
        "gpu-quota",
        lambda _, n: pod(n, main=gpus("amd.com/gpu", 9)),
        lambda _, n: pod(n, main=gpus("amd.com/gpu", 1)),
    ),
    Attempt(
        "mig-slices-beyond-their-model-quota",
        "gpu-quota",
        lambda _, n: pod(n, init=[init_container(gpus("nvidia.com/mig-1g.10gb", 3))]),
        lambda _, n: pod(n, init=[init_container(gpus("nvidia.com/mig-1g.10gb", 2))]),
    ),
    Attempt(
        "unknown-resource-of-a-gpu-vendor",
        "gpu-resource-unknown",
        lambda _, n: pod(n, init=[init_container(gpus("nvidia.com/gpu-unlisted", 1))]),
        lambda _, n: pod(n, init=[init_container(gpus(H100, 1))]),
    ),
    Attempt(
        "dra-claim-over-quota",
        "gpu-quota",
        lambda _, n: dra_pod(n, "nine-gpus"),
        lambda _, n: dra_pod(n, "one-gpu"),
    ),
    Attempt(
        "dra-claim-of-an-unmapped-device-class",
        "gpu-dra-unsupported",
        lambda _, n: dra_pod(n, "mig-profile"),
        lambda _, n: dra_pod(n, "one-gpu"),
    ),
    Attempt(
        "dra-claim-template-that-does-not-exist",
        "gpu-dra-unsupported",
        lambda _, n: dra_pod(n, "no-such-template"),
        lambda _, n: dra_pod(n, "one-gpu"),
    ),
    Attempt(
        "claim-template-asking-every-gpu",
        "gpu-dra-unsupported",
        lambda _, n: claim_template(n, "gpu.nvidia.com", mode="All"),
        lambda _, n: claim_template(n, "gpu.nvidia.com", 2),
    ),
]

ACTORS = ["researcher", "admin"]


def _create(who: Researcher, namespace: str, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return who.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))


def _delete(arena: Arena, manifest: dict[str, Any]) -> None:
    kind = manifest["kind"].lower()
    arena.stack.admin_kubectl(
        "delete", kind, manifest["metadata"]["name"], "-n", arena.a.namespace, "--wait=true"
    )


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.id for a in ATTEMPTS])
def test_hidden_gpus_are_counted_and_the_legitimate_action_admitted(
    arena: Arena, attempt: Attempt, actor: str
) -> None:
    who, ns = arena.actor(actor), arena.a.namespace
    name = f"{attempt.id[:40]}-{actor[:3]}"
    refused = _create(who, ns, attempt.attempt(arena, name))
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert f"[{attempt.rule}]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr
    kind = attempt.attempt(arena, name)["kind"].lower()
    assert arena.stack.cluster_kubectl("get", kind, name, "-n", ns).returncode == 1  # nothing was created
    manifest = attempt.allowed(arena, name)
    allowed = _create(who, ns, manifest)
    assert allowed.returncode == 0, allowed.stderr
    stored = json.loads(arena.stack.admin_kubectl("get", kind, name, "-n", ns, "-o", "json"))
    if kind == "pod":
        # Placement applies to any pod that asks GPUs, from whichever container: labgate put it on its pool.
        assert stored["spec"]["nodeSelector"]["labgate.io/node-pool"] == f"{arena.a.name}-spot"
    _delete(arena, manifest)


@pytest.mark.parametrize("actor", ACTORS)
def test_a_deployment_updated_to_hide_gpus_in_an_init_container_is_refused(arena: Arena, actor: str) -> None:
    who, ns = arena.actor(actor), arena.a.namespace
    name = f"serve-{actor[:3]}"

    def spec(init_gpus: int, resource: str = H100) -> dict[str, Any]:
        return {
            "containers": [{"name": "main", "image": IMAGE}],
            "initContainers": [init_container(gpus(resource, init_gpus))],
            "nodeSelector": dict(MODEL),
        }

    assert who.apply(deployment(name, spec(1)), ns).returncode == 0
    grown = who.apply(deployment(name, spec(9)), ns)
    assert grown.returncode == 1
    assert "[gpu-quota-unfit]" in grown.stderr, grown.stderr
    unknown = who.apply(deployment(name, spec(1, "amd.com/gpu-partition")), ns)
    assert unknown.returncode == 1
    assert "[gpu-resource-unknown]" in unknown.stderr, unknown.stderr
    assert who.apply(deployment(name, spec(2)), ns).returncode == 0  # the legitimate update
    stored = json.loads(arena.stack.admin_kubectl("get", "deployment", name, "-n", ns, "-o", "json"))
    assert stored["spec"]["template"]["spec"]["initContainers"][0]["resources"]["limits"] == {H100: "2"}
    arena.stack.admin_kubectl("delete", "deployment", name, "-n", ns)


@pytest.mark.parametrize("actor", ACTORS)
def test_claim_templates_are_judged_on_update_too(arena: Arena, actor: str) -> None:
    # A ResourceClaimTemplate's spec is immutable, so an UPDATE that reaches labgate changes metadata:
    # it is still judged on what the template asks (the platform's mig template maps to no model).
    who, ns = arena.actor(actor), arena.a.namespace
    refused = who.kubectl("label", "resourceclaimtemplate", "mig-profile", "-n", ns, f"touched-by={actor}")
    assert refused.returncode == 1
    assert "[gpu-dra-unsupported]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr
    allowed = who.kubectl(
        "label", "resourceclaimtemplate", "one-gpu", "-n", ns, f"touched-by={actor}", "--overwrite"
    )
    assert allowed.returncode == 0, allowed.stderr


def resource_claim(name: str, count: int) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def _claim_count(arena: Arena, name: str) -> int:
    stored = json.loads(
        arena.stack.admin_kubectl("get", "resourceclaim", name, "-n", arena.a.namespace, "-o", "json")
    )
    return int(stored["spec"]["devices"]["requests"][0]["exactly"]["count"])


@pytest.mark.parametrize("actor", ACTORS)
def test_a_claim_a_waiting_pod_names_cannot_be_swapped_under_it(arena: Arena, actor: str) -> None:
    # Issue 19: a pod held by a scheduling gate is admitted against a 1-device claim; deleting the
    # claim and creating it again with 8 devices would have the scheduler allocate 8, unjudged.
    who, ns = arena.actor(actor), arena.a.namespace
    name = f"swap-{actor[:3]}"
    assert _create(who, ns, resource_claim(name, 1)).returncode == 0
    waiting = pod(f"{name}-pod", resourceClaims=[{"name": "gpu", "resourceClaimName": name}])
    waiting["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    waiting["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    assert _create(who, ns, waiting).returncode == 0

    refused = who.kubectl("delete", "resourceclaim", name, "-n", ns, "--wait=false")
    assert refused.returncode == 1, refused.stdout
    assert "[dra-claim-in-use]" in refused.stderr, refused.stderr
    assert f'pod "{name}-pod" names it' in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr
    assert _claim_count(arena, name) == 1

    # Gone by the platform's hand (not the tenant's), it may not come back asking more while the
    # pod waits.
    arena.stack.admin_kubectl("delete", "resourceclaim", name, "-n", ns, "--wait=true")
    again = _create(who, ns, resource_claim(name, 8))
    assert again.returncode == 1, again.stdout
    assert "[dra-claim-in-use]" in again.stderr, again.stderr
    assert arena.stack.cluster_kubectl("get", "resourceclaim", name, "-n", ns).returncode == 1
    arena.stack.admin_kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(resource_claim(name, 1)))

    # UPDATE: removing the gate is the legitimate action; the claim stays the one judged.
    ungated = who.kubectl(
        "patch", "pod", f"{name}-pod", "-n", ns, "--type=json",
        "-p", json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]),
    )  # fmt: skip
    assert ungated.returncode == 0, ungated.stderr
    still = who.kubectl("delete", "resourceclaim", name, "-n", ns, "--wait=false")
    assert still.returncode == 1, still.stdout
    assert "[dra-claim-in-use]" in still.stderr, still.stderr

    # Once no live pod names it, the claim is the tenant's to delete and to create again.
    arena.stack.admin_kubectl("delete", "pod", f"{name}-pod", "-n", ns, "--wait=true")
    deleted = who.kubectl("delete", "resourceclaim", name, "-n", ns, "--wait=true")
    assert deleted.returncode == 0, deleted.stderr
    assert _create(who, ns, resource_claim(name, 2)).returncode == 0
    assert _claim_count(arena, name) == 2
    arena.stack.admin_kubectl("delete", "resourceclaim", name, "-n", ns)


# -- the quota, on what the apiserver holds ------------------------------------------------------------


def _pod_gpus(stack: LabgateStack, pod_obj: dict[str, Any]) -> int:
    """The pod's GPUs, counted here: Kubernetes' effective request of every GPU resource, plus the
    devices its claim templates ask (read from the apiserver)."""
    spec, namespace = pod_obj["spec"], pod_obj["metadata"]["namespace"]
    total = sum(reference_request(spec, r) for r in (H100, "amd.com/gpu", "nvidia.com/mig-1g.10gb"))
    for ref in spec.get("resourceClaims") or []:
        template = json.loads(
            stack.admin_kubectl(
                "get",
                "resourceclaimtemplate",
                ref["resourceClaimTemplateName"],
                "-n",
                namespace,
                "-o",
                "json",
            )
        )
        total += sum(r["exactly"].get("count", 1) for r in template["spec"]["spec"]["devices"]["requests"])
    return total


def test_the_quota_holds_on_the_pods_that_exist(stack: LabgateStack) -> None:
    factory = TenantFactory(stack)
    try:
        tenant = factory.create(spec_extra={"gpu": {"total": 6}})
        ns, who = tenant.namespace, tenant.researcher
        stack.admin_kubectl(
            "apply", "-n", ns, "-f", "-", stdin=json.dumps(claim_template("two", "gpu.nvidia.com", 2))
        )
        shapes = [
            pod("init-2", init=[init_container(gpus(H100, 2))]),  # 2
            pod(
                "sidecar-1-main-1", main=gpus(H100, 1), init=[init_container(gpus(H100, 1), sidecar=True)]
            ),  # 2
            dra_pod("claim-2", "two"),  # 2: the quota is full
            pod("init-1", init=[init_container(gpus(H100, 1))]),  # refused
            pod("sidecar-1", init=[init_container(gpus(H100, 1), sidecar=True)]),  # refused
            dra_pod("claim-2-more", "two"),  # refused
        ]
        results = {m["metadata"]["name"]: _create(who, ns, m) for m in shapes}
        assert [n for n, r in results.items() if r.returncode == 0] == [
            "init-2",
            "sidecar-1-main-1",
            "claim-2",
        ]
        for name in ("init-1", "sidecar-1", "claim-2-more"):
            assert "[gpu-quota]" in results[name].stderr, results[name].stderr
        held = json.loads(stack.admin_kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
        assert sorted(p["metadata"]["name"] for p in held) == ["claim-2", "init-2", "sidecar-1-main-1"]
        assert sum(_pod_gpus(stack, p) for p in held) == 6
        # What kubectl get tenant shows is the same number, once the reconciler has settled the pods.
        shown = json.loads(stack.admin_kubectl("get", "tenant", tenant.name, "-o", "json"))
        assert shown.get("status", {}).get("gpu", {}).get("used") in (None, 0, 6)
        stack.admin_kubectl(
            "wait", f"tenant/{tenant.name}", "--for=jsonpath={.status.gpu.used}=6", "--timeout=30s"
        )
    finally:
        factory.cleanup()
