"""The local control plane with labgate installed: CRDs, a real OPA server loaded with policies/,
and the webhook (one or more replicas) registered with the apiserver over TLS on loopback; with
`nodes=`, also kube-scheduler, every default controller and KWOK's simulated GPU node pools."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from devcluster.controlplane import CONTROLLERS, DEFAULT_CONTROLLERS, ControlPlane, LocalControlPlane
from devcluster.kubectl import kubectl
from devcluster.kueue import KUEUE_GROUPS, KUEUE_USER, KueueController, trusting_kueue
from devcluster.nodes import KwokNodes, NodePool
from devcluster.processes import Lifecycle, ManagedProcess, free_port, spawn, wait_until
from devcluster.tools import REPO_ROOT, ensure_tools
from labgate.core.certificates import issue_serving_cert, make_ca
from webhook.registration import webhook_configurations

LABGATE_NAMESPACE = "labgate-system"
EXEMPT_NAMESPACES = ["kube-system", LABGATE_NAMESPACE]
CRD_DIR = REPO_ROOT / "charts" / "labgate" / "crds"
# The policies OPA loads; LABGATE_POLICY_DIR points the local stack at another copy (e.g. a policy change
# under review) without touching the repository.
POLICY_DIR = Path(os.environ.get("LABGATE_POLICY_DIR", str(REPO_ROOT / "policies")))
WEBHOOK_CONFIGURATION = "labgate"


def opa_argv(opa: str, *, port: int, policy_dir: Path | None = None, watch: bool = False) -> list[str]:
    """`opa run` as labgate uses it: server on loopback; with `policy_dir`, the policies loaded once at
    start (tests, samples and test data skipped). The webhook keeps them loaded after that through
    OPA's API (webhook/policy_sync.py: new files and folders too, errors visible), as in the chart;
    `watch` is OPA's own --watch, for a stack without that webhook."""
    argv = [opa, "run", "--server", f"--addr=127.0.0.1:{port}", "--log-level=error"]
    if policy_dir is None:
        return argv
    return [
        *argv,
        *(["--watch"] if watch else []),
        "--ignore=*_test.rego",
        "--ignore=samples",
        "--ignore=testdata",
        str(policy_dir),
    ]


@dataclass(frozen=True)
class NodeSimulation:
    """Simulated nodes for a stack: the pools to create at start (more can be added later through
    `LabgateStack.kwok`), KWOK's node Lease duration (longer for large clusters), and how fast the
    controller manager (the Job controller creating pods) may call the API."""

    pools: list[NodePool] = field(default_factory=list)
    lease_seconds: int | None = None
    # kube-controller-manager's (--kube-api-qps, --kube-api-burst); None: its defaults (20, 30).
    controller_api_rate: tuple[int, int] | None = None


class LabgateLauncher(Protocol):
    """How the stack starts `labgate ARGS...` (the webhook, the reconciler): as host processes from the
    checkout (HostLauncher), or in the built image (devcluster.containerd.ContainerLauncher). `files`
    are read and `writable` directories written by the command, at the paths its env and args name."""

    def launch(
        self,
        workdir: Path,
        name: str,
        args: list[str],
        *,
        env: dict[str, str],
        files: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        detached: bool = False,
    ) -> ManagedProcess: ...


class HostLauncher:
    """`python -m cli.main ARGS...` from this checkout."""

    def launch(
        self,
        workdir: Path,
        name: str,
        args: list[str],
        *,
        env: dict[str, str],
        files: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        detached: bool = False,
    ) -> ManagedProcess:
        argv = [sys.executable, "-m", "cli.main", *args]
        return spawn(workdir, name, argv, detached=detached, env={**env, "PYTHONPATH": str(REPO_ROOT)})


class KubectlError(RuntimeError):
    """A kubectl command that labgate's own set-up needed failed."""


class LabgateStack(Lifecycle):
    """Control plane + OPA + webhook, ready for `kubectl apply` as researchers."""

    def __init__(
        self,
        workdir: Path,
        *,
        detached: bool = False,
        webhook_replicas: int = 1,
        control_plane: ControlPlane | None = None,
        webhook_host: str = "127.0.0.1",
        with_reconciler: bool = True,
        reconciler_lease_seconds: float = 15.0,
        policy_dir: Path = POLICY_DIR,
        nodes: NodeSimulation | None = None,
        launcher: LabgateLauncher | None = None,
        kueue: bool = False,
        kueue_every_tenant: bool = True,
        kueue_pod_integration: bool = False,
    ):
        """`control_plane` defaults to local processes; `webhook_host` is the address the apiserver
        reaches the webhook at (loopback here; the Docker bridge gateway for a kind cluster).
        `nodes` adds kube-scheduler, every default controller and KWOK nodes (local processes only):
        opt-in, since most tests need no node and startup time matters. `launcher` starts the webhook
        and reconciler (host processes by default). `kueue` runs Kueue beside labgate (devcluster/kueue.py:
        its CRDs, webhooks by URL, Jobs in tenant namespaces queued) and tells the reconciler so (it
        then provisions each tenant's queues) and the policies, as the chart's kueue.enabled does: at
        start they are served from a copy of `policy_dir` that trusts Kueue's controller
        (devcluster.kueue.trusting_kueue); `kueue_every_tenant` False leaves each Tenant to opt in
        (its spec.queue) instead of every tenant being Kueue's; `kueue_pod_integration` runs Kueue's pod,
        Deployment and StatefulSet integrations and says so to the policies (queue.pod_integration),
        which the reconciler reads too (it then leaves out the managed tenants' labgate-gpu quota).
        Local control plane only."""
        self.workdir = workdir
        self.detached = detached
        self.webhook_replicas = webhook_replicas
        self.webhook_host = webhook_host
        self.with_reconciler = with_reconciler
        self.policy_dir = policy_dir
        self.reconciler_lease_seconds = reconciler_lease_seconds
        self.nodes = nodes
        self.kwok: KwokNodes | None = None
        self.with_kueue = kueue
        self.kueue_every_tenant = kueue_every_tenant
        self.kueue_pod_integration = kueue_pod_integration
        if kueue_pod_integration and not kueue:
            raise ValueError("Kueue's pod integration needs kueue=True")
        self.kueue: KueueController | None = None
        if (nodes is not None or kueue) and control_plane is not None:
            raise ValueError("simulated nodes and Kueue need the local control plane")
        self.cluster: ControlPlane = control_plane or LocalControlPlane(
            workdir,
            detached=detached,
            with_scheduler=nodes is not None,
            controllers=DEFAULT_CONTROLLERS if nodes is not None else CONTROLLERS,
            # KWOK renews a Lease every quarter of its duration, as a kubelet does; a node whose
            # Lease is older than the grace period goes NotReady, so a slow Lease needs a long grace.
            node_monitor_grace_seconds=None
            if nodes is None or nodes.lease_seconds is None
            else nodes.lease_seconds,
            controller_api_rate=None if nodes is None else nodes.controller_api_rate,
        )
        self.launcher: LabgateLauncher = launcher or HostLauncher()
        self.processes: list[ManagedProcess] = []
        self.opa_url = ""
        self.webhook_urls: list[str] = []
        # Plain-HTTP /healthz, /readyz and /metrics of each replica, by its admission URL.
        self.health_urls: dict[str, str] = {}
        self.reconciler_metrics_urls: list[str] = []
        self.start_seconds = 0.0

    @property
    def admin_kubeconfig(self) -> Path:
        return self.cluster.admin_kubeconfig

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        return self.cluster.kubeconfig_for(user, groups)

    def admin_kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl as the cluster admin; raises KubectlError with kubectl's output on failure."""
        result = kubectl(self.admin_kubeconfig, *args, stdin=stdin)
        if result.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def cluster_kubectl(
        self, *args: str, manifest: dict[str, Any] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kubectl as the cluster admin, returning the result (for tests that expect failures)."""
        return kubectl(
            self.admin_kubeconfig, *args, stdin=None if manifest is None else yaml.safe_dump(manifest)
        )

    def start(self) -> None:
        started = time.monotonic()
        ensure_tools("kubernetes", "opa", *(["kueue"] if self.with_kueue else []))
        try:
            self.cluster.start()
            if self.with_kueue:
                # The policies learn that Kueue runs before OPA loads them (without it labgate refuses
                # Kueue's unsuspending of the Jobs it admits: [tenant-membership]).
                self.policy_dir = trusting_kueue(
                    self.policy_dir,
                    self.workdir / "policies-kueue",
                    every_tenant=self.kueue_every_tenant,
                    pod_integration=self.kueue_pod_integration,
                )
                # Before the reconciler: it provisions queues, so Kueue's CRDs must be served.
                self.kueue = KueueController(
                    self.workdir,
                    self.admin_kubeconfig,
                    self.kubeconfig_for(KUEUE_USER, KUEUE_GROUPS),
                    detached=self.detached,
                    pod_integration=self.kueue_pod_integration,
                )
                self.kueue.start()
            self.admin_kubectl("apply", "--server-side", "--field-manager=labgate-dev", "-f", str(CRD_DIR))
            # Not `kubectl wait`: it errors out while the new CRD has no status.conditions at all yet.
            wait_until(self._is_tenant_crd_established, what="Tenant CRD Established", timeout=30)
            # Applied, not created: a restarted stack may find it from its previous run.
            namespace = f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {LABGATE_NAMESPACE}}}\n"
            self.admin_kubectl(
                "apply", "--server-side", "--field-manager=labgate-dev", "-f", "-", stdin=namespace
            )
            self.opa_url = self.start_opa()
            self._start_webhooks()
            self.register_webhook(self.webhook_urls[0])
            if self.with_reconciler:
                self.start_reconciler()
            if self.nodes is not None:
                self.kwok = KwokNodes(
                    self.workdir,
                    self.admin_kubeconfig,
                    detached=self.detached,
                    lease_seconds=self.nodes.lease_seconds,
                )
                self.kwok.start()
                if self.kwok.process is not None:
                    self.processes.append(self.kwok.process)
                if self.nodes.pools:
                    self.kwok.add_pools(self.nodes.pools)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        if self.kueue is not None:
            self.kueue.stop()
        self.cluster.stop()

    def _is_tenant_crd_established(self) -> bool:
        result = self.cluster_kubectl("get", "crd/tenants.labgate.io", "-o", "json")
        if result.returncode != 0:
            return False
        conditions = json.loads(result.stdout).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def start_opa(self) -> str:
        """Start one OPA server with the stack's policies; return its URL once it is healthy."""
        opa = str(ensure_tools("opa")["opa"].binary())
        port = free_port()
        index = sum(1 for p in self.processes if p.name.startswith("opa"))
        process = spawn(
            self.workdir,
            "opa" if index == 0 else f"opa-{index}",
            opa_argv(opa, port=port, policy_dir=self.policy_dir),
            detached=self.detached,
        )
        self.processes.append(process)
        url = f"http://127.0.0.1:{port}"

        def is_healthy() -> bool:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)

        wait_until(is_healthy, what="OPA /health", timeout=30, watch=[process])
        return url

    def _start_webhooks(self) -> None:
        pki = self.workdir / "webhook-pki"
        pki.mkdir(parents=True, exist_ok=True)
        self.webhook_ca = make_ca("labgate-webhook-ca")
        serving = issue_serving_cert(
            self.webhook_ca,
            common_name="labgate-webhook",
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
        )
        (pki / "ca.crt").write_bytes(self.webhook_ca.cert_pem)
        (pki / "tls.crt").write_bytes(serving.cert_pem)
        (pki / "tls.key").write_bytes(serving.key_pem)
        (pki / "tls.key").chmod(0o600)
        # The stack's webhooks load the policies into OPA and keep them loaded (webhook/policy_sync.py).
        policies = {"LABGATE_POLICY_DIR": str(self.policy_dir), "LABGATE_POLICY_POLL_SECONDS": "0.5"}
        for _ in range(self.webhook_replicas):
            self.webhook_urls.append(self.start_webhook(opa_url=self.opa_url, extra_env=policies))

    def start_webhook(
        self, *, opa_url: str, wait_for: str = "/readyz", extra_env: dict[str, str] | None = None
    ) -> str:
        """Start one more webhook replica against `opa_url`; return its https URL once `wait_for` answers."""
        pki = self.workdir / "webhook-pki"
        port, health_port = free_port(), free_port()
        index = sum(1 for p in self.processes if p.name.startswith("webhook-"))
        # The apiserver presents a client certificate to webhooks when its control plane makes one
        # (the local one does); a kind cluster's cannot, so there the webhook serves without.
        client_ca = getattr(self.cluster, "webhook_client_ca_file", None)
        caller_auth = (
            {"LABGATE_TLS_CLIENT_CA_FILE": str(client_ca)}
            if client_ca is not None
            else {"LABGATE_ALLOW_UNAUTHENTICATED_CALLERS": "true"}
        )
        process = self.launcher.launch(
            self.workdir,
            f"webhook-{index}",
            ["serve"],
            detached=self.detached,
            files=[
                pki,
                self.admin_kubeconfig,
                *([Path(client_ca)] if client_ca is not None else []),
                *(
                    [Path(extra_env["LABGATE_POLICY_DIR"])]
                    if extra_env and "LABGATE_POLICY_DIR" in extra_env
                    else []
                ),
            ],
            writable=[self.workdir / "logs"],
            env={
                "LABGATE_OPA_URL": opa_url,
                "LABGATE_KUBECONFIG": str(self.admin_kubeconfig),
                "LABGATE_HOST": self.webhook_host,
                "LABGATE_PORT": str(port),
                "LABGATE_HEALTH_PORT": str(health_port),
                **caller_auth,
                "LABGATE_TLS_CERT_FILE": str(pki / "tls.crt"),
                "LABGATE_TLS_KEY_FILE": str(pki / "tls.key"),
                "LABGATE_NAMESPACE": LABGATE_NAMESPACE,
                "LABGATE_DECISION_LOG_FILE": str(self.workdir / "logs" / f"decisions-{index}.jsonl"),
                **({"LABGATE_KUEUE": "true"} if self.with_kueue else {}),
                **(extra_env or {}),
            },
        )
        self.processes.append(process)
        url = f"https://{self.webhook_host}:{port}"
        health = f"http://{self.webhook_host}:{health_port}"
        self.health_urls[url] = health

        def is_ready() -> bool:
            with urllib.request.urlopen(f"{health}{wait_for}", timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)

        wait_until(is_ready, what=f"labgate webhook {index} {wait_for}", timeout=60, watch=[process])
        return url

    def webhook_client_context(self) -> ssl.SSLContext:
        """A TLS context that trusts the webhook and presents the apiserver's client certificate."""
        context = ssl.create_default_context(cadata=self.webhook_ca.cert_pem.decode())
        pki = self.admin_kubeconfig.parent.parent / "pki"
        context.load_cert_chain(pki / "webhook-client.crt", pki / "webhook-client.key")
        return context

    def start_reconciler(self, *, identity: str | None = None) -> ManagedProcess:
        """Start one reconciler replica (several may run; the Lease picks the one that writes)."""
        index = sum(1 for p in self.processes if p.name.startswith("reconciler-"))
        metrics_port = free_port()
        self.reconciler_metrics_urls.append(f"http://127.0.0.1:{metrics_port}/metrics")
        gpu_config = self.policy_dir / "labgate" / "config" / "data.json"
        queue_config = self.policy_dir / "labgate" / "config" / "queue" / "data.json"
        process = self.launcher.launch(
            self.workdir,
            f"reconciler-{index}",
            [
                "reconcile",
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--namespace={LABGATE_NAMESPACE}",
                f"--identity={identity or f'reconciler-{index}'}",
                f"--lease-seconds={self.reconciler_lease_seconds}",
                # Which resources are GPUs, from the policies' configuration, as the chart passes it.
                f"--gpu-config={gpu_config}",
                # Which tenants' GPU pods Kueue gates (no labgate-gpu quota there), as the chart passes it.
                f"--queue-config={queue_config}",
                f"--metrics-port={metrics_port}",
                "--metrics-address=127.0.0.1",
                *(["--kueue"] if self.with_kueue else []),
            ],
            detached=self.detached,
            files=[self.admin_kubeconfig, gpu_config, queue_config],
            env={},
        )
        self.processes.append(process)
        return process

    def register_webhook(self, *urls: str, shard_label: str | None = None) -> None:
        """Point the apiserver's webhook configurations at `urls` (one replica, or shards; see
        webhook.registration.webhook_configurations)."""
        configurations = webhook_configurations(
            name=WEBHOOK_CONFIGURATION,
            urls=list(urls),
            ca_bundle_pem=self.webhook_ca.cert_pem,
            exempt_namespaces=EXEMPT_NAMESPACES,
            shard_label=shard_label,
        )
        self.admin_kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=labgate-dev",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(configurations),
        )
