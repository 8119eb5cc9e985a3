"""A real node (devcluster.node_cluster): the pinned kubelet on Debian's containerd and runc, pods on
the reference CNI plugins' bridge, Services routed by kube-proxy, images pulled by digest from the
local registry. What is graded is
what the cluster reports (the Node's conditions, the pods' status and logs through the apiserver) and
what the shared machine keeps: its kernel settings, and nothing of the node once it stopped.

Skipped, with the reason, where a node cannot run (not root, packages missing, cgroup v2)."""

from __future__ import annotations

import base64
import ipaddress
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.kubectl import kubectl
from devcluster.node import node_problem
from devcluster.node_cluster import NodeCluster
from devcluster.node_images import build_echo
from labgate.core.certificates import issue_serving_cert, make_ca

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

# The settings the kubelet's protectKernelDefaults checks and this machine holds otherwise.
SHARED_KERNEL_SETTINGS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")


def kernel_settings() -> dict[str, str]:
    return {key: Path(f"/proc/sys/{key}").read_text().strip() for key in SHARED_KERNEL_SETTINGS}


@pytest.fixture(scope="module")
def host_kernel_settings() -> dict[str, str]:
    """The shared machine's settings before the node starts."""
    return kernel_settings()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, host_kernel_settings: dict[str, str]
) -> Iterator[NodeCluster]:
    problem = node_problem()
    if problem is not None:
        pytest.skip(f"a real node cannot run here: {problem}")
    started = NodeCluster(tmp_path_factory.mktemp("node-cluster"))
    with started:
        print(f"bring-up seconds: {started.bring_up_seconds}")  # shown with -s: the figures in the docs
        yield started
        print(f"node memory (MiB, after the tests' pods): {started.node.resident_memory_mib()}")
    assert started.leftovers() == [], "the node left nothing behind (processes, cgroups, mounts, netns, veth)"
    assert kernel_settings() == host_kernel_settings, "the node changed the shared machine's kernel settings"


@pytest.fixture(scope="module")
def echo_image(cluster: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    return cluster.push_binary(build_echo(tmp_path_factory.mktemp("echo")), "labgate/echo")


@pytest.fixture
def namespace(cluster: NodeCluster) -> str:
    """A fresh namespace whose default ServiceAccount exists (pods need it to be admitted)."""
    name = f"node-{uuid.uuid4().hex[:8]}"
    admin = cluster.control_plane.admin_kubeconfig
    created = kubectl(admin, "create", "namespace", name)
    assert created.returncode == 0, created.stderr
    poll(lambda: kubectl(admin, "get", "serviceaccount", "default", "-n", name).returncode == 0, "default SA")
    # Not deleted: its pods still run when the node stops, which must end them and leave nothing.
    return name


def poll(check: Callable[[], bool], what: str | Callable[[], str], *, timeout: float = 90.0) -> None:
    """Poll `check` (bounded) until it returns true; `what` (or what it returns) names it on failure."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what() if callable(what) else what}: not within {timeout:.0f}s"
        time.sleep(0.5)


def apply_pod(
    cluster: NodeCluster,
    namespace: str,
    name: str,
    image: str,
    args: list[str],
    *,
    serves: int | None = None,
    secret: str | None = None,
) -> None:
    """A pod of one container; `serves`: a TCP port the kubelet probes before it calls the pod Ready;
    `secret`: a Secret whose files the container sees under /secret."""
    container: dict[str, Any] = {"name": "main", "image": image, "args": args}
    if serves is not None:
        container["readinessProbe"] = {"tcpSocket": {"port": serves}, "periodSeconds": 1}
    volumes = []
    if secret is not None:
        container["volumeMounts"] = [{"name": "secret", "mountPath": "/secret", "readOnly": True}]
        volumes.append({"name": "secret", "secret": {"secretName": secret}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            "volumes": volumes,
        },
    }
    applied = kubectl(cluster.control_plane.admin_kubeconfig, "apply", "-f", "-", stdin=json.dumps(pod))
    assert applied.returncode == 0, applied.stderr


def apply(cluster: NodeCluster, manifest: dict[str, Any]) -> None:
    applied = kubectl(cluster.control_plane.admin_kubeconfig, "apply", "-f", "-", stdin=json.dumps(manifest))
    assert applied.returncode == 0, applied.stderr


def get_pod(cluster: NodeCluster, namespace: str, name: str) -> dict[str, Any]:
    got = kubectl(cluster.control_plane.admin_kubeconfig, "get", "pod", name, "-n", namespace, "-o", "json")
    assert got.returncode == 0, got.stderr
    pod: dict[str, Any] = json.loads(got.stdout)
    return pod


def wait_for_phase(cluster: NodeCluster, namespace: str, name: str, phases: set[str]) -> dict[str, Any]:
    """The pod once its phase is one of `phases` (bounded; a Failed pod ends the wait)."""
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(get_pod(cluster, namespace, name))
        phase = seen.get("status", {}).get("phase")
        assert phase in phases or phase not in ("Failed", "Succeeded"), (
            f"{name} ended {phase}: {seen['status']}"
        )
        return phase in phases

    poll(reached, lambda: f"pod {name} in {sorted(phases)} (its status: {seen.get('status')})")
    return seen


def wait_until_ready(cluster: NodeCluster, namespace: str, name: str) -> dict[str, Any]:
    """The pod once its Ready condition is True (its readiness probe passed), bounded."""
    seen: dict[str, Any] = {}

    def ready() -> bool:
        seen.update(get_pod(cluster, namespace, name))
        conditions = {c["type"]: c["status"] for c in seen.get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True"

    poll(ready, lambda: f"pod {name} Ready (its status: {seen.get('status')})")
    return seen


def test_the_node_is_ready_with_the_pinned_kubelet_and_containerd(cluster: NodeCluster) -> None:
    node = cluster.node.node_object()
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}  # type: ignore[index]
    info = node["status"]["nodeInfo"]  # type: ignore[index]
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}  # type: ignore[index]
    assert conditions["Ready"] == "True", conditions
    assert info["kubeletVersion"] == "v1.34.4"
    assert info["containerRuntimeVersion"].startswith("containerd://1.6.")
    assert addresses["InternalIP"] == cluster.network.node_address


def test_a_pod_runs_from_an_image_pulled_by_digest(
    cluster: NodeCluster, namespace: str, echo_image: str
) -> None:
    apply_pod(cluster, namespace, "server", echo_image, ["-listen", ":7777"], serves=7777)
    pod = wait_until_ready(cluster, namespace, "server")
    status = pod["status"]["containerStatuses"][0]
    assert pod["spec"]["nodeName"] == cluster.node.name
    assert status["started"] is True, status
    assert "running" in status["state"], status
    # containerd 1.6 reports an image pulled by digest alone under its config's id in `image`; the
    # repository digest it pulled is `imageID`, and what the node's image store holds.
    assert status["imageID"] == echo_image, "the kubelet ran the pinned digest"
    assert echo_image in cluster.node.ctr("images", "ls", "--quiet").stdout.split()
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(cluster.network.pod_cidr)
    # The kubelet's own answer, through the apiserver (its client certificate, the node's address).
    logs = kubectl(cluster.control_plane.admin_kubeconfig, "logs", "server", "-n", namespace)
    assert logs.returncode == 0, logs.stderr
    assert "listening on [::]:7777" in logs.stdout


def test_the_shared_kernel_settings_stay_and_the_kubelet_sees_its_own(
    cluster: NodeCluster, host_kernel_settings: dict[str, str]
) -> None:
    configz = kubectl(
        cluster.control_plane.admin_kubeconfig,
        "get",
        "--raw",
        f"/api/v1/nodes/{cluster.node.name}/proxy/configz",
    )
    assert configz.returncode == 0, configz.stderr
    assert json.loads(configz.stdout)["kubeletconfig"]["protectKernelDefaults"] is True
    seen_by_kubelet = {
        key: cluster.node.read_as_node(f"/proc/sys/{key}").strip() for key in SHARED_KERNEL_SETTINGS
    }
    assert seen_by_kubelet == {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
    assert kernel_settings() == host_kernel_settings


def test_two_pods_on_the_node_talk_tcp_over_the_pod_network(
    cluster: NodeCluster, namespace: str, echo_image: str
) -> None:
    apply_pod(cluster, namespace, "server", echo_image, ["-listen", ":7777"], serves=7777)
    server_ip = wait_until_ready(cluster, namespace, "server")["status"]["podIP"]
    message = f"hello-{uuid.uuid4().hex[:6]}"
    apply_pod(cluster, namespace, "client", echo_image, ["-connect", f"{server_ip}:7777", "-send", message])
    client = wait_for_phase(cluster, namespace, "client", {"Succeeded"})
    assert client["status"]["podIP"] != server_ip
    logs = kubectl(cluster.control_plane.admin_kubeconfig, "logs", "client", "-n", namespace)
    assert f"reply from {server_ip}:7777: {message}" in logs.stdout, logs


def test_a_service_routes_to_its_pod_through_kube_proxy(
    cluster: NodeCluster, namespace: str, echo_image: str
) -> None:
    apply_pod(cluster, namespace, "server", echo_image, ["-listen", ":7777"], serves=7777)
    server_ip = wait_until_ready(cluster, namespace, "server")["status"]["podIP"]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "echo", "namespace": namespace},
        "spec": {"selector": {"app": "server"}, "ports": [{"port": 80, "targetPort": 7777}]},
    }
    applied = kubectl(cluster.control_plane.admin_kubeconfig, "apply", "-f", "-", stdin=json.dumps(service))
    assert applied.returncode == 0, applied.stderr
    cluster_ip = json.loads(
        kubectl(
            cluster.control_plane.admin_kubeconfig, "get", "service", "echo", "-n", namespace, "-o", "json"
        ).stdout
    )["spec"]["clusterIP"]
    assert cluster_ip.startswith("10.96.")
    message = f"via-service-{uuid.uuid4().hex[:6]}"
    # kube-proxy writes the route a moment after the EndpointSlice: the client retries (bounded).
    args = ["-connect", f"{cluster_ip}:80", "-send", message, "-attempts", "20"]
    apply_pod(cluster, namespace, "client", echo_image, args)
    wait_for_phase(cluster, namespace, "client", {"Succeeded"})
    logs = kubectl(cluster.control_plane.admin_kubeconfig, "logs", "client", "-n", namespace)
    assert f"reply from {cluster_ip}:80: {message}" in logs.stdout, logs
    assert server_ip != cluster_ip


def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(
    cluster: NodeCluster, namespace: str, echo_image: str
) -> None:
    args = ["-get", "https://10.96.0.1/version", "-attempts", "20"]
    apply_pod(cluster, namespace, "client", echo_image, args)
    wait_for_phase(cluster, namespace, "client", {"Succeeded"})
    logs = kubectl(cluster.control_plane.admin_kubeconfig, "logs", "client", "-n", namespace)
    status_line, body = logs.stdout.split("\n", 1)
    assert status_line == "https://10.96.0.1/version 200 OK", logs.stdout
    assert json.loads(body)["gitVersion"] == "v1.34.4"


def test_the_apiserver_calls_a_webhook_in_a_pod_through_its_service(
    cluster: NodeCluster, namespace: str, echo_image: str
) -> None:
    ca = make_ca("node-test-webhook-ca")
    serving = issue_serving_cert(ca, common_name="webhook", dns_names=(f"webhook.{namespace}.svc",))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "webhook-tls", "namespace": namespace},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": _b64(serving.cert_pem), "tls.key": _b64(serving.key_pem)},
    }
    apply(cluster, secret)
    message = f"refused in a pod ({uuid.uuid4().hex[:6]})"
    args = ["-webhook", ":8443", "-cert", "/secret/tls.crt", "-key", "/secret/tls.key", "-deny", message]
    apply_pod(cluster, namespace, "server", echo_image, args, serves=8443, secret="webhook-tls")
    wait_until_ready(cluster, namespace, "server")
    service = {"selector": {"app": "server"}, "ports": [{"port": 443, "targetPort": 8443}]}
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "webhook", "namespace": namespace},
            "spec": service,
        },
    )
    apply(cluster, _webhook_configuration(namespace, ca.cert_pem))
    refusal = f'admission webhook "refuse.node-test.labgate.io" denied the request: {message}'
    last: list[str] = []

    def refused() -> bool:
        created = kubectl(
            cluster.control_plane.admin_kubeconfig,
            "create",
            "configmap",
            f"probe-{uuid.uuid4().hex[:6]}",
            "-n",
            namespace,
        )
        last[:] = [created.stderr.strip() or created.stdout.strip()]
        return created.returncode != 0 and refusal in created.stderr

    # The configuration takes effect within moments (the apiserver's informer): polled, bounded.
    poll(refused, lambda: f"the webhook's refusal (the last answer: {last})", timeout=60)


def _webhook_configuration(namespace: str, ca_pem: bytes) -> dict[str, Any]:
    """A validating webhook on ConfigMap creates in `namespace` only, served by its Service "webhook"."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": f"node-test-{namespace}"},
        "webhooks": [
            {
                "name": "refuse.node-test.labgate.io",
                "clientConfig": {
                    "service": {"namespace": namespace, "name": "webhook", "port": 443},
                    "caBundle": _b64(ca_pem),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
