"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and,
when asked (`with_scheduler=True`, for clusters with simulated nodes), kube-scheduler.

    with LocalControlPlane(workdir) as cluster:
        cluster.kubeconfig_for("alice", groups=("team-a",))   # a researcher's kubeconfig

Certificates are made with `cryptography`; each user is a client certificate whose CN is the user name
and whose O values are the groups, exactly as a real cluster's x509 authenticator reads them. Ports are
picked free on 127.0.0.1, so several control planes can run side by side. Every process is stopped
by its pid on `stop()` (and by the kernel if the parent dies, unless started detached for `make run`).
"""

from __future__ import annotations

import base64
import shutil
import ssl
import urllib.request
from pathlib import Path
from typing import Protocol

import yaml

from devcluster.processes import Lifecycle, ManagedProcess, free_port, spawn, wait_until
from devcluster.tools import ensure_tools
from labgate.core.certificates import (
    KeyPair,
    issue_client_cert,
    issue_serving_cert,
    make_ca,
    make_signing_key,
)

# Native controllers that matter for labgate: quotas get status, namespaces really delete, service
# accounts and their tokens exist, aggregated ClusterRoles (admin/edit/view) are filled in, and Jobs
# create their pods (through the admission webhook, as on a real cluster).
CONTROLLERS = (
    "namespace-controller",
    "resourcequota-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    "job-controller",
)
# With nodes (devcluster.nodes), every controller a real cluster runs by default: Deployments,
# ReplicaSets, StatefulSets, CronJobs, Jobs, the PV binder, resource claims, node lifecycle, ... so
# that workloads create their pods through the webhook and the scheduler binds them, as in life.
DEFAULT_CONTROLLERS = ("*",)

ADMIN_USER = "labgate-admin"
# The identity the apiserver presents to admission webhooks (its AdmissionConfiguration's
# kubeConfigFile), signed by a CA of its own that labgate's webhook trusts for callers.
WEBHOOK_CLIENT_USER = "kube-apiserver-webhook-client"
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


def admission_configuration(kubeconfig: Path) -> dict[str, object]:
    """The apiserver's AdmissionConfiguration: both webhook plugins present the client certificate
    of `kubeconfig` (its user "*" matches every webhook) when they call a webhook."""
    webhook = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(kubeconfig),
    }
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {"name": "ValidatingAdmissionWebhook", "configuration": webhook},
            {"name": "MutatingAdmissionWebhook", "configuration": webhook},
        ],
    }


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, client: KeyPair, user: str) -> Path:
    """A kubeconfig with the credentials embedded, so it works when copied elsewhere."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "labgate-local",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client.cert_pem),
                    "client-key-data": b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": user, "context": {"cluster": "labgate-local", "user": user}}],
        "current-context": user,
    }
    return _write(path, yaml.safe_dump(config).encode())


class ControlPlane(Protocol):
    """What labgate's stack needs of a cluster: the local processes here, or a kind cluster in tests."""

    @property
    def server(self) -> str: ...

    @property
    def admin_kubeconfig(self) -> Path: ...

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class LocalControlPlane(Lifecycle):
    """etcd + kube-apiserver + kube-controller-manager in `workdir`, on free loopback ports."""

    def __init__(
        self,
        workdir: Path,
        *,
        detached: bool = False,
        with_scheduler: bool = False,
        controllers: tuple[str, ...] = CONTROLLERS,
        node_monitor_grace_seconds: int | None = None,
        controller_api_rate: tuple[int, int] | None = None,
        address: str = "127.0.0.1",
        real_nodes: bool = False,
    ):
        """`with_scheduler` starts kube-scheduler too; `controllers` are kube-controller-manager's
        (the few labgate needs by default: startup time matters to the tests without nodes).
        `node_monitor_grace_seconds`: how long a node's Lease may go unrenewed before the node
        controller marks it NotReady (raised with slow simulated Leases in large clusters).
        `controller_api_rate`: kube-controller-manager's (--kube-api-qps, --kube-api-burst), e.g. a
        production-like (200, 400) for the Job launch benchmark; None keeps its defaults (20, 30).
        `address`: where the apiserver listens and what it advertises (a real node in its own network
        namespace reaches it at the host end of its veth, devcluster.node_network).
        `real_nodes`: real kubelets join (devcluster.node): they are authorized as in a real
        cluster (the Node authorizer before RBAC, the NodeRestriction admission plugin), the
        apiserver gets a client certificate for calling them (logs, exec), and the `kubernetes`
        Service gets its endpoint (the apiserver's address), which pods reach through kube-proxy."""
        self.address = address
        self.real_nodes = real_nodes
        self.node_monitor_grace_seconds = node_monitor_grace_seconds
        self.controller_api_rate = controller_api_rate
        self.workdir = workdir
        self.detached = detached
        self.with_scheduler = with_scheduler
        self.controllers = controllers
        self.processes: list[ManagedProcess] = []
        self.apiserver_port = 0
        self._ca: KeyPair | None = None

    # -- public surface ---------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.apiserver_port}"

    @property
    def ca_pem(self) -> bytes:
        if self._ca is None:
            raise RuntimeError("control plane not started")
        return self._ca.cert_pem

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "kubeconfigs" / f"{ADMIN_USER}.kubeconfig"

    @property
    def webhook_client_ca_file(self) -> Path:
        """The CA that signed the client certificate the apiserver presents to webhooks."""
        return self.workdir / "pki" / "webhook-client-ca.crt"

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for `user` in `groups` (client certificate CN=user, O=groups)."""
        if self._ca is None:
            raise RuntimeError("control plane not started")
        suffix = "" if not groups else "@" + "+".join(sorted(groups))
        path = self.workdir / "kubeconfigs" / f"{user}{suffix}.kubeconfig"
        if not path.exists():
            client = issue_client_cert(self._ca, user=user, groups=groups)
            write_kubeconfig(path, server=self.server, ca_pem=self._ca.cert_pem, client=client, user=user)
        return path

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, *, timeout: float = 90.0) -> None:
        """Start etcd, the apiserver and the controller manager; return when the API serves requests."""
        tools = ensure_tools("etcd", "kubernetes")
        etcd_bin = str(tools["etcd"].binary())
        k8s = tools["kubernetes"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        pki = self.workdir / "pki"
        try:
            etcd_port, etcd_peer_port = free_port(), free_port()
            self.apiserver_port = free_port()
            controller_port, scheduler_port = free_port(), free_port()
            # A new CA and port each start: kubeconfigs of an earlier run would reach nothing.
            shutil.rmtree(self.workdir / "kubeconfigs", ignore_errors=True)
            self._write_pki(pki)

            etcd = self._spawn(
                "etcd",
                [
                    etcd_bin,
                    "--name=labgate-local",
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                    f"--initial-cluster=labgate-local=http://127.0.0.1:{etcd_peer_port}",
                    "--listen-metrics-urls=",
                    "--unsafe-no-fsync",  # a throwaway test cluster: durability is not the point
                    "--log-level=warn",
                ],
            )
            apiserver = self._spawn(
                "kube-apiserver",
                [
                    str(k8s.binary("kube-apiserver")),
                    f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    f"--bind-address={self.address}",
                    f"--advertise-address={self.address}",
                    f"--secure-port={self.apiserver_port}",
                    f"--cert-dir={self.workdir / 'apiserver-certs'}",
                    f"--tls-cert-file={pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={pki / 'ca.crt'}",
                    f"--admission-control-config-file={pki / 'admission-configuration.yaml'}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    *self._authorization_flags(pki),
                    "--allow-privileged=true",
                    "--profiling=false",
                    # Without real nodes no pod reaches the `kubernetes` Service: it needs no endpoint.
                    f"--endpoint-reconciler-type={'lease' if self.real_nodes else 'none'}",
                    "--v=1",
                ],
            )
            wait_until(
                self._is_api_ready, what="kube-apiserver /readyz", timeout=timeout, watch=[etcd, apiserver]
            )
            controller_kubeconfig = self._component_kubeconfig("system:kube-controller-manager")
            controllers = self._spawn(
                "kube-controller-manager",
                [
                    str(k8s.binary("kube-controller-manager")),
                    f"--kubeconfig={controller_kubeconfig}",
                    f"--authentication-kubeconfig={controller_kubeconfig}",
                    f"--authorization-kubeconfig={controller_kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={controller_port}",
                    f"--cert-dir={self.workdir / 'controller-certs'}",
                    f"--controllers={','.join(self.controllers)}",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={pki / 'ca.crt'}",
                    "--use-service-account-credentials=true",
                    "--leader-elect=false",
                    "--concurrent-namespace-syncs=4",
                    *(
                        [f"--node-monitor-grace-period={self.node_monitor_grace_seconds}s"]
                        if self.node_monitor_grace_seconds
                        else []
                    ),
                    *(
                        [
                            f"--kube-api-qps={self.controller_api_rate[0]}",
                            f"--kube-api-burst={self.controller_api_rate[1]}",
                        ]
                        if self.controller_api_rate
                        else []
                    ),
                    "--v=1",
                ],
            )
            watched = [controllers]
            if self.with_scheduler:
                scheduler_kubeconfig = self._component_kubeconfig("system:kube-scheduler")
                watched.append(
                    self._spawn(
                        "kube-scheduler",
                        [
                            str(k8s.binary("kube-scheduler")),
                            f"--kubeconfig={scheduler_kubeconfig}",
                            f"--authentication-kubeconfig={scheduler_kubeconfig}",
                            f"--authorization-kubeconfig={scheduler_kubeconfig}",
                            "--bind-address=127.0.0.1",
                            f"--secure-port={scheduler_port}",
                            f"--cert-dir={self.workdir / 'scheduler-certs'}",
                            "--leader-elect=false",
                            "--v=1",
                        ],
                    )
                )
            # The default ServiceAccount appearing proves the controller manager runs its controllers.
            wait_until(
                self._has_default_service_account,
                what="kube-controller-manager (default ServiceAccount)",
                timeout=timeout,
                watch=watched,
            )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every process this control plane started, newest first, by pid."""
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    # -- internals --------------------------------------------------------------------------------

    def _authorization_flags(self, pki: Path) -> list[str]:
        plugins = "NamespaceLifecycle,ServiceAccount,LimitRanger,ResourceQuota,PodSecurity"
        if not self.real_nodes:
            return [
                "--authorization-mode=RBAC",
                f"--enable-admission-plugins={plugins},MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            ]
        return [
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={plugins},NodeRestriction,"
            "MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            # A node's name resolves nowhere here: the apiserver calls kubelets at their InternalIP.
            "--kubelet-preferred-address-types=InternalIP",
            # No kube-proxy on this host (its rules would be the shared machine's): the apiserver
            # resolves webhook and aggregated API Services to their endpoints itself.
            "--enable-aggregator-routing=true",
        ]

    def _ca_or_raise(self) -> KeyPair:
        if self._ca is None:
            raise RuntimeError("control plane not started")
        return self._ca

    def _component_kubeconfig(self, user: str) -> Path:
        """A kubeconfig for a control-plane component, as its bootstrap RBAC expects it (CN=user)."""
        return write_kubeconfig(
            self.workdir / "kubeconfigs" / f"{user.removeprefix('system:')}.kubeconfig",
            server=self.server,
            ca_pem=self.ca_pem,
            client=issue_client_cert(self._ca_or_raise(), user=user),
            user=user,
        )

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        process = spawn(self.workdir, name, argv, detached=self.detached)
        self.processes.append(process)
        return process

    def _write_pki(self, pki: Path) -> None:
        ca = make_ca("labgate-local-cluster-ca")
        self._ca = ca
        serving = issue_serving_cert(
            ca,
            common_name="kube-apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ip_addresses=tuple(dict.fromkeys(("127.0.0.1", self.address, "10.96.0.1"))),
        )
        sa_private, sa_public = make_signing_key()
        _write(pki / "ca.crt", ca.cert_pem, 0o644)
        _write(pki / "ca.key", ca.key_pem)
        _write(pki / "apiserver.crt", serving.cert_pem, 0o644)
        _write(pki / "apiserver.key", serving.key_pem)
        _write(pki / "sa.key", sa_private)
        _write(pki / "sa.pub", sa_public, 0o644)
        webhook_client_ca = make_ca("labgate-local-webhook-client-ca")
        webhook_client = issue_client_cert(webhook_client_ca, user=WEBHOOK_CLIENT_USER)
        _write(pki / "webhook-client-ca.crt", webhook_client_ca.cert_pem, 0o644)
        _write(pki / "webhook-client.crt", webhook_client.cert_pem)
        _write(pki / "webhook-client.key", webhook_client.key_pem)
        webhook_kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "users": [
                {
                    "name": "*",
                    "user": {
                        "client-certificate": str(pki / "webhook-client.crt"),
                        "client-key": str(pki / "webhook-client.key"),
                    },
                }
            ],
        }
        _write(pki / "webhook-client.kubeconfig", yaml.safe_dump(webhook_kubeconfig).encode())
        _write(
            pki / "admission-configuration.yaml",
            yaml.safe_dump(admission_configuration(pki / "webhook-client.kubeconfig")).encode(),
        )
        # What the apiserver shows a kubelet when it asks for logs or an exec (kubelets authorize it
        # with a SubjectAccessReview, as kubeadm's apiserver-kubelet-client).
        kubelet_client = issue_client_cert(ca, user=KUBELET_CLIENT_USER, groups=("system:masters",))
        _write(pki / "kubelet-client.crt", kubelet_client.cert_pem)
        _write(pki / "kubelet-client.key", kubelet_client.key_pem)
        admin = issue_client_cert(ca, user=ADMIN_USER, groups=("system:masters",))
        _write(pki / "admin.crt", admin.cert_pem)
        _write(pki / "admin.key", admin.key_pem)
        write_kubeconfig(
            self.admin_kubeconfig, server=self.server, ca_pem=ca.cert_pem, client=admin, user=ADMIN_USER
        )
        self._admin_ssl = ssl.create_default_context(cadata=ca.cert_pem.decode())
        self._admin_ssl.load_cert_chain(pki / "admin.crt", pki / "admin.key")

    def _get(self, path: str) -> tuple[int, bytes]:
        request = urllib.request.Request(self.server + path)  # noqa: S310 - https to our own loopback apiserver
        try:
            with urllib.request.urlopen(request, context=self._admin_ssl, timeout=5) as response:  # noqa: S310
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as err:
            return int(err.code), bytes(err.read())

    def _is_api_ready(self) -> bool:
        status, _ = self._get("/readyz")
        return status == 200

    def _has_default_service_account(self) -> bool:
        status, _ = self._get("/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200
