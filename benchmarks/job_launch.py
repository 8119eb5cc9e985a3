"""A Job controller launching a large Job through labgate, against the same Job where labgate does not look.

    .venv/bin/python -m benchmarks.job_launch --pods 1000 --rounds 2 --write docs/benchmarks.md

Starts the local stack with simulated nodes (kube-scheduler, every default controller, KWOK; the
controller manager at --kube-api-qps=200 --kube-api-burst=400 unless told otherwise), one shared pool
of untainted 8-GPU nodes with room for every pod, one tenant (`launch`, quota: all the pods) and a
namespace no Tenant names (`launch-baseline`: labgate's namespaced webhooks select namespaces with the
tenant label only, which the harness checks before it measures). Then, in rounds, for both shapes (a
Job of N identical 1-GPU pods, parallelism = completions = N, and an Indexed Job of the same size) and
both targets (labgate, baseline), interleaved so that the machine's noise hits both alike:

  - apply -> all N pods created and apply -> all N bound, from a cluster-wide pod watch;
  - FailedCreate events on the Job (count and reasons; a reason naming a labgate webhook is labgate's);
  - CPU seconds of each process (/proc utime + stime of it and its children, before and after), RSS;
  - the apiserver's writes by resource (apiserver_request_total, verbs POST/PUT/PATCH/DELETE, before
    and after, from its /metrics);
  - the truth: GPUs bound in the tenant's namespace never above its quota, at every pod event
    (tests/cluster_truth.py, independent of labgate).

Then a second Job beyond the free quota: a first Job holds half the quota, a second Job of N pods
fits the quota but not what is free, so half its pods wait. Measured over a fixed window against an
idle window of the same length (the first Job alone): FailedCreate, API writes, the apiserver's and
labgate's CPU. The baseline does the same under a Kubernetes ResourceQuota of the same size.

`--kueue` runs Kueue beside labgate (Jobs in tenant namespaces queued) when the stack can start it
(LabgateStack(kueue=True), issue 20); otherwise it says so and stops. Nothing here asserts: the
figures go into docs/benchmarks.md (`--write`). Every wait is bounded; the stack stops every process it
started when the run ends, however it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from benchmarks.cluster_sim import Truth, _client, watch_pods
from benchmarks.report import replace_section
from devcluster.controlplane import LocalControlPlane
from devcluster.nodes import NodePool
from devcluster.stack import WEBHOOK_CONFIGURATION, LabgateStack, NodeSimulation
from labgate.core.tenant import TENANT_LABEL

IMAGE = "registry.lab.example/research/trainer:v1"
GPUS_PER_NODE = 8
TENANT, BASELINE = "launch", "launch-baseline"
RESEARCHERS = "launch-researchers"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
SHAPES = ("job", "indexed")
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Whose CPU is labgate's: the webhook replicas, OPA and the reconciler.
LABGATE_PROCESSES = ("webhook-", "opa", "reconciler-")
DEFAULT_TIMEOUT = 600.0  # seconds a launch may take from apply to all bound

_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_WEBHOOK_CALL_FAILED = re.compile(r'failed calling webhook "(?P<webhook>[^"]+)"')
_WEBHOOK_DENIAL = re.compile(
    r'admission webhook "(?P<webhook>[^"]+)" denied the request:\s*(?:\[(?P<rule>[\w.-]+)\])?'
)


# --- pure helpers (tests/unit/harness/test_job_launch.py) -----------------------------------------


def api_writes(metrics_text: str) -> Counter[str]:
    """The apiserver's writes so far by resource, from its /metrics text: apiserver_request_total
    summed over codes for the write verbs, keyed `resource[.group][/subresource]` (e.g. "pods",
    "pods/binding", "jobs.batch/status", "events", "events.events.k8s.io")."""
    writes: Counter[str] = Counter()
    for sample in _REQUEST_TOTAL.finditer(metrics_text):
        labels = dict(_LABEL.findall(sample["labels"]))
        if labels.get("verb") not in WRITE_VERBS:
            continue
        key = labels.get("resource", "")
        if labels.get("group"):
            key += f".{labels['group']}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        writes[key] += round(float(sample["value"]))
    return writes


def failed_create_reason(message: str) -> str:
    """What refused a pod, from a FailedCreate event's message: `labgate [rule-id]` for a labgate
    webhook (its name ends in labgate.io), `labgate [call failed: CAUSE]` when the apiserver could not
    get its answer (a timeout: failurePolicy Fail refuses the pod), `webhook NAME` for another webhook,
    `ResourceQuota` for the apiserver's quota, else the message's first words."""
    denial = _WEBHOOK_DENIAL.search(message)
    if denial is not None:
        if _is_labgate_webhook(denial["webhook"]):
            return f"labgate [{denial['rule'] or 'no rule id'}]"
        return f"webhook {denial['webhook']}"
    failed = _WEBHOOK_CALL_FAILED.search(message)
    if failed is not None:
        cause = message.rsplit(": ", 1)[-1].strip()[:40]
        if _is_labgate_webhook(failed["webhook"]):
            return f"labgate [call failed: {cause}]"
        return f"webhook {failed['webhook']} [call failed: {cause}]"
    if "exceeded quota" in message:
        return "ResourceQuota"
    return " ".join(message.split()[:8])


def _is_labgate_webhook(name: str) -> bool:
    return name == "labgate.io" or name.endswith(".labgate.io")


def failed_creates(events: Iterable[dict[str, Any]]) -> Counter[str]:
    """FailedCreate events (core v1, as the Job controller records them) counted by reason, each event
    as many times as it happened (`count`, or `series.count` when aggregated)."""
    reasons: Counter[str] = Counter()
    for event in events:
        if event.get("reason") != "FailedCreate":
            continue
        times = (event.get("series") or {}).get("count") or event.get("count") or 1
        reasons[failed_create_reason(str(event.get("message", "")))] += int(times)
    return reasons


def is_labgate_reason(reason: str) -> bool:
    return reason.startswith("labgate ")


def excludes_unlabelled_namespaces(configuration: dict[str, Any]) -> bool:
    """Every webhook of a configuration that judges namespaced objects requires the tenant label on
    the namespace (namespaceSelector matchExpressions: TENANT_LABEL Exists), so a namespace without it
    is never sent to labgate."""
    for webhook in configuration.get("webhooks") or []:
        scopes = {rule.get("scope", "*") for rule in webhook.get("rules") or []}
        if scopes <= {"Cluster"}:
            continue
        expressions = (webhook.get("namespaceSelector") or {}).get("matchExpressions") or []
        if not any(e.get("key") == TENANT_LABEL and e.get("operator") == "Exists" for e in expressions):
            return False
    return True


def ratio(value: float, reference: float) -> float:
    return value / reference if reference else float("nan")


# --- processes ------------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    return children


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (a launcher may run the real server as a child)."""
    children, tree, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
    return total


def rss_mb(pids: list[int]) -> tuple[float, float]:
    """(current, peak) resident memory in MB, summed over `pids`."""
    now = peak = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            if line.startswith("VmRSS:"):
                now += int(line.split()[1])
            elif line.startswith("VmHWM:"):
                peak += int(line.split()[1])
    return now / 1024, peak / 1024


def stack_processes(stack: LabgateStack) -> dict[str, list[int]]:
    """Every process of the stack by name, each with its descendants."""
    processes = list(stack.processes)
    if isinstance(stack.cluster, LocalControlPlane):
        processes += stack.cluster.processes
    kueue = getattr(getattr(stack, "kueue", None), "process", None)
    if kueue is not None:
        processes.append(kueue)
    return {p.name: process_tree(p.pid) for p in processes if p.is_running()}


# --- the cluster ----------------------------------------------------------------------------------


class LaunchTruth(Truth):
    """The pod watch, with when each pod was first seen (created) besides when it was bound."""

    def __init__(self, quotas: dict[str, int]):
        super().__init__(quotas=quotas)
        self.created_seen: dict[tuple[str, str], float] = {}

    def apply(self, kind: str, pod: dict[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self.lock:
            self.created_seen.setdefault(key, time.monotonic())
        super().apply(kind, pod)

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                p
                for p in self.pods.values()
                if p["metadata"]["namespace"] == namespace
                and (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == job
            ]

    def times(self, namespace: str, pods: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
        """When each of `pods` was first seen, and when bound (those bound)."""
        with self.lock:
            keys = [(namespace, p["metadata"]["name"]) for p in pods]
            return (
                [self.created_seen[k] for k in keys if k in self.created_seen],
                [self.bound_seen[k] for k in keys if k in self.bound_seen],
            )


def job_manifest(name: str, pods: int, *, indexed: bool) -> dict[str, Any]:
    """N identical 1-GPU pods at once (parallelism = completions = N); they run until deleted."""
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            }
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def wait_for(check: Callable[[], bool], *, timeout: float, every: float = 0.2) -> bool:
    """Poll `check` until true or `timeout` seconds passed; whether it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return check()


@dataclass
class Sample:
    """The stack's counters at one moment."""

    at: float
    cpu: dict[str, float]
    writes: Counter[str]


@dataclass
class Cluster:
    stack: LabgateStack
    admin: httpx.Client
    researcher: httpx.Client
    truth: LaunchTruth
    pids: dict[str, list[int]] = field(default_factory=dict)

    def sample(self) -> Sample:
        metrics = self.admin.get("/metrics", timeout=90)
        metrics.raise_for_status()
        return Sample(
            time.monotonic(),
            {name: cpu_seconds(pids) for name, pids in self.pids.items()},
            api_writes(metrics.text),
        )

    def client(self, namespace: str) -> httpx.Client:
        return self.researcher if namespace == TENANT else self.admin

    def events(self, namespace: str, uid: str) -> Counter[str]:
        response = self.admin.get(
            f"/api/v1/namespaces/{namespace}/events",
            params={"fieldSelector": f"involvedObject.uid={uid},reason=FailedCreate"},
        )
        response.raise_for_status()
        return failed_creates(response.json()["items"])

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> str:
        response = self.client(namespace).post(f"/apis/batch/v1/namespaces/{namespace}/jobs", json=manifest)
        if response.status_code != 201:
            raise RuntimeError(f"creating Job {manifest['metadata']['name']}: {response.text[:500]}")
        return str(response.json()["metadata"]["uid"])

    def delete_jobs(self, namespace: str, timeout: float) -> bool:
        """Delete every Job of `namespace` with its pods; whether the pods are gone within `timeout`."""
        deadline = time.monotonic() + timeout
        for path, params in (
            (f"/apis/batch/v1/namespaces/{namespace}/jobs", {"propagationPolicy": "Background"}),
            (f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": "0"}),
        ):
            # A collection delete answers when it is done, slowly on a loaded machine; the deletion
            # goes on if the answer is late, and the wait below sees it through.
            with contextlib.suppress(httpx.TimeoutException):
                self.admin.delete(path, params=params, timeout=max(1.0, deadline - time.monotonic()))

        def gone() -> bool:
            with self.truth.lock:
                return not any(p["metadata"]["namespace"] == namespace for p in self.truth.pods.values())

        return wait_for(gone, timeout=max(0.0, deadline - time.monotonic()), every=0.5)

    def tenant_usage(self) -> int:
        """The tenant's status.gpu.used; -1 when the apiserver did not answer."""
        try:
            tenant = self.admin.get(f"/apis/labgate.io/v1alpha1/tenants/{TENANT}").json()
        except httpx.HTTPError:
            return -1
        return int(((tenant.get("status") or {}).get("gpu") or {}).get("used") or 0)


# --- one launch -----------------------------------------------------------------------------------


@dataclass
class Launch:
    target: str  # "labgate" or "baseline"
    shape: str
    round: int
    pods: int
    created: int = 0
    bound: int = 0
    to_created_s: float = float("nan")
    to_bound_s: float = float("nan")
    timed_out: bool = False
    failed_create: Counter[str] = field(default_factory=Counter)
    cpu: dict[str, float] = field(default_factory=dict)
    writes: Counter[str] = field(default_factory=Counter)
    load: float = 0.0


def launch(cluster: Cluster, target: str, shape: str, round_: int, args: argparse.Namespace) -> Launch:
    namespace = TENANT if target == "labgate" else BASELINE
    name = f"{shape}-r{round_}"
    result = Launch(target, shape, round_, args.pods, load=os.getloadavg()[0])
    before = cluster.sample()
    uid = cluster.create_job(namespace, job_manifest(name, args.pods, indexed=shape == "indexed"))

    def all_bound() -> bool:
        pods = cluster.truth.job_pods(namespace, name)
        return len(pods) >= args.pods and all(p["spec"].get("nodeName") for p in pods)

    result.timed_out = not wait_for(all_bound, timeout=args.timeout)
    after = cluster.sample()
    pods = cluster.truth.job_pods(namespace, name)
    created, bound = cluster.truth.times(namespace, pods)
    result.created, result.bound = len(created), len(bound)
    if len(created) >= args.pods:
        result.to_created_s = max(created) - before.at
    if len(bound) >= args.pods:
        result.to_bound_s = max(bound) - before.at
    result.failed_create = cluster.events(namespace, uid)
    result.cpu = {n: after.cpu[n] - before.cpu.get(n, 0.0) for n in after.cpu}
    result.writes = after.writes - before.writes
    print(
        f"{target:8} {shape:7} round {round_}: created {result.created} in {result.to_created_s:.1f} s, "
        f"bound {result.bound} in {result.to_bound_s:.1f} s, FailedCreate {dict(result.failed_create)}, "
        f"load {result.load:.1f}",
        flush=True,
    )
    settle(cluster, namespace, args)
    return result


def settle(cluster: Cluster, namespace: str, args: argparse.Namespace) -> None:
    """Remove the namespace's Jobs and pods; for the tenant, wait until labgate reports 0 GPUs used
    (else the next launch would meet last launch's usage). Bounded; says when it was not enough."""
    if not cluster.delete_jobs(namespace, timeout=args.timeout):
        print(f"warning: pods of {namespace} not gone within {args.timeout:.0f} s", flush=True)
    if namespace == TENANT and not wait_for(lambda: cluster.tenant_usage() == 0, timeout=60, every=1):
        print(f"warning: tenant {TENANT} still reports {cluster.tenant_usage()} GPUs used", flush=True)


# --- the second Job beyond the free quota -------------------------------------------------------


@dataclass
class Waiting:
    target: str
    window_s: float
    held: int  # GPUs the first Job holds
    idle_cpu: dict[str, float] = field(default_factory=dict)
    idle_writes: Counter[str] = field(default_factory=Counter)
    cpu: dict[str, float] = field(default_factory=dict)
    writes: Counter[str] = field(default_factory=Counter)
    failed_create: Counter[str] = field(default_factory=Counter)
    second_bound: int = 0
    second_created: int = 0


def _window(cluster: Cluster, seconds: float) -> tuple[dict[str, float], Counter[str]]:
    before = cluster.sample()
    time.sleep(seconds)
    after = cluster.sample()
    return {n: after.cpu[n] - before.cpu.get(n, 0.0) for n in after.cpu}, after.writes - before.writes


def waiting(cluster: Cluster, target: str, args: argparse.Namespace) -> Waiting:
    """A first Job holds half the quota; measure an idle window, then a second Job of N pods waiting."""
    namespace = TENANT if target == "labgate" else BASELINE
    held = args.pods // 2
    result = Waiting(target, args.window, held)
    cluster.create_job(namespace, job_manifest("holds-half", held, indexed=False))
    if not wait_for(
        lambda: (
            sum(bool(p["spec"].get("nodeName")) for p in cluster.truth.job_pods(namespace, "holds-half"))
            >= held
        ),
        timeout=args.timeout,
    ):
        print(f"warning: the first Job in {namespace} did not bind {held} pods", flush=True)
    result.idle_cpu, result.idle_writes = _window(cluster, args.window)
    before = cluster.sample()
    uid = cluster.create_job(namespace, job_manifest("beyond-free", args.pods, indexed=False))
    time.sleep(max(0.0, args.window - (time.monotonic() - before.at)))
    after = cluster.sample()
    result.cpu = {n: after.cpu[n] - before.cpu.get(n, 0.0) for n in after.cpu}
    result.writes = after.writes - before.writes
    result.failed_create = cluster.events(namespace, uid)
    second = cluster.truth.job_pods(namespace, "beyond-free")
    result.second_created = len(second)
    result.second_bound = sum(bool(p["spec"].get("nodeName")) for p in second)
    print(
        f"{target:8} beyond the free quota: {result.second_created} created, {result.second_bound} bound, "
        f"FailedCreate {dict(result.failed_create)}",
        flush=True,
    )
    settle(cluster, namespace, args)
    return result


# --- set-up and the run -------------------------------------------------------------------------


def _kueue_supported() -> bool:
    return "kueue" in inspect.signature(LabgateStack.__init__).parameters


def _set_up(stack: LabgateStack, args: argparse.Namespace) -> None:
    """The pool, the tenant (quota: every pod), the baseline namespace with a ResourceQuota of the
    same size for the waiting variant; checks that labgate's webhooks do not see the baseline."""
    assert stack.kwok is not None
    nodes = -(-args.pods // GPUS_PER_NODE) + 1
    stack.kwok.add_pools(
        [NodePool(name="shared", nodes=nodes, gpu_product="h100", gpus=GPUS_PER_NODE, pods=110)],
        timeout=max(120.0, nodes * 0.5),
    )
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "labgate.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": TENANT},
            "spec": {
                "members": {"researchers": [{"kind": "Group", "name": RESEARCHERS}]},
                "namespaces": {"names": [TENANT]},
                "gpu": {"total": args.pods},
            },
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BASELINE}},
    ]
    stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
    stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=180s", f"tenant/{TENANT}")
    if args.kueue and not wait_for(lambda: _queue_active(stack), timeout=120, every=1):
        raise SystemExit(f"Kueue's ClusterQueue {TENANT} not Active within 120 s")
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        configuration = json.loads(stack.admin_kubectl("get", kind, WEBHOOK_CONFIGURATION, "-o", "json"))
        if not excludes_unlabelled_namespaces(configuration):
            raise SystemExit(
                f"{kind} {WEBHOOK_CONFIGURATION} may see {BASELINE}: no baseline to compare with"
            )
    labels = json.loads(stack.admin_kubectl("get", "namespace", BASELINE, "-o", "json"))["metadata"]["labels"]
    if TENANT_LABEL in labels:
        raise SystemExit(f"namespace {BASELINE} carries {TENANT_LABEL}")


def _queue_active(stack: LabgateStack) -> bool:
    """The reconciler made the tenant's ClusterQueue and Kueue reports it Active."""
    found = stack.cluster_kubectl("get", f"clusterqueue.kueue.x-k8s.io/{TENANT}", "-o", "json")
    if found.returncode != 0:
        return False
    conditions = json.loads(found.stdout).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


def _baseline_quota(stack: LabgateStack, gpus: int) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": BASELINE},
        "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}},
    }
    stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump(quota))


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.kueue and not _kueue_supported():
        raise SystemExit(
            "--kueue is not available yet: this checkout's LabgateStack cannot start Kueue "
            "(issue 20, branch wip/kueue-stack); run without --kueue"
        )
    workdir = Path(tempfile.mkdtemp(prefix="labgate-job-launch-"))
    simulation = NodeSimulation(controller_api_rate=(args.kube_api_qps, args.kube_api_burst))
    extra: dict[str, Any] = {"kueue": True} if args.kueue else {}
    facts: dict[str, Any] = {"load_before": os.getloadavg()[0], "started": datetime.now(UTC)}
    stop = threading.Event()
    try:
        with LabgateStack(workdir, nodes=simulation, webhook_replicas=1, **extra) as stack:
            facts["stack_start_s"] = stack.start_seconds
            _set_up(stack, args)
            admin = _client(stack.admin_kubeconfig, stack.cluster.server)
            researcher = _client(stack.kubeconfig_for("r-launch", (RESEARCHERS,)), stack.cluster.server)
            truth = LaunchTruth(quotas={TENANT: args.pods})
            cluster = Cluster(stack, admin, researcher, truth, stack_processes(stack))
            threading.Thread(target=watch_pods, args=(admin, truth, stop), daemon=True).start()
            launches = []
            for round_ in range(1, args.rounds + 1):
                for shape in SHAPES:
                    targets = ("baseline", "labgate") if round_ % 2 else ("labgate", "baseline")
                    launches += [launch(cluster, t, shape, round_, args) for t in targets]
            waits = []
            if not args.without_waiting:
                _baseline_quota(stack, args.pods)
                waits = [waiting(cluster, t, args) for t in ("labgate", "baseline")]
            facts["memory_mb"] = {name: rss_mb(pids) for name, pids in stack_processes(stack).items()}
            facts["max_overshoot"] = truth.worst_overshoot[TENANT]
            facts["peak_bound"] = truth.peak_bound[TENANT]
            stop.set()
    finally:
        stop.set()
        shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs
    facts["load_after"] = os.getloadavg()[0]
    facts["finished"] = datetime.now(UTC)
    return {"launches": launches, "waits": waits, "facts": facts}


# --- the report ---------------------------------------------------------------------------------


def _median(values: Iterable[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else float("nan")


def _labgate_cpu(cpu: dict[str, float]) -> float:
    return sum(s for n, s in cpu.items() if n.startswith(LABGATE_PROCESSES))


def _per_pod_ms(seconds: float, pods: int) -> float:
    return 1000 * seconds / pods


def _launch_rows(launches: list[Launch]) -> list[str]:
    lines = [
        "| shape | target | apply → all created | apply → all bound | FailedCreate (labgate's) "
        "| API writes / pod | kube-apiserver CPU ms / pod | labgate CPU ms / pod (webhook, OPA, reconciler) "
        "| etcd, controller manager, scheduler CPU ms / pod | load (1 min) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for shape in SHAPES:
        for target in ("baseline", "labgate"):
            runs = [r for r in launches if r.shape == shape and r.target == target]
            if not runs:
                continue
            pods = runs[0].pods

            def ms(name: str, rs: list[Launch] = runs, n: int = pods) -> float:
                return _median(
                    _per_pod_ms(sum(s for p, s in r.cpu.items() if p.startswith(name)), n) for r in rs
                )

            failed = sum(sum(r.failed_create.values()) for r in runs)
            labgate_failed = sum(
                sum(n for reason, n in r.failed_create.items() if is_labgate_reason(reason)) for r in runs
            )
            timed_out = sum(r.timed_out for r in runs)
            lines.append(
                f"| {shape} | {target} | {_median(r.to_created_s for r in runs):.1f} s "
                f"| {_median(r.to_bound_s for r in runs):.1f} s{f' ({timed_out} timed out)' if timed_out else ''} "
                f"| {failed} ({labgate_failed}) "
                f"| {_median(sum(r.writes.values()) / pods for r in runs):.2f} "
                f"| {ms('kube-apiserver'):.2f} "
                f"| {_median(_per_pod_ms(_labgate_cpu(r.cpu), pods) for r in runs):.2f} "
                f"({ms('webhook-'):.2f}, {ms('opa'):.2f}, {ms('reconciler-'):.2f}) "
                f"| {ms('etcd'):.2f}, {ms('kube-controller-manager'):.2f}, {ms('kube-scheduler'):.2f} "
                f"| {', '.join(f'{r.load:.1f}' for r in runs)} |"
            )
    return lines


def _target_rows(launches: list[Launch]) -> list[str]:
    """Labgate against the baseline, per shape and round, median over rounds, beside the targets."""
    lines = [
        "| shape | all bound, labgate / baseline (≤ 1.15) | API writes (≤ 1.1) | kube-apiserver CPU (≤ 1.2) "
        "| labgate CPU ms / pod (≤ 3) | FailedCreate caused by labgate (0) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for shape in SHAPES:
        pairs = []
        for round_ in sorted({r.round for r in launches}):
            by_target = {r.target: r for r in launches if r.shape == shape and r.round == round_}
            if {"labgate", "baseline"} <= set(by_target):
                pairs.append((by_target["labgate"], by_target["baseline"]))
        if not pairs:
            continue
        bound = _median(ratio(lg.to_bound_s, base.to_bound_s) for lg, base in pairs)
        writes = _median(ratio(sum(lg.writes.values()), sum(base.writes.values())) for lg, base in pairs)
        apiserver = _median(
            ratio(lg.cpu.get("kube-apiserver", 0.0), base.cpu.get("kube-apiserver", 0.0))
            for lg, base in pairs
        )
        cpu = _median(_per_pod_ms(_labgate_cpu(lg.cpu), lg.pods) for lg, _ in pairs)
        caused = sum(
            sum(n for reason, n in lg.failed_create.items() if is_labgate_reason(reason)) for lg, _ in pairs
        )
        lines.append(f"| {shape} | {bound:.2f} | {writes:.2f} | {apiserver:.2f} | {cpu:.2f} | {caused} |")
    return lines


def _writes_rows(launches: list[Launch], top: int = 10) -> list[str]:
    """API writes per pod by resource, each target summed over its rounds and shapes."""
    totals: dict[str, Counter[str]] = {"baseline": Counter(), "labgate": Counter()}
    pods: Counter[str] = Counter()
    for r in launches:
        totals[r.target].update(r.writes)
        pods[r.target] += r.pods
    resources = sorted(
        set(totals["baseline"]) | set(totals["labgate"]),
        key=lambda k: -(totals["baseline"][k] + totals["labgate"][k]),
    )
    lines = ["| resource | baseline writes / pod | labgate writes / pod |", "| --- | ---: | ---: |"]
    for resource in resources[:top]:
        per = [totals[t][resource] / pods[t] if pods[t] else float("nan") for t in ("baseline", "labgate")]
        lines.append(f"| {resource} | {per[0]:.3f} | {per[1]:.3f} |")
    return lines


def _waiting_rows(waits: list[Waiting]) -> list[str]:
    lines = [
        "| target | second Job: created / bound of N | FailedCreate (reasons) | API writes, waiting (idle) "
        "| kube-apiserver CPU s, waiting (idle) | labgate CPU s, waiting (idle) |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for w in waits:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in w.failed_create.most_common()) or "none"
        lines.append(
            f"| {w.target}{' (ResourceQuota)' if w.target == 'baseline' else ''} "
            f"| {w.second_created} / {w.second_bound} "
            f"| {sum(w.failed_create.values())} ({reasons}) "
            f"| {sum(w.writes.values())} ({sum(w.idle_writes.values())}) "
            f"| {w.cpu.get('kube-apiserver', 0.0):.2f} ({w.idle_cpu.get('kube-apiserver', 0.0):.2f}) "
            f"| {_labgate_cpu(w.cpu):.2f} ({_labgate_cpu(w.idle_cpu):.2f}) |"
        )
    return lines


def command(args: argparse.Namespace) -> str:
    parts = [f"--pods {args.pods}", f"--rounds {args.rounds}", f"--window {args.window:g}"]
    if args.timeout != DEFAULT_TIMEOUT:
        parts.append(f"--timeout {args.timeout:g}")
    if (args.kube_api_qps, args.kube_api_burst) != (200, 400):
        parts.append(f"--kube-api-qps {args.kube_api_qps} --kube-api-burst {args.kube_api_burst}")
    if args.kueue:
        parts.append("--kueue")
    if args.without_waiting:
        parts.append("--without-waiting")
    return ".venv/bin/python -m benchmarks.job_launch " + " ".join(parts) + " --write docs/benchmarks.md"


def table(results: dict[str, Any], args: argparse.Namespace) -> str:
    facts, launches, waits = results["facts"], results["launches"], results["waits"]
    memory = facts["memory_mb"]

    def mem(name: str) -> str:
        now, peak = memory.get(name, (float("nan"), float("nan")))
        return f"{name} {now:.0f} / {peak:.0f}"

    lines = [
        f"{args.pods} pods x 1 GPU, {args.rounds} round(s), "
        f"kube-controller-manager at --kube-api-qps={args.kube_api_qps} --kube-api-burst={args.kube_api_burst}"
        f"{', Kueue beside labgate' if args.kueue else ', without Kueue'}; medians over rounds. "
        "Measured "
        f"{facts['started']:%Y-%m-%d %H:%M} to {facts['finished']:%H:%M} UTC on {os.cpu_count()} cores, "
        f"load average (1 min) {facts['load_before']:.1f} before, {facts['load_after']:.1f} after "
        "(the load column: at each launch's start).",
        "",
        *_target_rows(launches),
        "",
        *_launch_rows(launches),
        "",
        "API writes per pod by resource (every round and shape):",
        "",
        *_writes_rows(launches),
        "",
    ]
    if waits:
        lines += [
            f"A second Job of {args.pods} pods beyond the free quota (quota {args.pods} GPUs, a first Job "
            f"holds {waits[0].held}), over {args.window:g} s from its apply, against {args.window:g} idle "
            "seconds with the first Job alone:",
            "",
            *_waiting_rows(waits),
            "",
        ]
    lines += [
        f"Bound GPUs in the tenant's namespace against its quota of {args.pods}, at every pod event: "
        f"max overshoot {facts['max_overshoot']} (must be 0), peak {facts['peak_bound']}.",
        "",
        "Memory MB now / peak at the end: "
        + ", ".join(
            mem(n)
            for n in ("webhook-0", "opa", "reconciler-0", "kube-apiserver", "etcd", "kube-controller-manager")
        )
        + ".",
        "",
        f"Reproduce: `{command(args)}`",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="pods per Job (1 GPU each)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kube-api-qps", type=int, default=200, help="kube-controller-manager's")
    parser.add_argument("--kube-api-burst", type=int, default=400, help="kube-controller-manager's")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds a launch may take to bind"
    )
    parser.add_argument(
        "--window", type=float, default=60.0, help="seconds the waiting second Job is watched"
    )
    parser.add_argument("--without-waiting", action="store_true", help="skip the second Job beyond the quota")
    parser.add_argument(
        "--kueue", action="store_true", help="Kueue beside labgate (when the stack can start it)"
    )
    parser.add_argument("--write", type=Path, help="replace the job-launch section of this Markdown file")
    args = parser.parse_args()
    results = run(args)
    print(json.dumps(results, indent=2, default=str))
    rendered = table(results, args)
    print(rendered)
    if args.write:
        replace_section(args.write, "job-launch", rendered)


if __name__ == "__main__":
    main()
