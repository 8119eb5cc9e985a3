"""labgate installed by `helm install labgate charts/labgate` on the real node (devcluster.node_chart):
the image toolchain/build-image.sh builds, OPA's and kubectl's, each pushed to the node's registry
and pulled by the kubelet by digest; two webhook replicas behind the chart's Service with the chart's
own certificates. What is graded is what the cluster reports (the pods' status, the webhook
configurations) and what a researcher's `kubectl` answers, against the same applies the host-process
stack judges (`labgate check`, which `make run`'s webhook agrees with).

The tests run in this file's order: the last one uninstalls. Skipped, with the reason, where a node
cannot run or the image cannot be built (not root, debootstrap or umoci missing)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from devcluster.admission_stream import VERDICT_PREFIX, AdmissionStream, Call
from devcluster.kubectl import kubectl
from devcluster.node_chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    ChartImages,
    chart_with_policies,
    helm,
    helm_upgrade,
    install_chart,
    provenance_values,
    release_pods,
)
from devcluster.node_cluster import NodeCluster
from devcluster.node_images import build_echo, push_binary_image
from devcluster.node_runtime import NodeImageStore
from devcluster.tools import REPO_ROOT, tool
from tests.e2e.conftest import is_pod_ready, labgate_image_or_skip, poll, provision_tenant

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

EXAMPLES = REPO_ROOT / "examples"
ALICE = ("alice", ("team-a",))
# The webhook pods' HTTPS port (the chart's webhook.port).
WEBHOOK_PORT = 8443
# The one user of the node's private registry (htpasswd): a lab's robot account for one team's images.
PRIVATE_PULLER = ("team-puller", secrets.token_urlsafe(18))


@dataclass(frozen=True)
class Installed:
    cluster: NodeCluster
    images: ChartImages
    install_seconds: float
    values: dict[str, Any]
    workdir: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    archive = labgate_image_or_skip()
    workdir = tmp_path_factory.mktemp("node-helm")
    started = NodeCluster(workdir / "cluster", private_registry_users=dict([PRIVATE_PULLER]))
    with started:
        release = install_chart(started, archive, workdir)
        # Shown with -s: the figures in docs/operations.md.
        print(f"helm install to ready: {release.seconds} s (bring-up: {started.bring_up_seconds})")
        print("\n".join(pull_events(started) + restarts(started)))
        yield Installed(started, release.images, release.seconds, release.values, workdir)
    assert started.leftovers() == [], "the node left nothing behind"


def pull_events(cluster: NodeCluster) -> list[str]:
    """The kubelet's "Successfully pulled" events in the release's namespace: what each pull took."""
    listed = kubectl(cluster.control_plane.admin_kubeconfig, "get", "events", "-n", NAMESPACE, "-o", "json")
    events = json.loads(listed.stdout)["items"] if listed.returncode == 0 else []
    return [f"{e['involvedObject']['name']}: {e['message']}" for e in events if e.get("reason") == "Pulled"]


def restarts(cluster: NodeCluster) -> list[str]:
    """Each restarted container of the release and why its last run ended."""
    listed = kubectl(cluster.control_plane.admin_kubeconfig, "get", "pods", "-n", NAMESPACE, "-o", "json")
    pods = json.loads(listed.stdout)["items"] if listed.returncode == 0 else []
    return [
        f"{p['metadata']['name']}/{s['name']}: {s['restartCount']} restart(s), last {s.get('lastState')}; "
        f"its last words: {last_log_line(cluster, p['metadata']['name'], s['name'])}"
        for p in pods
        for s in p["status"].get("containerStatuses", [])
        if s["restartCount"]
    ]


def last_log_line(cluster: NodeCluster, pod: str, container: str) -> str:
    admin_kubeconfig = cluster.control_plane.admin_kubeconfig
    logs = kubectl(admin_kubeconfig, "logs", pod, "-c", container, "-n", NAMESPACE, "--previous")
    lines = (logs.stdout + logs.stderr).strip().splitlines()
    return lines[-1] if lines else ""


def admin(installed: Installed, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return kubectl(installed.cluster.control_plane.admin_kubeconfig, *args, stdin=stdin)


def get_json(installed: Installed, *args: str) -> dict[str, Any]:
    got = admin(installed, "get", *args, "-o", "json")
    assert got.returncode == 0, got.stderr
    found: dict[str, Any] = json.loads(got.stdout)
    return found


def component_pods(installed: Installed, component: str) -> list[dict[str, Any]]:
    return release_pods(installed.cluster.control_plane.admin_kubeconfig, component)


def image_ids(pod: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["imageID"] for s in pod["status"]["containerStatuses"]}


def test_both_webhook_replicas_run_ready_from_the_pushed_digests(installed: Installed) -> None:
    webhooks = component_pods(installed, "webhook")
    assert len(webhooks) == 2, [p["metadata"]["name"] for p in webhooks]
    for pod in webhooks:
        assert pod["status"]["phase"] == "Running", pod["status"]
        assert is_pod_ready(pod), pod["status"]
        assert pod["spec"]["nodeName"] == installed.cluster.node.name
        # The kubelet pulled what was pushed: the repository digest is the container's imageID.
        assert image_ids(pod) == {"labgate": installed.images.labgate, "opa": installed.images.opa}
    reconcilers = component_pods(installed, "reconciler")
    assert reconcilers, "the reconciler's pods"
    for pod in reconcilers:
        assert pod["status"]["phase"] == "Running", pod["status"]
        assert set(image_ids(pod).values()) == {installed.images.labgate}


def test_the_validating_webhook_configuration_calls_the_charts_service(installed: Installed) -> None:
    configuration = get_json(installed, "validatingwebhookconfiguration", RELEASE)
    service = get_json(installed, "service", "labgate-webhook", "-n", NAMESPACE)
    for webhook in configuration["webhooks"]:
        client = webhook["clientConfig"]
        assert client["service"]["namespace"] == NAMESPACE
        assert client["service"]["name"] == "labgate-webhook"
        assert client["service"]["port"] in {p["port"] for p in service["spec"]["ports"]}
        assert client.get("caBundle"), "the chart's self-signed CA is injected"
    # Behind the Service: the two webhook pods (the apiserver reaches them by endpoint).
    slices = get_json(
        installed, "endpointslices", "-n", NAMESPACE, "-l", "kubernetes.io/service-name=labgate-webhook"
    )["items"]
    ready = {
        a for s in slices for e in s["endpoints"] if e["conditions"].get("ready") for a in e["addresses"]
    }
    assert ready == {p["status"]["podIP"] for p in component_pods(installed, "webhook")}


def offline_verdict(manifest: Path, policies: Path = REPO_ROOT / "policies") -> str:
    """What `labgate check` shows alice for `manifest` in team-a under `policies` (the host-process
    webhook's message)."""
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "check",
            "-f",
            str(manifest),
            "--as",
            ALICE[0],
            "--groups",
            ",".join(ALICE[1]),
            "-n",
            "team-a",
            "--tenants",
            str(EXAMPLES / "tenants.yaml"),
            "--policies",
            str(policies),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO_ROOT,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    return checked.stdout.strip().splitlines()[-1].split(": admission webhook ", 1)[1]


def test_a_researchers_sweep_is_refused_as_the_host_stack_refuses_it_and_her_experiment_admitted(
    installed: Installed,
) -> None:
    applied = admin(installed, "apply", "-f", str(EXAMPLES / "tenants.yaml"))
    assert applied.returncode == 0, applied.stderr
    waited = admin(installed, "wait", "--for=condition=Ready", "--timeout=120s", "tenant/team-a")
    assert waited.returncode == 0, waited.stderr
    alice = installed.cluster.control_plane.kubeconfig_for(*ALICE)
    expected = offline_verdict(EXAMPLES / "gpu-sweep-job.yaml")
    assert expected.startswith('"validate.labgate.io" denied the request: [gpu-quota-unfit] Job "lr-sweep"')
    # The legitimate counterpart: her first experiment, as make run's demo applies it.
    experiment = kubectl(alice, "apply", "-n", "team-a", "-f", str(EXAMPLES / "experiment-pod.yaml"))
    assert experiment.returncode == 0, experiment.stderr
    assert "pod/hello-experiment created" in experiment.stdout
    sweep = kubectl(alice, "apply", "-n", "team-a", "-f", str(EXAMPLES / "gpu-sweep-job.yaml"))
    assert sweep.returncode == 1, sweep.stdout
    assert f"admission webhook {expected}" in sweep.stderr, sweep.stderr
    assert admin(installed, "get", "job", "lr-sweep", "-n", "team-a").returncode != 0, "no Job was created"


def test_no_tenant_may_hold_a_namespace_the_chart_spares_from_admission(installed: Installed) -> None:
    """The chart's webhook.exemptNamespaces are never judged: the webhook it installs knows them,
    and refuses a Tenant that names one; a namespace whose name only begins the same is admitted."""
    spared = installed.values["webhook"]["exemptNamespaces"][0]

    def tenant(namespace: str) -> str:
        members = {"researchers": [{"kind": "Group", "name": "ops"}]}
        spec = {"members": members, "namespaces": {"names": [namespace]}}
        return json.dumps(
            {"apiVersion": "labgate.io/v1alpha1", "kind": "Tenant", "metadata": {"name": "ops"}, "spec": spec}
        )

    refused = admin(installed, "apply", "-f", "-", stdin=tenant(spared))
    assert refused.returncode == 1, refused.stdout
    assert (
        f'[tenant-namespace-conflict] Tenant "ops" spec.namespaces.names[0] "{spared}" is the platform\'s'
        in refused.stderr
    )
    admitted = admin(installed, "apply", "-f", "-", stdin=tenant(f"{spared}-ops"))
    assert admitted.returncode == 0, admitted.stderr
    deleted = admin(installed, "delete", "tenant", "ops", "--timeout=60s")
    assert deleted.returncode == 0, deleted.stderr


# examples/experiment-pod.yaml's image: from a registry no policy names yet.
ELSEWHERE_IMAGE = "registry.lab.example/team-a/trainer:v1"


def small_pod(name: str, image: str) -> dict[str, Any]:
    """A pod in team-a that runs `image` once (the one-file images run `opa version`)."""
    resources = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "args": ["version"], "resources": resources}],
        },
    }


def ca_bundles(installed: Installed) -> list[set[str]]:
    """Each webhook's caBundle in both of labgate's configurations, as the SHA-256 of each CA in it."""
    bundles = []
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        for webhook in get_json(installed, kind, RELEASE)["webhooks"]:
            pem = base64.b64decode(webhook["clientConfig"].get("caBundle") or "")
            bundles.append({der_sha256(c) for c in x509.load_pem_x509_certificates(pem)} if pem else set())
    return bundles


def der_sha256(certificate: x509.Certificate) -> str:
    return hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).hexdigest()


def served_by(address: str, port: int, candidates: list[x509.Certificate]) -> str:
    """Which of the candidate CAs signed the certificate served at address:port (a TLS handshake from
    the host, as the apiserver's calls come; the webhook asks for a client certificate this client
    does not send, which ends the connection after the server's certificate has been seen)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((address, port), timeout=3) as raw, context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    except OSError as error:  # a pod starting or stopping: asked again at the next poll
        return f"unreachable ({error})"
    assert der is not None, f"{address}:{port} served no certificate"
    served = x509.load_der_x509_certificate(der)
    for ca in candidates:
        try:
            served.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return der_sha256(ca)
    return "none of them"


def test_certificates_rotate_on_the_node_while_serving_and_no_call_fails(installed: Installed) -> None:
    """An infra team shortens certificates.selfSigned by `helm upgrade`: the new lifetimes find the
    CA too short, and the reconciler's leader rotates it (trust the next CA, serve a certificate of
    it, drop the previous) while the kubelet carries the Secret into both webhook pods' volumes and
    a researcher's admissions keep arriving through the chart's Service. Graded by the cluster: both
    configurations end trusting one new CA, each webhook pod serves a certificate it signed (seen
    from the host, at the pod's own address), and no call failed."""
    cluster = installed.cluster
    workdir = installed.workdir / "rotation"
    workdir.mkdir()
    before = ca_bundles(installed)
    assert before, "labgate's webhooks"
    assert len(set.union(*before)) == 1, f"one CA trusted everywhere before: {before}"
    # The CA has about 8760h left, within the new 4800h + 4080h: rotated once, then at rest (9600h).
    lifetimes = {"duration": "4800h", "renewBefore": "4080h", "caDuration": "9600h", "checkSeconds": 5}
    values = {
        **installed.values,
        "certificates": {**installed.values["certificates"], "selfSigned": lifetimes},
    }
    seen: list[str] = []

    def rotated() -> bool:
        bundles = ca_bundles(installed)
        pods = [p for p in component_pods(installed, "webhook") if not p["metadata"].get("deletionTimestamp")]
        trusted = set.union(*bundles)
        if len(trusted) != 1 or trusted == set.union(*before) or any(b != trusted for b in bundles):
            seen[:] = [f"bundles {bundles}"]
            return False
        cas = certificates_in_bundle(installed)
        issuers = {
            served_by(p["status"]["podIP"], WEBHOOK_PORT, cas) for p in pods if p["status"].get("podIP")
        }
        seen[:] = [f"bundle {trusted}, served by {issuers} on {len(pods)} pods"]
        return len(pods) == 2 and issuers == trusted

    alice = cluster.control_plane.kubeconfig_for(*ALICE)
    objects = {"allowed": small_pod("during-rotation", installed.images.opa)}
    with AdmissionStream(alice, "team-a", objects, workdir) as stream:
        poll(lambda: len(stream.calls) >= 4, "calls before the upgrade")
        began = stream.seconds()
        helm_upgrade(cluster.control_plane.admin_kubeconfig, CHART, values, workdir)
        poll(rotated, lambda: f"the CA rotated on both pods: {seen}", timeout=420)
        done = stream.seconds()
        poll(lambda: sum(c.at > done for c in stream.calls) >= 8, "calls after the rotation")
    calls = list(stream.calls)
    failed = [c for c in calls if not c.is_admitted]
    # Shown with -s: the figures in docs/operations.md.
    print(
        f"CA rotated {done - began:.0f} s after helm upgrade began; {len(calls)} calls, not admitted: {len(failed)}"
    )
    assert failed == [], f"calls that failed during the rotation: {failed[:5]}"


def certificates_in_bundle(installed: Installed) -> list[x509.Certificate]:
    configuration = get_json(installed, "validatingwebhookconfiguration", RELEASE)
    pem = base64.b64decode(configuration["webhooks"][0]["clientConfig"]["caBundle"])
    return x509.load_pem_x509_certificates(pem)


def webhook_pod_names(installed: Installed) -> set[str]:
    """The webhook pods that are not terminating (a rolled-out pod stays a while: its preStop delay)."""
    pods = component_pods(installed, "webhook")
    return {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}


def tail_is_refused(calls: list[Call], name: str, *, since: float, count: int) -> bool:
    """The last `count` calls of `name` after `since` were all refused by policy (both replicas had
    their turns: the apiserver spreads calls over the Service's endpoints)."""
    recent = [c for c in calls if c.object == name and c.at >= since][-count:]
    return len(recent) == count and all(c.is_policy_verdict for c in recent)


def test_helm_upgrade_with_a_changed_policy_drops_no_admission_call_and_the_new_policy_decides(
    installed: Installed,
) -> None:
    """The infra team's upgrade: cluster-wide allowed registries (policies/labgate/config/data.json,
    the node's registry only) and the webhook's registry settings (which roll the webhook pods),
    while a researcher's admission requests keep arriving. No call fails for any reason but the new
    rule's verdict; the image from elsewhere is refused with [image-registry] after it, the
    registry's image admitted throughout."""
    cluster = installed.cluster
    kubeconfig = cluster.control_plane.admin_kubeconfig
    workdir = installed.workdir / "upgrade"
    chart, policies = chart_with_policies(workdir)
    config_file = policies / "labgate" / "config" / "data.json"
    config = json.loads(config_file.read_text())
    config["allowed_registries"] = [f"{cluster.registry.host}/labgate"]
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    elsewhere = small_pod("from-elsewhere", ELSEWHERE_IMAGE)
    (workdir / "from-elsewhere.json").write_text(json.dumps(elsewhere))
    expected = offline_verdict(workdir / "from-elsewhere.json", policies)
    assert expected.startswith(
        '"validate.labgate.io" denied the request: [image-registry] Pod "from-elsewhere"'
    )
    objects = {"allowed": small_pod("from-the-registry", installed.images.opa), "elsewhere": elsewhere}
    before_pods = webhook_pod_names(installed)
    alice = cluster.control_plane.kubeconfig_for(*ALICE)
    with AdmissionStream(alice, "team-a", objects, workdir) as stream:
        poll(lambda: sum(c.object == "elsewhere" for c in stream.calls) >= 4, "calls before the upgrade")
        began = stream.seconds()
        upgrade_seconds = helm_upgrade(
            kubeconfig, chart, {**installed.values, **upgrade_values(installed)}, workdir
        )
        rolled_out = stream.seconds()
        poll(
            lambda: tail_is_refused(stream.calls, "elsewhere", since=rolled_out, count=6),
            lambda: f"the new policy decides on every replica; last calls {stream.calls[-6:]}",
            timeout=120,
        )
        decided = stream.seconds()
    calls = list(stream.calls)
    failed = [c for c in calls if c.is_failed]
    # Shown with -s: the figures in docs/operations.md.
    print(
        f"helm upgrade to rolled out: {upgrade_seconds} s; {len(calls)} calls in {calls[-1].at:.0f} s "
        f"({sum(began <= c.at <= rolled_out for c in calls)} during the upgrade); failed: {len(failed)}; "
        f"new policy on every replica {decided - began:.1f} s after the upgrade began"
    )
    assert failed == [], f"calls that failed for a reason other than the policy: {failed[:5]}"
    refused = [c for c in calls if c.object == "allowed" and not c.is_admitted]
    assert refused == [], f"the registry's image stays admitted (upgrade {began}-{rolled_out} s)"
    before = [c for c in calls if c.object == "elsewhere" and c.at < began]
    assert before, "calls before the upgrade"
    assert all(c.is_admitted for c in before), "before the upgrade the old policy admitted it"
    refusals = {c.message for c in calls if c.object == "elsewhere" and not c.is_admitted}
    assert refusals == {f"admission webhook {expected}"}, refusals
    after = webhook_pod_names(installed)
    assert after.isdisjoint(before_pods), "the upgrade rolled the webhook pods"
    assert len(after) == 2
    assert all(
        is_pod_ready(p) for p in component_pods(installed, "webhook") if p["metadata"]["name"] in after
    )


def upgrade_values(installed: Installed) -> dict[str, Any]:
    """The install's values plus the webhook's registry settings for the node's registry."""
    webhook = {**installed.values["webhook"], **provenance_values(installed.cluster.registry.host)["webhook"]}
    return {"webhook": webhook}


def pulled_events(installed: Installed, namespace: str) -> list[dict[str, Any]]:
    """The kubelet's image events (Pulling, Pulled) in `namespace`."""
    events: list[dict[str, Any]] = get_json(installed, "events", "-n", namespace)["items"]
    return [e for e in events if e.get("reason") in {"Pulling", "Pulled"}]


def test_an_unsigned_image_is_refused_before_any_pull_and_the_signed_one_pulled_by_its_digest(
    installed: Installed,
) -> None:
    """Read from the node's containerd, not from the pod's status: the chart's images are the pinned
    digests; once team-a requires signatures (its Tenant's spec.images), an unsigned image is refused
    at admission and never reaches the node, and the signed one is admitted and pulled by digest."""
    cluster = installed.cluster
    store = NodeImageStore.read(cluster.node)
    for reference in (installed.images.labgate, installed.images.opa, installed.images.kubectl):
        if reference == installed.images.kubectl and store.digest_of(reference) is None:
            continue  # the pre-delete hook's image is pulled at uninstall only
        assert store.digest_of(reference) == reference.partition("@")[2], (reference, store.images)
    host = cluster.registry.host
    key, public_key = cluster.images.generate_key_pair("release")
    opa = tool("opa").binary()
    # The same binary as two images (their configs differ, so do their digests); one is signed.
    signed = push_binary_image(
        cluster.images, opa, f"{host}/labgate/tool", tag="signed", env={"BUILD": "signed"}
    )
    unsigned = push_binary_image(
        cluster.images, opa, f"{host}/labgate/tool", tag="unsigned", env={"BUILD": "unsigned"}
    )
    cluster.images.sign("v2", key, signed)
    signed_digest, unsigned_digest = signed.partition("@")[2], unsigned.partition("@")[2]
    before = NodeImageStore.read(cluster.node)
    assert not before.holds(signed_digest)
    assert not before.holds(unsigned_digest)
    images = {
        "registries": [f"{host}/labgate"],
        "requireSignature": True,
        "signingKeys": [{"name": "release", "publicKey": public_key}],
    }
    patched = admin(
        installed, "patch", "tenant", "team-a", "--type=merge", "-p", json.dumps({"spec": {"images": images}})
    )
    assert patched.returncode == 0, patched.stderr
    alice = installed.cluster.control_plane.kubeconfig_for(*ALICE)
    unsigned_pod = json.dumps(small_pod("unsigned-tool", unsigned))
    refusal = f'{VERDICT_PREFIX}image-signature] Pod "unsigned-tool"'
    answers: list[str] = []

    def is_refused_as_unsigned() -> bool:
        tried = kubectl(alice, "create", "--dry-run=server", "-f", "-", stdin=unsigned_pod)
        answers.append(tried.stdout + tried.stderr)
        return tried.returncode == 1 and refusal in tried.stderr

    # Every replica has the patched Tenant once a few tries in a row are refused.
    poll(
        lambda: all(is_refused_as_unsigned() for _ in range(4)),
        lambda: f"the Tenant's signature rule decides; last answer: {answers[-1:]}",
    )
    created = kubectl(alice, "create", "-f", "-", stdin=unsigned_pod)
    assert created.returncode == 1, created.stdout
    assert refusal in created.stderr, created.stderr
    assert unsigned_digest in created.stderr, created.stderr
    assert "trusted keys: release" in created.stderr, created.stderr
    # The legitimate counterpart: the signed image is admitted, and the kubelet pulls it by digest.
    created = kubectl(alice, "create", "-f", "-", stdin=json.dumps(small_pod("signed-tool", signed)))
    assert created.returncode == 0, created.stderr

    def has_run() -> bool:
        pod = get_json(installed, "pod", "signed-tool", "-n", "team-a")
        return pod["status"].get("phase") in {"Succeeded", "Failed"}

    poll(
        has_run,
        lambda: f"signed-tool ran: {get_json(installed, 'pod', 'signed-tool', '-n', 'team-a')['status']}",
        timeout=120,
    )
    pod = get_json(installed, "pod", "signed-tool", "-n", "team-a")
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert image_ids(pod) == {"main": signed}
    after = NodeImageStore.read(cluster.node)
    assert after.digest_of(signed) == signed_digest, after.images
    assert not after.holds(unsigned_digest), "nothing of the refused image reached the node"
    events = pulled_events(installed, "team-a")
    # Shown with -s: the figures in docs/operations.md.
    print("\n".join(f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}" for e in events))
    assert any(e["reason"] == "Pulling" and signed in e["message"] for e in events), events
    assert not any(unsigned_digest in e["message"] for e in events), events


ECHO_PORT = 7777
# What the kubelet reports of a container whose image it could not pull.
PULL_FAILURES = {"ErrImagePull", "ImagePullBackOff"}


@dataclass(frozen=True)
class PullTenant:
    """A fresh Tenant of one namespace (its name) whose images may come from the node's two
    registries, and its researcher's kubeconfig."""

    name: str
    member: Path


def pull_tenant(installed: Installed, name: str) -> PullTenant:
    """Provision `name` (labgate's reconciler) with an admin, a researcher group, and spec.images
    allowing the open registry's labgate/ and the whole private registry (whatever the cluster-wide
    allowed_registries say by the time this runs)."""
    cluster = installed.cluster
    members = {
        "admins": [{"kind": "User", "name": f"admin-{name}"}],
        "researchers": [{"kind": "Group", "name": name}],
    }
    images = {"registries": [f"{cluster.registry.host}/labgate", cluster.private_registry.host]}
    provision_tenant(cluster.control_plane.admin_kubeconfig, name, {"members": members, "images": images})
    return PullTenant(name, cluster.control_plane.kubeconfig_for(f"researcher-{name}", (name,)))


def echo_pod(
    name: str, image: str, *, pull_secret: str | None = None, pull_policy: str | None = None
) -> dict[str, Any]:
    """A long-running echo server (Ready once it listens), with a pull secret and policy if given."""
    resources = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}}
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "args": ["-listen", f":{ECHO_PORT}"],
        "readinessProbe": {"tcpSocket": {"port": ECHO_PORT}, "periodSeconds": 1},
        "resources": resources,
    }
    if pull_policy is not None:
        container["imagePullPolicy"] = pull_policy
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    if pull_secret is not None:
        spec["imagePullSecrets"] = [{"name": pull_secret}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create_pod(kubeconfig: Path, namespace: str, pod: dict[str, Any]) -> None:
    created = kubectl(kubeconfig, "create", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr


def wait_ready(installed: Installed, namespace: str, name: str) -> dict[str, Any]:
    """The pod once Ready (its container runs and listens)."""
    seen: dict[str, Any] = {}

    def ready() -> bool:
        seen.update(get_json(installed, "pod", name, "-n", namespace))
        return is_pod_ready(seen)

    poll(ready, lambda: f"pod {namespace}/{name} Ready (status {seen.get('status')})", timeout=120)
    return seen


def pod_events(installed: Installed, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind=Pod,involvedObject.name={name}"
    events: list[dict[str, Any]] = get_json(
        installed, "events", "-n", namespace, "--field-selector", selector
    )["items"]
    return events


def has_run(pod: dict[str, Any]) -> bool:
    """Whether any container of the pod ever started (running now, or ended)."""
    states = [s.get("state", {}) for s in pod["status"].get("containerStatuses", [])]
    started = any("running" in s or "terminated" in s for s in states)
    return started or pod["status"].get("phase") in {"Running", "Succeeded", "Failed"}


def pull_failure(pod: dict[str, Any]) -> str | None:
    """The kubelet's reason for a container waiting on its image's pull, if that is why it waits."""
    for status in pod["status"].get("containerStatuses", []):
        waiting = status.get("state", {}).get("waiting", {})
        if waiting.get("reason") in PULL_FAILURES:
            return f"{waiting['reason']}: {waiting.get('message', '')}"
    return None


def wait_pull_refused(installed: Installed, namespace: str, name: str) -> str:
    """The kubelet's pull failure for the pod (its reason and message), asserting at every look that
    none of its containers ever started."""
    seen: dict[str, Any] = {}

    def refused() -> bool:
        seen.update(get_json(installed, "pod", name, "-n", namespace))
        assert not has_run(seen), f"{namespace}/{name} ran from the node's cache: {seen['status']}"
        return pull_failure(seen) is not None

    poll(refused, lambda: f"{namespace}/{name}'s pull refused (status {seen.get('status')})", timeout=120)
    failure = pull_failure(seen)
    assert failure is not None
    return failure


def unauthorized_pull_events(installed: Installed, namespace: str, name: str, host: str) -> list[str]:
    """The kubelet's Failed events for the pod that say the registry at `host` refused it (401)."""
    return [
        e["message"]
        for e in pod_events(installed, namespace, name)
        if e.get("reason") == "Failed"
        and host in e.get("message", "")
        and re.search(r"401|unauthorized", e["message"], re.IGNORECASE)
    ]


def pull_policies(pod: dict[str, Any]) -> list[str | None]:
    return [c.get("imagePullPolicy") for c in pod["spec"]["containers"]]


def private_pull_secret(installed: Installed, tenant: PullTenant, name: str) -> None:
    """The tenant's member stores the private registry's credentials as a dockerconfigjson Secret."""
    user, password = PRIVATE_PULLER
    created = kubectl(
        tenant.member,
        "create",
        "secret",
        "docker-registry",
        name,
        "-n",
        tenant.name,
        f"--docker-server={installed.cluster.private_registry.host}",
        f"--docker-username={user}",
        f"--docker-password={password}",
    )
    assert created.returncode == 0, created.stderr


def unjudged_namespace(installed: Installed, name: str) -> None:
    """A namespace of no tenant (labgate does not judge it), with its default ServiceAccount."""
    created = admin(installed, "create", "namespace", name)
    assert created.returncode == 0, created.stderr
    poll(
        lambda: admin(installed, "get", "serviceaccount", "default", "-n", name).returncode == 0,
        f"namespace {name}'s default ServiceAccount",
    )


def remove(installed: Installed, tenants: list[str], namespaces: list[str]) -> list[str]:
    """Delete the Tenants, then their namespaces and the others (with every pod and Secret in them);
    what failed."""
    steps = [("tenant", name) for name in tenants] + [("namespace", name) for name in namespaces]
    failed = []
    for kind, name in steps:
        deleted = admin(installed, "delete", kind, name, "--ignore-not-found", "--timeout=120s")
        if deleted.returncode != 0:
            failed.append(f"{kind}/{name}: {deleted.stderr.strip()}")
    return failed


@dataclass(frozen=True)
class PullImages:
    """The echo server as the private registry's image (by digest) and as the open registry's."""

    private: str
    public: str


def push_pull_images(installed: Installed) -> PullImages:
    cluster = installed.cluster
    echo = build_echo(installed.workdir / "echo")
    # The same binary; another config (so another digest) than the public image's.
    private = cluster.push_private_binary(echo, "lab-a/echo", env={"BUILD": "private"})
    return PullImages(private=private, public=cluster.push_binary(echo, "labgate/echo"))


def test_a_tenant_cannot_start_another_tenants_private_image_from_the_nodes_cache(
    installed: Installed,
) -> None:
    """Tenant A pulls its private image onto the (only, shared) node with its own pull secret. The
    node's containerd now holds it, and a pod that may run a cached image without asking the
    registry (imagePullPolicy IfNotPresent) does run it with no credentials at all: the control, in
    a namespace labgate does not judge. Tenant B's pod of the same reference by digest, without
    A's secret, is admitted but labgate sets imagePullPolicy: Always on it, so the kubelet asks the
    registry with B's (no) credentials: refused, and it never runs. A's second pod, with the
    secret, and B's pod of a public image run."""
    images = push_pull_images(installed)
    suffix = uuid.uuid4().hex[:4]
    owner, other, control = f"pull-a-{suffix}", f"pull-b-{suffix}", f"pull-control-{suffix}"
    try:
        check_private_image_isolation(installed, images, owner, other, control)
    finally:
        failed = remove(installed, [owner, other], [owner, other, control])
    assert failed == [], f"what the test made is deleted: {failed}"


def check_private_image_isolation(
    installed: Installed, images: PullImages, owner_name: str, other_name: str, control: str
) -> None:
    owner, other = pull_tenant(installed, owner_name), pull_tenant(installed, other_name)
    private_pull_secret(installed, owner, "private-pull")
    owner_pulls_onto_the_node(installed, owner, images.private)
    cache_runs_it_unchecked(installed, control, images.private)
    borrower_is_refused(installed, other, images.private)
    # The legitimate counterparts: A's next pod with its secret, B's pod of a public image.
    create_pod(owner.member, owner.name, echo_pod("holder-two", images.private, pull_secret="private-pull"))
    create_pod(other.member, other.name, echo_pod("public", images.public))
    wait_ready(installed, owner.name, "holder-two")
    wait_ready(installed, other.name, "public")
    borrower = get_json(installed, "pod", "borrower", "-n", other.name)
    assert not has_run(borrower), borrower["status"]
    assert pull_failure(borrower) is not None, borrower["status"]
    # Why: labgate's mutation set Always on every tenant pod (the kubelet asks the registry each time).
    for tenant, pod in ((owner, "holder"), (owner, "holder-two"), (other, "borrower"), (other, "public")):
        assert pull_policies(get_json(installed, "pod", pod, "-n", tenant.name)) == ["Always"], pod


def owner_pulls_onto_the_node(installed: Installed, owner: PullTenant, image: str) -> None:
    """A's pod with its pull secret runs: the kubelet pulled the image into the node's containerd."""
    create_pod(owner.member, owner.name, echo_pod("holder", image, pull_secret="private-pull"))
    wait_ready(installed, owner.name, "holder")
    digest = image.partition("@")[2]
    assert NodeImageStore.read(installed.cluster.node).digest_of(image) == digest, "the node holds it"


def cache_runs_it_unchecked(installed: Installed, namespace: str, image: str) -> None:
    """The control (the hole is real on this node): where labgate does not judge, a pod of the image
    with IfNotPresent and no pull secret runs from the node's cache, the registry never asked."""
    unjudged_namespace(installed, namespace)
    pod = echo_pod("from-cache", image, pull_policy="IfNotPresent")
    create_pod(installed.cluster.control_plane.admin_kubeconfig, namespace, pod)
    wait_ready(installed, namespace, "from-cache")
    events = pod_events(installed, namespace, "from-cache")
    pulled = [e["message"] for e in events if e.get("reason") in {"Pulling", "Pulled"}]
    assert any("already present on machine" in m for m in pulled), pulled
    assert not any(e.get("reason") == "Pulling" for e in events), pulled


def borrower_is_refused(installed: Installed, other: PullTenant, image: str) -> None:
    """B's pod of the same reference, without a secret: admitted, set to Always, and the kubelet's
    pull of it refused by the private registry (401): it never runs."""
    create_pod(other.member, other.name, echo_pod("borrower", image))
    failure = wait_pull_refused(installed, other.name, "borrower")
    host = installed.cluster.private_registry.host

    def refusals() -> list[str]:
        return unauthorized_pull_events(installed, other.name, "borrower", host)

    poll(
        lambda: bool(refusals()),
        lambda: f"a Failed event of a 401 from {host}: {pod_events(installed, other.name, 'borrower')}",
    )
    # Shown with -s: how the kubelet reports it.
    print(f"borrower: {failure}", *refusals(), sep="\n")


def labgate_webhook_configurations(installed: Installed) -> list[str]:
    names: list[str] = []
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        listed = get_json(installed, kind)["items"]
        names += [f"{kind}/{c['metadata']['name']}" for c in listed if "labgate" in json.dumps(c)]
    return names


def test_helm_uninstall_leaves_no_webhook_configuration_and_pods_are_admitted_again(
    installed: Installed,
) -> None:
    """Runs last (the file's order): after it labgate is gone."""
    assert labgate_webhook_configurations(installed), "installed, labgate's webhook configurations exist"
    kubeconfig = installed.cluster.control_plane.admin_kubeconfig
    uninstalled = helm(
        kubeconfig, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "3m"
    )
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert labgate_webhook_configurations(installed) == []
    # Never a bricked cluster: a pod in a tenant's namespace, which the webhook judged, is admitted.
    alice = installed.cluster.control_plane.kubeconfig_for(*ALICE)
    name = f"after-uninstall-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": installed.images.opa, "args": ["version"]}]},
    }
    created = kubectl(alice, "create", "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr
