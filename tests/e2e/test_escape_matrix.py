"""The tenant-escape matrix: one tenant's researchers and admins try to reach, impersonate, starve or
break another tenant through the real kubectl; every attempt must be refused with the right rule id,
and the matching legitimate action must be admitted.

RBAC here is deliberately too open (tenant A's researchers may edit in B's namespace, as many labs
start out), so that what refuses the cross-tenant attempts is labgate's admission policy.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from devcluster.stack import LabgateStack
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest, tenant_pool
from tests.e2e.training_kinds import install_training_crds

pytestmark = [pytest.mark.tenancy, pytest.mark.network, pytest.mark.secrets, pytest.mark.quota]

IMAGE = "registry.lab.example/research/trainer:v1"


@dataclass(frozen=True)
class Arena:
    a: TenantUnderTest
    b: TenantUnderTest
    stack: LabgateStack
    suffix: str = ""

    def actor(self, who: str) -> Researcher:
        return {
            "researcher": self.a.researcher,
            "admin": self.a.admin,
            "b-researcher": self.b.researcher,
            "b-admin": self.b.admin,
        }[who]

    def namespace(self, which: str) -> str:
        return {"A": self.a.namespace, "B": self.b.namespace}[which]


@pytest.fixture(scope="module")
def arena(stack: LabgateStack) -> Iterator[Arena]:
    factory = TenantFactory(stack)
    try:
        suffix = uuid.uuid4().hex[:4]
        a_name, b_name = f"esc-a-{suffix}", f"esc-b-{suffix}"
        # Cluster-scoped objects the scheduling rows name: a high class A may not use, a Never class
        # and a runtime class A may use, and a runtime class it may not.
        cluster_objects: list[dict[str, Any]] = [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"e2e-high-{suffix}"},
                "value": 1000000,
            },
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"e2e-never-{suffix}"},
                "value": -50,
                "preemptionPolicy": "Never",
            },
            *(
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": n},
                    "handler": "runc",
                }
                for n in (f"e2e-gvisor-{suffix}", f"e2e-kata-{suffix}")
            ),
        ]
        for obj in cluster_objects:
            stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump(obj))
            factory.created.append((str(obj["kind"]).lower(), str(obj["metadata"]["name"])))
        a = factory.create(
            name=a_name,
            spec_extra={
                "namespaces": {"names": [a_name], "prefix": f"{a_name}-"},
                "gpu": {"total": 8, "models": {"h100": 8}},
                "placement": {"nodePools": [tenant_pool(a_name, spot=True)], "allowOnDemand": False},
                "network": {"allowEgress": False},
                # One narrow exception: it puts A's namespace at Pod Security "privileged", so what
                # refuses every other host feature below is labgate's own baseline, control by control.
                "exceptions": {"sysctls": ["net.core.somaxconn"]},
                "scheduling": {
                    "priorityClasses": [f"e2e-never-{suffix}"],
                    "runtimeClasses": [f"e2e-gvisor-{suffix}"],
                },
            },
        )
        b = factory.create(
            name=b_name,
            spec_extra={
                "namespaces": {"names": [b_name], "prefix": f"{b_name}-"},
                "gpu": {"total": 8},
                "placement": {"nodePools": [tenant_pool(b_name, spot=False)], "allowOnDemand": True},
                # B is open to the outside and may expose NodePort Services (not LoadBalancer).
                "network": {"allowEgress": True, "allowServiceTypes": ["NodePort"]},
            },
            # B trusts a CI service account that lives in A's namespace: A must not mint its tokens.
            extra_researchers=[{"kind": "ServiceAccount", "namespace": a_name, "name": "runner"}],
        )
        factory.open_rbac(b.namespace, *a.researcher.groups)
        ns = a.namespace
        stack.admin_kubectl("create", "serviceaccount", "trainer", "-n", ns)
        # An account no restricted Secret names: researchers may run pods as it.
        stack.admin_kubectl("create", "serviceaccount", "worker", "-n", ns)
        stack.admin_kubectl("create", "serviceaccount", "runner", "-n", ns)
        # A trusts its deploy account as an admin: only A's admins may run as it or mint its tokens.
        stack.admin_kubectl("create", "serviceaccount", "deployer", "-n", ns)
        deployer = {"kind": "ServiceAccount", "namespace": ns, "name": "deployer"}
        stack.admin_kubectl(
            "patch",
            "tenant",
            a.name,
            "--type=json",
            "-p",
            json.dumps([{"op": "add", "path": "/spec/members/admins/-", "value": deployer}]),
        )
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
        install_training_crds(stack)
        # Volumes a claim may name: A's own, B's, and one of no tenant.
        for volume, tenant in (
            (f"pv-{a_name}", a_name),
            (f"pv-{b_name}", b_name),
            (f"pv-none-{suffix}", None),
        ):
            stack.admin_kubectl("apply", "-f", "-", stdin=json.dumps(persistent_volume(volume, tenant)))
        yield Arena(a=a, b=b, stack=stack, suffix=suffix)
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


def persistent_volume(name: str, tenant: str | None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"labgate.io/tenant": tenant} if tenant else {}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": f"/tmp/{name}"},
            "persistentVolumeReclaimPolicy": "Retain",
        },
    }


def claim(name: str, volume: str) -> dict[str, Any]:
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "",
        "volumeName": volume,
    }
    return simple("PersistentVolumeClaim", name, spec=spec)


def service(name: str, **spec: Any) -> dict[str, Any]:
    return simple("Service", name, spec={"ports": [{"port": 80}], "selector": {"app": name}, **spec})


def egress(*peers: dict[str, Any]) -> list[Any]:
    return [{"to": list(peers)}]


# -- the training kinds: a privileged container in one item of a list (or map) of pod templates -----

PRIVILEGED = [{"name": "main", "image": IMAGE, "securityContext": {"privileged": True}}]
CLEAN = [{"name": "main", "image": IMAGE}]


def _template(containers: list[Any]) -> dict[str, Any]:
    return {"spec": {"containers": containers, "restartPolicy": "Never"}}


def _replica_specs(field: str, first: str, second: str, containers: list[Any]) -> dict[str, Any]:
    return {
        field: {
            first: {"replicas": 1, "template": _template(CLEAN)},
            second: {"replicas": 2, "template": _template(containers)},
        }
    }


def _ray_cluster(containers: list[Any]) -> dict[str, Any]:
    return {
        "headGroupSpec": {"template": _template(CLEAN)},
        "workerGroupSpecs": [
            {"groupName": "cpu", "replicas": 1, "template": _template(CLEAN)},
            {"groupName": "gpu", "replicas": 2, "template": _template(containers)},
        ],
    }


def _argo(containers: list[Any], patch: str | None = None) -> dict[str, Any]:
    work: dict[str, Any] = {
        "name": "work",
        "container": {k: v for k, v in containers[0].items() if k != "name"},
    }
    if patch is not None:
        work["podSpecPatch"] = patch
    return {
        "entrypoint": "main",
        "templates": [{"name": "main", "steps": [[{"name": "s", "template": "work"}]]}, work],
    }


_PRIVILEGED_PATCH = '{"containers": [{"name": "main", "securityContext": {"privileged": true}}]}'

TRAINING_KINDS: dict[str, tuple[str, str, Callable[[list[Any]], dict[str, Any]]]] = {
    "jobset": (
        "JobSet",
        "jobset.x-k8s.io/v1alpha2",
        lambda c: {
            "replicatedJobs": [
                {"name": "driver", "replicas": 1, "template": {"spec": {"template": _template(CLEAN)}}},
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": _template(c)}},
                },
            ]
        },
    ),
    "raycluster": ("RayCluster", "ray.io/v1", _ray_cluster),
    "rayjob": (
        "RayJob",
        "ray.io/v1",
        lambda c: {"entrypoint": "python t.py", "rayClusterSpec": _ray_cluster(c)},
    ),
    "leaderworkerset": (
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io/v1",
        lambda c: {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": _template(CLEAN),
                "workerTemplate": _template(c),
            },
        },
    ),
    "pytorchjob": (
        "PyTorchJob",
        "kubeflow.org/v1",
        lambda c: _replica_specs("pytorchReplicaSpecs", "Master", "Worker", c),
    ),
    "tfjob": ("TFJob", "kubeflow.org/v1", lambda c: _replica_specs("tfReplicaSpecs", "PS", "Worker", c)),
    "mpijob": (
        "MPIJob",
        "kubeflow.org/v2beta1",
        lambda c: _replica_specs("mpiReplicaSpecs", "Launcher", "Worker", c),
    ),
    "xgboostjob": (
        "XGBoostJob",
        "kubeflow.org/v1",
        lambda c: _replica_specs("xgbReplicaSpecs", "Master", "Worker", c),
    ),
    "paddlejob": (
        "PaddleJob",
        "kubeflow.org/v1",
        lambda c: _replica_specs("paddleReplicaSpecs", "Master", "Worker", c),
    ),
    "trainjob": (
        "TrainJob",
        "trainer.kubeflow.org/v1alpha1",
        # The overrides carry no securityContext: the escape there is a hostPath volume.
        lambda c: {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"image": IMAGE, "numNodes": 2},
            "podTemplateOverrides": [
                {"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"team": "a"}}},
                {
                    "targetJobs": [{"name": "node"}],
                    "spec": {
                        "volumes": [
                            {"name": "v", "hostPath": {"path": "/"}}
                            if c is PRIVILEGED
                            else {"name": "v", "emptyDir": {}}
                        ]
                    },
                },
            ],
        },
    ),
    "workflow": ("Workflow", "argoproj.io/v1alpha1", _argo),
    "workflowtemplate": ("WorkflowTemplate", "argoproj.io/v1alpha1", _argo),
    "cronworkflow": (
        "CronWorkflow",
        "argoproj.io/v1alpha1",
        lambda c: {"schedule": "0 * * * *", "workflowSpec": _argo(c)},
    ),
    "workflow-podspecpatch": (
        "Workflow",
        "argoproj.io/v1alpha1",
        lambda c: _argo(CLEAN, _PRIVILEGED_PATCH if c is PRIVILEGED else '{"nodeSelector": {"team": "a"}}'),
    ),
}


def training(key: str, name: str, containers: list[Any]) -> Build:
    kind, api, spec = TRAINING_KINDS[key]
    return lambda _: simple(kind, name, api, spec=spec(containers))


# -- attempts ------------------------------------------------------------------------------------

Build = Callable[[Arena], dict[str, Any]]
Patch = Callable[[Arena], list[dict[str, Any]]]
Check = Callable[[Arena, dict[str, Any]], None]


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
    # Also tried as an UPDATE: the legitimate object is applied first, then the attempt over it.
    update: bool = False
    # UPDATE rows: `allowed` is created first; the attempt is this JSON patch of it (refused) and
    # `allowed_patch` the legitimate change it mirrors (admitted).
    attempt_patch: Patch | None = None
    allowed_patch: Patch | None = None
    # What the admitted object (read back from the apiserver) must and must not allow.
    admitted: Check | None = None


def _token(name: str, account: str) -> Build:
    def build(_: Arena) -> dict[str, Any]:
        secret = simple("Secret", name, type="kubernetes.io/service-account-token")
        secret["metadata"]["annotations"] = {"kubernetes.io/service-account.name": account}
        return secret

    return build


def _account(account: str | None) -> dict[str, Any]:
    return {"serviceAccountName": account} if account else {}


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
        elif how == "csi":
            csi = {"driver": "secrets-store.csi.k8s.io", "nodePublishSecretRef": {"name": "trainer-key"}}
            volumes = [{"name": "k", "csi": csi}]
        elif how == "azureFile":
            volumes = [{"name": "k", "azureFile": {"secretName": "trainer-key", "shareName": "data"}}]
        elif how == "cephfs":
            volumes = [
                {"name": "k", "cephfs": {"monitors": ["10.0.0.1:6789"], "secretRef": {"name": "trainer-key"}}}
            ]
        elif how == "initContainer":
            init = {"name": "init", "image": IMAGE, "envFrom": [{"secretRef": {"name": "trainer-key"}}]}
            return pod(name, initContainers=[init], containers=[container], **_account(account))
        else:
            volumes = [{"name": "k", "projected": {"sources": [{"secret": {"name": "trainer-key"}}]}}]
        spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
        if account:
            spec["serviceAccountName"] = account
        return pod(name, **spec)

    return build


# -- row helpers -----------------------------------------------------------------------------------

Named = Callable[[Arena, str], dict[str, Any]]


def _named(build: Named, name: str) -> Build:
    return lambda arena: build(arena, name)


def _both(id_: str, rule: str, attempt: Named, allowed: Named, **kw: Any) -> list[Attempt]:
    """The row as tenant A's researcher and as its admin (each with its own object names)."""
    name = "r" + uuid.uuid5(uuid.NAMESPACE_DNS, id_).hex[:8]
    return [
        Attempt(
            f"{id_}-as-{actor}",
            rule,
            actor,
            "A",
            _named(attempt, f"{name}-{actor[0]}"),
            _named(allowed, f"{name}-{actor[0]}"),
            **kw,
        )
        for actor in ("researcher", "admin")
    ]


def _container(**security_context: Any) -> dict[str, Any]:
    return {"name": "main", "image": IMAGE, "securityContext": security_context}


def _somaxconn() -> dict[str, Any]:
    return {"sysctls": [{"name": "net.core.somaxconn", "value": "4096"}]}


def _projected_token() -> dict[str, Any]:
    source = {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    return {"name": "token", "projected": {"sources": [source]}}


def _add_capability(capability: str) -> list[dict[str, Any]]:
    context = {"capabilities": {"add": [capability]}}
    return [{"op": "add", "path": "/spec/template/spec/containers/0/securityContext", "value": context}]


def _set_template(field: str, value: Any) -> list[dict[str, Any]]:
    return [{"op": "add", "path": f"/spec/template/spec/{field}", "value": value}]


def _add_toleration(pool: str | None) -> list[dict[str, Any]]:
    toleration = (
        {"key": "labgate.io/pool", "operator": "Equal", "value": pool, "effect": "NoSchedule"}
        if pool
        else {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
    )
    return [{"op": "add", "path": "/spec/tolerations/-", "value": toleration}]


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]
    return spec["template"]["spec"] if "template" in spec else spec


_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}  # fmt: skip
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def baseline_gaps(spec: dict[str, Any]) -> set[str]:
    """What a pod spec allows beyond the Pod Security Standards' baseline, computed here from the
    published profile (independently of labgate's Rego); every added capability is listed, with
    those of the baseline set, so that a row sees what it asked arrive."""
    gaps = {key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)}
    gaps |= {f"hostPath {v['hostPath'].get('path')}" for v in spec.get("volumes") or [] if "hostPath" in v}
    pod_context = spec.get("securityContext") or {}
    gaps |= {
        f"sysctl {s['name']}" for s in pod_context.get("sysctls") or [] if s["name"] not in _SAFE_SYSCTLS
    }
    contexts = [pod_context]
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for container in spec.get(group) or []:
            context = container.get("securityContext") or {}
            contexts.append(context)
            if context.get("privileged"):
                gaps.add("privileged")
            gaps |= {f"capability {c}" for c in (context.get("capabilities") or {}).get("add") or []}
            if context.get("procMount") not in (None, "Default"):
                gaps.add("procMount")
            gaps |= {f"hostPort {p['hostPort']}" for p in container.get("ports") or [] if p.get("hostPort")}
            lifecycle = container.get("lifecycle") or {}
            handlers = [container.get(p) for p in _PROBES] + [
                lifecycle.get("postStart"),
                lifecycle.get("preStop"),
            ]
            actions = [h.get(a) for h in handlers if h for a in ("httpGet", "tcpSocket")]
            gaps |= {f"probe host {a['host']}" for a in actions if a and a.get("host")}
    for context in contexts:
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            gaps.add("seccomp Unconfined")
        if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
            gaps.add("appArmor Unconfined")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type") not in (
            None,
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ):
            gaps.add(f"selinux type {selinux['type']}")
        if selinux.get("user") or selinux.get("role"):
            gaps.add("selinux user/role")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            gaps.add("hostProcess")
    return gaps


def _assert_baseline(obj: dict[str, Any], *, allowed: set[str]) -> None:
    """The admitted object allows nothing beyond the baseline but `allowed` (its baseline-set
    capabilities are listed too, so that what the row asked is seen to have arrived)."""
    assert baseline_gaps(_pod_spec(obj)) == allowed, _pod_spec(obj)


def _assert_priority(obj: dict[str, Any], value: int) -> None:
    assert _pod_spec(obj).get("priority") == value, _pod_spec(obj)


def _assert_field(obj: dict[str, Any], field: str, value: Any) -> None:
    assert _pod_spec(obj).get(field) == value, _pod_spec(obj)


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
        _token("s1", "worker"),
    ),
    Attempt(
        "token-for-other-tenants-member-account",
        "service-account-token",
        "researcher",
        "A",
        _token("s2", "runner"),
        _token("s2", "worker"),
    ),
    Attempt(
        "job-as-privileged-service-account",
        "privileged-service-account",
        "researcher",
        "A",
        lambda _: job("s3", serviceAccountName="labgate-reconciler"),
        lambda _: job("s3", serviceAccountName="worker"),
    ),
    Attempt(
        "pod-reads-restricted-secret-env",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s4", None, "env"),
        _restricted_secret_pod("s4", "trainer", "env"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
    Attempt(
        "pod-reads-restricted-secret-envfrom",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s5", None, "envFrom"),
        _restricted_secret_pod("s5", "trainer", "envFrom"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
    Attempt(
        "pod-mounts-restricted-secret",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s6", "default", "volume"),
        _restricted_secret_pod("s6", "trainer", "volume"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
    Attempt(
        "pod-projects-restricted-secret",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s7", None, "projected"),
        _restricted_secret_pod("s7", "trainer", "projected"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
    # Running as the account a restricted Secret names is reading the Secret: admins only.
    Attempt(
        "pod-runs-as-restricted-account",
        "restricted-service-account",
        "researcher",
        "A",
        lambda _: pod("s15", serviceAccountName="trainer"),
        lambda _: pod("s15", serviceAccountName="trainer"),
        allowed_where="A-admin",
    ),
    Attempt(
        "token-for-restricted-account",
        "restricted-service-account",
        "researcher",
        "A",
        _token("s18", "trainer"),
        _token("s18", "trainer"),
        allowed_where="A-admin",
    ),
    Attempt(
        "job-runs-as-restricted-account",
        "restricted-service-account",
        "researcher",
        "A",
        lambda _: job("s16", serviceAccountName="trainer"),
        lambda _: job("s16", serviceAccountName="trainer"),
        allowed_where="A-admin",
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
    # Pod hardening: A holds one narrow exception (the sysctl net.core.somaxconn), which puts its
    # namespace at Pod Security "privileged"; labgate alone refuses every other baseline control.
    *_both(
        "pod-capability-beyond-baseline",
        "pod-hardening",
        lambda _, n: pod(n, containers=[_container(capabilities={"add": ["NET_ADMIN"]})]),
        lambda _, n: pod(
            n, containers=[_container(capabilities={"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]})]
        ),
        admitted=lambda _, obj: _assert_baseline(obj, allowed={"capability NET_BIND_SERVICE"}),
    ),
    *_both(
        "pod-privileged-beside-a-narrow-exception",
        "pod-hardening",
        lambda _, n: pod(n, containers=[_container(privileged=True)], securityContext=_somaxconn()),
        lambda _, n: pod(n, securityContext=_somaxconn()),
        admitted=lambda _, obj: _assert_baseline(obj, allowed={"sysctl net.core.somaxconn"}),
    ),
    *_both(
        "pod-unsafe-sysctl-beyond-the-exception",
        "pod-hardening",
        lambda _, n: pod(n, securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}),
        lambda _, n: pod(n, securityContext=_somaxconn()),
        admitted=lambda _, obj: _assert_baseline(obj, allowed={"sysctl net.core.somaxconn"}),
    ),
    *_both(
        "pod-seccomp-unconfined",
        "pod-hardening",
        lambda _, n: pod(n, securityContext={"seccompProfile": {"type": "Unconfined"}}),
        lambda _, n: pod(n, securityContext={"seccompProfile": {"type": "RuntimeDefault"}}),
        admitted=lambda _, obj: _assert_baseline(obj, allowed=set()),
    ),
    *_both(
        "pod-apparmor-unconfined",
        "pod-hardening",
        lambda _, n: pod(n, containers=[_container(appArmorProfile={"type": "Unconfined"})]),
        lambda _, n: pod(n, containers=[_container(appArmorProfile={"type": "RuntimeDefault"})]),
        admitted=lambda _, obj: _assert_baseline(obj, allowed=set()),
    ),
    *_both(
        "pod-host-port",
        "pod-hardening",
        lambda _, n: pod(
            n,
            containers=[{"name": "main", "image": IMAGE, "ports": [{"containerPort": 22, "hostPort": 2222}]}],
        ),
        lambda _, n: pod(n, containers=[{"name": "main", "image": IMAGE, "ports": [{"containerPort": 22}]}]),
        admitted=lambda _, obj: _assert_baseline(obj, allowed=set()),
    ),
    *_both(
        "pod-selinux-super-privileged-type",
        "pod-hardening",
        lambda _, n: pod(n, securityContext={"seLinuxOptions": {"type": "spc_t"}}),
        lambda _, n: pod(n, securityContext={"seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}}),
        admitted=lambda _, obj: _assert_baseline(obj, allowed=set()),
    ),
    *_both(
        "pod-unmasked-proc",
        "pod-hardening",
        lambda _, n: pod(n, hostUsers=False, containers=[_container(procMount="Unmasked")]),
        lambda _, n: pod(n, hostUsers=False, containers=[_container(procMount="Default")]),
        admitted=lambda _, obj: _assert_baseline(obj, allowed=set()),
    ),
    *_both(
        "pod-probe-host",
        "pod-hardening",
        # The kubelet connects to a probe's host from the node: past NetworkPolicies, to the API.
        lambda _, n: pod(
            n,
            containers=[
                {
                    "name": "main",
                    "image": IMAGE,
                    "readinessProbe": {"tcpSocket": {"host": "10.96.0.1", "port": 443}},
                }
            ],
        ),
        lambda _, n: pod(
            n, containers=[{"name": "main", "image": IMAGE, "readinessProbe": {"tcpSocket": {"port": 8080}}}]
        ),
        admitted=lambda _, obj: _assert_baseline(obj, allowed=set()),
    ),
    *_both(
        "pod-hostpath",
        "pod-hardening",
        lambda _, n: pod(n, volumes=[{"name": "h", "hostPath": {"path": "/var/lib/kubelet"}}]),
        lambda _, n: pod(n, volumes=[{"name": "h", "emptyDir": {}}]),
        admitted=lambda _, obj: _assert_baseline(obj, allowed=set()),
    ),
    *_both(
        "deployment-update-adds-capability",
        "pod-hardening",
        lambda _, n: deployment(n),
        lambda _, n: deployment(n),
        attempt_patch=lambda _: _add_capability("SYS_ADMIN"),
        allowed_patch=lambda _: _add_capability("CHOWN"),
        admitted=lambda _, obj: _assert_baseline(obj, allowed={"capability CHOWN"}),
    ),
    # Priority: only the tenant's classes, never the system ones, never above its ceiling.
    *_both(
        "pod-system-priority-class",
        "priority-class",
        lambda _, n: pod(n, priorityClassName="system-node-critical"),
        lambda _, n: pod(n, priorityClassName="research-default"),
        admitted=lambda _, obj: _assert_priority(obj, 0),
    ),
    *_both(
        "job-priority-class-the-tenant-does-not-list",
        "priority-class",
        lambda ar, n: job(n, priorityClassName=f"e2e-high-{ar.suffix}"),
        lambda _, n: job(n, priorityClassName="research-preemptible"),
    ),
    *_both(
        "job-explicit-priority-above-the-ceiling",
        "priority-class",
        lambda _, n: job(n, priority=1000000),
        lambda _, n: job(n, priorityClassName="research-preemptible", priority=-100),
    ),
    *_both(
        "job-preempting-under-a-never-class",
        "priority-class",
        lambda ar, n: job(
            n, priorityClassName=f"e2e-never-{ar.suffix}", preemptionPolicy="PreemptLowerPriority"
        ),
        lambda ar, n: job(n, priorityClassName=f"e2e-never-{ar.suffix}", preemptionPolicy="Never"),
    ),
    *_both(
        "deployment-update-to-system-priority-class",
        "priority-class",
        lambda _, n: deployment(n),
        lambda _, n: deployment(n),
        attempt_patch=lambda _: _set_template("priorityClassName", "system-cluster-critical"),
        allowed_patch=lambda _: _set_template("priorityClassName", "research-preemptible"),
    ),
    # Node choice, runtime class and scheduler.
    *_both(
        "pod-names-its-node",
        "placement-node-name",
        lambda _, n: pod(n, nodeName="gpu-node-1"),
        lambda _, n: pod(n, nodeSelector={"kubernetes.io/os": "linux"}),
        admitted=lambda _, obj: _assert_field(obj, "nodeName", None),
    ),
    *_both(
        "deployment-update-names-a-node",
        "placement-node-name",
        lambda _, n: deployment(n),
        lambda _, n: deployment(n),
        attempt_patch=lambda _: _set_template("nodeName", "gpu-node-1"),
        allowed_patch=lambda _: _set_template("nodeSelector", {"kubernetes.io/os": "linux"}),
    ),
    *_both(
        "pod-runtime-class-not-allowed",
        "placement-runtime-class",
        lambda ar, n: pod(n, runtimeClassName=f"e2e-kata-{ar.suffix}"),
        lambda ar, n: pod(n, runtimeClassName=f"e2e-gvisor-{ar.suffix}"),
        admitted=lambda ar, obj: _assert_field(obj, "runtimeClassName", f"e2e-gvisor-{ar.suffix}"),
    ),
    *_both(
        "job-other-scheduler",
        "placement-scheduler",
        lambda _, n: job(n, schedulerName="my-scheduler"),
        lambda _, n: job(n, schedulerName="default-scheduler"),
    ),
    Attempt(
        "gpu-pod-update-adds-other-tenants-toleration",
        "placement-pool",
        "researcher",
        "A",
        lambda _: pod("g7", **gpu(1)),
        lambda _: pod("g7", **gpu(1)),
        attempt_patch=lambda ar: _add_toleration(f"{ar.b.name}-ondemand"),
        allowed_patch=lambda _: _add_toleration(None),
    ),
    # Identities: another tenant's member account, and A's admin account for non-admins.
    *_both(
        "pod-as-other-tenants-member-account",
        "service-account-identity",
        lambda _, n: pod(n, serviceAccountName="runner"),
        lambda _, n: pod(n, serviceAccountName="worker"),
    ),
    *_both(
        "job-projected-token-of-other-tenants-member-account",
        "service-account-identity",
        lambda _, n: job(n, serviceAccountName="runner", volumes=[_projected_token()]),
        lambda _, n: job(n, serviceAccountName="worker", volumes=[_projected_token()]),
    ),
    Attempt(
        "pod-as-admin-account-by-researcher",
        "service-account-identity",
        "researcher",
        "A",
        lambda _: pod("s9", serviceAccountName="deployer"),
        lambda _: pod("s9", serviceAccountName="deployer"),
        allowed_where="A-admin",
    ),
    Attempt(
        "token-for-admin-account-by-researcher",
        "service-account-token",
        "researcher",
        "A",
        _token("s10", "deployer"),
        _token("s10", "deployer"),
        allowed_where="A-admin",
    ),
    # Every field that names a Secret is checked, not a list of the common ones.
    Attempt(
        "pod-csi-restricted-secret",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s11", None, "csi"),
        _restricted_secret_pod("s11", "trainer", "csi"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
    Attempt(
        "pod-azurefile-restricted-secret",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s12", None, "azureFile"),
        _restricted_secret_pod("s12", "trainer", "azureFile"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
    Attempt(
        "pod-cephfs-restricted-secret",
        "secret-scope",
        "admin",
        "A",
        _restricted_secret_pod("s13", None, "cephfs"),
        _restricted_secret_pod("s13", "trainer", "cephfs"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
    Attempt(
        "pod-init-container-restricted-secret",
        "secret-scope",
        "researcher",
        "A",
        _restricted_secret_pod("s14", None, "initContainer"),
        _restricted_secret_pod("s14", "trainer", "initContainer"),
        allowed_where="A-admin",  # only admins run pods as "trainer" (restricted-service-account)
    ),
]


def _renamed(build: Build, suffix: str) -> Build:
    def renamed(ar: Arena) -> dict[str, Any]:
        manifest = build(ar)
        manifest["metadata"]["name"] += suffix
        return manifest

    return renamed


def _as_both(attempt: Attempt) -> list[Attempt]:
    """The attempt as tenant A's researcher and as its admin (whose objects get names of their own)."""
    return [
        Attempt(
            **{
                **attempt.__dict__,
                "id": f"{attempt.id}-{who}",
                "actor": who,
                "attempt": _renamed(attempt.attempt, suffix),
                "allowed": _renamed(attempt.allowed, suffix),
            }
        )
        for who, suffix in (("researcher", ""), ("admin", "-adm"))
    ]


def _pv(tenant: str) -> Callable[[Arena], str]:
    def name(ar: Arena) -> str:
        if tenant == "none":
            return f"pv-none-{ar.a.name.rsplit('-', 1)[1]}"
        return f"pv-{ar.a.name if tenant == 'A' else ar.b.name}"

    return name


# Network, services, namespaces, volumes and the training kinds (issue 9).
ATTEMPTS += [
    Attempt(
        "netpol-egress-to-metadata-address",
        "network-policy-metadata",
        "b-admin",
        "B",
        lambda _: netpol("m1", egress=egress({"ipBlock": {"cidr": "0.0.0.0/0"}})),
        lambda _: netpol(
            "m1", egress=egress({"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}})
        ),
        allowed_where="B",
        update=True,
    ),
    Attempt(
        "netpol-egress-to-ipv6-metadata-address",
        "network-policy-metadata",
        "b-admin",
        "B",
        lambda _: netpol("m2", egress=egress({"ipBlock": {"cidr": "fd00::/8"}})),
        lambda _: netpol(
            "m2", egress=egress({"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:ec2::254/128"]}})
        ),
        allowed_where="B",
        update=True,
    ),
    Attempt(
        "netpol-egress-without-peers-reaches-metadata",
        "network-policy-metadata",
        "b-admin",
        "B",
        lambda _: netpol("m3", egress=[{"ports": [{"port": 443}]}]),
        lambda _: netpol(
            "m3",
            egress=[
                {
                    "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}],
                    "ports": [{"port": 443}],
                }
            ],
        ),
        allowed_where="B",
        update=True,
    ),
    Attempt(
        "netpol-ingress-ipblock-when-egress-is-off",
        "network-policy-peer",
        "admin",
        "A",
        lambda _: netpol("m4", ingress=[{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]),
        lambda ar: netpol("m4", ingress=from_tenant(ar.a.name)),
        update=True,
    ),
    Attempt(
        "netpol-selector-on-an-ordinary-label",
        "network-policy-peer",
        "admin",
        "A",
        lambda _: netpol(
            "m5", ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"purpose": "data"}}}]}]
        ),
        lambda ar: netpol(
            "m5",
            ingress=[
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"purpose": "data", "labgate.io/tenant": ar.a.name}
                            }
                        }
                    ]
                }
            ],
        ),
        update=True,
    ),
    Attempt(
        # The namespace does not exist yet: B may create it tomorrow under its prefix.
        "netpol-selector-for-a-namespace-created-later",
        "network-policy-peer",
        "admin",
        "A",
        lambda ar: netpol(
            "m6",
            egress=egress(
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": f"{ar.b.name}-later"}}}
            ),
        ),
        lambda ar: netpol(
            "m6",
            egress=egress(
                {
                    "namespaceSelector": {
                        "matchLabels": {
                            "kubernetes.io/metadata.name": f"{ar.a.name}-later",
                            "labgate.io/tenant": ar.a.name,
                        }
                    }
                }
            ),
        ),
        update=True,
    ),
    *_as_both(
        Attempt(
            "service-external-ips",
            "service-exposure",
            "researcher",
            "A",
            lambda _: service("e1", externalIPs=["10.96.0.10"]),
            lambda _: service("e1"),
            update=True,
        )
    ),
    *_as_both(
        Attempt(
            "service-nodeport-not-allowed",
            "service-exposure",
            "researcher",
            "A",
            lambda _: service("e2", type="NodePort"),
            lambda _: service("e2", type="ClusterIP"),
            update=True,
        )
    ),
    *_as_both(
        Attempt(
            "service-externalname-not-allowed",
            "service-exposure",
            "researcher",
            "A",
            lambda ar: simple(
                "Service",
                "e3",
                spec={"type": "ExternalName", "externalName": f"db.{ar.b.name}.svc.cluster.local"},
            ),
            lambda _: service("e3"),
        )
    ),
    Attempt(
        # B may expose NodePort Services, not LoadBalancers.
        "service-loadbalancer-beyond-what-the-tenant-allows",
        "service-exposure",
        "b-researcher",
        "B",
        lambda _: service("e4", type="LoadBalancer"),
        lambda _: service("e4", type="NodePort"),
        allowed_where="B",
        update=True,
    ),
    *_as_both(
        Attempt(
            "namespace-of-no-tenant",
            # Said once, by namespace-orphan (namespace-untenanted said the same; it now speaks only
            # to a tenant's service accounts).
            "namespace-orphan",
            "researcher",
            "cluster",
            lambda ar: simple("Namespace", f"free-{ar.a.name}"),
            lambda ar: simple("Namespace", f"{ar.a.name}-free"),  # labgate labels it for A
            allowed_where="cluster",
        )
    ),
    *_as_both(
        Attempt(
            "namespace-squatting-other-tenants-prefix",
            "namespace-reserved",
            "researcher",
            "cluster",
            lambda ar: simple("Namespace", f"{ar.b.name}-squat"),
            lambda ar: simple("Namespace", f"{ar.a.name}-squat"),
            allowed_where="cluster",
        )
    ),
    *_as_both(
        Attempt(
            "pvc-binds-other-tenants-volume",
            "volume-claim",
            "researcher",
            "A",
            lambda ar: claim("v1", _pv("B")(ar)),
            lambda ar: claim("v1", _pv("A")(ar)),
        )
    ),
    *_as_both(
        Attempt(
            "pvc-binds-volume-of-no-tenant",
            "volume-claim",
            "researcher",
            "A",
            lambda ar: claim("v2", _pv("none")(ar)),
            lambda ar: claim("v2", _pv("A")(ar)),
        )
    ),
    *_as_both(
        Attempt(
            "pvc-binds-volume-that-does-not-exist-yet",
            "volume-claim",
            "researcher",
            "A",
            lambda ar: claim("v3", f"pv-later-{ar.b.name}"),
            lambda ar: claim("v3", _pv("A")(ar)),
        )
    ),
    *[
        row
        for key in TRAINING_KINDS
        for row in _as_both(
            Attempt(
                f"{key}-privileged-in-a-list-of-templates",
                "pod-hardening",
                "researcher",
                "A",
                training(key, f"k-{key}", PRIVILEGED),
                training(key, f"k-{key}", CLEAN),
                update=True,
            )
        )
    ],
]


def _run(arena: Arena, actor: str, where: str, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    if where == "A-admin":
        return arena.a.admin.apply(manifest, arena.a.namespace)
    who = arena.actor(actor)
    if where == "cluster":
        return who.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    return who.kubectl("create", "-n", arena.namespace(where), "-f", "-", stdin=json.dumps(manifest))


_RESOURCE = {"Pod": "pod", "Job": "job.batch", "Deployment": "deployment.apps", "Secret": "secret"}


def _patch(
    arena: Arena, actor: str, manifest: dict[str, Any], patch: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    target = f"{_RESOURCE[manifest['kind']]}/{manifest['metadata']['name']}"
    return arena.actor(actor).kubectl(
        "patch", target, "-n", arena.a.namespace, "--type=json", "-p", json.dumps(patch)
    )


def _read_back(arena: Arena, manifest: dict[str, Any], where: str) -> dict[str, Any]:
    namespace = arena.namespace(where.removesuffix("-admin"))
    target = f"{_RESOURCE[manifest['kind']]}/{manifest['metadata']['name']}"
    found: dict[str, Any] = json.loads(
        arena.stack.admin_kubectl("get", target, "-n", namespace, "-o", "json")
    )
    return found


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[a.id for a in ATTEMPTS])
def test_escape_attempt_is_refused_and_the_legitimate_action_admitted(arena: Arena, attempt: Attempt) -> None:
    manifest = attempt.allowed(arena)
    if attempt.attempt_patch is not None and attempt.allowed_patch is not None:
        created = _run(arena, attempt.actor, attempt.allowed_where, manifest)
        assert created.returncode == 0, created.stderr
        refused = _patch(arena, attempt.actor, manifest, attempt.attempt_patch(arena))
        allowed = _patch(arena, attempt.actor, manifest, attempt.allowed_patch(arena))
    else:
        refused = _run(arena, attempt.actor, attempt.where, attempt.attempt(arena))
        allowed = _run(arena, attempt.actor, attempt.allowed_where, manifest)
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert f"[{attempt.rule}]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr
    assert allowed.returncode == 0, allowed.stderr
    if attempt.admitted is not None:
        attempt.admitted(arena, _read_back(arena, manifest, attempt.allowed_where))
    if manifest["kind"] == "Namespace":
        arena.stack.admin_kubectl("delete", "namespace", manifest["metadata"]["name"], "--wait=false")
    if manifest["kind"] == "Pod" and attempt.attempt_patch is not None:
        # GPU pods made for UPDATE rows give their GPUs back to the tenant's quota.
        arena.stack.admin_kubectl(
            "delete", "pod", manifest["metadata"]["name"], "-n", arena.a.namespace, "--wait=false"
        )


UPDATES = [a for a in ATTEMPTS if a.update]


@pytest.mark.parametrize("attempt", UPDATES, ids=[a.id for a in UPDATES])
def test_escape_attempt_is_refused_on_update(arena: Arena, attempt: Attempt) -> None:
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


def _one_create_per_rule() -> list[Attempt]:
    """The first CREATE row of each rule that kubectl create can send (apply cannot send generateName)."""
    rows: dict[str, Attempt] = {}
    for attempt in ATTEMPTS:
        if attempt.attempt_patch is None and "admin" not in attempt.where:
            rows.setdefault(attempt.rule, attempt)
    return list(rows.values())


def _generated(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest named by the apiserver: metadata.generateName instead of metadata.name."""
    metadata = {k: v for k, v in manifest["metadata"].items() if k != "name"}
    return {**manifest, "metadata": {**metadata, "generateName": f"{manifest['metadata']['name']}-"}}


GENERATED = _one_create_per_rule()


@pytest.mark.parametrize("attempt", GENERATED, ids=[a.id for a in GENERATED])
def test_escape_attempt_is_refused_when_the_apiserver_names_it(arena: Arena, attempt: Attempt) -> None:
    """The same attempt with generateName (how controllers name what they create): refused with the
    same rule, naming the object by the name the apiserver generated. The apiserver names the object
    after the request is made: the mutating webhook and `labgate check` see no name at all, and the
    validating webhook gets the generated one (the Rego tests and tests/unit/cli hold the nameless
    case)."""
    prefix = f"{attempt.attempt(arena)['metadata']['name']}-"
    refused = _run(arena, attempt.actor, attempt.where, _generated(attempt.attempt(arena)))
    assert refused.returncode == 1, f"admitted: {refused.stdout}"
    assert f"[{attempt.rule}]" in refused.stderr, refused.stderr
    assert "Fix:" in refused.stderr, refused.stderr
    assert f'"{prefix}' in refused.stderr, refused.stderr


def test_namespace_count_is_bounded_per_tenant(stack: LabgateStack, tenants: TenantFactory) -> None:
    """A tenant with maxCount 2 has its own namespace and may create one more; the third is refused
    with the counts, and allowed again once one is gone."""
    name = f"cnt-{uuid.uuid4().hex[:6]}"
    tenant = tenants.create(
        name=name, spec_extra={"namespaces": {"names": [name], "prefix": f"{name}-", "maxCount": 2}}
    )
    created = tenant.researcher.kubectl("create", "namespace", f"{name}-one")
    assert created.returncode == 0, created.stderr
    for who in (tenant.researcher, tenant.admin):
        refused = who.kubectl("create", "namespace", f"{name}-two")
        assert refused.returncode == 1
        assert (
            f'[namespace-count] tenant "{name}" has 2 namespaces, its limit (spec.namespaces.maxCount: 2): '
            f'namespace "{name}-two" would be number 3.'
        ) in refused.stderr, refused.stderr
    stack.admin_kubectl("delete", "namespace", f"{name}-one", "--wait=true", "--timeout=60s")
    # The webhook learns of the deletion through its watch: poll, bounded, for the admission.
    deadline = time.monotonic() + 20
    while True:
        admitted = tenant.researcher.kubectl("create", "namespace", f"{name}-two")
        if admitted.returncode == 0 or time.monotonic() > deadline:
            break
        assert "[namespace-count]" in admitted.stderr, admitted.stderr
        time.sleep(0.5)
    assert admitted.returncode == 0, admitted.stderr
    stack.admin_kubectl("delete", "namespace", f"{name}-two", "--wait=false")


def test_a_namespace_named_by_the_apiserver_joins_the_researchers_tenant(arena: Arena) -> None:
    """`generateName` under the researcher's own tenant's prefix: the mutating webhook sees no name
    yet, and every name the apiserver can generate starts with the prefix, so the namespace is
    labelled for the tenant and admitted. The same under the other tenant's prefix is refused."""

    def create(generate_name: str) -> subprocess.CompletedProcess[str]:
        manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": generate_name}}
        return arena.a.researcher.kubectl("create", "-o", "name", "-f", "-", stdin=json.dumps(manifest))

    created = create(f"{arena.a.name}-gen-")
    assert created.returncode == 0, created.stderr
    name = created.stdout.strip().removeprefix("namespace/")
    assert name.startswith(f"{arena.a.name}-gen-"), created.stdout
    found = json.loads(arena.stack.admin_kubectl("get", "namespace", name, "-o", "json"))
    assert found["metadata"].get("labels", {}).get("labgate.io/tenant") == arena.a.name, found["metadata"]
    arena.stack.admin_kubectl("delete", "namespace", name, "--wait=false")
    foreign = create(f"{arena.b.name}-gen-")
    assert foreign.returncode == 1, f"admitted: {foreign.stdout}"
    assert "Fix:" in foreign.stderr, foreign.stderr


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


def test_ephemeral_containers_are_judged_like_any_container(arena: Arena) -> None:
    """kubectl debug adds an ephemeral container to a running pod (pods/ephemeralcontainers), with the
    RBAC labgate provisions for researchers (issue 22 item 10); labgate refuses what it refuses
    elsewhere and admits a baseline debug container."""
    ns = arena.a.namespace
    researcher = arena.a.researcher
    assert (
        researcher.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(pod("dbg-target"))).returncode == 0
    )

    def debug(container: str, profile: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return researcher.kubectl(
            "debug",
            "dbg-target",
            "-n",
            ns,
            f"--image={IMAGE}",
            f"--profile={profile}",
            "-c",
            container,
            *flags,
        )

    for container, profile, asked in (
        ("root", "sysadmin", "privileged: true"),
        ("net", "netadmin", '"NET_ADMIN"'),
    ):
        refused = debug(container, profile)
        assert refused.returncode == 1, refused.stdout
        assert "[pod-hardening]" in refused.stderr, refused.stderr
        assert f'spec.ephemeralContainers[0] ("{container}") asks' in refused.stderr, refused.stderr
        assert asked in refused.stderr, refused.stderr
    # A debug container asked to start from the node's cache (IfNotPresent, also what the API gives
    # a tagged image by default) is made to pull its image: the node is shared (image-pull-always).
    admitted = debug("look", "baseline", "--image-pull-policy=IfNotPresent")
    assert admitted.returncode == 0, admitted.stderr
    live = json.loads(arena.stack.admin_kubectl("get", "pod", "dbg-target", "-n", ns, "-o", "json"))
    assert [c.get("imagePullPolicy") for c in live["spec"]["ephemeralContainers"]] == ["Always"]
    assert [c["name"] for c in live["spec"]["ephemeralContainers"]] == ["look"]
    assert baseline_gaps(live["spec"]) == set()


def test_restricted_secrets_are_neither_read_nor_lifted_by_researchers(arena: Arena) -> None:
    """A restricted Secret is for pods running as its service account: a researcher cannot read it
    through the API (RBAC), nor change, lift or delete it (the API would hand back its data); the
    tenant's admin can. Researchers still write and change their own, unrestricted Secrets."""
    ns, researcher, admin = arena.a.namespace, arena.a.researcher, arena.a.admin
    restricted = simple("Secret", "vault-key", stringData={"key": "k"})
    restricted["metadata"]["annotations"] = {"labgate.io/restricted-to-service-account": "trainer"}
    assert researcher.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(restricted)).returncode == 0

    read = researcher.kubectl("get", "secret", "vault-key", "-n", ns, "-o", "json")
    assert read.returncode == 1
    assert 'cannot get resource "secrets"' in read.stderr, read.stderr
    listed = researcher.kubectl("get", "secrets", "-n", ns)
    assert listed.returncode == 1
    assert 'cannot list resource "secrets"' in listed.stderr, listed.stderr

    # kubectl patch and label read the Secret first, which RBAC refuses; a server-side apply or a
    # replace writes without reading, and the delete answers with the object: labgate refuses those.
    lifted_manifest = simple("Secret", "vault-key", stringData={"key": "mine now"}, labels={"touched": "yes"})
    assert "cannot get resource" in researcher.kubectl("label", "secret", "vault-key", "x=y", "-n", ns).stderr
    for args, stdin in (
        (("apply", "--server-side", "--force-conflicts", "-f", "-"), json.dumps(lifted_manifest)),
        (("replace", "-f", "-"), json.dumps(lifted_manifest)),
        (("delete", "secret", "vault-key"), None),
    ):
        refused = researcher.kubectl(*args, "-n", ns, stdin=stdin)
        assert refused.returncode == 1, refused.stdout
        assert "[secret-restriction]" in refused.stderr, refused.stderr
        assert "Fix: ask an admin of tenant" in refused.stderr, refused.stderr
    still = json.loads(arena.stack.admin_kubectl("get", "secret", "vault-key", "-n", ns, "-o", "json"))
    assert still["metadata"]["annotations"] == {"labgate.io/restricted-to-service-account": "trainer"}
    assert "touched" not in (still["metadata"].get("labels") or {})

    mine = simple("Secret", "my-key", stringData={"key": "k"})
    assert researcher.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(mine)).returncode == 0
    relabelled = simple("Secret", "my-key", stringData={"key": "k2"}, labels={"touched": "yes"})
    changed = researcher.kubectl("apply", "--server-side", "-n", ns, "-f", "-", stdin=json.dumps(relabelled))
    assert changed.returncode == 0, changed.stderr
    assert researcher.kubectl("delete", "secret", "my-key", "-n", ns).returncode == 0

    assert admin.kubectl("get", "secret", "vault-key", "-n", ns).returncode == 0
    lift = json.dumps([{"op": "remove", "path": "/metadata/annotations"}])
    lifted = admin.kubectl("patch", "secret", "vault-key", "-n", ns, "--type=json", "-p", lift)
    assert lifted.returncode == 0, lifted.stderr
    assert admin.kubectl("delete", "secret", "vault-key", "-n", ns).returncode == 0


def test_a_tenant_cannot_be_given_a_system_priority_class(arena: Arena) -> None:
    """Even the infra team cannot list a system-* class for a tenant: the CRD refuses it."""
    add = [{"op": "add", "path": "/spec/scheduling/priorityClasses/-", "value": "system-node-critical"}]
    refused = arena.stack.cluster_kubectl(
        "patch", "tenant", arena.a.name, "--type=json", "-p", json.dumps(add)
    )
    assert refused.returncode == 1, refused.stdout
    assert "system-* priority classes are the cluster's own" in refused.stderr, refused.stderr


def test_only_admins_change_what_runs_as_a_restricted_account(arena: Arena) -> None:
    """A workload running as "trainer" (the account Secret "trainer-key" is restricted to) is the
    admin's: a researcher may not change its pod template (that would run their code with the
    Secret), on CREATE or UPDATE, but may label it; the admin may change it."""
    ns, researcher, admin = arena.a.namespace, arena.a.researcher, arena.a.admin
    manifest = deployment("s17", serviceAccountName="trainer")
    refused = researcher.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(manifest))
    assert refused.returncode == 1, refused.stdout
    assert "[restricted-service-account]" in refused.stderr, refused.stderr
    assert 'runs as service account "trainer", to which Secret "trainer-key" is restricted' in refused.stderr
    assert "Fix:" in refused.stderr
    assert admin.apply(manifest, ns).returncode == 0

    other = "registry.lab.example/research/trainer:v2"
    changed = researcher.kubectl("set", "image", "deployment/s17", f"m={other}", "-n", ns)
    assert changed.returncode == 1, changed.stdout
    assert "[restricted-service-account]" in changed.stderr, changed.stderr
    labelled = researcher.kubectl("label", "deployment", "s17", "-n", ns, "owner=research")
    assert labelled.returncode == 0, labelled.stderr  # the template is as it was
    by_admin = admin.kubectl("set", "image", "deployment/s17", f"m={other}", "-n", ns)
    assert by_admin.returncode == 0, by_admin.stderr
    stored = json.loads(arena.stack.admin_kubectl("get", "deployment", "s17", "-n", ns, "-o", "json"))
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == other
    assert stored["metadata"]["labels"]["owner"] == "research"
    arena.stack.admin_kubectl("delete", "deployment", "s17", "-n", ns)
