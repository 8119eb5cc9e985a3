"""The tenant-escape matrix: one tenant's researchers and admins try to reach, impersonate, starve or
break another tenant through the real kubectl; every attempt must be refused with the right rule id,
and the matching legitimate action must be admitted.

RBAC here is deliberately too open (tenant A's researchers may edit in B's namespace, as many labs
start out), so that what refuses the cross-tenant attempts is labgate's admission policy.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from devcluster.stack import LabgateStack
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest

pytestmark = [pytest.mark.tenancy, pytest.mark.network, pytest.mark.secrets, pytest.mark.quota]

IMAGE = "registry.lab.example/research/trainer:v1"


@dataclass(frozen=True)
class Arena:
    a: TenantUnderTest
    b: TenantUnderTest
    stack: LabgateStack

    def actor(self, who: str) -> Researcher:
        return {"researcher": self.a.researcher, "admin": self.a.admin}[who]

    def namespace(self, which: str) -> str:
        return {"A": self.a.namespace, "B": self.b.namespace}[which]


def _pool(tenant: str, *, spot: bool) -> dict[str, Any]:
    name = f"{tenant}-{'spot' if spot else 'ondemand'}"
    return {
        "name": name,
        "nodeSelector": {"labgate.io/node-pool": name},
        "tolerations": [
            {"key": "labgate.io/pool", "operator": "Equal", "value": name, "effect": "NoSchedule"}
        ],
        "spot": spot,
    }


@pytest.fixture(scope="module")
def arena(stack: LabgateStack) -> Iterator[Arena]:
    factory = TenantFactory(stack)
    try:
        suffix = uuid.uuid4().hex[:4]
        a_name, b_name = f"esc-a-{suffix}", f"esc-b-{suffix}"
        a = factory.create(
            name=a_name,
            spec_extra={
                "namespaces": {"names": [a_name], "prefix": f"{a_name}-"},
                "gpu": {"total": 8, "models": {"h100": 8}},
                "placement": {"nodePools": [_pool(a_name, spot=True)], "allowOnDemand": False},
                "network": {"allowEgress": False},
            },
        )
        b = factory.create(
            name=b_name,
            spec_extra={
                "namespaces": {"names": [b_name], "prefix": f"{b_name}-"},
                "gpu": {"total": 8},
                "placement": {"nodePools": [_pool(b_name, spot=False)], "allowOnDemand": True},
            },
            # B trusts a CI service account that lives in A's namespace: A must not mint its tokens.
            extra_researchers=[{"kind": "ServiceAccount", "namespace": a_name, "name": "runner"}],
        )
        factory.open_rbac(b.namespace, *a.researcher.groups)
        ns = a.namespace
        stack.admin_kubectl("create", "serviceaccount", "trainer", "-n", ns)
        stack.admin_kubectl("create", "serviceaccount", "runner", "-n", ns)
        restricted = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "trainer-key",
                "namespace": ns,
                "annotations": {"labgate.io/restricted-to-service-account": "trainer"},
            },
            "stringData": {"key": "k"},
        }
        stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump(restricted))
        yield Arena(a=a, b=b, stack=stack)
    finally:
        factory.cleanup()


# -- manifests -------------------------------------------------------------------------------------


def pod(name: str, **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    annotations = spec.pop("annotations", {})
    containers = spec.pop("containers", [{"name": "main", "image": IMAGE}])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"containers": containers, **spec},
    }


def gpu(n: int, model: str | None = "h100", **spec: Any) -> dict[str, Any]:
    selector = {"nvidia.com/gpu.product": model} if model else {}
    selector.update(spec.pop("nodeSelector", {}))
    return {
        "containers": [{"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": str(n)}}}],
        "nodeSelector": selector,
        **spec,
    }


def job(
    name: str, *, parallelism: int = 1, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    template_spec = {"containers": [{"name": "main", "image": IMAGE}], "restartPolicy": "Never", **spec}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "template": {"metadata": {"labels": labels or {}}, "spec": template_spec},
        },
    }


def deployment(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "m", "image": IMAGE}], **spec},
            },
        },
    }


def simple(kind: str, name: str, api: str = "v1", **body: Any) -> dict[str, Any]:
    labels = body.pop("labels", {})
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "labels": labels}, **body}


def netpol(
    name: str,
    *,
    ingress: list[Any] | None = None,
    egress: list[Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {}, "policyTypes": []}
    if ingress is not None:
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = ingress
    if egress is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = egress
    return simple("NetworkPolicy", name, "networking.k8s.io/v1", spec=spec, labels=labels or {})


def from_tenant(tenant: str) -> list[Any]:
    return [{"from": [{"namespaceSelector": {"matchLabels": {"labgate.io/tenant": tenant}}}]}]


def namespace(name: str, tenant: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"labgate.io/tenant": tenant}},
    }


def cronjob(name: str) -> dict[str, Any]:
    return simple(
        "CronJob", name, "batch/v1", spec={"schedule": "0 * * * *", "jobTemplate": {"spec": job("t")["spec"]}}
    )


# -- attempts ------------------------------------------------------------------------------------

Build = Callable[[Arena], dict[str, Any]]


@dataclass(frozen=True)
class Attempt:
    """An escape attempt (refused with `rule`) and the legitimate action it mirrors (admitted)."""

    id: str
    rule: str
    actor: str  # "researcher" or "admin" of tenant A
    where: str  # "A", "B" or "cluster"
    attempt: Build
    allowed: Build
    allowed_where: str = "A"


def _token(name: str, account: str) -> Build:
    def build(_: Arena) -> dict[str, Any]:
        secret = simple("Secret", name, type="kubernetes.io/service-account-token")
        secret["metadata"]["annotations"] = {"kubernetes.io/service-account.name": account}
        return secret

    return build


def _restricted_secret_pod(name: str, account: str | None, how: str) -> Build:
    def build(_: Arena) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "main", "image": IMAGE}
        volumes: list[Any] = []
        if how == "env":
            container["env"] = [
                {"name": "K", "valueFrom": {"secretKeyRef": {"name": "trainer-key", "key": "key"}}}
            ]
        elif how == "envFrom":
            container["envFrom"] = [{"secretRef": {"name": "trainer-key"}}]
        elif how == "volume":
            volumes = [{"name": "k", "secret": {"secretName": "trainer-key"}}]
        else:
            volumes = [{"name": "k", "projected": {"sources": [{"secret": {"name": "trainer-key"}}]}}]
        spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
        if account:
            spec["serviceAccountName"] = account
        return pod(name, **spec)

    return build


ATTEMPTS: list[Attempt] = [
    # Workloads and objects in the other tenant's namespace (RBAC would let A; labgate must not).
    Attempt(
        "pod-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: pod("x1"),
        lambda _: pod("x1"),
    ),
    Attempt(
        "job-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: job("x2"),
        lambda _: job("x2"),
    ),
    Attempt(
        "cronjob-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: cronjob("x3"),
        lambda _: cronjob("x3"),
    ),
    Attempt(
        "deployment-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: deployment("x4"),
        lambda _: deployment("x4"),
    ),
    Attempt(
        "statefulset-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: simple(
            "StatefulSet", "x5", "apps/v1", spec=deployment("x5")["spec"] | {"serviceName": "x5"}
        ),
        lambda _: simple(
            "StatefulSet", "x5", "apps/v1", spec=deployment("x5")["spec"] | {"serviceName": "x5"}
        ),
    ),
    Attempt(
        "configmap-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: simple("ConfigMap", "x6", data={"a": "b"}),
        lambda _: simple("ConfigMap", "x6", data={"a": "b"}),
    ),
    Attempt(
        "secret-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: simple("Secret", "x7", stringData={"a": "b"}),
        lambda _: simple("Secret", "x7", stringData={"a": "b"}),
    ),
    Attempt(
        "service-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: simple("Service", "x8", spec={"ports": [{"port": 80}]}),
        lambda _: simple("Service", "x8", spec={"ports": [{"port": 80}]}),
    ),
    Attempt(
        "serviceaccount-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda _: simple("ServiceAccount", "x9"),
        lambda _: simple("ServiceAccount", "x9"),
        allowed_where="A-admin",
    ),
    Attempt(
        "networkpolicy-in-other-namespace",
        "tenant-membership",
        "researcher",
        "B",
        lambda ar: netpol("x10", ingress=from_tenant(ar.a.name)),
        lambda ar: netpol("x10", ingress=from_tenant(ar.a.name)),
        allowed_where="A-admin",
    ),
    # Claiming another tenant's identity from one's own namespace.
    Attempt(
        "pod-labelled-as-other-tenant",
        "tenant-identity-claim",
        "researcher",
        "A",
        lambda ar: pod("y1", labels={"labgate.io/tenant": ar.b.name}),
        lambda ar: pod("y1", labels={"labgate.io/tenant": ar.a.name}),
    ),
    Attempt(
        "configmap-labelled-as-other-tenant",
        "tenant-identity-claim",
        "researcher",
        "A",
        lambda ar: simple("ConfigMap", "y2", labels={"labgate.io/tenant": ar.b.name}),
        lambda ar: simple("ConfigMap", "y2", labels={"labgate.io/tenant": ar.a.name}),
    ),
    Attempt(
        "job-template-labelled-as-other-tenant",
        "tenant-identity-claim",
        "researcher",
        "A",
        lambda ar: job("y3", labels={"labgate.io/tenant": ar.b.name}),
        lambda ar: job("y3", labels={"team": "a"}),
    ),
    # Namespaces.
    Attempt(
        "namespace-under-other-tenants-prefix",
        "namespace-tenant-member",
        "researcher",
        "cluster",
        lambda ar: namespace(f"{ar.b.name}-stolen", ar.b.name),
        lambda ar: namespace(f"{ar.a.name}-mine", ar.a.name),
        allowed_where="cluster",
    ),
    Attempt(
        "namespace-outside-prefix",
        "namespace-prefix",
        "researcher",
        "cluster",
        lambda ar: namespace(f"free-{ar.a.name}", ar.a.name),
        lambda ar: namespace(f"{ar.a.name}-two", ar.a.name),
        allowed_where="cluster",
    ),
    Attempt(
        "namespace-with-other-prefix-but-own-label",
        "namespace-prefix",
        "researcher",
        "cluster",
        lambda ar: namespace(f"{ar.b.name}-sneaky", ar.a.name),
        lambda ar: namespace(f"{ar.a.name}-three", ar.a.name),
        allowed_where="cluster",
    ),
    # Host access, refused at apply time for workloads (Pod Security only warns on templates).
    Attempt(
        "job-hostpath",
        "pod-hardening",
        "researcher",
        "A",
        lambda _: job("h1", volumes=[{"name": "h", "hostPath": {"path": "/var/lib/kubelet"}}]),
        lambda _: job("h1", volumes=[{"name": "h", "emptyDir": {}}]),
    ),
    Attempt(
        "job-hostnetwork",
        "pod-hardening",
        "researcher",
        "A",
        lambda _: job("h2", hostNetwork=True),
        lambda _: job("h2"),
    ),
    Attempt(
        "job-hostpid",
        "pod-hardening",
        "researcher",
        "A",
        lambda _: job("h3", hostPID=True),
        lambda _: job("h3"),
    ),
    Attempt(
        "job-hostipc",
        "pod-hardening",
        "researcher",
        "A",
        lambda _: job("h4", hostIPC=True),
        lambda _: job("h4"),
    ),
    Attempt(
        "deployment-privileged",
        "pod-hardening",
        "researcher",
        "A",
        lambda _: deployment(
            "h5", containers=[{"name": "m", "image": IMAGE, "securityContext": {"privileged": True}}]
        ),
        lambda _: deployment("h5"),
    ),
    Attempt(
        "job-privileged-init-container",
        "pod-hardening",
        "researcher",
        "A",
        lambda _: job(
            "h6", initContainers=[{"name": "i", "image": IMAGE, "securityContext": {"privileged": True}}]
        ),
        lambda _: job("h6", initContainers=[{"name": "i", "image": IMAGE}]),
    ),
    # GPUs: starving the others.
    Attempt(
        "pod-over-gpu-quota",
        "gpu-quota",
        "researcher",
        "A",
        lambda _: pod("g1", **gpu(9)),
        lambda _: pod("g1", **gpu(1)),
    ),
    Attempt(
        "job-that-can-never-fit",
        "gpu-quota-unfit",
        "researcher",
        "A",
        lambda _: job("g2", parallelism=3, **gpu(4)),
        lambda _: job("g2", parallelism=2, **gpu(1)),
    ),
    Attempt(
        "pod-unknown-gpu-model",
        "gpu-model-unknown",
        "researcher",
        "A",
        lambda _: pod("g3", **gpu(1, model="b200")),
        lambda _: pod("g3", **gpu(1)),
    ),
    Attempt(
        "pod-on-other-tenants-pool",
        "placement-pool",
        "researcher",
        "A",
        lambda ar: pod("g4", **gpu(1, nodeSelector={"labgate.io/node-pool": f"{ar.b.name}-ondemand"})),
        lambda ar: pod("g4", **gpu(1, nodeSelector={"labgate.io/node-pool": f"{ar.a.name}-spot"})),
    ),
    Attempt(
        "pod-tolerating-other-tenants-taint",
        "placement-pool",
        "researcher",
        "A",
        lambda ar: pod(
            "g5",
            **gpu(
                1,
                tolerations=[
                    {
                        "key": "labgate.io/pool",
                        "operator": "Equal",
                        "value": f"{ar.b.name}-ondemand",
                        "effect": "NoSchedule",
                    }
                ],
            ),
        ),
        lambda ar: pod(
            "g5",
            **gpu(
                1,
                tolerations=[
                    {
                        "key": "labgate.io/pool",
                        "operator": "Equal",
                        "value": f"{ar.a.name}-spot",
                        "effect": "NoSchedule",
                    }
                ],
            ),
        ),
    ),
    Attempt(
        "pod-on-demand-without-permission",
        "placement-on-demand",
        "researcher",
        "A",
        lambda _: pod("g6", annotations={"labgate.io/capacity": "on-demand"}, **gpu(1)),
        lambda _: pod("g6", **gpu(1)),
    ),
    # Secrets and service accounts.
    Attempt(
        "token-for-privileged-service-account",
        "service-account-token",
        "researcher",
        "A",
        _token("s1", "labgate-reconciler"),
        _token("s1", "trainer"),
    ),
    Attempt(
        "token-for-other-tenants-member-account",
        "service-account-token",
        "researcher",
        "A",
        _token("s2", "runner"),
        _token("s2", "trainer"),
    ),
    Attempt(
        "job-as-privileged-service-account",
        "privileged-service-account",
        "researcher",
        "A",
        lambda _: job("s3", serviceAccountName="labgate-reconciler"),
        lambda _: job("s3", serviceAccountName="trainer"),
    ),
    Attempt(
        "pod-reads-restricted-secret-env",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s4", None, "env"),
        _restricted_secret_pod("s4", "trainer", "env"),
    ),
    Attempt(
        "pod-reads-restricted-secret-envfrom",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s5", None, "envFrom"),
        _restricted_secret_pod("s5", "trainer", "envFrom"),
    ),
    Attempt(
        "pod-mounts-restricted-secret",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s6", "default", "volume"),
        _restricted_secret_pod("s6", "trainer", "volume"),
    ),
    Attempt(
        "pod-projects-restricted-secret",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s7", None, "projected"),
        _restricted_secret_pod("s7", "trainer", "projected"),
    ),
    # Network policies (tenant admins may write them, within the tenant).
    Attempt(
        "netpol-ingress-from-other-tenant",
        "network-policy-peer",
        "admin",
        "A",
        lambda ar: netpol("n1", ingress=from_tenant(ar.b.name)),
        lambda ar: netpol("n1", ingress=from_tenant(ar.a.name)),
    ),
    Attempt(
        "netpol-ingress-from-every-namespace",
        "network-policy-peer",
        "admin",
        "A",
        lambda _: netpol("n2", ingress=[{"from": [{"namespaceSelector": {}}]}]),
        lambda ar: netpol("n2", ingress=from_tenant(ar.a.name)),
    ),
    Attempt(
        "netpol-egress-to-other-tenant-by-expression",
        "network-policy-peer",
        "admin",
        "A",
        lambda ar: netpol(
            "n3",
            egress=[
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {"key": "labgate.io/tenant", "operator": "In", "values": [ar.b.name]}
                                ]
                            }
                        }
                    ]
                }
            ],
        ),
        lambda ar: netpol(
            "n3",
            egress=[
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {"key": "labgate.io/tenant", "operator": "In", "values": [ar.a.name]}
                                ]
                            }
                        }
                    ]
                }
            ],
        ),
    ),
    Attempt(
        "netpol-egress-to-the-internet-when-egress-is-off",
        "network-policy-peer",
        "admin",
        "A",
        lambda _: netpol("n4", egress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]),
        lambda ar: netpol(
            "n4", egress=[{"to": [{"namespaceSelector": {"matchLabels": {"labgate.io/tenant": ar.a.name}}}]}]
        ),
    ),
    Attempt(
        "netpol-posing-as-baseline",
        "network-policy-baseline",
        "admin",
        "A",
        lambda ar: netpol(
            "n5", ingress=from_tenant(ar.a.name), labels={"app.kubernetes.io/managed-by": "labgate"}
        ),
        lambda ar: netpol(
            "n5", ingress=from_tenant(ar.a.name), labels={"app.kubernetes.io/managed-by": "team"}
        ),
    ),
]


def _run(arena: Arena, actor: str, where: str, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    if where == "A-admin":
        return arena.a.admin.apply(manifest, arena.a.namespace)
    who = arena.actor(actor)
    if where == "cluster":
        return who.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    return who.kubectl("create", "-n", arena.namespace(where), "-f", "-", stdin=json.dumps(manifest))


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.id for a in ATTEMPTS])
def test_escape_attempt_is_refused_and_the_legitimate_action_admitted(arena: Arena, attempt: Attempt) -> None:
    refused = _run(arena, attempt.actor, attempt.where, attempt.attempt(arena))
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert f"[{attempt.rule}]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr
    allowed = _run(arena, attempt.actor, attempt.allowed_where, attempt.allowed(arena))
    assert allowed.returncode == 0, allowed.stderr
    manifest = attempt.allowed(arena)
    if manifest["kind"] == "Namespace":
        arena.stack.admin_kubectl("delete", "namespace", manifest["metadata"]["name"], "--wait=false")


def test_baseline_network_policies_cannot_be_edited_or_deleted(arena: Arena) -> None:
    admin, ns = arena.a.admin, arena.a.namespace
    edited = admin.kubectl(
        "patch",
        "networkpolicy",
        "labgate-baseline-ingress",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"ingress":[{}]}}',
    )
    assert edited.returncode == 1
    assert "[network-policy-baseline]" in edited.stderr
    deleted = admin.kubectl("delete", "networkpolicy", "labgate-baseline-egress", "-n", ns)
    assert deleted.returncode == 1
    assert "[network-policy-baseline]" in deleted.stderr
    assert (
        arena.stack.cluster_kubectl("get", "networkpolicy", "labgate-baseline-egress", "-n", ns).returncode
        == 0
    )
