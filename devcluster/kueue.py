"""Kueue beside labgate in the local stack, run out of cluster as the stack's other processes are.

Kueue beside labgate in the local stack (opt-in: `LabgateStack(kueue=True)`), run out of cluster
against the local apiserver as the other processes are.

    with LabgateStack(workdir, nodes=NodeSimulation(pools), kueue=True) as stack:
        ...   # Kueue's CRDs served, its webhooks registered by URL, Jobs in tenant namespaces queued

What the stack sets up (the same shape as the chart's `kueue` section asks of an installed Kueue):
- its CRDs (from the pinned build, <tools>/kueue-<version>/crds), served at kueue.x-k8s.io/v1beta2;
- a serving certificate of its own (a CA the stack makes), the webhooks Kueue serves registered with the
  apiserver by URL on loopback (`kueue_webhook_configurations`), only those of the kinds labgate uses
  (batch Jobs and Kueue's own objects);
- its configuration (`kueue_configuration`): Jobs without a queue name are Kueue's in namespaces that
  carry labgate's tenant label (manageJobsWithoutQueueName + managedJobsNamespaceSelector), and the
  LocalQueue named `default` the reconciler makes in each of them is the queue they go to; and its
  resource transformation (rbac.queues.gpu_total_transformation): every nvidia.com/gpu a workload asks
  also asks one labgate.io/gpu-total, which each tenant's ClusterQueue caps at its total across flavors;
- with `pod_integration` (LabgateStack(kueue=True, kueue_pod_integration=True)), Kueue's pod,
  Deployment and StatefulSet integrations too, with their webhooks: every pod in a tenant namespace
  waits behind Kueue's scheduling gate until Kueue admits it (each a Workload of its own; a
  Deployment's and a StatefulSet's pods one by one), and the policies say so (queue.pod_integration).

Two facts of Kueue run out of cluster: with its internal certificate management off it reads its
metrics certificate from the fixed path /etc/kueue/metrics/certs, so it runs in a mount namespace of its
own in which /etc is an overlay (the machine's /etc unchanged, the writes kept in the stack's workdir);
and the VisibilityOnDemand feature gate wants certificates of its own, so it is off.
"""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from devcluster.kubectl import kubectl
from devcluster.processes import ManagedProcess, free_port, rerecord, spawn, wait_until
from devcluster.tools import ensure_tools
from labgate.core.certificates import issue_serving_cert, make_ca
from labgate.core.tenant import TENANT_LABEL
from rbac.queues import gpu_total_transformation

KUEUE_NAMESPACE = "kueue-system"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
WEBHOOK_CONFIGURATION = "kueue"
METRICS_CERT_PATH = "/etc/kueue/metrics/certs"
# Kueue's identity (a client certificate): not one labgate trusts, so labgate's webhook judges Kueue's
# own writes (a Job it admits) as in a real cluster, where it runs as a service account of its own.
KUEUE_USER = f"system:serviceaccount:{KUEUE_NAMESPACE}:kueue-controller-manager"
KUEUE_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{KUEUE_NAMESPACE}")
# Namespaces Kueue's webhooks never see: the control plane's, its own and labgate's.
EXEMPT_NAMESPACES = ("kube-system", KUEUE_NAMESPACE, "labgate-system")

# The webhooks Kueue serves for what labgate uses: (mutating?, path, API group, version, resource,
# operations). Its other integrations (Kubeflow, Ray, JobSet, ...) are not enabled; plain Pods,
# Deployments and StatefulSets only with the pod integration (_POD_INTEGRATION_WEBHOOKS).
_WEBHOOKS: tuple[tuple[bool, str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    (True, "/mutate-batch-v1-job", "batch", "v1", ("jobs",), ("CREATE",)),
    (False, "/validate-batch-v1-job", "batch", "v1", ("jobs",), ("CREATE", "UPDATE")),
    (True, "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io", "v1beta2", ("clusterqueues",), ("CREATE",)),
    (False, "/validate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io", "v1beta2", ("clusterqueues",), ("CREATE", "UPDATE")),
    (False, "/validate-kueue-x-k8s-io-v1beta2-cohort", "kueue.x-k8s.io", "v1beta2", ("cohorts",), ("CREATE", "UPDATE")),
    (True, "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor", "kueue.x-k8s.io", "v1beta2", ("resourceflavors",), ("CREATE",)),
    (False, "/validate-kueue-x-k8s-io-v1beta2-resourceflavor", "kueue.x-k8s.io", "v1beta2", ("resourceflavors",), ("CREATE", "UPDATE")),
    (True, "/mutate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2", ("workloads",), ("CREATE",)),
    (False, "/validate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2", ("workloads", "workloads/status"), ("CREATE", "UPDATE")),
)  # fmt: skip

# Kueue's frameworks "pod", "deployment" and "statefulset" (v0.17: a Deployment's or StatefulSet's
# webhook marks its pod template, and the pod webhook gates each pod it makes).
POD_INTEGRATION_FRAMEWORKS = ("pod", "deployment", "statefulset")
_POD_INTEGRATION_WEBHOOKS: tuple[tuple[bool, str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    (True, "/mutate--v1-pod", "", "v1", ("pods",), ("CREATE",)),
    (False, "/validate--v1-pod", "", "v1", ("pods",), ("CREATE", "UPDATE")),
    (True, "/mutate-apps-v1-deployment", "apps", "v1", ("deployments",), ("CREATE", "UPDATE")),
    (False, "/validate-apps-v1-deployment", "apps", "v1", ("deployments",), ("CREATE", "UPDATE")),
    (True, "/mutate-apps-v1-statefulset", "apps", "v1", ("statefulsets",), ("CREATE", "UPDATE")),
    (False, "/validate-apps-v1-statefulset", "apps", "v1", ("statefulsets",), ("CREATE", "UPDATE")),
)  # fmt: skip


def kueue_configuration(
    *, webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path, pod_integration: bool = False
) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a run beside labgate, on loopback;
    `pod_integration` adds the frameworks POD_INTEGRATION_FRAMEWORKS to batch/job. The namespace
    selector is what keeps the pod integration to tenant namespaces: for pod-based integrations it is
    a strong exemption in v0.17 (a pod elsewhere is never Kueue's, whatever its labels), and its
    podOptions are gone from config v1beta2. The resource transformation is what the ClusterQueues'
    cap across flavors counts (rbac/queues.py): without it Kueue admits a tenant's total on each pool."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]},
        "integrations": {
            "frameworks": ["batch/job", *(POD_INTEGRATION_FRAMEWORKS if pod_integration else ())]
        },
        "resources": {"transformations": [gpu_total_transformation()]},
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 100, "burst": 200},
    }


def kueue_webhook_configurations(
    url: str, ca_bundle_pem: bytes, *, pod_integration: bool = False
) -> list[dict[str, Any]]:
    """Kueue's mutating and validating webhook configurations, registered by URL (`url`: its https
    base), outside EXEMPT_NAMESPACES; with `pod_integration` also those of pods, Deployments and
    StatefulSets. Named "kueue": the apiserver calls mutating configurations in name order, so
    Kueue suspends a Job (gates a pod) before labgate's mutation ("labgate") sees it."""
    ca = base64.b64encode(ca_bundle_pem).decode()
    entries = _WEBHOOKS + (_POD_INTEGRATION_WEBHOOKS if pod_integration else ())

    def webhook(
        path: str, group: str, version: str, resources: tuple[str, ...], ops: tuple[str, ...]
    ) -> dict[str, Any]:
        return {
            # "/mutate--v1-pod" -> "mutate.v1.pod.kueue.x-k8s.io" (a name has no empty segment).
            "name": ".".join([*filter(None, path.strip("/").split("-")), "kueue.x-k8s.io"]),
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"{url}{path}", "caBundle": ca},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": list(EXEMPT_NAMESPACES),
                    }
                ]
            },
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "resources": list(resources),
                    "operations": list(ops),
                }
            ],
        }

    configurations = []
    for mutating, kind in ((True, "MutatingWebhookConfiguration"), (False, "ValidatingWebhookConfiguration")):
        configurations.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"app.kubernetes.io/name": "kueue"}},
                "webhooks": [webhook(*entry[1:]) for entry in entries if entry[0] is mutating],
            }
        )
    return configurations


def in_private_etc(argv: list[str], *, overlay: Path, cert_dir: Path) -> list[str]:
    """`argv` run in a mount namespace of its own where /etc is an overlay of the machine's (writes go
    to `overlay`) holding /etc/kueue/metrics/certs -> `cert_dir`. Kueue's process keeps the pid (each
    step execs the next), so it is stopped by that pid as any other."""
    upper, work = overlay / "upper", overlay / "work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    metrics_parent = str(Path(METRICS_CERT_PATH).parent)
    script = " && ".join(
        [
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={shlex.quote(str(upper))},"
            f"workdir={shlex.quote(str(work))} /etc",
            f"mkdir -p {metrics_parent}",
            f"rm -rf {METRICS_CERT_PATH}",
            f"ln -s {shlex.quote(str(cert_dir))} {METRICS_CERT_PATH}",
            f"exec {shlex.join(argv)}",
        ]
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def trust_kueue(policy_dir: Path, *, every_tenant: bool = True, pod_integration: bool = False) -> None:
    """Tell the policies at `policy_dir` (a copy) that Kueue runs, as the chart's kueue.enabled does:
    Kueue's service accounts are trusted as the control plane's (config trusted_groups: without it
    labgate refuses Kueue's unsuspending of a Job it admitted, [tenant-membership]), every tenant is
    Kueue's (queue.managed_by_kueue: the queue rules hold, gpu-quota-pending is silent for a queued
    workload) and Kueue's controller is KUEUE_USER (queue.kueue_users: exempt for the fields it sets
    at admission only). `every_tenant=False` leaves it to each Tenant (its spec.queue), as the demo
    does so that team-a's bare GPU pods still run (a managed tenant's are refused without Kueue's pod
    integration: queue-bare-pod). `pod_integration`: Kueue runs its pod integration
    (queue.pod_integration: a managed tenant's GPU pods queue behind Kueue's gate, and the reconciler
    leaves out their namespaces' labgate-gpu ResourceQuota)."""
    config = policy_dir / "labgate" / "config" / "data.json"
    data = json.loads(config.read_text())
    group = f"system:serviceaccounts:{KUEUE_NAMESPACE}"
    if group not in data["trusted_groups"]:
        data["trusted_groups"].append(group)
    config.write_text(json.dumps(data, indent=2) + "\n")
    queue_config = policy_dir / "labgate" / "config" / "queue" / "data.json"
    queue = json.loads(queue_config.read_text())
    queue.update(managed_by_kueue=every_tenant, kueue_users=[KUEUE_USER], pod_integration=pod_integration)
    queue_config.write_text(json.dumps(queue, indent=2) + "\n")


def trusting_kueue(
    policy_dir: Path, copy: Path, *, every_tenant: bool = True, pod_integration: bool = False
) -> Path:
    """A copy of the policies at `policy_dir`, made at `copy` (replaced), that trust Kueue
    (trust_kueue); what LabgateStack(kueue=True) serves, so that no caller has to remember it."""
    if policy_dir.resolve() != copy.resolve():  # a restarted stack serves its copy already
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(policy_dir, copy)
    trust_kueue(copy, every_tenant=every_tenant, pod_integration=pod_integration)
    return copy


class KueueError(RuntimeError):
    """Kueue could not be set up beside the stack."""


class KueueController:
    """One Kueue controller manager beside a local control plane: its CRDs, certificates, process and
    webhook registration."""

    def __init__(
        self,
        workdir: Path,
        admin_kubeconfig: Path,
        kubeconfig: Path,
        *,
        detached: bool = False,
        pod_integration: bool = False,
    ):
        """`admin_kubeconfig` installs Kueue; Kueue runs as `kubeconfig` (KUEUE_USER);
        `pod_integration`: Kueue's pod, Deployment and StatefulSet integrations too."""
        self.workdir = workdir
        self.pod_integration = pod_integration
        self.admin_kubeconfig = admin_kubeconfig
        self.kubeconfig = kubeconfig
        self.detached = detached
        self.process: ManagedProcess | None = None
        self.webhook_url = ""

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = kubectl(self.admin_kubeconfig, *args, stdin=stdin)
        if result.returncode != 0:
            raise KueueError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def install_crds(self) -> None:
        crds = ensure_tools("kueue")["kueue"].directory / "crds"
        self._kubectl("apply", "--server-side", "--field-manager=labgate-dev", "-f", str(crds))
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}
        # Kueue's RBAC, broad in this throwaway cluster (its own chart's ClusterRole is narrower).
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "labgate-dev-kueue"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUEUE_USER}],
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
        }
        self._kubectl(
            "apply",
            "--server-side",
            "--field-manager=labgate-dev",
            "-f",
            "-",
            stdin=yaml.safe_dump_all([namespace, binding]),
        )

    def start(self, *, timeout: float = 90.0) -> None:
        """Install the CRDs, start Kueue, and register its webhooks once it is ready."""
        binary = ensure_tools("kueue")["kueue"].binary()
        self.install_crds()
        home = self.workdir / "kueue"
        cert_dir = home / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        ca = make_ca("labgate-local-kueue-ca")
        serving = issue_serving_cert(
            ca, common_name="kueue-webhook", dns_names=("localhost",), ip_addresses=("127.0.0.1",)
        )
        (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
        (cert_dir / "tls.key").write_bytes(serving.key_pem)
        (cert_dir / "tls.key").chmod(0o600)
        webhook_port, health_port, metrics_port = free_port(), free_port(), free_port()
        config = home / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                kueue_configuration(
                    webhook_port=webhook_port,
                    health_port=health_port,
                    metrics_port=metrics_port,
                    cert_dir=cert_dir,
                    pod_integration=self.pod_integration,
                )
            )
        )
        argv = [
            str(binary),
            f"--config={config}",
            f"--kubeconfig={self.kubeconfig}",
            "--zap-log-level=info",
        ]
        self.process = spawn(
            self.workdir,
            "kueue",
            in_private_etc(argv, overlay=home / "etc-overlay", cert_dir=cert_dir),
            detached=self.detached,
        )
        health = f"http://127.0.0.1:{health_port}/readyz"

        def is_ready() -> bool:
            with urllib.request.urlopen(health, timeout=2) as response:
                return bool(response.status == 200)

        wait_until(is_ready, what="Kueue /readyz", timeout=timeout, interval=0.3, watch=[self.process])
        # The pid now runs Kueue itself (it exec'd): record that, for `python -m devcluster down`.
        rerecord(self.workdir, self.process)
        self.webhook_url = f"https://127.0.0.1:{webhook_port}"
        configurations = kueue_webhook_configurations(
            self.webhook_url, ca.cert_pem, pod_integration=self.pod_integration
        )
        self._kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=labgate-dev", "-f", "-",
            stdin=yaml.safe_dump_all(configurations),
        )  # fmt: skip

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
