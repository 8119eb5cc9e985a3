"""The escape matrix, isolation rows (issue 19): what a tenant's pods end up bound to, whoever creates
the objects. Each attempt, through the real kubectl as tenant A's researcher and as its admin, on
CREATE and (where the API lets the field change) UPDATE, in every workload kind that can carry it,
is refused with its rule id, and the legitimate action it mirrors is admitted. Claims that
Kubernetes' own controllers create from a tenant's template are tried as those controllers.

The arena (tenants A and B, A's, B's and a platform volume) is test_escape_matrix's, set up again for
this module.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devcluster.nodes import MODEL_LABEL, POOL_LABEL, NodePool, tenant_placement
from devcluster.stack import POLICY_DIR, LabgateStack, NodeSimulation
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest, isolation_violations
from tests.e2e.test_escape_matrix import (
    IMAGE,
    TRAINING_KINDS,
    Arena,
    Attempt,
    Build,
    _as_both,
    _pv,
    _run,
    arena,
    claim,
    cronjob,
    deployment,
    job,
    pod,
    simple,
    training,
)

__all__ = ["arena"]  # the fixture, imported to be set up for this module

pytestmark = [pytest.mark.tenancy, pytest.mark.quota]

# -- manifests -------------------------------------------------------------------------------------


def _claim_spec(**extra: Any) -> dict[str, Any]:
    return {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "",
        **extra,
    }


def _ephemeral(**claim: Any) -> list[dict[str, Any]]:
    return [{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": _claim_spec(**claim)}}}]


def _mounting() -> list[dict[str, Any]]:
    return [{"name": "main", "image": IMAGE, "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]


def _carrying(kind: str, name: str, volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """A `kind` whose pod template mounts `volumes`."""
    if kind == "Pod":
        return pod(name, containers=_mounting(), volumes=volumes)
    if kind == "Job":
        return job(name, containers=_mounting(), volumes=volumes)
    if kind == "Deployment":
        return deployment(name, containers=_mounting(), volumes=volumes)
    if kind == "CronJob":
        made = cronjob(name)
        made["spec"]["jobTemplate"]["spec"]["template"]["spec"].update(
            containers=_mounting(), volumes=volumes
        )
        return made
    assert kind == "StatefulSet"
    made = deployment(name, containers=_mounting(), volumes=volumes)
    made["kind"] = "StatefulSet"
    made["spec"]["serviceName"] = name
    return made


def _statefulset_claims(name: str, **claim: Any) -> dict[str, Any]:
    made = _carrying("StatefulSet", name, [])
    made["spec"]["template"]["spec"]["containers"] = _mounting()
    made["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": _claim_spec(**claim)}]
    return made


def _ephemeral_of(kind: str, name: str, tenant: str) -> Build:
    return lambda ar: _carrying(kind, name, _ephemeral(volumeName=_pv(tenant)(ar)))


def _selecting(name: str, labels: Any) -> Build:
    return lambda ar: simple(
        "PersistentVolumeClaim", name, spec=_claim_spec(selector={"matchLabels": labels(ar)})
    )


def _unconfined_ephemeral(kind: str, name: str, *, own: bool) -> Build:
    def build(ar: Arena) -> dict[str, Any]:
        labels = {"labgate.io/tenant": ar.a.name} if own else {}
        return _carrying(kind, name, _ephemeral(selector={"matchLabels": labels}))

    return build


# Kinds whose pod template may change after creation (a Job's and a Pod's may not).
_TEMPLATE_UPDATABLE = {"Deployment", "CronJob", "StatefulSet"}

ATTEMPTS: list[Attempt] = [
    # Finding 1: another tenant's (or the platform's) volume through a claim template.
    *[
        row
        for kind in ("Pod", "Job", "Deployment", "CronJob", "StatefulSet")
        for tenant in ("B", "none")
        for row in _as_both(
            Attempt(
                f"{kind.lower()}-ephemeral-volume-names-{'other-tenants' if tenant == 'B' else 'platform'}-volume",
                "volume-claim-template",
                "researcher",
                "A",
                _ephemeral_of(kind, f"e-{kind.lower()}-{tenant.lower()}", tenant),
                _ephemeral_of(kind, f"e-{kind.lower()}-{tenant.lower()}", "A"),
                update=kind in _TEMPLATE_UPDATABLE,
            )
        )
    ],
    *_as_both(
        Attempt(
            "statefulset-claim-template-names-other-tenants-volume",
            "volume-claim-template",
            "researcher",
            "A",
            lambda ar: _statefulset_claims("sts-b", volumeName=_pv("B")(ar)),
            lambda ar: _statefulset_claims("sts-b", volumeName=_pv("A")(ar)),
        )
    ),
    *_as_both(
        Attempt(
            "statefulset-claim-template-selects-any-volume",
            "volume-claim-selector",
            "researcher",
            "A",
            lambda _: _statefulset_claims("sts-sel", selector={"matchLabels": {"dataset": "imagenet"}}),
            lambda ar: _statefulset_claims(
                "sts-sel", selector={"matchLabels": {"labgate.io/tenant": ar.a.name, "dataset": "imagenet"}}
            ),
        )
    ),
    *_as_both(
        Attempt(
            "pvc-selector-could-match-other-tenants-volumes",
            "volume-claim-selector",
            "researcher",
            "A",
            _selecting("sel", lambda _: {"dataset": "imagenet"}),
            _selecting("sel", lambda ar: {"labgate.io/tenant": ar.a.name, "dataset": "imagenet"}),
        )
    ),
    *_as_both(
        Attempt(
            "pvc-selector-names-other-tenants-label",
            "volume-claim-selector",
            "researcher",
            "A",
            _selecting("sel2", lambda ar: {"labgate.io/tenant": ar.b.name}),
            _selecting("sel2", lambda ar: {"labgate.io/tenant": ar.a.name}),
        )
    ),
    *[
        row
        for kind in ("Pod", "Deployment")
        for row in _as_both(
            Attempt(
                f"{kind.lower()}-ephemeral-volume-selects-any-volume",
                "volume-claim-selector",
                "researcher",
                "A",
                _unconfined_ephemeral(kind, f"es-{kind.lower()}", own=False),
                _unconfined_ephemeral(kind, f"es-{kind.lower()}", own=True),
                update=kind in _TEMPLATE_UPDATABLE,
            )
        )
    ],
]


# Finding 5: GPUs without a GPU request, through the variables and mounts container toolkits read.
def _env(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"name": n, "value": v} for n, v in pairs]


def _with_containers(kind: str, name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    if kind == "Pod":
        return pod(name, containers=containers, **spec)
    if kind == "Job":
        return job(name, containers=containers, **spec)
    if kind == "Deployment":
        return deployment(name, containers=containers, **spec)
    if kind == "CronJob":
        made = cronjob(name)
        made["spec"]["jobTemplate"]["spec"]["template"]["spec"].update(containers=containers, **spec)
        return made
    assert kind == "StatefulSet"
    made = deployment(name, containers=containers, **spec)
    made["kind"] = "StatefulSet"
    made["spec"]["serviceName"] = name
    return made


def _device_env(kind: str, name: str, variable: str | None) -> Build:
    pairs = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID")] + ([(variable, "all")] if variable else [])
    return lambda _: _with_containers(kind, name, [{"name": "main", "image": IMAGE, "env": _env(*pairs)}])


DEVICE_ATTEMPTS: list[Attempt] = [
    *[
        row
        for kind in ("Pod", "Job", "Deployment", "CronJob", "StatefulSet")
        for variable in ("NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
        for row in _as_both(
            Attempt(
                f"{kind.lower()}-sets-{variable.lower().replace('_', '-')}",
                "device-visibility",
                "researcher",
                "A",
                _device_env(kind, f"d-{kind.lower()}-{variable[:4].lower()}", variable),
                _device_env(kind, f"d-{kind.lower()}-{variable[:4].lower()}", None),
                update=kind in _TEMPLATE_UPDATABLE,
            )
        )
    ],
    *[
        row
        for variable in (
            "NVIDIA_DRIVER_CAPABILITIES",
            "NVIDIA_MIG_CONFIG_DEVICES",
            "NVIDIA_MIG_MONITOR_DEVICES",
            "HIP_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
            "ZE_AFFINITY_MASK",
        )
        for row in _as_both(
            Attempt(
                f"deployment-sets-{variable.lower().replace('_', '-')}",
                "device-visibility",
                "researcher",
                "A",
                _device_env("Deployment", f"dv-{variable.lower().replace('_', '-')}", variable),
                _device_env("Deployment", f"dv-{variable.lower().replace('_', '-')}", None),
                update=True,
            )
        )
    ],
    *_as_both(
        Attempt(
            "init-container-sets-nvidia-visible-devices",
            "device-visibility",
            "researcher",
            "A",
            lambda _: pod(
                "d-init",
                initContainers=[
                    {"name": "prep", "image": IMAGE, "env": _env(("NVIDIA_VISIBLE_DEVICES", "all"))}
                ],
            ),
            lambda _: pod(
                "d-init",
                initContainers=[
                    {"name": "prep", "image": IMAGE, "env": _env(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"))}
                ],
            ),
        )
    ),
    *_as_both(
        Attempt(
            "env-from-prefix-makes-a-device-variable",
            "device-visibility",
            "researcher",
            "A",
            lambda _: _with_containers(
                "Deployment",
                "d-pfx",
                [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "envFrom": [{"configMapRef": {"name": "cfg", "optional": True}, "prefix": "NVIDIA_"}],
                    }
                ],
            ),
            lambda _: _with_containers(
                "Deployment",
                "d-pfx",
                [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "envFrom": [{"configMapRef": {"name": "cfg", "optional": True}, "prefix": "APP_"}],
                    }
                ],
            ),
            update=True,
        )
    ),
    *_as_both(
        Attempt(
            "mount-at-the-nvidia-device-list-path",
            "device-visibility",
            "researcher",
            "A",
            lambda _: _with_containers(
                "Job",
                "d-mnt",
                [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "volumeMounts": [{"name": "l", "mountPath": "/var/run/nvidia-container-devices/all"}],
                    }
                ],
                volumes=[{"name": "l", "emptyDir": {}}],
            ),
            lambda _: _with_containers(
                "Job",
                "d-mnt",
                [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "volumeMounts": [{"name": "l", "mountPath": "/var/run/cache"}],
                    }
                ],
                volumes=[{"name": "l", "emptyDir": {}}],
            ),
        )
    ),
    *_as_both(
        Attempt(
            "configmap-holds-a-device-variable-for-env-from",
            "device-visibility",
            "researcher",
            "A",
            lambda _: simple("ConfigMap", "d-cm", data={"NVIDIA_VISIBLE_DEVICES": "all"}),
            lambda _: simple("ConfigMap", "d-cm", data={"BATCH_SIZE": "64"}),
            update=True,
        )
    ),
    *[
        row
        # (these two build their pods from fields of their own: their rows follow)
        for key in sorted(TRAINING_KINDS.keys() - {"trainjob", "workflow-podspecpatch"})
        for row in _as_both(
            Attempt(
                f"{key}-sets-nvidia-visible-devices-in-a-list-of-templates",
                "device-visibility",
                "researcher",
                "A",
                training(
                    key,
                    f"dk-{key}",
                    [{"name": "main", "image": IMAGE, "env": _env(("NVIDIA_VISIBLE_DEVICES", "all"))}],
                ),
                training(key, f"dk-{key}", [{"name": "main", "image": IMAGE}]),
                update=True,
            )
        )
    ],
]


def _trainjob(name: str, variable: str | None) -> Build:
    def build(_: Arena) -> dict[str, Any]:
        kind, api, spec = TRAINING_KINDS["trainjob"]
        body = spec([{"name": "main", "image": IMAGE}])
        body["trainer"]["env"] = _env(
            *([(variable, "all")] if variable else [("CUDA_DEVICE_ORDER", "PCI_BUS_ID")])
        )
        return simple(kind, name, api, spec=body)

    return build


def _patched_workflow(name: str, variable: str | None) -> Build:
    def build(_: Arena) -> dict[str, Any]:
        kind, api, spec = TRAINING_KINDS["workflow"]
        body = spec([{"name": "main", "image": IMAGE}])
        env = _env(*([(variable, "all")] if variable else [("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]))
        body["templates"][1]["podSpecPatch"] = json.dumps({"containers": [{"name": "main", "env": env}]})
        return simple(kind, name, api, spec=body)

    return build


DEVICE_ATTEMPTS += [
    row
    for key, build in (("trainjob", _trainjob), ("workflow-podspecpatch", _patched_workflow))
    for row in _as_both(
        Attempt(
            f"{key}-sets-nvidia-visible-devices",
            "device-visibility",
            "researcher",
            "A",
            build(f"dk-{key}", "NVIDIA_VISIBLE_DEVICES"),
            build(f"dk-{key}", None),
            update=True,
        )
    )
]
ATTEMPTS += DEVICE_ATTEMPTS


# Finding 6: DRA admin access (devices other pods, other tenants' included, hold).
def _gpu_claim(kind: str, name: str, *, admin: bool) -> Build:
    request: dict[str, Any] = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    if admin:
        request["exactly"]["adminAccess"] = True
    spec = {"devices": {"requests": [request]}}
    body = {"spec": spec} if kind == "ResourceClaim" else {"spec": {"spec": spec}}
    return lambda _: simple(kind, name, "resource.k8s.io/v1", **body)


def _monitor_namespace(*, labelled: bool, admin: bool) -> Build:
    def build(ar: Arena) -> dict[str, Any]:
        labels = {"resource.kubernetes.io/admin-access": "true"} if labelled else {}
        return simple("Namespace", f"{ar.a.name}-mon{'-adm' if admin else ''}", labels=labels)

    return build


ATTEMPTS += [
    *[
        Attempt(
            f"namespace-created-with-the-admin-access-label-{who}",
            "namespace-admin-access",
            who,
            "cluster",
            _monitor_namespace(labelled=True, admin=who == "admin"),
            _monitor_namespace(labelled=False, admin=who == "admin"),
            allowed_where="cluster",
        )
        for who in ("researcher", "admin")
    ],
]


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.id for a in ATTEMPTS])
def test_isolation_attempt_is_refused_and_the_legitimate_action_admitted(
    arena: Arena, attempt: Attempt
) -> None:
    refused = _run(arena, attempt.actor, attempt.where, attempt.attempt(arena))
    allowed = _run(arena, attempt.actor, attempt.allowed_where, attempt.allowed(arena))
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert f"[{attempt.rule}]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr
    assert allowed.returncode == 0, allowed.stderr
    if attempt.allowed(arena)["kind"] == "Namespace":
        arena.stack.admin_kubectl(
            "delete", "namespace", attempt.allowed(arena)["metadata"]["name"], "--wait=false"
        )


UPDATES = [a for a in ATTEMPTS if a.update]


@pytest.mark.parametrize("attempt", UPDATES, ids=[a.id for a in UPDATES])
def test_isolation_attempt_is_refused_on_update(arena: Arena, attempt: Attempt) -> None:
    """The legitimate object is admitted, then the attempt applied over it (an UPDATE) is refused."""
    who, namespace = arena.actor(attempt.actor), arena.namespace(attempt.allowed_where)
    allowed, changed = attempt.allowed(arena), attempt.attempt(arena)
    name = f"{allowed['metadata']['name']}-upd"
    allowed["metadata"]["name"] = changed["metadata"]["name"] = name
    created = who.apply(allowed, namespace)
    assert created.returncode == 0, created.stderr
    refused = who.apply(changed, namespace)
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert "error when applying patch" in refused.stderr, refused.stderr  # an UPDATE, not a CREATE
    assert f"[{attempt.rule}]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr


# -- claims Kubernetes' controllers create from a tenant's template ---------------------------------

# Who kube-controller-manager is when it makes claims from a Pod's ephemeral volumes and from a
# StatefulSet's claim templates (--use-service-account-credentials).
CONTROLLERS = ("ephemeral-volume-controller", "statefulset-controller")


def _as_controller(
    stack: LabgateStack, controller: str, verb: str, namespace: str, manifest: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return stack.cluster_kubectl(
        f"--as=system:serviceaccount:kube-system:{controller}",
        "--as-group=system:serviceaccounts",
        "--as-group=system:serviceaccounts:kube-system",
        "--as-group=system:authenticated",
        verb,
        "-n",
        namespace,
        "-f",
        "-",
        manifest=manifest,
    )


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_claims_a_controller_creates_in_a_tenant_namespace_are_judged(arena: Arena, controller: str) -> None:
    """kube-controller-manager is a trusted requester elsewhere; a claim it makes in a tenant's
    namespace binds what the tenant's template said, so it is judged like the tenant's own."""
    ns, short = arena.a.namespace, controller.split("-", maxsplit=1)[0]
    for tenant, why in (
        ("B", f'which belongs to tenant "{arena.b.name}"'),
        ("none", "which belongs to no tenant"),
    ):
        made = claim(f"c-{short}-{tenant.lower()}", _pv(tenant)(arena))
        refused = _as_controller(arena.stack, controller, "create", ns, made)
        assert refused.returncode == 1, refused.stdout
        assert "[volume-claim] PersistentVolumeClaim" in refused.stderr, refused.stderr
        assert why in refused.stderr, refused.stderr
    unconfined = simple(
        "PersistentVolumeClaim", f"c-{short}-sel", spec=_claim_spec(selector={"matchLabels": {}})
    )
    refused = _as_controller(arena.stack, controller, "create", ns, unconfined)
    assert refused.returncode == 1, refused.stdout
    assert "[volume-claim-selector]" in refused.stderr, refused.stderr
    admitted = _as_controller(arena.stack, controller, "create", ns, claim(f"c-{short}-a", _pv("A")(arena)))
    assert admitted.returncode == 0, admitted.stderr
    arena.stack.admin_kubectl("delete", "pvc", f"c-{short}-a", "-n", ns, "--wait=false")


def test_the_volume_binder_cannot_bind_a_tenants_claim_to_another_tenants_volume(arena: Arena) -> None:
    """A claim with no volumeName and no StorageClass may be matched by kube-controller-manager's
    binder to any free volume of no class; the binder's update that sets spec.volumeName is judged."""
    ns = arena.a.namespace
    for name in ("c-bind-b", "c-bind-a"):
        free = simple("PersistentVolumeClaim", name, spec=_claim_spec())
        arena.stack.admin_kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(free))

    def bound(name: str, volume: str) -> dict[str, Any]:
        live = json.loads(arena.stack.admin_kubectl("get", "pvc", name, "-n", ns, "-o", "json"))
        live["spec"]["volumeName"] = volume
        return dict(live)

    refused = _as_controller(
        arena.stack, "persistent-volume-binder", "replace", ns, bound("c-bind-b", _pv("B")(arena))
    )
    assert refused.returncode == 1, refused.stdout
    assert "[volume-claim]" in refused.stderr, refused.stderr
    admitted = _as_controller(
        arena.stack, "persistent-volume-binder", "replace", ns, bound("c-bind-a", _pv("A")(arena))
    )
    assert admitted.returncode == 0, admitted.stderr
    for name in ("c-bind-b", "c-bind-a"):
        arena.stack.admin_kubectl("delete", "pvc", name, "-n", ns, "--wait=false")


def test_pods_a_controller_creates_with_a_device_variable_are_refused(arena: Arena) -> None:
    """A ReplicaSet's pods are created by kube-controller-manager: judged like the tenant's own."""
    ns = arena.a.namespace
    made = pod(
        "d-rs", containers=[{"name": "main", "image": IMAGE, "env": _env(("NVIDIA_VISIBLE_DEVICES", "all"))}]
    )
    refused = _as_controller(arena.stack, "replicaset-controller", "create", ns, made)
    assert refused.returncode == 1, refused.stdout
    assert (
        '[device-visibility] Pod "d-rs" spec.containers[0] ("main") sets NVIDIA_VISIBLE_DEVICES'
        in refused.stderr
    )
    admitted = _as_controller(arena.stack, "replicaset-controller", "create", ns, pod("d-rs"))
    assert admitted.returncode == 0, admitted.stderr


def test_kubectl_debug_cannot_add_a_container_that_sees_every_gpu(arena: Arena) -> None:
    """An ephemeral container (pods/ephemeralcontainers, granted here) is judged like any other."""
    ns = arena.a.namespace
    role = simple(
        "Role",
        "e2e-debug-dev",
        "rbac.authorization.k8s.io/v1",
        rules=[
            {
                "apiGroups": [""],
                "resources": ["pods/ephemeralcontainers"],
                "verbs": ["get", "patch", "update"],
            }
        ],
    )
    binding = simple(
        "RoleBinding",
        "e2e-debug-dev",
        "rbac.authorization.k8s.io/v1",
        subjects=[
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}
            for g in arena.a.researcher.groups
        ],
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-debug-dev"},
    )
    for obj in (role, binding):
        arena.stack.admin_kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(obj))
    researcher = arena.a.researcher
    assert researcher.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(pod("d-dbg"))).returncode == 0

    def debug(container: str, *env: str) -> subprocess.CompletedProcess[str]:
        return researcher.kubectl(
            "debug", "d-dbg", "-n", ns, f"--image={IMAGE}", "--profile=baseline", "-c", container, *env
        )

    refused = debug("peek", "--env=NVIDIA_VISIBLE_DEVICES=all")
    assert refused.returncode == 1, refused.stdout
    assert 'spec.ephemeralContainers[0] ("peek") sets NVIDIA_VISIBLE_DEVICES' in refused.stderr, (
        refused.stderr
    )
    admitted = debug("look", "--env=CUDA_DEVICE_ORDER=PCI_BUS_ID")
    assert admitted.returncode == 0, admitted.stderr


def test_admin_access_claims_are_refused_even_where_a_cluster_admin_set_the_label(arena: Arena) -> None:
    """Kubernetes refuses adminAccess outside namespaces labelled resource.kubernetes.io/admin-access;
    in a tenant's namespace labgate refuses it even where a cluster admin set that label."""
    ns = arena.a.namespace
    arena.stack.admin_kubectl(
        "label", "--overwrite", "namespace", ns, "resource.kubernetes.io/admin-access=true"
    )
    try:
        for who, suffix in ((arena.a.researcher, ""), (arena.a.admin, "-adm")):
            for kind in ("ResourceClaim", "ResourceClaimTemplate"):
                name = f"adm-{kind.lower()}{suffix}"
                refused = who.kubectl(
                    "create", "-n", ns, "-f", "-", stdin=json.dumps(_gpu_claim(kind, name, admin=True)(arena))
                )
                assert refused.returncode == 1, refused.stdout
                assert f'[dra-admin-access] {kind} "{name}"' in refused.stderr, refused.stderr
                assert "asks adminAccess: true" in refused.stderr, refused.stderr
                admitted = who.kubectl(
                    "create",
                    "-n",
                    ns,
                    "-f",
                    "-",
                    stdin=json.dumps(_gpu_claim(kind, name, admin=False)(arena)),
                )
                assert admitted.returncode == 0, admitted.stderr
    finally:
        arena.stack.admin_kubectl("label", "namespace", ns, "resource.kubernetes.io/admin-access-")


@contextlib.contextmanager
def _namespace_editors(arena: Arena) -> Iterator[None]:
    """Grant A's researchers and admin update on their namespace (RBAC as open as some labs make
    it: labgate's own roles give members no namespace writes), for the length of the block."""
    ns = arena.a.namespace
    role = simple(
        "ClusterRole",
        f"e2e-ns-edit-{ns}",
        "rbac.authorization.k8s.io/v1",
        rules=[
            {
                "apiGroups": [""],
                # The status and finalize subresources write the labels too.
                "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
                "resourceNames": [ns],
                "verbs": ["get", "patch", "update"],
            }
        ],
    )
    users = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": arena.a.admin.name}]
    groups = [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}
        for g in arena.a.researcher.groups
    ]
    binding = simple(
        "ClusterRoleBinding",
        f"e2e-ns-edit-{ns}",
        "rbac.authorization.k8s.io/v1",
        subjects=users + groups,
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"e2e-ns-edit-{ns}"},
    )
    for obj in (role, binding):
        arena.stack.admin_kubectl("apply", "-f", "-", stdin=json.dumps(obj))
    try:
        yield
    finally:
        for kind in ("clusterrolebinding", "clusterrole"):
            arena.stack.admin_kubectl("delete", kind, f"e2e-ns-edit-{ns}", "--ignore-not-found")


def test_the_admin_access_label_cannot_be_added_to_a_tenant_namespace(arena: Arena) -> None:
    """Granted update on their namespace, neither A's researcher nor its admin may add the
    admin-access label; other labels they may add."""
    ns = arena.a.namespace
    with _namespace_editors(arena):
        for who in (arena.a.researcher, arena.a.admin):
            refused = who.kubectl("label", "namespace", ns, "resource.kubernetes.io/admin-access=true")
            assert refused.returncode == 1, refused.stdout
            assert "[namespace-admin-access]" in refused.stderr, refused.stderr
            admitted = who.kubectl("label", "--overwrite", "namespace", ns, f"team-note={who.name}")
            assert admitted.returncode == 0, admitted.stderr


def _tenant_label(arena: Arena) -> str | None:
    namespace = json.loads(arena.stack.admin_kubectl("get", "namespace", arena.a.namespace, "-o", "json"))
    label: str | None = (namespace["metadata"].get("labels") or {}).get("labgate.io/tenant")
    return label


def test_the_tenant_label_cannot_be_taken_off_or_changed_on_a_tenant_namespace(arena: Arena) -> None:
    """Granted update on their namespace, neither A's researcher nor its admin may take
    labgate.io/tenant off it, nor set it to B: the namespace would leave A's quotas (the webhook
    counts the pods of A's namespaces) and, unlabelled, labgate's admission, while its pods and
    controllers run on. By patch and by a whole-object update; the label stays. Other labels they
    change; the platform releases it."""
    ns = arena.a.namespace
    with _namespace_editors(arena):
        for who in (arena.a.researcher, arena.a.admin):
            by_label = who.kubectl("label", "namespace", ns, "labgate.io/tenant-")
            namespace = json.loads(who.kubectl("get", "namespace", ns, "-o", "json").stdout)
            del namespace["metadata"]["labels"]["labgate.io/tenant"]
            by_replace = who.kubectl("replace", "-f", "-", stdin=json.dumps(namespace))
            for refused in (by_label, by_replace):
                assert refused.returncode == 1, refused.stdout
                assert f'[namespace-release] user "{who.name}"' in refused.stderr, refused.stderr
                release = f'may not remove label labgate.io/tenant="{arena.a.name}" from namespace "{ns}"'
                assert release in refused.stderr, refused.stderr
                assert "Fix: keep the label" in refused.stderr, refused.stderr
            moved = who.kubectl("label", "--overwrite", "namespace", ns, f"labgate.io/tenant={arena.b.name}")
            assert moved.returncode == 1, moved.stdout
            move = f'of namespace "{ns}" from "{arena.a.name}" to "{arena.b.name}"'
            assert f'[namespace-release] user "{who.name}"' in moved.stderr, moved.stderr
            assert move in moved.stderr, moved.stderr
            assert _tenant_label(arena) == arena.a.name
            admitted = who.kubectl("label", "--overwrite", "namespace", ns, f"team-note={who.name}-release")
            assert admitted.returncode == 0, admitted.stderr
    # The platform's release is admitted (a server-side dry run: the namespace stays A's for the
    # rest of the module, and the reconciler, which relabels the namespaces a Tenant lists, is not raced).
    released = arena.stack.cluster_kubectl("label", "namespace", ns, "labgate.io/tenant-", "--dry-run=server")
    assert released.returncode == 0, released.stderr
    assert f"namespace/{ns} unlabeled" in released.stdout, released.stdout


def _patch_status_labels(
    who: Researcher, ns: str, labels: dict[str, str | None]
) -> subprocess.CompletedProcess[str]:
    patch = json.dumps({"metadata": {"labels": labels}})
    return who.kubectl("patch", "namespace", ns, "--subresource=status", "--type=merge", "-p", patch)


def _decision_records(arena: Arena, namespace: str) -> list[dict[str, Any]]:
    log = arena.stack.workdir / "logs" / "decisions-0.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r["object"]["kind"] == "Namespace" and r["object"]["name"] == namespace]


def test_the_namespace_status_and_finalize_subresources_change_no_tenant_label(arena: Arena) -> None:
    """A Namespace's labels change through its status and finalize subresources too (their
    strategies keep only the spec or the status). Granted them, neither A's researcher nor its admin
    takes labgate.io/tenant off A's namespace, moves it to B, or adds the admin-access label there;
    the labels stay, and a label of their own they change there. The platform's writes to them (the
    namespace controller finishing a deletion) never wait on labgate: the decision log has none."""
    ns = arena.a.namespace
    with _namespace_editors(arena):
        for who in (arena.a.researcher, arena.a.admin):
            namespace = json.loads(who.kubectl("get", "namespace", ns, "-o", "json").stdout)
            del namespace["metadata"]["labels"]["labgate.io/tenant"]
            attempts = {
                "status, tenant label off": (
                    _patch_status_labels(who, ns, {"labgate.io/tenant": None}),
                    "[namespace-release]",
                ),
                "status, moved to B": (
                    _patch_status_labels(who, ns, {"labgate.io/tenant": arena.b.name}),
                    "[namespace-release]",
                ),
                "status, admin access": (
                    _patch_status_labels(who, ns, {"resource.kubernetes.io/admin-access": "true"}),
                    "[namespace-admin-access]",
                ),
                "finalize, tenant label off": (
                    who.kubectl(
                        "replace",
                        "--raw",
                        f"/api/v1/namespaces/{ns}/finalize",
                        "-f",
                        "-",
                        stdin=json.dumps(namespace),
                    ),
                    "[namespace-release]",
                ),
            }
            for attempt, (refused, rule) in attempts.items():
                assert refused.returncode == 1, f"{who.name}, {attempt}: {refused.stdout}"
                assert rule in refused.stderr, f"{who.name}, {attempt}: {refused.stderr}"
            labels = json.loads(arena.stack.admin_kubectl("get", "namespace", ns, "-o", "json"))["metadata"][
                "labels"
            ]
            assert labels["labgate.io/tenant"] == arena.a.name
            assert "resource.kubernetes.io/admin-access" not in labels
            admitted = _patch_status_labels(who, ns, {"team-note": f"{who.name}-status"})
            assert admitted.returncode == 0, admitted.stderr
            assert _tenant_label(arena) == arena.a.name
    # The refusals were the status and finalize writes they were, and the log says so.
    deadline = time.monotonic() + 30
    while len([r for r in _decision_records(arena, ns) if r["object"].get("subresource")]) < 10:
        assert time.monotonic() < deadline, _decision_records(arena, ns)[-10:]
        time.sleep(0.2)
    written = [(r["object"]["subresource"], r["verdict"]) for r in _decision_records(arena, ns)[-10:]]
    assert written.count(("status", "refused")) == 6, written
    assert written.count(("finalize", "refused")) == 2, written
    assert written.count(("status", "allowed")) == 2, written
    # A namespace of A's the platform deletes goes, status and finalize written by the namespace
    # controller without asking labgate.
    gone = f"{arena.a.name}-gone-{uuid.uuid4().hex[:4]}"
    created = arena.a.admin.kubectl("create", "namespace", gone)
    assert created.returncode == 0, created.stderr
    arena.stack.admin_kubectl("delete", "namespace", gone, "--wait=false")
    deadline = time.monotonic() + 60
    while arena.stack.cluster_kubectl("get", "namespace", gone).returncode == 0:
        assert time.monotonic() < deadline, f"namespace {gone} was not deleted within 60s"
        time.sleep(0.5)
    records = _decision_records(arena, gone)
    assert ("CREATE", "allowed") in {(r["operation"], r["verdict"]) for r in records}, records
    assert [r for r in records if r["object"].get("subresource")] == []


def test_cluster_admins_still_bind_platform_volumes_into_a_tenant(arena: Arena) -> None:
    """The exemption that is left: the infra team (system:masters) binds a platform volume on purpose."""
    ns = arena.a.namespace
    created = arena.stack.cluster_kubectl(
        "create", "-n", ns, "-f", "-", manifest=claim("c-admin", _pv("none")(arena))
    )
    assert created.returncode == 0, created.stderr
    arena.stack.admin_kubectl("delete", "pvc", "c-admin", "-n", ns, "--wait=false")


def test_the_isolation_oracle_finds_nothing_in_the_arena(arena: Arena) -> None:
    """After every row: no pod, claim or volume of the arena's tenants breaks isolation."""
    found = [v for v in isolation_violations(arena.stack) if arena.a.name in v or arena.b.name in v]
    assert found == [], "\n".join(found)
    claims = json.loads(arena.stack.admin_kubectl("get", "pvc", "-n", arena.a.namespace, "-o", "json"))[
        "items"
    ]
    assert _pv("B")(arena) not in {c["spec"].get("volumeName") for c in claims}


# -- node pools, graded by where the scheduler binds (issue 19 findings 3 and 4, issue 22 item 1) ----
#
# A cluster of its own with kube-scheduler, the default controllers and KWOK nodes: A keeps two spot
# pools (h100, a100), B one (h100), C none; one shared CPU pool belongs to nobody. Each attempt, as
# researcher and as tenant admin, is refused with [placement-pool]; the legitimate action beside it
# is admitted and its pods are bound on the pool it must land on (read from the node's label).


@dataclass(frozen=True)
class PoolArena:
    a: TenantUnderTest
    b: TenantUnderTest
    c: TenantUnderTest
    stack: LabgateStack
    pools: dict[str, NodePool]  # "a-h100", "a-a100", "b-h100", "shared"

    def tenant(self, key: str) -> TenantUnderTest:
        return {"A": self.a, "B": self.b, "C": self.c}[key]

    def pool(self, key: str) -> str:
        return self.pools[key].name


@pytest.fixture(scope="module")
def pool_arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolArena]:
    policy_dir = tmp_path_factory.mktemp("pool-policies") / "policies"
    shutil.copytree(POLICY_DIR, policy_dir)
    with LabgateStack(
        tmp_path_factory.mktemp("pool-sim"),
        reconciler_lease_seconds=4,
        policy_dir=policy_dir,
        nodes=NodeSimulation(),
    ) as sim:
        factory = TenantFactory(sim)
        try:
            s = uuid.uuid4().hex[:4]
            a_name, b_name, c_name = f"pa-{s}", f"pb-{s}", f"pc-{s}"
            pools = {
                "a-h100": NodePool(name=f"{a_name}-h100", tenant=a_name, spot=True, gpu_product="h100"),
                "a-a100": NodePool(name=f"{a_name}-a100", tenant=a_name, spot=True, gpu_product="a100"),
                "b-h100": NodePool(name=f"{b_name}-h100", tenant=b_name, spot=True, gpu_product="h100"),
                "shared": NodePool(name=f"shared-{s}", gpu_product="none", gpus=0),
            }
            assert sim.kwok is not None
            sim.kwok.add_pools(list(pools.values()))
            placed = list(pools.values())
            a = factory.create(
                name=a_name, spec_extra={"gpu": {"total": 16}, "placement": tenant_placement(placed, a_name)}
            )
            b = factory.create(
                name=b_name, spec_extra={"gpu": {"total": 8}, "placement": tenant_placement(placed, b_name)}
            )
            c = factory.create(name=c_name, spec_extra={"gpu": {"total": 8}})
            yield PoolArena(a=a, b=b, c=c, stack=sim, pools=pools)
        finally:
            factory.cleanup()


@pytest.fixture
def pools_checked(pool_arena: PoolArena) -> Iterator[PoolArena]:
    """The arena; after the test, the isolation oracle finds nothing the arena's tenants hold."""
    yield pool_arena
    names = (pool_arena.a.name, pool_arena.b.name, pool_arena.c.name)
    found = [v for v in isolation_violations(pool_arena.stack) if any(n in v for n in names)]
    assert found == [], "isolation violated:\n" + "\n".join(found)


def _taints_of(pool: NodePool) -> list[dict[str, Any]]:
    return [{**t, "operator": "Equal"} for t in pool.taints()]


def _labelled(made: dict[str, Any], row: str) -> dict[str, Any]:
    """`made` with label e2e-row=<row> on the object and on its pod template (to find its pods)."""
    made["metadata"].setdefault("labels", {})["e2e-row"] = row
    if made["kind"] == "Deployment":
        made["spec"]["selector"] = {"matchLabels": {"e2e-row": row}}
    if made["kind"] != "Pod":
        made["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})["e2e-row"] = row
    return made


def _spec_of(made: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = made["spec"] if made["kind"] == "Pod" else made["spec"]["template"]["spec"]
    return spec


def _workload(kind: str, name: str, *, gpus: int = 0, **spec: Any) -> dict[str, Any]:
    """A `kind` (Pod, Job, Deployment) of one pod: CPU only, or `gpus` whole GPUs."""
    main: dict[str, Any] = {"name": "main", "image": IMAGE}
    if gpus:
        main["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    made = {"Pod": pod, "Job": job, "Deployment": deployment}[kind](name, containers=[main], **spec)
    return _labelled(made, name)


PoolBuild = Callable[[PoolArena, str], dict[str, Any]]


@dataclass(frozen=True)
class PoolRow:
    """An attempt into a pool not the tenant's (refused, `says` in the message), the legitimate action
    it mirrors (admitted, its pods bound on pool `lands`), and, for kinds whose template may change,
    the attempt as an UPDATE of the legitimate object."""

    id: str
    tenant: str
    attempt: PoolBuild
    allowed: PoolBuild
    lands: str
    says: Callable[[PoolArena], str]
    update: Callable[[PoolArena, dict[str, Any]], dict[str, Any]] | None = None
    # For a running Pod, whose tolerations may only be added to: the tolerations the UPDATE adds.
    adds: Callable[[PoolArena], list[dict[str, Any]]] | None = None


def _tolerating(extra: list[dict[str, Any]]) -> Callable[[PoolArena, dict[str, Any]], dict[str, Any]]:
    def change(_: PoolArena, made: dict[str, Any]) -> dict[str, Any]:
        spec = _spec_of(made)
        spec["tolerations"] = [*spec.get("tolerations", []), *extra]
        return made

    return change


def _selecting_pool(made: dict[str, Any], pool: str) -> dict[str, Any]:
    _spec_of(made)["nodeSelector"][POOL_LABEL] = pool
    return made


_EVERY_TAINT = [{"operator": "Exists"}]
_POOL_KEYS_EXIST = [
    {"key": "labgate.io/pool", "operator": "Exists"},
    {"key": "labgate.io/spot", "operator": "Exists"},
]


def _into(ar: PoolArena, key: str, model: str | None = None) -> dict[str, Any]:
    """The selector (pool, and `model` when given) and tolerations that put a pod on pool `key`."""
    pool = ar.pools[key]
    selector = {POOL_LABEL: pool.name, **({MODEL_LABEL: model} if model else {})}
    return {"nodeSelector": selector, "tolerations": _taints_of(pool)}


POOL_ROWS = [
    # Finding 3: a tenant without pools (C) into another tenant's pool, CPU or not.
    PoolRow(
        "cpu-pod-of-a-tenant-without-pools-into-b",
        "C",
        lambda ar, n: _workload("Pod", n, **_into(ar, "b-h100")),
        lambda _, n: _workload("Pod", n),
        "shared",
        lambda ar: f'a node pool of tenant "{ar.b.name}"',
        adds=lambda ar: _taints_of(ar.pools["b-h100"]),
    ),
    PoolRow(
        "gpu-job-of-a-tenant-without-pools-into-b",
        "C",
        lambda ar, n: _workload("Job", n, gpus=1, **_into(ar, "b-h100")),
        lambda _, n: _workload("Job", n),
        "shared",
        lambda ar: f'a node pool of tenant "{ar.b.name}"',
    ),
    # Finding 4: wildcard tolerations, and a CPU pod of a tenant with pools into another's.
    PoolRow(
        "cpu-job-tolerating-every-taint",
        "C",
        lambda _, n: _workload("Job", n, tolerations=_EVERY_TAINT),
        lambda _, n: _workload("Job", n),
        "shared",
        lambda _: "is operator: Exists without a key: it tolerates every taint",
    ),
    PoolRow(
        "cpu-deployment-tolerating-pool-keys-with-exists",
        "A",
        lambda _, n: _workload("Deployment", n, tolerations=_POOL_KEYS_EXIST),
        lambda ar, n: _workload("Deployment", n, **_into(ar, "a-h100")),
        "a-h100",
        lambda _: 'tolerates taint "labgate.io/pool" with operator: Exists, whatever its value',
        update=_tolerating(_EVERY_TAINT),
    ),
    PoolRow(
        "cpu-pod-of-a-tenant-with-pools-into-b",
        "A",
        lambda ar, n: _workload("Pod", n, **_into(ar, "b-h100")),
        lambda ar, n: _workload("Pod", n, nodeSelector={POOL_LABEL: ar.pool("shared")}),
        "shared",
        lambda ar: f'a node pool of tenant "{ar.b.name}"',
        adds=lambda _: _EVERY_TAINT,
    ),
    # Issue 22 item 1: the pool must have the model; labgate picks the one that has it.
    PoolRow(
        "gpu-pod-asks-a-model-no-pool-has",
        "A",
        lambda _, n: _workload("Pod", n, gpus=1, nodeSelector={MODEL_LABEL: "b200"}),
        lambda _, n: _workload("Pod", n, gpus=1, nodeSelector={MODEL_LABEL: "a100"}),
        "a-a100",
        lambda ar: (
            f'asks GPU model "b200", and no node pool of tenant "{ar.a.name}" that labgate may place it '
            f'on has it; its pools: "{ar.pool("a-h100")}" (spot: h100), "{ar.pool("a-a100")}" (spot: a100)'
        ),
    ),
    PoolRow(
        "gpu-deployment-selects-its-pool-without-its-model",
        "A",
        lambda ar, n: _workload("Deployment", n, gpus=1, **_into(ar, "a-h100", "a100")),
        lambda ar, n: _workload("Deployment", n, gpus=1, **_into(ar, "a-a100", "a100")),
        "a-a100",
        lambda ar: (
            f'asks {POOL_LABEL}="{ar.pool("a-h100")}" for GPU model "a100", which that pool does not have'
        ),
        update=lambda ar, made: _selecting_pool(made, ar.pool("a-h100")),
    ),
    PoolRow(
        "gpu-job-asks-a-model-no-pool-has",
        "A",
        lambda _, n: _workload("Job", n, gpus=1, nodeSelector={MODEL_LABEL: "b200"}),
        lambda _, n: _workload("Job", n, gpus=1, nodeSelector={MODEL_LABEL: "h100"}),
        "a-h100",
        lambda _: 'asks GPU model "b200", and no node pool of tenant',
    ),
]

_WHO = ("researcher", "admin")


def _actor(ar: PoolArena, row: PoolRow, who: str) -> Researcher:
    tenant = ar.tenant(row.tenant)
    return tenant.researcher if who == "researcher" else tenant.admin


def _bound_pools(ar: PoolArena, namespace: str, row: str) -> list[str]:
    """The pools of the nodes the row's pods are bound on ("" for a pod not bound yet)."""
    listed = json.loads(
        ar.stack.admin_kubectl("get", "pods", "-n", namespace, "-l", f"e2e-row={row}", "-o", "json")
    )["items"]
    pools = {p.name: key for key, p in ar.pools.items()}
    return [pools.get(str(p["spec"].get("nodeName") or "").rsplit("-", 1)[0], "") for p in listed]


def _lands_on(ar: PoolArena, namespace: str, row: str, key: str) -> None:
    deadline = time.monotonic() + 90
    while True:
        bound = _bound_pools(ar, namespace, row)
        if bound and all(bound):
            assert set(bound) == {key}, f"{row}: bound on {bound}, expected {key}"
            return
        assert time.monotonic() < deadline, f"{row}: pods not bound within 90s ({bound})"
        time.sleep(0.5)


_POOL_CASES = [(row, who) for row in POOL_ROWS for who in _WHO]


@pytest.mark.cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("row", "who"), _POOL_CASES, ids=[f"{r.id}-{w}" for r, w in _POOL_CASES])
def test_pool_attempt_is_refused_and_the_legitimate_action_lands_on_its_pool(
    pools_checked: PoolArena, row: PoolRow, who: str
) -> None:
    ar = pools_checked
    actor, namespace = _actor(ar, row, who), ar.tenant(row.tenant).namespace
    name = f"{row.id[:40]}-{who[0]}"
    refused = actor.apply(row.attempt(ar, name), namespace)
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert "[placement-pool]" in refused.stderr, refused.stderr
    assert row.says(ar) in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr
    admitted = actor.apply(row.allowed(ar, name), namespace)
    assert admitted.returncode == 0, admitted.stderr
    _lands_on(ar, namespace, name, row.lands)


_POOL_UPDATES = [(row, who) for row, who in _POOL_CASES if row.update or row.adds]


@pytest.mark.cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("row", "who"), _POOL_UPDATES, ids=[f"{r.id}-{w}" for r, w in _POOL_UPDATES])
def test_pool_attempt_is_refused_on_update(pools_checked: PoolArena, row: PoolRow, who: str) -> None:
    """The legitimate object is admitted and bound; the attempt applied over it (an UPDATE: a running
    Pod's added tolerations, a Deployment's new template) is refused, and its pods stay where they were."""
    ar = pools_checked
    actor, namespace = _actor(ar, row, who), ar.tenant(row.tenant).namespace
    name = f"{row.id[:36]}-u{who[0]}"
    created = actor.apply(row.allowed(ar, name), namespace)
    assert created.returncode == 0, created.stderr
    _lands_on(ar, namespace, name, row.lands)
    if row.adds is not None:
        added = [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in row.adds(ar)]
        refused = actor.kubectl("patch", "pod", name, "-n", namespace, "--type=json", "-p", json.dumps(added))
    else:
        assert row.update is not None
        refused = actor.apply(row.update(ar, row.allowed(ar, name)), namespace)
        assert "error when applying patch" in refused.stderr, refused.stderr  # an UPDATE, not a CREATE
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert "[placement-pool]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr
    _lands_on(ar, namespace, name, row.lands)


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_pods_a_controller_makes_from_a_tenants_template_stay_off_other_pools(
    pools_checked: PoolArena,
) -> None:
    """A ReplicaSet's pods are created by kube-controller-manager: a pod it makes in C's namespace
    with B's tolerations is refused like C's own; one without lands on the shared pool."""
    ar = pools_checked
    ns = ar.c.namespace
    refused = _as_controller(
        ar.stack, "replicaset-controller", "create", ns, _workload("Pod", "rs-into-b", **_into(ar, "b-h100"))
    )
    assert refused.returncode == 1, refused.stdout
    assert f'[placement-pool] Pod "rs-into-b" spec.nodeSelector asks {POOL_LABEL}=' in refused.stderr
    admitted = _as_controller(ar.stack, "replicaset-controller", "create", ns, _workload("Pod", "rs-plain"))
    assert admitted.returncode == 0, admitted.stderr
    _lands_on(ar, ns, "rs-plain", "shared")


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_the_pool_owner_keeps_its_node(pools_checked: PoolArena) -> None:
    """After every attempt above, B's in-quota pod asking all 8 GPUs of its one node binds there, and
    no pod of A or C sits on B's pool."""
    ar = pools_checked
    made = _workload("Pod", "b-owner", gpus=8, nodeSelector={MODEL_LABEL: "h100"})
    admitted = ar.b.researcher.apply(made, ar.b.namespace)
    assert admitted.returncode == 0, admitted.stderr
    _lands_on(ar, ar.b.namespace, "b-owner", "b-h100")
    for other in (ar.a, ar.c):
        listed = json.loads(ar.stack.admin_kubectl("get", "pods", "-n", other.namespace, "-o", "json"))
        on_b = [
            p["metadata"]["name"]
            for p in listed["items"]
            if ar.pool("b-h100") in str(p["spec"].get("nodeName"))
        ]
        assert on_b == [], f"pods of {other.name} on B's pool: {on_b}"


# -- an untainted pool of another tenant: kept by the pod's own required node selection ------------
#
# B gets a pool whose nodes carry no taint (the infra team configured it so): nothing but a pod's
# required node selection keeps A's pods off it. A pod of A whose required nodeAffinity can select
# it is refused, as researcher and admin, on CREATE and on the UPDATE of a gated pod (the node
# selection a gated pod may still gain); without the rule the scheduler binds it there (the test
# then fails naming where it was bound and what the isolation oracle found). Selecting its own pool,
# or excluding B's, is admitted and bound where it must be; a gate removed binds in A's own pool.

_GATE = "example.com/hold"


def _required(*expressions: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": list(expressions)}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _expression(operator: str, *values: str) -> dict[str, Any]:
    return {"key": POOL_LABEL, "operator": operator, "values": list(values)}


@pytest.fixture
def open_pool(pools_checked: PoolArena) -> Iterator[str]:
    """An untainted pool of B (one CPU node), listed in B's Tenant, for the test's duration."""
    ar = pools_checked
    pool = NodePool(name=f"{ar.b.name}-open", gpu_product="none", gpus=0)  # no tenant: no taint
    assert pool.taints() == []
    assert ar.stack.kwok is not None
    ar.stack.kwok.add_pools([pool])
    ar.pools["b-open"] = pool
    entry = {**pool.tenant_pool(), "tolerations": []}
    ar.stack.admin_kubectl(
        "patch", "tenant", ar.b.name, "--type=json",
        "-p", json.dumps([{"op": "add", "path": "/spec/placement/nodePools/-", "value": entry}]),
    )  # fmt: skip
    try:
        _wait_for_the_webhook_to_know(ar, pool.name)
        yield pool.name
    finally:
        for tenant in (ar.a, ar.b):
            ar.stack.cluster_kubectl(
                "delete", "pods", "-n", tenant.namespace, "-l", "e2e-open", "--wait=false"
            )
        ar.stack.admin_kubectl("patch", "tenant", ar.b.name, "--type=json", "-p", json.dumps([
            {"op": "remove", "path": "/spec/placement/nodePools/1"},
        ]))  # fmt: skip
        ar.stack.cluster_kubectl("delete", "node", *pool.node_manifests()[0]["metadata"]["name"].split())
        del ar.pools["b-open"]


def _wait_for_the_webhook_to_know(ar: PoolArena, pool: str) -> None:
    """Until a pod of A naming the pool by its label is refused (a rule older than this one's)."""
    probe = _workload("Pod", "probe-open", nodeSelector={POOL_LABEL: pool})
    deadline = time.monotonic() + 60
    while True:
        tried = ar.a.researcher.kubectl("apply", "--dry-run=server", "-n", ar.a.namespace, "-f", "-",
                                        stdin=json.dumps(probe))  # fmt: skip
        if tried.returncode == 1 and "[placement-pool]" in tried.stderr:
            return
        assert time.monotonic() < deadline, f"the webhook never learnt pool {pool}: {tried.stderr}"
        time.sleep(0.5)


def _open_workload(name: str, **spec: Any) -> dict[str, Any]:
    made = _workload("Pod", name, **spec)
    made["metadata"]["labels"]["e2e-open"] = "1"
    return made


def _fail_with_binding(ar: PoolArena, namespace: str, name: str) -> None:
    """The attempt was admitted: say where the scheduler bound it and what the oracle found."""
    deadline = time.monotonic() + 60
    bound = _bound_pools(ar, namespace, name)
    while not (bound and all(bound)) and time.monotonic() < deadline:
        time.sleep(0.5)
        bound = _bound_pools(ar, namespace, name)
    found = [v for v in isolation_violations(ar.stack) if name in v]
    pytest.fail(f"admitted; the scheduler bound it on pool {bound}; the isolation oracle: {found}")


@pytest.mark.cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize("who", _WHO)
def test_required_affinity_into_an_untainted_pool_is_refused_and_own_selection_lands(
    pools_checked: PoolArena, open_pool: str, who: str
) -> None:
    ar = pools_checked
    actor = ar.a.researcher if who == "researcher" else ar.a.admin
    ns = ar.a.namespace
    attempt = f"into-open-{who[0]}"
    refused = actor.apply(_open_workload(attempt, affinity=_required(_expression("In", open_pool))), ns)
    if refused.returncode == 0:
        _fail_with_binding(ar, ns, attempt)
    assert "[placement-pool]" in refused.stderr, refused.stderr
    assert f'node pool "{open_pool}" of tenant "{ar.b.name}"' in refused.stderr, refused.stderr
    assert f'{POOL_LABEL} NotIn ["{open_pool}"]' in refused.stderr, refused.stderr
    own = f"own-pool-{who[0]}"
    selecting_own = _open_workload(
        own,
        affinity=_required(_expression("In", ar.pool("a-h100"))),
        tolerations=_taints_of(ar.pools["a-h100"]),
    )
    admitted = actor.apply(selecting_own, ns)
    assert admitted.returncode == 0, admitted.stderr
    _lands_on(ar, ns, own, "a-h100")
    excluding = f"not-open-{who[0]}"
    admitted = actor.apply(_open_workload(excluding, affinity=_required(_expression("NotIn", open_pool))), ns)
    assert admitted.returncode == 0, admitted.stderr
    _lands_on(ar, ns, excluding, "shared")


@pytest.mark.cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize("who", _WHO)
def test_a_gated_pods_node_selection_is_judged_when_it_changes(
    pools_checked: PoolArena, open_pool: str, who: str
) -> None:
    """While gated, a pod may gain a nodeSelector and a required node affinity (and tolerations):
    each such UPDATE is judged. Into B's untainted pool: refused; into A's own pool: admitted; the
    gate removed, the pod binds in A's pool."""
    ar = pools_checked
    actor = ar.a.researcher if who == "researcher" else ar.a.admin
    ns = ar.a.namespace
    name = f"gated-{who[0]}"
    created = actor.apply(_open_workload(name, schedulingGates=[{"name": _GATE}]), ns)
    assert created.returncode == 0, created.stderr

    def patch(*ops: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return actor.kubectl("patch", "pod", name, "-n", ns, "--type=json", "-p", json.dumps(list(ops)))

    into_b = patch({"op": "add", "path": "/spec/affinity", "value": _required(_expression("In", open_pool))})
    if into_b.returncode == 0:
        patch({"op": "remove", "path": "/spec/schedulingGates"})
        _fail_with_binding(ar, ns, name)
    assert "[placement-pool]" in into_b.stderr, into_b.stderr
    assert f'node pool "{open_pool}" of tenant "{ar.b.name}"' in into_b.stderr, into_b.stderr
    into_own = patch(
        {"op": "add", "path": "/spec/nodeSelector", "value": {POOL_LABEL: ar.pool("a-h100")}},
        {"op": "add", "path": "/spec/tolerations/-", "value": _taints_of(ar.pools["a-h100"])[0]},
        {"op": "add", "path": "/spec/tolerations/-", "value": _taints_of(ar.pools["a-h100"])[1]},
    )
    assert into_own.returncode == 0, into_own.stderr
    ungated = patch({"op": "remove", "path": "/spec/schedulingGates"})
    assert ungated.returncode == 0, ungated.stderr
    _lands_on(ar, ns, name, "a-h100")


def _pull_policies(pod_spec: dict[str, Any]) -> dict[str, str]:
    return {
        c["name"]: c.get("imagePullPolicy", "")
        for group in ("initContainers", "containers", "ephemeralContainers")
        for c in pod_spec.get(group, [])
    }


def test_every_pod_a_tenant_starts_pulls_its_image_whoever_creates_it(arena: Arena) -> None:
    """A shared node keeps the images it pulled: a tenant's pod that does not pull always could start
    from a private image another tenant pulled (the packets of that are tests/e2e/test_node_helm.py's).
    A Pod written with IfNotPresent, by the researcher or the admin, and the pod the Job controller
    makes from a template that says so, are stored pulling always; so is the template, from the Job's
    creation, so that the Job controller's pods are born pulling always."""
    ns = arena.a.namespace
    cached = {"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}
    fetch = {"name": "fetch", "image": IMAGE, "imagePullPolicy": "Never"}
    for who, name in ((arena.a.researcher, "pull-r"), (arena.a.admin, "pull-a")):
        made = pod(name, containers=[cached], initContainers=[fetch])
        created = who.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(made))
        assert created.returncode == 0, created.stderr
        live = json.loads(arena.stack.admin_kubectl("get", "pod", name, "-n", ns, "-o", "json"))
        assert _pull_policies(live["spec"]) == {"main": "Always", "fetch": "Always"}
        # The legitimate change of a running pod's image: it pulls always, so it is admitted.
        swapped = who.kubectl("set", "image", f"pod/{name}", f"main={IMAGE}-2", "-n", ns)
        assert swapped.returncode == 0, swapped.stderr
    sweep = job("pull-job", containers=[cached])
    created = arena.a.researcher.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(sweep))
    assert created.returncode == 0, created.stderr
    stored = json.loads(arena.stack.admin_kubectl("get", "job", "pull-job", "-n", ns, "-o", "json"))
    assert _pull_policies(stored["spec"]["template"]["spec"]) == {"main": "Always"}

    def made_by_the_job() -> list[dict[str, Any]]:
        listed = arena.stack.admin_kubectl("get", "pods", "-n", ns, "-l", "job-name=pull-job", "-o", "json")
        items: list[dict[str, Any]] = json.loads(listed)["items"]
        return items

    deadline = time.monotonic() + 60
    while not made_by_the_job():
        assert time.monotonic() < deadline, "the Job controller made no pod"
        time.sleep(0.5)
    assert [_pull_policies(p["spec"]) for p in made_by_the_job()] == [{"main": "Always"}]
