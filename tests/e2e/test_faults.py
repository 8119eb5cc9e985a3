"""The fault suite: labgate under the faults it must survive, each bounded in time and load.

Every test asserts what a user would notice: no wrongful admission, no quota overshoot (counted from
the pods the apiserver holds, independently of labgate's ledger), and recovery within a bound. The
measured figures (wrongful admissions, refused legitimate requests, recovery time) are printed with
`-s` as `FAULT <name>: ...` lines; docs/operations.md keeps the table.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.kubectl import kubectl
from devcluster.processes import ManagedProcess
from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from tests.e2e.conftest import TenantFactory, pod_manifest
from tests.e2e.test_quota import gpu_pod, ledger_data, second_namespace
from tests.e2e.test_reconciler import eventually, get_json

pytestmark = pytest.mark.faults

FINISHED = ("Succeeded", "Failed")


def report(fault: str, **figures: object) -> None:
    print(f"FAULT {fault}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def require_local(stack: LabgateStack, what: str) -> None:
    """Skip where the control plane is not the local one (kind): `what` needs its processes or PKI."""
    if getattr(stack.cluster, "webhook_client_ca_file", None) is None:
        pytest.skip(f"{what} needs the local control plane")


def gpus_held(stack: LabgateStack, *namespaces: str) -> int:
    """The GPUs the apiserver's unfinished pods in `namespaces` ask (container limits), whatever
    labgate's ledger says."""
    total = 0
    for namespace in namespaces:
        pods = get_json(stack, "pods", "-n", namespace)
        assert pods is not None
        for pod in pods["items"]:
            if pod.get("status", {}).get("phase") in FINISHED:
                continue
            for container in pod["spec"]["containers"]:
                total += int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
    return total


def create(who: Any, manifest: dict[str, Any], namespace: str) -> Any:
    """`kubectl create` (not apply: a name that exists must reach the apiserver as a CREATE)."""
    return who.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))


# -- duplicate names -------------------------------------------------------------------------------


@pytest.mark.quota
def test_a_duplicate_name_cannot_rewrite_a_live_pods_count(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """The apiserver asks the validating webhook about a CREATE before it finds the name taken. That
    request must not touch the GPUs counted for the pod that holds the name."""
    team = tenants.create(spec_extra={"gpu": {"total": 8}})
    other = second_namespace(stack, tenants, team)
    me = team.researcher
    assert create(me, gpu_pod("big-1", 7), team.namespace).returncode == 0
    eventually(
        lambda: (
            ledger_data(stack, team.name)
            == {"reservations": {}, "settled": {"total": 7, "by_model": {"h100": 7}}}
        ),
        what="big-1 settled",
    )
    duplicate = create(me, gpu_pod("big-1", 1), team.namespace)
    assert duplicate.returncode == 1
    assert "AlreadyExists" in duplicate.stderr, duplicate.stderr
    started = time.monotonic()
    refused = create(me, gpu_pod("big-2", 7), other)
    assert refused.returncode == 1, "7 + 7 GPUs on a quota of 8"
    assert "[gpu-quota]" in refused.stderr, refused.stderr
    # The duplicate's reservation waits for a pod that never comes (no pod has its uid): released
    # within seconds, and the live pod's 7 GPUs stay counted.
    eventually(
        lambda: ledger_data(stack, team.name)["reservations"] == {}, what="duplicate released", timeout=30
    )
    released = time.monotonic() - started
    assert ledger_data(stack, team.name)["settled"]["total"] == 7
    assert create(me, gpu_pod("small", 1), other).returncode == 0
    over = create(me, gpu_pod("one-more", 1), other)
    assert over.returncode == 1
    assert "[gpu-quota]" in over.stderr
    held = gpus_held(stack, team.namespace, other)
    assert held == 8
    report("duplicate-name", wrongful_admits=0, held=f"{held}/8", duplicate_released_s=f"{released:.1f}")


# -- forged requests -------------------------------------------------------------------------------


def forged_review(namespace: str, user: str, groups: list[str], gpus: int, *, dry_run: bool = False) -> bytes:
    """What someone who can reach the webhook port might send: a GPU pod CREATE that reserves GPUs in
    another tenant's ledger if the webhook believes it."""
    pod = gpu_pod("forged", gpus)
    pod["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()))
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "name": "forged",
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": groups},
            "object": pod,
            "dryRun": dry_run,
        },
    }
    return json.dumps(review).encode()


def post(url: str, body: bytes, context: ssl.SSLContext) -> dict[str, Any]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})  # noqa: S310
    with urllib.request.urlopen(request, context=context, timeout=5) as response:  # noqa: S310
        return dict(json.loads(response.read()))


@pytest.mark.quota
def test_a_forged_review_without_the_apiservers_certificate_is_refused_at_tls(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    require_local(stack, "an apiserver that presents a webhook client certificate")
    victim = tenants.create(spec_extra={"gpu": {"total": 8}})
    url = f"{stack.webhook_urls[0]}/validate"
    body = forged_review(victim.namespace, victim.researcher.name, list(victim.researcher.groups), 8)
    trusting_only = ssl.create_default_context(cadata=stack.webhook_ca.cert_pem.decode())
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        post(url, body, trusting_only)
    # The same port answers the apiserver's certificate (a dry run: nothing is reserved either way).
    answered = post(
        url,
        forged_review(
            victim.namespace, victim.researcher.name, list(victim.researcher.groups), 8, dry_run=True
        ),
        stack.webhook_client_context(),
    )
    assert answered["response"]["uid"], "answered: the port is up, and the certificate is what counts"
    # Nothing was reserved: the victim's own 8-GPU pod is admitted at once.
    ledger = get_json(stack, "configmap", f"labgate-gpu-ledger.{victim.name}", "-n", LABGATE_NAMESPACE)
    assert ledger is None or json.loads(ledger["data"]["reservations"]) == {}
    assert victim.researcher.apply(gpu_pod("real", 8), victim.namespace).returncode == 0
    report("forged-request", wrongful_admits=0, reserved_by_forgery=0)


# -- the settled-pods store deleted ----------------------------------------------------------------


@pytest.mark.quota
def test_deleting_the_settled_pods_store_loses_no_running_pod(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8}})
    me = team.researcher
    for i in range(4):
        assert create(me, gpu_pod(f"run-{i}", 2), team.namespace).returncode == 0
    eventually(
        lambda: (
            ledger_data(stack, team.name)
            == {"reservations": {}, "settled": {"total": 8, "by_model": {"h100": 8}}}
        ),
        what="four pods settled",
    )
    stack.admin_kubectl(
        "delete",
        "configmap",
        "-n",
        LABGATE_NAMESPACE,
        "-l",
        f"labgate.io/gpu-settled=true,labgate.io/tenant={team.name}",
    )
    started = time.monotonic()
    # Pod events follow (what recomputed the sum as 0 before): no GPU pod may fit while 8 GPUs run.
    assert me.apply(pod_manifest("cpu-only"), team.namespace).returncode == 0
    wrongful = 0
    for i in range(3):
        result = create(me, gpu_pod(f"more-{i}", 1), team.namespace)
        wrongful += result.returncode == 0
        assert "[gpu-quota]" in result.stderr, result.stderr
    assert wrongful == 0

    def recount_reported() -> bool:
        events = get_json(
            stack,
            "events",
            "-n",
            "default",
            "--field-selector",
            f"involvedObject.name={team.name},reason=GpuUsageRecounted",
        )
        return bool(events and events["items"])

    eventually(recount_reported, what="the repair is reported on the Tenant", timeout=30)
    recovered = time.monotonic() - started

    def store_pods() -> int:
        shards = get_json(
            stack,
            "configmaps",
            "-n",
            LABGATE_NAMESPACE,
            "-l",
            f"labgate.io/gpu-settled=true,labgate.io/tenant={team.name}",
        )
        return sum(len(json.loads(s["data"]["pods"])) for s in (shards or {}).get("items", []))

    eventually(lambda: store_pods() == 4, what="the store holds the four running pods again")
    assert ledger_data(stack, team.name)["settled"]["total"] == 8
    assert gpus_held(stack, team.namespace) == 8
    report(
        "settled-store-deleted", wrongful_admits=wrongful, held="8/8", repair_reported_s=f"{recovered:.1f}"
    )


# -- partition of one replica ----------------------------------------------------------------------


class Partition:
    """A TCP relay between a webhook replica and the apiserver that can drop the link as a network
    partition does: the apiserver's side of every connection goes away, the replica's side stays
    open and silent (no FIN or RST ever reaches it). New connections after `heal` pass again."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._cut = threading.Event()
        self._lock = threading.Lock()
        self._upstreams: list[socket.socket] = []
        self._held: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._held.append(client)
            if self._cut.is_set():
                continue  # accepted and never answered, as across a partition
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                continue
            upstream.settimeout(None)
            with self._lock:
                self._upstreams.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if self._cut.is_set():
                    return
                sink.sendall(data)
        except OSError:
            return

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            upstreams, self._upstreams = self._upstreams, []
        for upstream in upstreams:  # the apiserver forgets these connections; the replica is not told
            upstream.close()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in [*self._held, *self._upstreams]:
                sock.close()


@pytest.fixture
def partitioned_replica(stack: LabgateStack, tmp_path: Path) -> Iterator[tuple[str, Partition]]:
    """A webhook replica with its own OPA whose connection to the API runs through a Partition; it is
    the only replica the apiserver calls while the test runs."""
    server = stack.cluster.server.removeprefix("https://")
    host, port = server.rsplit(":", 1)
    partition = Partition((host, int(port)))
    config = yaml.safe_load(stack.admin_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{partition.port}"
    kubeconfig = tmp_path / "partitioned.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    url = stack.start_webhook(
        opa_url=stack.start_opa(),
        extra_env={
            "LABGATE_KUBECONFIG": str(kubeconfig),
            "LABGATE_WATCH_TIMEOUT_SECONDS": "3",
            "LABGATE_FACTS_MAX_AGE_SECONDS": "8",
        },
    )
    stack.register_webhook(url)
    try:
        yield url, partition
    finally:
        stack.register_webhook(stack.webhook_urls[0])
        partition.close()


def is_ready(stack: LabgateStack, url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{stack.health_urls[url]}/readyz", timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)
    except urllib.error.HTTPError as err:
        err.close()
        return False


def privileged_job(name: str) -> dict[str, Any]:
    """A suspended Job whose pods would run privileged: labgate judges its template when it is
    created (Pod Security admission judges only pods, which a suspended Job does not make)."""
    spec = pod_manifest(name)["spec"]
    spec["containers"][0]["securityContext"] = {"privileged": True}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"suspend": True, "template": {"spec": {**spec, "restartPolicy": "Never"}}},
    }


@pytest.mark.tenancy
def test_a_partitioned_replica_refuses_on_stale_facts_and_recovers(
    stack: LabgateStack, tenants: TenantFactory, partitioned_replica: tuple[str, Partition]
) -> None:
    url, partition = partitioned_replica
    team = tenants.create(spec_extra={"enforcement": {"pod-hardening": "warn"}})
    me = team.researcher
    assert create(me, privileged_job("warned"), team.namespace).returncode == 0, "warn mode admits"
    bound, slack = 8.0, 4.0
    partition.cut()
    cut_at = time.monotonic()
    # The infra team now enforces pod hardening; the partitioned replica cannot see it.
    stack.admin_kubectl(
        "patch",
        "tenant",
        team.name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"enforcement": {"pod-hardening": "enforce"}}}),
    )
    admitted_late: list[float] = []
    stale_refusals = 0
    attempt = 0
    while time.monotonic() - cut_at < bound + slack + 4:
        result = create(me, privileged_job(f"p-{attempt}"), team.namespace)
        attempt += 1
        if result.returncode == 0:
            admitted_late.append(time.monotonic() - cut_at)
        elif "[facts-stale]" in result.stderr:
            stale_refusals += 1
        time.sleep(0.5)
    # Within the bound the replica may still decide on what it knew; past it, never.
    assert [t for t in admitted_late if t > bound + slack] == [], admitted_late
    assert stale_refusals > 0
    assert not is_ready(stack, url), "a replica on stale facts reports not ready"
    partition.heal()
    healed_at = time.monotonic()
    eventually(lambda: is_ready(stack, url), what="ready again after the partition heals", timeout=30)
    recovered = time.monotonic() - healed_at
    refused = create(me, privileged_job("after"), team.namespace)
    assert refused.returncode == 1
    assert "[pod-hardening]" in refused.stderr, refused.stderr
    assert create(me, pod_manifest("plain"), team.namespace).returncode == 0
    report(
        "partition-one-replica",
        admitted_within_bound=len(admitted_late),
        wrongful_admits_past_bound=0,
        stale_refusals=stale_refusals,
        recovery_s=f"{recovered:.1f}",
    )


# -- an outage of labgate: OPA killed, then the webhook ----------------------------------------------


@pytest.fixture
def doomed_replica(stack: LabgateStack) -> Iterator[tuple[ManagedProcess, ManagedProcess]]:
    """A webhook replica with an OPA of its own, the only one the apiserver calls, for killing."""
    opa_url = stack.start_opa()
    opa = stack.processes[-1]
    url = stack.start_webhook(opa_url=opa_url)
    webhook = stack.processes[-1]
    stack.register_webhook(url)
    try:
        yield opa, webhook
    finally:
        stack.register_webhook(stack.webhook_urls[0])
        webhook.stop()
        opa.stop()


def everything_else_is_writable(stack: LabgateStack, suffix: str, operator_user: str) -> list[str]:
    """Writes by the platform and by platform operators outside tenants; the ones that failed."""
    failed: list[str] = []

    def run(*args: str, manifest: dict[str, Any] | None = None, kubeconfig: Path | None = None) -> None:
        if kubeconfig is None:
            result = stack.cluster_kubectl(*args, manifest=manifest)
        else:
            result = kubectl(kubeconfig, *args, stdin=None if manifest is None else json.dumps(manifest))
        if result.returncode != 0:
            failed.append(f"kubectl {' '.join(args)}: {result.stderr.strip()}")

    operator_ns = f"gpu-operator-{suffix}"
    for namespace in ("kube-system", "default"):
        run("create", "configmap", f"outage-{suffix}", "-n", namespace, "--from-literal=k=v")
        run("apply", "-n", namespace, "-f", "-", manifest=pod_manifest(f"outage-{suffix}"))
    # A GPU operator's namespace, made by the cluster admin, opted out for its own controller.
    run(
        "apply",
        "-f",
        "-",
        manifest={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": operator_ns, "labels": {"labgate.io/ignore": "true"}},
        },
    )
    run("create", "configmap", "operator-state", "-n", operator_ns, "--from-literal=k=v")
    deadline = time.monotonic() + 15  # pods need the namespace's default ServiceAccount
    while (
        get_json(stack, "serviceaccount/default", "-n", operator_ns) is None and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    run("apply", "-n", operator_ns, "-f", "-", manifest=pod_manifest("device-plugin"))
    operator = stack.kubeconfig_for(operator_user)
    run("label", "namespace", operator_ns, "driver=ready", "--overwrite", kubeconfig=operator)
    # Cluster-scoped objects that are not a tenant's.
    run("create", "clusterrole", f"outage-{suffix}", "--verb=get", "--resource=pods")
    run("create", "priorityclass", f"outage-{suffix}", "--value=10")
    run("create", "namespace", f"plain-{suffix}")
    for args in (
        ("delete", "namespace", operator_ns, f"plain-{suffix}", "--wait=false"),
        ("delete", "clusterrole", f"outage-{suffix}"),
        ("delete", "priorityclass", f"outage-{suffix}"),
        ("delete", "configmap", f"outage-{suffix}", "-n", "kube-system"),
        ("delete", "configmap", f"outage-{suffix}", "-n", "default"),
        ("delete", "pod", f"outage-{suffix}", "-n", "kube-system", "--wait=false"),
        ("delete", "pod", f"outage-{suffix}", "-n", "default", "--wait=false"),
    ):
        stack.cluster_kubectl(*args)
    return failed


@pytest.fixture
def gpu_operator(stack: LabgateStack) -> Iterator[str]:
    """A platform operator's identity (not the platform's groups) that may label namespaces."""
    user = f"gpu-operator-{uuid.uuid4().hex[:6]}"
    stack.admin_kubectl("create", "clusterrole", user, "--verb=get,patch,update", "--resource=namespaces")
    stack.admin_kubectl("create", "clusterrolebinding", user, f"--clusterrole={user}", f"--user={user}")
    try:
        yield user
    finally:
        stack.cluster_kubectl("delete", "clusterrolebinding", user)
        stack.cluster_kubectl("delete", "clusterrole", user)


@pytest.mark.tenancy
def test_an_outage_of_labgate_touches_only_the_tenants(
    stack: LabgateStack,
    tenants: TenantFactory,
    doomed_replica: tuple[ManagedProcess, ManagedProcess],
    gpu_operator: str,
) -> None:
    team = tenants.create()
    me = team.researcher
    opa, webhook = doomed_replica
    assert create(me, pod_manifest("before"), team.namespace).returncode == 0
    opa.stop()
    refused = create(me, pod_manifest("no-opa"), team.namespace)
    assert refused.returncode == 1
    assert "[policy-engine-unavailable]" in refused.stderr, refused.stderr
    assert everything_else_is_writable(stack, uuid.uuid4().hex[:6], gpu_operator) == []
    webhook.stop()
    refused = create(me, pod_manifest("no-webhook"), team.namespace)
    assert refused.returncode == 1
    # A tenant that refuses GPU pods beyond quota (the default): its namespace's mutating webhook.
    assert 'failed calling webhook "mutate-refusing-tenants.labgate.io"' in refused.stderr, refused.stderr
    # Namespaces that are a tenant's fail closed as well, whoever asks.
    claimed = stack.cluster_kubectl(
        "apply",
        "-f",
        "-",
        manifest={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": f"{team.name}-x", "labels": {"labgate.io/tenant": team.name}},
        },
    )
    assert claimed.returncode == 1
    assert 'failed calling webhook "mutate-cluster.labgate.io"' in claimed.stderr, claimed.stderr
    patched = stack.cluster_kubectl("label", "namespace", team.namespace, "extra=1", "--overwrite")
    assert patched.returncode == 1
    assert "labgate.io" in patched.stderr, patched.stderr
    assert everything_else_is_writable(stack, uuid.uuid4().hex[:6], gpu_operator) == []
    assert get_json(stack, "pod", "no-opa", "-n", team.namespace) is None
    assert get_json(stack, "pod", "no-webhook", "-n", team.namespace) is None
    report("outage-opa-then-webhook", wrongful_admits=0, non_tenant_writes_failed=0)


# -- OPA paused, etcd paused -----------------------------------------------------------------------


class Stream:
    """A researcher creating 1-GPU pods one after the other (bounded load), recording each outcome."""

    def __init__(self, who: Any, namespace: str, prefix: str):
        self.who, self.namespace, self.prefix = who, namespace, prefix
        self.outcomes: list[tuple[float, bool, str]] = []  # (monotonic, admitted, stderr)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            name = f"{self.prefix}-{len(self.outcomes)}"
            result = self.who.kubectl(
                "create",
                "-n",
                self.namespace,
                "--request-timeout=8s",
                "-f",
                "-",
                stdin=json.dumps(gpu_pod(name, 1)),
            )
            self.outcomes.append((time.monotonic(), result.returncode == 0, result.stderr))
            self._stop.wait(0.3)

    def __enter__(self) -> Stream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def first_admitted_after(self, moment: float) -> float | None:
        return next((t - moment for t, ok, _ in self.outcomes if ok and t > moment), None)


def paused(pid: int, seconds: float) -> float:
    """SIGSTOP `pid` for `seconds`; return when it was resumed (monotonic)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)  # the fault's duration, not a wait for a condition
    finally:
        os.kill(pid, signal.SIGCONT)
    return time.monotonic()


@pytest.mark.quota
def test_opa_paused_refuses_within_the_deadline_and_recovers(
    stack: LabgateStack, tenants: TenantFactory, doomed_replica: tuple[ManagedProcess, ManagedProcess]
) -> None:
    opa, _ = doomed_replica
    team = tenants.create(spec_extra={"gpu": {"total": 6}})
    with Stream(team.researcher, team.namespace, "opa") as stream:
        time.sleep(1.5)  # some admissions before the fault
        started = time.monotonic()
        resumed = paused(opa.pid, 5.0)
        eventually(
            lambda: stream.first_admitted_after(resumed) is not None, what="admitting again", timeout=20
        )
    during = [(ok, err) for t, ok, err in stream.outcomes if started + 1 < t < resumed]
    assert during, "requests were made during the pause"
    assert not any(ok for ok, _ in during), "nothing admitted without a decision"
    assert all("[policy-engine-unavailable]" in err for _, err in during), during[:2]
    held = gpus_held(stack, team.namespace)
    assert held <= 6
    recovery = stream.first_admitted_after(resumed)
    report(
        "opa-paused-5s",
        wrongful_admits=0,
        refused_legit=len(during),
        held=f"{held}/6",
        recovery_s=f"{recovery:.1f}",
    )


@pytest.mark.quota
def test_etcd_paused_admits_nothing_wrongly_and_recovers(stack: LabgateStack, tenants: TenantFactory) -> None:
    require_local(stack, "pausing etcd")
    etcd = next(p for p in stack.cluster.processes if p.name == "etcd")  # type: ignore[attr-defined]
    team = tenants.create(spec_extra={"gpu": {"total": 6}})
    with Stream(team.researcher, team.namespace, "etcd") as stream:
        time.sleep(1.5)
        resumed = paused(etcd.pid, 5.0)
        eventually(
            lambda: stream.first_admitted_after(resumed) is not None, what="admitting again", timeout=40
        )
    eventually(
        lambda: gpus_held(stack, team.namespace) >= min(6, sum(ok for _, ok, _ in stream.outcomes)),
        what="counted",
    )
    held = gpus_held(stack, team.namespace)
    assert held <= 6, f"{held} GPUs held on a quota of 6"
    refused = [err for _, ok, err in stream.outcomes if not ok and "[gpu-quota]" not in err]
    recovery = stream.first_admitted_after(resumed)
    report(
        "etcd-paused-5s",
        wrongful_admits=max(0, held - 6),
        refused_legit=len(refused),
        held=f"{held}/6",
        recovery_s=f"{recovery:.1f}",
    )
