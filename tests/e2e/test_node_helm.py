"""labgate installed by `helm install labgate charts/labgate` on the real node (devcluster.node_chart):
the image toolchain/build-image.sh builds, OPA's and kubectl's, each pushed to the node's registry
and pulled by the kubelet by digest; two webhook replicas behind the chart's Service with the chart's
own certificates. What is graded is what the cluster reports (the pods' status, the webhook
configurations) and what a researcher's `kubectl` answers, against the same applies the host-process
stack judges (`labgate check`, which `make run`'s webhook agrees with).

The tests run in this file's order: the last one uninstalls. Skipped, with the reason, where a node
cannot run or the image cannot be built (not root, debootstrap or umoci missing)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster.image import ImageBuildError, build
from devcluster.kubectl import kubectl
from devcluster.node import node_problem
from devcluster.node_chart import (
    NAMESPACE,
    RELEASE,
    ChartImages,
    chart_values,
    helm,
    helm_install,
    push_chart_images,
)
from devcluster.node_cluster import NodeCluster
from devcluster.tools import REPO_ROOT

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

EXAMPLES = REPO_ROOT / "examples"
ALICE = ("alice", ("team-a",))


@dataclass(frozen=True)
class Installed:
    cluster: NodeCluster
    images: ChartImages
    install_seconds: float


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    problem = node_problem()
    if problem is not None:
        pytest.skip(f"a real node cannot run here: {problem}")
    try:
        image = build()
    except ImageBuildError as error:
        pytest.skip(f"the labgate image cannot be built here: {error}")
    workdir = tmp_path_factory.mktemp("node-helm")
    started = NodeCluster(workdir / "cluster")
    with started:
        images = push_chart_images(started, image.archive, workdir)
        values = chart_values(
            images,
            apiserver_address=started.network.host_address,
            client_ca_pem=started.control_plane.webhook_client_ca_file.read_bytes(),
        )
        seconds = helm_install(started.control_plane.admin_kubeconfig, values, workdir)
        # Shown with -s: the figures in docs/operations.md.
        print(f"helm install to ready: {seconds} s (bring-up: {started.bring_up_seconds})")
        print("\n".join(pull_events(started) + restarts(started)))
        yield Installed(started, images, seconds)
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


def poll(check: Callable[[], bool], what: str | Callable[[], str], *, timeout: float = 90.0) -> None:
    """Poll `check` (bounded) until it returns true; `what` (or what it returns) names it on failure."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what() if callable(what) else what}: not within {timeout:.0f}s"
        time.sleep(0.5)


def component_pods(installed: Installed, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    pods: list[dict[str, Any]] = get_json(installed, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return pods


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def image_ids(pod: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["imageID"] for s in pod["status"]["containerStatuses"]}


def test_both_webhook_replicas_run_ready_from_the_pushed_digests(installed: Installed) -> None:
    webhooks = component_pods(installed, "webhook")
    assert len(webhooks) == 2, [p["metadata"]["name"] for p in webhooks]
    for pod in webhooks:
        assert pod["status"]["phase"] == "Running", pod["status"]
        assert is_ready(pod), pod["status"]
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


def offline_verdict(manifest: Path) -> str:
    """What `labgate check` shows alice for `manifest` in team-a (the host-process webhook's message)."""
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
            str(REPO_ROOT / "policies"),
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
