"""End-to-end fixtures: one real control plane with labgate per test session, a fresh tenant and
labelled namespace per test, and researchers who act through the real kubectl."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.image import ImageBuildError, build
from devcluster.kubectl import kubectl
from devcluster.node import node_problem
from devcluster.stack import POLICY_DIR, LabgateStack, NodeSimulation
from tests import isolation_oracle


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


def _cluster_mode(config: pytest.Config) -> str:
    return str(config.getoption("--cluster") or os.environ.get("LABGATE_E2E_CLUSTER", "local"))


def _docker_engine_problem() -> str | None:
    """Why kind cannot run here, or None when a Docker engine answers."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker client on PATH"
    probe = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return f"docker info failed: {(probe.stderr or probe.stdout).strip().splitlines()[-1]}"
    return None


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabgateStack]:
    """The cluster under test with labgate installed."""
    if _cluster_mode(request.config) == "kind":
        problem = _docker_engine_problem()
        if problem is not None:
            pytest.skip(f"kind mode needs a Docker engine ({problem})")
        from tests.e2e.kind import kind_stack

        yield from kind_stack(tmp_path_factory.mktemp("kind"), reconciler_lease_seconds=4)
        return
    # A copy of the policies, so that the hot-reload test can change them on disk; a short lease, so
    # that the failover test sees a takeover in seconds.
    policy_dir = tmp_path_factory.mktemp("policies") / "policies"
    shutil.copytree(POLICY_DIR, policy_dir)
    with LabgateStack(
        tmp_path_factory.mktemp("cluster"), reconciler_lease_seconds=4, policy_dir=policy_dir
    ) as started:
        yield started


@pytest.fixture(scope="session")
def kueue_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabgateStack]:
    """A cluster with simulated nodes (kube-scheduler, every controller, KWOK; no pools yet: tests add
    their own through `kueue_stack.kwok`) and Kueue beside labgate (devcluster/kueue.py): its CRDs,
    its webhooks, Jobs in tenant namespaces queued, and the reconciler provisioning each tenant's
    queues. For tests marked `kueue`; the other tests run without Kueue. The stack's policies trust
    Kueue's service accounts for the whole-requester rules (Kueue is no tenant's member), and its
    queue rules know Kueue manages every tenant and exempt Kueue's controller (KUEUE_USER) for the
    fields it sets at admission only, as LabgateStack(kueue=True) sets them itself; two webhook replicas share the
    quota ledger (issue 20: one quota, two enforcers that agree)."""
    with LabgateStack(
        tmp_path_factory.mktemp("kueue-cluster"),
        reconciler_lease_seconds=4,
        nodes=NodeSimulation(),
        kueue=True,
        webhook_replicas=2,
    ) as started:
        yield started


@pytest.fixture(scope="session")
def kueue_pod_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabgateStack]:
    """The `kueue_stack` cluster with Kueue's pod integration on (pod, Deployment and StatefulSet
    frameworks; the policies' queue.pod_integration, which the reconciler reads too): every pod in a
    tenant namespace waits behind Kueue's scheduling gate until Kueue admits it. A cluster of its own,
    since that changes every bare pod of every tenant (tests/e2e/test_kueue_pod_integration.py)."""
    with LabgateStack(
        tmp_path_factory.mktemp("kueue-pod-cluster"),
        reconciler_lease_seconds=4,
        nodes=NodeSimulation(),
        kueue=True,
        kueue_pod_integration=True,
    ) as started:
        yield started


@pytest.fixture
def kueue_pod_tenants(kueue_pod_stack: LabgateStack) -> Iterator[TenantFactory]:
    """Tenants made for one test in the cluster of Kueue's pod integration (deleted after it)."""
    factory = TenantFactory(kueue_pod_stack)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture
def kueue_tenants(kueue_stack: LabgateStack) -> Iterator[TenantFactory]:
    """Tenants made for one test in the Kueue cluster (deleted after it)."""
    factory = TenantFactory(kueue_stack)
    try:
        yield factory
    finally:
        factory.cleanup()


@dataclass(frozen=True)
class Researcher:
    """A person with a client certificate (CN=name, O=groups), acting through the real kubectl."""

    name: str
    groups: tuple[str, ...]
    kubeconfig: Path

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kubeconfig, *args, stdin=stdin)

    def apply(self, manifest: dict[str, Any], namespace: str) -> subprocess.CompletedProcess[str]:
        # JSON, not YAML: PyYAML writes "3e-4" unquoted and Go's YAML 1.2 reads it back as a number.
        return self.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))


@dataclass(frozen=True)
class TenantUnderTest:
    """A Tenant made for one test, with its labelled namespace and one researcher."""

    name: str
    namespace: str
    researcher: Researcher
    admin: Researcher


class TenantFactory:
    def __init__(self, stack: LabgateStack):
        self.stack = stack
        self.created: list[tuple[str, str]] = []

    def create(
        self,
        *,
        name: str | None = None,
        spec_extra: dict[str, Any] | None = None,
        extra_researchers: list[dict[str, str]] | None = None,
    ) -> TenantUnderTest:
        suffix = uuid.uuid4().hex[:6]
        name = name or f"t-{suffix}"
        group = f"{name}-researchers"
        tenant = {
            "apiVersion": "labgate.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {
                "members": {
                    "admins": [{"kind": "User", "name": f"admin-{suffix}"}],
                    "researchers": [{"kind": "Group", "name": group}, *(extra_researchers or [])],
                },
                "namespaces": {"names": [name]},
                **(spec_extra or {}),
            },
        }
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"labgate.io/tenant": name, "labgate.io/e2e": "true"}},
        }
        # The namespace first: applied together, the reconciler may create it between kubectl's
        # read and its create, and the apply would fail with AlreadyExists.
        self.stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump(namespace))
        self.stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump(tenant))
        self.created.append(("namespace", name))
        self.created.append(("tenant", name))
        # The reconciler provisions the rest (RBAC, quota, policies) and then reports Ready.
        self.stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=30s", f"tenant/{name}")
        researcher = f"researcher-{suffix}"
        return TenantUnderTest(
            name=name,
            namespace=name,
            researcher=Researcher(researcher, (group,), self.stack.kubeconfig_for(researcher, (group,))),
            admin=Researcher(f"admin-{suffix}", (), self.stack.kubeconfig_for(f"admin-{suffix}")),
        )

    def open_rbac(self, namespace: str, *groups: str) -> None:
        """Let `groups` edit workloads in `namespace` (RBAC as permissive as many labs start with), so
        that what refuses them is labgate's admission webhook rather than RBAC."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "e2e-open-edit", "namespace": namespace},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups
            ],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        }
        self.stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump(binding))

    def cleanup(self) -> None:
        for kind, name in reversed(self.created):
            self.stack.admin_kubectl("delete", kind, name, "--wait=false", "--ignore-not-found")


@pytest.fixture
def tenants(stack: LabgateStack) -> Iterator[TenantFactory]:
    factory = TenantFactory(stack)
    try:
        yield factory
    finally:
        factory.cleanup()


def pod_manifest(name: str, *, image: str = "registry.lab.example/research/trainer:v1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": image, "command": ["python", "train.py"]}]},
    }


def tenant_pool(tenant: str, *, spot: bool = True) -> dict[str, Any]:
    """A Tenant's node pool named after it, spot or on-demand, tainted for it (spec.placement.nodePools)."""
    name = f"{tenant}-{'spot' if spot else 'ondemand'}"
    return {
        "name": name,
        "nodeSelector": {"labgate.io/node-pool": name},
        "tolerations": [
            {"key": "labgate.io/pool", "operator": "Equal", "value": name, "effect": "NoSchedule"}
        ],
        "spot": spot,
    }


def isolation_violations(stack: LabgateStack) -> list[str]:
    """The isolation oracle (tests/isolation_oracle.py) on what the cluster holds now, listed as the
    cluster admin; a resource the API does not serve is an empty list."""

    def list_items(resource: str) -> list[Any]:
        listed = stack.cluster_kubectl("get", resource, "-A", "-o", "json")
        if listed.returncode != 0:
            if "doesn't have a resource type" in listed.stderr:
                return []
            raise AssertionError(f"kubectl get {resource}: {listed.stderr}")
        return list(json.loads(listed.stdout)["items"])

    return isolation_oracle.violations(isolation_oracle.collect(list_items))


def labgate_image_or_skip() -> Path:
    """The labgate image's OCI archive for the `node` tests (devcluster.image builds it); the test is
    skipped, with the reason, where a real node cannot run or the image cannot be built here."""
    problem = node_problem()
    if problem is not None:
        pytest.skip(f"a real node cannot run here: {problem}")
    try:
        return build().archive
    except ImageBuildError as error:
        pytest.skip(f"the labgate image cannot be built here: {error}")


def poll(check: Callable[[], bool], what: str | Callable[[], str], *, timeout: float = 90.0) -> None:
    """Poll `check` (bounded) until it returns true; `what` (or what it returns) names it on failure."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what() if callable(what) else what}: not within {timeout:.0f}s"
        time.sleep(0.5)


def is_pod_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def provision_tenant(admin_kubeconfig: Path, name: str, spec: dict[str, Any]) -> None:
    """Apply a Tenant of one namespace (`name`, labelled for it) with `spec` beside its namespaces,
    as the cluster admin, and wait until labgate's reconciler reports it Ready (the node tests, where
    the chart's reconciler provisions it)."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"labgate.io/tenant": name}},
    }
    tenant = {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"namespaces": {"names": [name]}, **spec},
    }
    # The namespace first (see TenantFactory.create).
    for manifest in (namespace, tenant):
        applied = kubectl(admin_kubeconfig, "apply", "-f", "-", stdin=json.dumps(manifest))
        assert applied.returncode == 0, applied.stderr
    waited = kubectl(admin_kubeconfig, "wait", "--for=condition=Ready", "--timeout=120s", f"tenant/{name}")
    assert waited.returncode == 0, waited.stderr
