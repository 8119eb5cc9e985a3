"""The NetworkPolicies labgate provisions and its chart renders, graded by the packets they stop on a
real node: labgate installed by Helm (devcluster.node_chart), tenants provisioned by its reconciler,
their pods run by the kubelet on the reference CNI bridge, and kube-router's policy controller
enforcing what the cluster holds (devcluster.node_enforcer), as a lab's CNI would.

Every connection is opened by a tenant's pod (`kubectl exec` of the echo binary's -dial, a TCP
connect and nothing more) or by the node itself, and every refusal is paired with the legitimate
connection it must not break. A port a tenant's pod cannot open is also opened from the node, where
no NetworkPolicy applies: so "cannot" means the policy stopped it, not that nothing listens there.

Skipped, with the reason, where a node cannot run or the image cannot be built."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster.kubectl import kubectl
from devcluster.node_chart import NAMESPACE, RELEASE, install_chart
from devcluster.node_cluster import NodeCluster
from devcluster.node_images import build_echo
from tests.e2e.conftest import is_pod_ready, labgate_image_or_skip, poll, provision_tenant

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

ECHO_PORT = 7777
# How long one connection attempt may take; a dropped SYN takes all of it.
DIAL_TIMEOUT = "2s"
# kube-router applies a changed NetworkPolicy in about 4 s here: what a test waits for, at most.
POLICY_SETTLE_SECONDS = 45.0


@dataclass(frozen=True)
class Lab:
    cluster: NodeCluster
    echo_image: str
    # The host's end of the node's link: outside the cluster, where a listener stands for "the internet".
    outside_address: str


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    archive = labgate_image_or_skip()
    workdir = tmp_path_factory.mktemp("node-netpol")
    started = NodeCluster(workdir / "cluster")
    with started:
        install_chart(started, archive, workdir)
        echo = started.push_binary(build_echo(workdir / "echo"), "labgate/echo")
        yield Lab(started, echo, started.network.host_address)
    assert started.leftovers() == [], "the node left nothing behind"


def admin(lab: Lab, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return kubectl(lab.cluster.control_plane.admin_kubeconfig, *args, stdin=stdin)


@dataclass(frozen=True)
class Team:
    """A Tenant of one namespace (its name), its admin's kubeconfig, and its pods' addresses."""

    name: str
    admin: Path
    pods: dict[str, str]


def provision(lab: Lab, name: str, network: dict[str, Any]) -> Team:
    """Apply a Tenant (labgate's reconciler provisions it) and start two echo servers in its namespace,
    created by the tenant's admin and admitted by labgate's webhook."""
    owner = f"admin-{name}"
    members = {"admins": [{"kind": "User", "name": owner}], "researchers": [{"kind": "Group", "name": name}]}
    provision_tenant(
        lab.cluster.control_plane.admin_kubeconfig, name, {"members": members, "network": network}
    )
    kubeconfig = lab.cluster.control_plane.kubeconfig_for(owner)
    for pod in ("one", "two"):
        created = kubectl(kubeconfig, "apply", "-n", name, "-f", "-", stdin=json.dumps(echo_pod(lab, pod)))
        assert created.returncode == 0, created.stderr
    return Team(name, kubeconfig, {pod: ready_pod_ip(lab, name, pod) for pod in ("one", "two")})


def echo_pod(lab: Lab, name: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": lab.echo_image,
        "args": ["-listen", f":{ECHO_PORT}"],
        "readinessProbe": {"tcpSocket": {"port": ECHO_PORT}, "periodSeconds": 1},
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
    }


def ready_pod_ip(lab: Lab, namespace: str, name: str) -> str:
    seen: dict[str, Any] = {}

    def ready() -> bool:
        got = admin(lab, "get", "pod", name, "-n", namespace, "-o", "json")
        seen.update(json.loads(got.stdout) if got.returncode == 0 else {})
        return is_pod_ready(seen)

    poll(ready, lambda: f"pod {namespace}/{name} Ready (status {seen.get('status')})", timeout=120)
    address: str = seen["status"]["podIP"]
    return address


def pod_dials(lab: Lab, namespace: str, pod: str, address: str) -> bool:
    """Whether pod `namespace/pod` opens a TCP connection to `address` (host:port)."""
    dialed = admin(
        lab, "exec", pod, "-n", namespace, "--", "/echo", "-dial", address, "-timeout", DIAL_TIMEOUT
    )
    if dialed.returncode == 0:
        return True
    # A connection that failed, not an exec that did: the echo binary said why.
    assert "echo: dial tcp" in dialed.stderr, dialed.stderr
    return False


def node_dials(lab: Lab, address: str) -> bool:
    """Whether the node itself (its network namespace, where no NetworkPolicy applies) opens `address`."""
    host, port = address.rsplit(":", 1)
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=2).close()"
    nsenter = shutil.which("nsenter") or "nsenter"
    argv = [nsenter, f"--net={lab.cluster.network.netns_path}", "--", "python3", "-c", probe]
    return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0


def settles(check: Callable[[], bool], expected: bool, what: str) -> None:
    """`check` returns `expected` within the time a policy change takes to reach the node's rules,
    and still does on the next look (a rule being rewritten is not the answer)."""
    poll(lambda: check() == expected and check() == expected, what, timeout=POLICY_SETTLE_SECONDS)


@pytest.fixture(scope="module")
def closed(lab: Lab) -> Team:
    """A tenant whose pods may not leave the cluster (allowEgress: false)."""
    return provision(lab, f"net-a-{uuid.uuid4().hex[:4]}", {"allowEgress": False})


@pytest.fixture(scope="module")
def open_team(lab: Lab) -> Team:
    """A tenant with the default egress (anywhere but the metadata address)."""
    return provision(lab, f"net-b-{uuid.uuid4().hex[:4]}", {})


def at(address: str) -> str:
    return f"{address}:{ECHO_PORT}"


def test_a_tenants_pod_reaches_its_own_tenants_pod_and_not_another_tenants(
    lab: Lab, closed: Team, open_team: Team
) -> None:
    # The legitimate traffic, inside each tenant.
    assert pod_dials(lab, closed.name, "one", at(closed.pods["two"]))
    assert pod_dials(lab, open_team.name, "one", at(open_team.pods["two"]))
    # Across tenants, either way: the target's baseline ingress admits only its own tenant, even for
    # a source whose egress is open to anywhere.
    assert node_dials(lab, at(open_team.pods["one"])), "the node reaches the server: it listens"
    settles(lambda: pod_dials(lab, closed.name, "one", at(open_team.pods["one"])), False, "a→b closed")
    settles(lambda: pod_dials(lab, open_team.name, "one", at(closed.pods["one"])), False, "b→a closed")


@pytest.fixture(scope="module")
def outside_listener(lab: Lab) -> Iterator[str]:
    """A TCP listener on the host outside the cluster (host:port), accepting until the module ends."""
    listener = socket.create_server((lab.outside_address, 0))
    listener.settimeout(0.5)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"{lab.outside_address}:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_a_tenant_without_egress_cannot_reach_outside_the_cluster_and_one_with_it_can(
    lab: Lab, closed: Team, open_team: Team, outside_listener: str
) -> None:
    assert pod_dials(lab, open_team.name, "one", outside_listener), "egress allowed: the listener answers"
    settles(lambda: pod_dials(lab, closed.name, "one", outside_listener), False, "no egress outside")
    # Inside its tenant the closed team still talks (its egress rule to its own tenant).
    assert pod_dials(lab, closed.name, "two", at(closed.pods["one"]))


def labgate_ports(lab: Lab) -> list[tuple[str, str]]:
    """(what, address) of every TCP port labgate's pods declare, and OPA's, on their pod IPs."""
    listed = admin(
        lab, "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "json"
    )
    assert listed.returncode == 0, listed.stderr
    found = []
    for pod in json.loads(listed.stdout)["items"]:
        if pod["status"].get("phase") != "Running":
            continue
        component = pod["metadata"]["labels"].get("app.kubernetes.io/component", "?")
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                what = f"{component}/{container['name']}/{port.get('name', port['containerPort'])}"
                found.append((what, f"{pod['status']['podIP']}:{port['containerPort']}"))
    return found


def test_no_tenant_pod_reaches_labgates_webhook_opa_or_metrics_ports(lab: Lab, open_team: Team) -> None:
    ports = labgate_ports(lab)
    components = {what.split("/")[0] for what, _ in ports}
    assert {"webhook", "reconciler"} <= components, ports
    listening = [(what, address) for what, address in ports if node_dials(lab, address)]
    # The webhook's admission and health ports and the reconciler's metrics listen on the pod's IP:
    # the node (the kubelet's probes) reaches them.
    assert {what.split("/")[0] for what, _ in listening} >= {"webhook", "reconciler"}, (ports, listening)
    for what, address in ports:

        def tenant_reaches(address: str = address) -> bool:
            return pod_dials(lab, open_team.name, "one", address)

        settles(tenant_reaches, False, f"{what} closed to tenants")
    # The legitimate caller of the admission port, the apiserver, still reaches it: a pod labgate
    # judges is admitted (the webhook fails closed, so an unreachable webhook would refuse it).
    created = kubectl(
        open_team.admin, "apply", "-n", open_team.name, "-f", "-", stdin=json.dumps(echo_pod(lab, "judged"))
    )
    assert created.returncode == 0, created.stderr


def network_policy(name: str, egress_to: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [egress_to]}]},
    }


def test_a_tenant_admins_allowed_widening_opens_what_it_says_and_nothing_more(
    lab: Lab, closed: Team, open_team: Team, outside_listener: str
) -> None:
    # A third tenant that accepts the closed tenant's traffic (allowIngressFromTenants).
    partner = provision(lab, f"net-c-{uuid.uuid4().hex[:4]}", {"allowIngressFromTenants": [closed.name]})
    settles(lambda: pod_dials(lab, closed.name, "one", at(partner.pods["one"])), False, "a→c closed before")
    # Refused, each with its rule: egress to a tenant that does not accept it, and to an address
    # block while the tenant's egress is off.
    to_open = network_policy(
        "to-b", {"namespaceSelector": {"matchLabels": {"labgate.io/tenant": open_team.name}}}
    )
    refused = kubectl(closed.admin, "apply", "-n", closed.name, "-f", "-", stdin=json.dumps(to_open))
    assert refused.returncode == 1, refused.stdout
    assert "[network-policy-peer]" in refused.stderr, refused.stderr
    to_outside = network_policy("to-outside", {"ipBlock": {"cidr": f"{lab.outside_address}/32"}})
    refused = kubectl(closed.admin, "apply", "-n", closed.name, "-f", "-", stdin=json.dumps(to_outside))
    assert refused.returncode == 1, refused.stdout
    assert "[network-policy-peer]" in refused.stderr, refused.stderr
    # Admitted: egress to the partner tenant, which its Tenant allows.
    to_partner = network_policy(
        "to-c", {"namespaceSelector": {"matchLabels": {"labgate.io/tenant": partner.name}}}
    )
    admitted = kubectl(closed.admin, "apply", "-n", closed.name, "-f", "-", stdin=json.dumps(to_partner))
    assert admitted.returncode == 0, admitted.stderr
    settles(lambda: pod_dials(lab, closed.name, "one", at(partner.pods["one"])), True, "a→c opened")
    # And nothing more: the other tenant and the outside stay closed.
    assert not pod_dials(lab, closed.name, "one", at(open_team.pods["one"]))
    assert not pod_dials(lab, closed.name, "one", outside_listener)
    # The partner accepts the closed tenant, not the reverse: its pods still cannot reach the closed one.
    assert not pod_dials(lab, partner.name, "one", at(closed.pods["one"]))


def node_rules_caught_up(lab: Lab, closed: Team, open_team: Team) -> None:
    """Return once the node's rules hold every NetworkPolicy change made before the call: a policy
    made now (the closed tenant's pod `one` accepting the open tenant) is seen to open, then, taken
    away, to close. The enforcer reads its cache of policies in order, so a change it shows is
    applied with every change before it."""
    barrier = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "test-barrier", "namespace": closed.name},
        "spec": {
            "podSelector": {"matchLabels": {"app": "one"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {"labgate.io/tenant": open_team.name}}}]}
            ],
        },
    }
    made = admin(lab, "apply", "-f", "-", stdin=json.dumps(barrier))
    assert made.returncode == 0, made.stderr

    def reaches() -> bool:
        return pod_dials(lab, open_team.name, "one", at(closed.pods["one"]))

    settles(reaches, True, "the barrier policy applied on the node")
    removed = admin(lab, "delete", "networkpolicy", "test-barrier", "-n", closed.name)
    assert removed.returncode == 0, removed.stderr
    settles(reaches, False, "the barrier policy taken away on the node")


def test_a_deleted_tenants_kept_namespace_stays_closed_to_other_tenants(
    lab: Lab, closed: Team, open_team: Team
) -> None:
    """keepOnDelete (the default) keeps the namespace and its running pods: they stay apart from
    every other tenant after the Tenant goes, and still reach each other."""
    gone = provision(lab, f"net-d-{uuid.uuid4().hex[:4]}", {})
    settles(lambda: pod_dials(lab, open_team.name, "one", at(gone.pods["one"])), False, "b→d closed")
    deleted = admin(lab, "delete", "tenant", gone.name, "--timeout=60s")
    assert deleted.returncode == 0, deleted.stderr
    assert admin(lab, "get", "tenant", gone.name).returncode == 1, "the Tenant is gone"
    node_rules_caught_up(lab, closed, open_team)
    assert not pod_dials(lab, open_team.name, "one", at(gone.pods["one"])), "another tenant reaches it"
    assert pod_dials(lab, gone.name, "one", at(gone.pods["two"])), "its own pods reach each other"
    assert ready_pod_ip(lab, gone.name, "two") == gone.pods["two"], "its pods run on"
