"""The Job launch benchmark: a large Job launched through labgate, against the same Job it does not see.

A Job controller launching a large Job through labgate, against the same Job where labgate does not
look; with `--kueue`, the same again in a second stack where Kueue runs beside labgate.

    .venv/bin/python -m benchmarks.job_launch --pods 1000 --rounds 1 --window 60 --kueue --write docs/benchmarks.md

Each stack (first without Kueue, then, with `--kueue`, one with it) is the local stack with simulated
nodes (kube-scheduler, every default controller, KWOK; the controller manager at --kube-api-qps=200
--kube-api-burst=400 unless told otherwise), one shared pool of untainted 8-GPU nodes with room for
every pod, two tenants (`launch`, quota: all the pods; `gang`, quota 32 GPUs) and a namespace no Tenant
names (`launch-baseline`: labgate's namespaced webhooks select namespaces with the tenant label only,
which the harness checks before it measures). In the Kueue stack the policies are told that Kueue runs,
as the chart's kueue.enabled does (LabgateStack(kueue=True) serves a copy that trusts Kueue): without it labgate refuses
Kueue's unsuspending of the Jobs it admitted and they never start. The baseline stays outside Kueue too
(Kueue's managedJobsNamespaceSelector asks for the tenant label; checked, and every baseline launch is
checked to have made no Workload): it is the same plain cluster in both stacks, so each stack's
labgate-to-baseline ratios read alike. In rounds, for both shapes (a Job of N identical 1-GPU pods,
parallelism = completions = N, and an Indexed Job of the same size) and both targets (labgate, or
labgate with Kueue; baseline), interleaved so that the machine's noise hits both alike:

  - apply -> all N pods created and apply -> all N bound, from a cluster-wide pod watch, and when
    half, 99 % and 99.9 % of them had been created (a launch's last few pods against its bulk);
  - FailedCreate events on the Job (count and reasons; a reason naming a labgate webhook is labgate's);
  - the creates labgate's webhooks refused, from the apiserver's apiserver_admission_webhook_rejection_count
    (the events stop at 25 a Job: client-go's event spam filter), and those Kubernetes' ResourceQuota
    admission refused after them (apiserver_admission_controller_admission_duration_seconds);
  - CPU seconds of each process (/proc utime + stime of it and its children, before and after), RSS;
  - the apiserver's writes by resource (apiserver_request_total, verbs POST/PUT/PATCH/DELETE, before
    and after, from its /metrics);
  - the truth: GPUs bound in each tenant's namespace never above its quota, at every pod event
    (benchmarks.cluster_sim.Truth over tests/cluster_truth.py, independent of labgate and Kueue).

Then a second Job beyond the free quota: a first Job holds half the quota, a second Job of N pods
fits the quota but not what is free, so half its pods wait (without Kueue) or all of it waits unmade
(with Kueue). Measured over a fixed window against an idle window of the same length (the first Job
alone): pods created, FailedCreate, API writes, the apiserver's and labgate's CPU. The baseline does
the same under a Kubernetes ResourceQuota of the same size.

Then a gang: a 4 x 8-GPU Indexed Job (parallelism = completions = 4) in the `gang` tenant,
first when it fits at once (apply -> all 4 bound), then applied while a blocker Job holds 8 of the 32
GPUs: watched for --gang-window seconds (pods created and bound at every poll, and from the watch: a
partial gang bound while blocked is what Kueue must prevent), then the blocker deleted, and the time
from that to all 4 bound.

Nothing here asserts: the figures go into docs/benchmarks.md (`--write`). Every wait is bounded; each
stack stops every process it started when its part ends, however it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
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

from benchmarks.cluster_sim import Truth, client_of, watch_pods
from benchmarks.report import replace_section
from devcluster.controlplane import LocalControlPlane
from devcluster.kueue import kueue_configuration
from devcluster.nodes import NodePool
from devcluster.stack import WEBHOOK_CONFIGURATION, LabgateStack, NodeSimulation
from labgate.core.tenant import TENANT_LABEL

IMAGE = "registry.lab.example/research/trainer:v1"
GPUS_PER_NODE = 8
TENANT, BASELINE = "launch", "launch-baseline"
RESEARCHERS = "launch-researchers"
# The gang: GANG_PODS pods of GANG_GPUS GPUs each, in a tenant of its own whose quota is
# the gang's size; a blocker of GANG_GPUS GPUs leaves too little free for it.
GANG_TENANT, GANG_RESEARCHERS = "gang", "gang-researchers"
GANG_PODS, GANG_GPUS = 4, 8
GANG_QUOTA = GANG_PODS * GANG_GPUS
KUEUE_WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
SHAPES = ("job", "indexed")
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Whose CPU is labgate's: the webhook replicas, OPA and the reconciler.
LABGATE_PROCESSES = ("webhook-", "opa", "reconciler-")
DEFAULT_TIMEOUT = 600.0  # seconds a launch may take from apply to all bound
DEFAULT_GANG_WINDOW = 20.0  # seconds the blocked gang is watched

_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_WEBHOOK_REJECTIONS = re.compile(
    r"^apiserver_admission_webhook_rejection_count\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)", re.MULTILINE
)
_PLUGIN_DURATIONS = re.compile(
    r"^apiserver_admission_controller_admission_duration_seconds_count\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)",
    re.MULTILINE,
)
_WEBHOOK_SAMPLE = re.compile(
    r"^(?P<name>labgate_admission_overloaded_total|labgate_admission_wait_seconds_(?:count|sum|bucket))"
    r"(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)",
    re.MULTILINE,
)
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


def refused_creates(metrics_text: str, webhook_part: str = "labgate") -> int:
    """Creates the apiserver says webhooks whose name holds `webhook_part` refused so far (its
    apiserver_admission_webhook_rejection_count, operation CREATE, every type and error). Unlike
    FailedCreate events, which client-go's spam filter stops at 25 per object, this counts every one."""
    refused = 0
    for sample in _WEBHOOK_REJECTIONS.finditer(metrics_text):
        labels = dict(_LABEL.findall(sample["labels"]))
        if labels.get("operation") == "CREATE" and webhook_part in labels.get("name", ""):
            refused += round(float(sample["value"]))
    return refused


def quota_refused_creates(metrics_text: str) -> int:
    """Creates the apiserver's own ResourceQuota admission refused so far (its
    apiserver_admission_controller_admission_duration_seconds count, rejected, operation CREATE). It
    runs after the validating webhooks, so each of these was a create labgate had already admitted:
    a reservation whose pod never comes, counted until it expires."""
    refused = 0
    for sample in _PLUGIN_DURATIONS.finditer(metrics_text):
        labels = dict(_LABEL.findall(sample["labels"]))
        if (labels.get("name"), labels.get("operation"), labels.get("rejected")) == (
            "ResourceQuota",
            "CREATE",
            "true",
        ):
            refused += round(float(sample["value"]))
    return refused


def created_by_share(
    created: list[float], start: float, shares: tuple[float, ...] = (0.5, 0.99, 0.999)
) -> dict[float, float]:
    """Seconds from `start` until each share of the pods had been created (the first `share` of them
    in order of creation): how a launch's tail compares with its bulk."""
    ordered = sorted(created)
    return (
        {share: ordered[max(0, math.ceil(share * len(ordered)) - 1)] - start for share in shares}
        if ordered
        else {}
    )


def admission_overloads(metrics_text: str) -> Counter[str]:
    """From a webhook replica's /metrics text: its [admission-overloaded] refusals so far by cause
    (line-full, waited, pushed-out), and under "waits", "waited_ms" and "waits_over_500ms" how many
    requests waited for a slot, for how long in all, and how many of them longer than half a second
    (the wait bound is 1 s by default)."""
    found: Counter[str] = Counter()
    within_half_second = 0
    for sample in _WEBHOOK_SAMPLE.finditer(metrics_text):
        value = float(sample["value"])
        labels = dict(_LABEL.findall(sample["labels"] or ""))
        if sample["name"] == "labgate_admission_overloaded_total":
            found[labels.get("cause", "")] += round(value)
        elif sample["name"].endswith("_count"):
            found["waits"] += round(value)
        elif sample["name"].endswith("_sum"):
            found["waited_ms"] += round(value * 1000)
        elif labels.get("le") == "0.5":
            within_half_second += round(value)
    found["waits_over_500ms"] = found["waits"] - within_half_second
    return +found


_WEBHOOK_CONNECTIONS = re.compile(r"^labgate_admission_connections_total\s+(?P<value>\S+)", re.MULTILINE)


def admission_connections(metrics_text: str) -> int:
    """From a webhook replica's /metrics text: the connections to its admission port so far whose
    TLS handshake completed (the apiserver opens one for each concurrent call beyond its 25 idle)."""
    return sum(round(float(m["value"])) for m in _WEBHOOK_CONNECTIONS.finditer(metrics_text))


_WEBHOOK_REFUSAL = re.compile(
    r"^(?P<name>labgate_admission_rule_findings_total|labgate_policy_engine_errors_total)"
    r"\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)",
    re.MULTILINE,
)


def webhook_refusals(metrics_text: str) -> Counter[str]:
    """From a webhook replica's /metrics text: what it refused so far other than for overload, by
    rule id (its enforced findings; a request refused by two rules counts under both) and, under
    `no-decision:<reason>`, the requests refused because no policy decision could be had."""
    found: Counter[str] = Counter()
    for sample in _WEBHOOK_REFUSAL.finditer(metrics_text):
        labels = dict(_LABEL.findall(sample["labels"]))
        if sample["name"] == "labgate_policy_engine_errors_total":
            found[f"no-decision:{labels.get('reason', '')}"] += round(float(sample["value"]))
        elif labels.get("mode") == "enforce":
            found[labels.get("rule", "")] += round(float(sample["value"]))
    return +found


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


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Kubernetes LabelSelector (matchLabels and matchExpressions: In, NotIn, Exists,
    DoesNotExist) selects an object with `labels`, as the apiserver and Kueue read it (an empty
    selector selects everything)."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        held = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }
        if operator not in held:
            raise ValueError(f"unknown selector operator {operator!r}")
        if not held[operator]:
            return False
    return True


def bound_before(bound_at: Iterable[float], moment: float) -> int:
    """How many pods the watch saw bound before `moment` (a gang's pods bound while it was blocked)."""
    return sum(1 for at in bound_at if at < moment)


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


def job_manifest(name: str, pods: int, *, indexed: bool, gpus: int = 1) -> dict[str, Any]:
    """N identical pods of `gpus` GPUs at once (parallelism = completions = N); they run until deleted."""
    spec: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
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
    refused: int = 0  # creates labgate's webhooks refused so far (refused_creates)
    # The webhook replicas' [admission-overloaded] refusals by cause and their waits (admission_overloads).
    overloads: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)  # and their other refusals (webhook_refusals)
    connections: int = 0  # TLS connections the webhook replicas accepted so far (admission_connections)
    quota_refused: int = 0  # creates the apiserver's ResourceQuota admission refused so far


@dataclass
class Cluster:
    stack: LabgateStack
    admin: httpx.Client
    researchers: dict[str, httpx.Client]  # by tenant namespace; the admin elsewhere
    truth: LaunchTruth
    kueue: bool
    pids: dict[str, list[int]] = field(default_factory=dict)

    def sample(self) -> Sample:
        metrics = self.admin.get("/metrics", timeout=90)
        metrics.raise_for_status()
        overloads: Counter[str] = Counter()
        refusals: Counter[str] = Counter()
        connections = 0
        for health in self.stack.health_urls.values():
            replica = httpx.get(f"{health}/metrics", timeout=30)
            replica.raise_for_status()
            overloads += admission_overloads(replica.text)
            refusals += webhook_refusals(replica.text)
            connections += admission_connections(replica.text)
        return Sample(
            time.monotonic(),
            {name: cpu_seconds(pids) for name, pids in self.pids.items()},
            api_writes(metrics.text),
            refused_creates(metrics.text),
            overloads,
            refusals,
            connections,
            quota_refused_creates(metrics.text),
        )

    def pod_writes_stopped(self, quiet_seconds: float = 2.0) -> bool:
        """Whether the apiserver served no pod write (any subresource) over `quiet_seconds`."""
        before = self.pod_writes()
        time.sleep(quiet_seconds)
        return self.pod_writes() == before

    def pod_writes(self) -> int:
        metrics = self.admin.get("/metrics", timeout=90)
        metrics.raise_for_status()
        return sum(n for resource, n in api_writes(metrics.text).items() if resource.split("/")[0] == "pods")

    def client(self, namespace: str) -> httpx.Client:
        return self.researchers.get(namespace, self.admin)

    def workloads(self, namespace: str) -> int:
        """Kueue's Workloads in `namespace`; -1 without Kueue (its API is not served)."""
        if not self.kueue:
            return -1
        response = self.admin.get(KUEUE_WORKLOADS.format(namespace=namespace))
        response.raise_for_status()
        return len(response.json()["items"])

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

    def delete_jobs(self, namespace: str, timeout: float, *, job: str | None = None) -> bool:
        """Delete every Job of `namespace` (or only `job`) with its pods; whether those pods are gone
        within `timeout`."""
        deadline = time.monotonic() + timeout
        jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs" + (f"/{job}" if job else "")
        pods: dict[str, str] = {"gracePeriodSeconds": "0"}
        if job:
            pods["labelSelector"] = f"{JOB_NAME_LABEL}={job}"

        def delete() -> None:
            for path, params in (
                (jobs, {"propagationPolicy": "Background"}),
                (f"/api/v1/namespaces/{namespace}/pods", pods),
            ):
                # A collection delete answers when it is done, slowly on a loaded machine, and the
                # apiserver ends one past its request timeout (10,000 pods): what it deleted stays
                # deleted, and the next round deletes the rest.
                with contextlib.suppress(httpx.TimeoutException, httpx.RemoteProtocolError):
                    self.admin.delete(
                        path, params=params, timeout=max(1.0, min(60.0, deadline - time.monotonic()))
                    )

        def gone() -> bool:
            with self.truth.lock:
                return not any(
                    p["metadata"]["namespace"] == namespace
                    and (job is None or (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == job)
                    for p in self.truth.pods.values()
                )

        while time.monotonic() < deadline:
            delete()
            if wait_for(gone, timeout=max(0.0, min(60.0, deadline - time.monotonic())), every=0.5):
                return True
        return gone()

    def tenant_usage(self, name: str = TENANT) -> int:
        """The tenant's status.gpu.used; -1 when the apiserver did not answer."""
        try:
            tenant = self.admin.get(f"/apis/labgate.io/v1alpha1/tenants/{name}").json()
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
    refused: int = 0  # creates labgate refused, as the apiserver counted them (not capped as events are)
    overloads: Counter[str] = field(default_factory=Counter)  # the webhook's, during the launch
    refusals: Counter[str] = field(default_factory=Counter)  # the webhook's other refusals, by rule
    connections: int = 0  # TLS connections the webhook replicas accepted during the launch
    quota_refused: int = 0  # creates the apiserver's ResourceQuota admission refused, after labgate's
    created_by: dict[float, float] = field(default_factory=dict)  # share of pods -> s until created
    cpu: dict[str, float] = field(default_factory=dict)
    writes: Counter[str] = field(default_factory=Counter)
    load: float = 0.0
    workloads: int = -1  # Kueue's Workloads for it (1 queued by Kueue, 0 not; -1 without Kueue)


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
    result.refused = after.refused - before.refused
    result.overloads = after.overloads - before.overloads
    result.refusals = after.refusals - before.refusals
    result.connections = after.connections - before.connections
    result.quota_refused = after.quota_refused - before.quota_refused
    result.created_by = created_by_share(created, before.at)
    result.workloads = cluster.workloads(namespace)
    print(
        f"{target:8} {shape:7} round {round_}: created {result.created} in {result.to_created_s:.1f} s, "
        f"bound {result.bound} in {result.to_bound_s:.1f} s, FailedCreate {dict(result.failed_create)}, "
        f"refused by labgate {result.refused} (overloaded {dict(result.overloads)}, "
        f"by rule {dict(result.refusals)}), webhook connections {result.connections}, "
        f"refused by ResourceQuota {result.quota_refused}, created by share "
        f"{ {f'{share:.1%}': round(s, 1) for share, s in result.created_by.items()} }, "
        f"Kueue Workloads {result.workloads}, load {result.load:.1f}",
        flush=True,
    )
    settle(cluster, namespace, args)
    return result


def settle(cluster: Cluster, namespace: str, args: argparse.Namespace) -> None:
    """Remove the namespace's Jobs and pods; for a tenant, wait until labgate reports 0 GPUs used
    (else the next launch would meet last launch's usage) and, with Kueue, no Workload is left (else
    Kueue would still count its quota). Bounded; says when it was not enough."""
    if not cluster.delete_jobs(namespace, timeout=args.timeout):
        print(f"warning: pods of {namespace} not gone within {args.timeout:.0f} s", flush=True)
    # The Job controller goes on writing to the deleted pods (taking its tracking finalizers off,
    # answered 404) for seconds after they are gone: wait until the pod writes stop, else the next
    # launch, of either target, is charged with them.
    if not wait_for(cluster.pod_writes_stopped, timeout=60, every=1):
        print(f"warning: pod writes still going on 60 s after {namespace}'s pods were gone", flush=True)
    if namespace not in (TENANT, GANG_TENANT):
        return
    if not wait_for(lambda: cluster.tenant_usage(namespace) == 0, timeout=60, every=1):
        print(
            f"warning: tenant {namespace} still reports {cluster.tenant_usage(namespace)} GPUs used",
            flush=True,
        )
    if cluster.kueue and not wait_for(lambda: cluster.workloads(namespace) == 0, timeout=60, every=1):
        print(f"warning: {cluster.workloads(namespace)} Kueue Workloads left in {namespace}", flush=True)


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


# --- a gang -----------------------------------------------------------------------------------


@dataclass
class Gang:
    """A GANG_PODS x GANG_GPUS Indexed Job: when it fits at once, and when a blocker holds GANG_GPUS."""

    window_s: float
    fits_to_bound_s: float = float("nan")
    fits_failed_create: Counter[str] = field(default_factory=Counter)
    polls: int = 0  # polls while blocked
    blocked_created_max: int = 0  # the most gang pods that existed at one poll while blocked
    blocked_bound_max: int = 0  # the most gang pods bound at one poll while blocked
    bound_before_release: int = 0  # gang pods the watch saw bound before the blocker was deleted
    blocked_failed_create: Counter[str] = field(default_factory=Counter)
    release_to_bound_s: float = float("nan")
    blocked_writes: Counter[str] = field(default_factory=Counter)
    blocked_cpu: dict[str, float] = field(default_factory=dict)


def _bound_pods(cluster: Cluster, job: str) -> list[dict[str, Any]]:
    return [p for p in cluster.truth.job_pods(GANG_TENANT, job) if p["spec"].get("nodeName")]


def _gang_bound_at(cluster: Cluster, job: str, timeout: float, pods: int = GANG_PODS) -> float | None:
    """When the watch saw the last of the Job's `pods` bound (None: not all within `timeout`)."""
    if not wait_for(lambda: len(_bound_pods(cluster, job)) >= pods, timeout=timeout):
        return None
    _, bound = cluster.truth.times(GANG_TENANT, cluster.truth.job_pods(GANG_TENANT, job))
    return max(bound)


def gang(cluster: Cluster, args: argparse.Namespace) -> Gang:
    """The gang applied when it fits; then applied beside a blocker, watched, the blocker deleted."""
    result = Gang(window_s=args.gang_window)
    manifest = job_manifest("gang-fits", GANG_PODS, indexed=True, gpus=GANG_GPUS)
    applied = time.monotonic()
    uid = cluster.create_job(GANG_TENANT, manifest)
    bound_at = _gang_bound_at(cluster, "gang-fits", args.timeout)
    if bound_at is not None:
        result.fits_to_bound_s = bound_at - applied
    result.fits_failed_create = cluster.events(GANG_TENANT, uid)
    settle(cluster, GANG_TENANT, args)
    cluster.create_job(GANG_TENANT, job_manifest("blocker", 1, indexed=False, gpus=GANG_GPUS))
    if _gang_bound_at(cluster, "blocker", args.timeout, pods=1) is None:
        print("warning: the gang's blocker was not bound", flush=True)
    before = cluster.sample()
    uid = cluster.create_job(GANG_TENANT, job_manifest("gang", GANG_PODS, indexed=True, gpus=GANG_GPUS))
    while time.monotonic() - before.at < args.gang_window:
        pods = cluster.truth.job_pods(GANG_TENANT, "gang")
        result.polls += 1
        result.blocked_created_max = max(result.blocked_created_max, len(pods))
        result.blocked_bound_max = max(result.blocked_bound_max, len(_bound_pods(cluster, "gang")))
        time.sleep(0.2)
    after = cluster.sample()
    result.blocked_cpu = {n: after.cpu[n] - before.cpu.get(n, 0.0) for n in after.cpu}
    result.blocked_writes = after.writes - before.writes
    result.blocked_failed_create = cluster.events(GANG_TENANT, uid)
    released = time.monotonic()
    cluster.delete_jobs(GANG_TENANT, timeout=args.timeout, job="blocker")
    bound_at = _gang_bound_at(cluster, "gang", args.timeout)
    _, bound = cluster.truth.times(GANG_TENANT, cluster.truth.job_pods(GANG_TENANT, "gang"))
    result.bound_before_release = bound_before(bound, released)
    if bound_at is not None:
        result.release_to_bound_s = bound_at - released
    print(
        f"gang: fits, bound in {result.fits_to_bound_s:.1f} s; blocked: at most {result.blocked_created_max} "
        f"created, {result.blocked_bound_max} bound over {result.polls} polls ({result.bound_before_release} "
        f"by the watch), FailedCreate {dict(result.blocked_failed_create)}; all bound "
        f"{result.release_to_bound_s:.1f} s after the blocker's deletion",
        flush=True,
    )
    settle(cluster, GANG_TENANT, args)
    return result


# --- set-up and the run -------------------------------------------------------------------------


def _set_up(stack: LabgateStack, args: argparse.Namespace) -> None:
    """The pool, the tenants (launch: quota every pod; gang: the gang's size), the baseline namespace;
    checks that labgate's webhooks (and with Kueue, Kueue's Job management) do not see the baseline."""
    assert stack.kwok is not None
    nodes = max(-(-args.pods // GPUS_PER_NODE) + 1, GANG_PODS + 2)
    stack.kwok.add_pools(
        [NodePool(name="shared", nodes=nodes, gpu_product="h100", gpus=GPUS_PER_NODE, pods=110)],
        timeout=max(120.0, nodes * 0.5),
    )
    documents: list[dict[str, Any]] = [
        _tenant(TENANT, RESEARCHERS, args.pods),
        _tenant(GANG_TENANT, GANG_RESEARCHERS, GANG_QUOTA),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BASELINE}},
    ]
    stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
    for tenant in (TENANT, GANG_TENANT):
        stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=180s", f"tenant/{tenant}")
        if stack.kueue is not None and not wait_for(
            functools.partial(_queue_active, stack, tenant), timeout=120, every=1
        ):
            raise SystemExit(f"Kueue's ClusterQueue {tenant} not Active within 120 s")
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        configuration = json.loads(stack.admin_kubectl("get", kind, WEBHOOK_CONFIGURATION, "-o", "json"))
        if not excludes_unlabelled_namespaces(configuration):
            raise SystemExit(
                f"{kind} {WEBHOOK_CONFIGURATION} may see {BASELINE}: no baseline to compare with"
            )
    labels = json.loads(stack.admin_kubectl("get", "namespace", BASELINE, "-o", "json"))["metadata"]["labels"]
    if TENANT_LABEL in labels:
        raise SystemExit(f"namespace {BASELINE} carries {TENANT_LABEL}")
    if stack.kueue is not None and selector_matches(_kueue_namespaces(), labels):
        raise SystemExit(f"Kueue manages the Jobs of {BASELINE}: no baseline to compare with")


def _tenant(name: str, researchers: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "members": {"researchers": [{"kind": "Group", "name": researchers}]},
            "namespaces": {"names": [name]},
            "gpu": {"total": gpus},
        },
    }


def _kueue_namespaces() -> dict[str, Any]:
    """The namespaces whose Jobs without a queue name the stack's Kueue manages."""
    configuration = kueue_configuration(webhook_port=0, health_port=0, metrics_port=0, cert_dir=Path())
    selector: dict[str, Any] = configuration["managedJobsNamespaceSelector"]
    return selector


def _queue_active(stack: LabgateStack, tenant: str) -> bool:
    """The reconciler made the tenant's ClusterQueue and Kueue reports it Active."""
    found = stack.cluster_kubectl("get", f"clusterqueue.kueue.x-k8s.io/{tenant}", "-o", "json")
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


def _measure(cluster: Cluster, args: argparse.Namespace) -> dict[str, Any]:
    launches = []
    for round_ in range(1, args.rounds + 1):
        for shape in args.shapes.split(","):
            targets = ("baseline", "labgate") if round_ % 2 else ("labgate", "baseline")
            launches += [launch(cluster, t, shape, round_, args) for t in targets]
    waits = []
    if not args.without_waiting:
        _baseline_quota(cluster.stack, args.pods)
        waits = [waiting(cluster, t, args) for t in ("labgate", "baseline")]
    gangs = [] if args.without_gang else [gang(cluster, args)]
    return {"launches": launches, "waits": waits, "gangs": gangs}


def run_stack(args: argparse.Namespace, *, kueue: bool) -> dict[str, Any]:
    """One stack (with or without Kueue) measured from start to end; every process stopped after."""
    workdir = Path(tempfile.mkdtemp(prefix="labgate-job-launch-"))
    simulation = NodeSimulation(controller_api_rate=(args.kube_api_qps, args.kube_api_burst))
    facts: dict[str, Any] = {"load_before": os.getloadavg()[0], "started": datetime.now(UTC)}
    stop = threading.Event()
    try:
        with LabgateStack(workdir / "stack", nodes=simulation, webhook_replicas=1, kueue=kueue) as stack:
            facts["stack_start_s"] = stack.start_seconds
            _set_up(stack, args)
            admin = client_of(stack.admin_kubeconfig, stack.cluster.server)
            researchers = {
                tenant: client_of(stack.kubeconfig_for(f"r-{tenant}", (group,)), stack.cluster.server)
                for tenant, group in ((TENANT, RESEARCHERS), (GANG_TENANT, GANG_RESEARCHERS))
            }
            truth = LaunchTruth(quotas={TENANT: args.pods, GANG_TENANT: GANG_QUOTA})
            cluster = Cluster(stack, admin, researchers, truth, kueue, stack_processes(stack))
            threading.Thread(target=watch_pods, args=(admin, truth, stop), daemon=True).start()
            results = _measure(cluster, args)
            facts["memory_mb"] = {name: rss_mb(pids) for name, pids in stack_processes(stack).items()}
            facts["max_overshoot"] = dict(truth.worst_overshoot)
            facts["peak_bound"] = dict(truth.peak_bound)
            stop.set()
    finally:
        stop.set()
        shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs
    facts["load_after"] = os.getloadavg()[0]
    facts["finished"] = datetime.now(UTC)
    return {**results, "facts": facts, "kueue": kueue}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The stack without Kueue, then (`--kueue`) the stack with it, each with its own baseline."""
    stacks = {"without": run_stack(args, kueue=False)}
    if args.kueue:
        stacks["with"] = run_stack(args, kueue=True)
    return stacks


# --- the report ---------------------------------------------------------------------------------


def _median(values: Iterable[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else float("nan")


def _labgate_cpu(cpu: dict[str, float]) -> float:
    return sum(s for n, s in cpu.items() if n.startswith(LABGATE_PROCESSES))


def _per_pod_ms(seconds: float, pods: int) -> float:
    return 1000 * seconds / pods


def target_name(target: str, kueue: bool) -> str:
    return "labgate + Kueue" if kueue and target == "labgate" else target


def _launch_rows(launches: list[Launch], kueue: bool = False) -> list[str]:
    lines = [
        "| shape | target | apply → all created | apply → all bound | FailedCreate events (labgate's) / creates labgate refused "
        "| API writes / pod | kube-apiserver CPU ms / pod | labgate CPU ms / pod (webhook, OPA, reconciler) "
        f"| etcd, controller manager, scheduler{', Kueue' if kueue else ''} CPU ms / pod "
        f"|{' Kueue Workloads |' if kueue else ''} load (1 min) |",
        f"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |{' ---: |' if kueue else ''} ---: |",
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
            kueue_ms = f", {ms('kueue'):.2f}" if kueue else ""
            workloads = f" {', '.join(str(r.workloads) for r in runs)} |" if kueue else ""
            lines.append(
                f"| {shape} | {target_name(target, kueue)} | {_median(r.to_created_s for r in runs):.1f} s "
                f"| {_median(r.to_bound_s for r in runs):.1f} s{f' ({timed_out} timed out)' if timed_out else ''} "
                f"| {failed} ({labgate_failed}) / {sum(r.refused for r in runs)} "
                f"| {_median(sum(r.writes.values()) / pods for r in runs):.2f} "
                f"| {ms('kube-apiserver'):.2f} "
                f"| {_median(_per_pod_ms(_labgate_cpu(r.cpu), pods) for r in runs):.2f} "
                f"({ms('webhook-'):.2f}, {ms('opa'):.2f}, {ms('reconciler-'):.2f}) "
                f"| {ms('etcd'):.2f}, {ms('kube-controller-manager'):.2f}, {ms('kube-scheduler'):.2f}{kueue_ms} "
                f"|{workloads} {', '.join(f'{r.load:.1f}' for r in runs)} |"
            )
    return lines


def _target_rows(launches: list[Launch], kueue: bool = False) -> list[str]:
    """Labgate against the baseline, per shape and round, median over rounds, beside the targets."""
    lines = [
        f"| shape | all bound, {target_name('labgate', kueue)} / baseline (≤ 1.15) | API writes (≤ 1.1) | kube-apiserver CPU (≤ 1.2) "
        "| labgate CPU ms / pod (≤ 3) | creates labgate refused (0) |",
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
        caused = sum(lg.refused for lg, _ in pairs)
        lines.append(f"| {shape} | {bound:.2f} | {writes:.2f} | {apiserver:.2f} | {cpu:.2f} | {caused} |")
    return lines


def writes_rows(launches: list[Launch], top: int = 10, kueue: bool = False) -> list[str]:
    """API writes per pod by resource, each target summed over its rounds and shapes: the `top`
    most written, then every resource of Kueue's API group (few writes a Job, not a pod, but what
    Kueue adds)."""
    totals: dict[str, Counter[str]] = {"baseline": Counter(), "labgate": Counter()}
    pods: Counter[str] = Counter()
    for r in launches:
        totals[r.target].update(r.writes)
        pods[r.target] += r.pods
    resources = sorted(
        set(totals["baseline"]) | set(totals["labgate"]),
        key=lambda k: (-(totals["baseline"][k] + totals["labgate"][k]), k),  # ties by name: stable
    )
    lines = [
        f"| resource | baseline writes / pod | {target_name('labgate', kueue)} writes / pod |",
        "| --- | ---: | ---: |",
    ]
    shown = resources[:top] + [r for r in resources[top:] if r.partition("/")[0].endswith(".kueue.x-k8s.io")]
    for resource in shown:
        per = [totals[t][resource] / pods[t] if pods[t] else float("nan") for t in ("baseline", "labgate")]
        lines.append(f"| {resource} | {per[0]:.3f} | {per[1]:.3f} |")
    return lines


def _waiting_rows(waits: list[Waiting], kueue: bool = False) -> list[str]:
    lines = [
        "| target | second Job: created / bound of N | FailedCreate (reasons) | API writes, waiting (idle) "
        "| kube-apiserver CPU s, waiting (idle) | labgate CPU s, waiting (idle) |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for w in waits:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in w.failed_create.most_common()) or "none"
        lines.append(
            f"| {target_name(w.target, kueue)}{' (ResourceQuota)' if w.target == 'baseline' else ''} "
            f"| {w.second_created} / {w.second_bound} "
            f"| {sum(w.failed_create.values())} ({reasons}) "
            f"| {sum(w.writes.values())} ({sum(w.idle_writes.values())}) "
            f"| {w.cpu.get('kube-apiserver', 0.0):.2f} ({w.idle_cpu.get('kube-apiserver', 0.0):.2f}) "
            f"| {_labgate_cpu(w.cpu):.2f} ({_labgate_cpu(w.idle_cpu):.2f}) |"
        )
    return lines


def _gang_rows(stacks: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| stack | fits at once: apply → all bound | blocked: most created / bound at one poll (polls) "
        "| blocked: bound by the watch before the blocker's deletion (0) | FailedCreate while blocked "
        "(reasons) | API writes, kube-apiserver CPU s, labgate CPU s while blocked "
        "| blocker deleted → all bound |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for results in stacks.values():
        for g in results["gangs"]:
            reasons = ", ".join(f"{r}: {n}" for r, n in g.blocked_failed_create.most_common()) or "none"
            lines.append(
                f"| {'labgate + Kueue' if results['kueue'] else 'labgate'} | {g.fits_to_bound_s:.1f} s "
                f"| {g.blocked_created_max} / {g.blocked_bound_max} ({g.polls}) | {g.bound_before_release} "
                f"| {sum(g.blocked_failed_create.values())} ({reasons}) "
                f"| {sum(g.blocked_writes.values())}, {g.blocked_cpu.get('kube-apiserver', 0.0):.2f}, "
                f"{_labgate_cpu(g.blocked_cpu):.2f} | {g.release_to_bound_s:.1f} s |"
            )
    return lines


def _summary(launches: list[Launch], shape: str, target: str) -> dict[str, float]:
    """Medians over rounds of one shape and target (nan when none ran)."""
    runs = [r for r in launches if r.shape == shape and r.target == target]
    return {
        "bound_s": _median(r.to_bound_s for r in runs),
        "failed": sum(sum(r.failed_create.values()) for r in runs),
        "labgate_failed": sum(
            sum(n for reason, n in r.failed_create.items() if is_labgate_reason(reason)) for r in runs
        ),
        "refused": sum(r.refused for r in runs),
        "writes": _median(sum(r.writes.values()) / r.pods for r in runs),
        "apiserver_ms": _median(_per_pod_ms(r.cpu.get("kube-apiserver", 0.0), r.pods) for r in runs),
        "labgate_ms": _median(_per_pod_ms(_labgate_cpu(r.cpu), r.pods) for r in runs),
        "kueue_ms": _median(_per_pod_ms(r.cpu.get("kueue", 0.0), r.pods) for r in runs),
    }


def kueue_rows(without: list[Launch], with_kueue: list[Launch]) -> list[str]:
    """Per shape, labgate without and with Kueue, each beside its own stack's baseline."""
    lines = [
        "| shape | target | apply → all bound (x its baseline) | FailedCreate events (labgate's) / creates labgate refused "
        "| API writes / pod (x its baseline) | kube-apiserver CPU ms / pod | labgate CPU ms / pod "
        "| Kueue CPU ms / pod |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for shape in SHAPES:
        for kueue, launches in ((False, without), (True, with_kueue)):
            own, base = _summary(launches, shape, "labgate"), _summary(launches, shape, "baseline")
            kueue_ms = f"{own['kueue_ms']:.2f}" if kueue else "-"
            if math.isnan(own["bound_s"]) and math.isnan(own["writes"]):
                continue
            lines.append(
                f"| {shape} | {target_name('labgate', kueue)} "
                f"| {own['bound_s']:.1f} s ({ratio(own['bound_s'], base['bound_s']):.2f}) "
                f"| {own['failed']:.0f} ({own['labgate_failed']:.0f}) / {own['refused']:.0f} "
                f"| {own['writes']:.2f} ({ratio(own['writes'], base['writes']):.2f}) "
                f"| {own['apiserver_ms']:.2f} | {own['labgate_ms']:.2f} "
                f"| {kueue_ms} |"
            )
    return lines


def command(args: argparse.Namespace) -> str:
    parts = [f"--pods {args.pods}", f"--rounds {args.rounds}", f"--window {args.window:g}"]
    if args.timeout != DEFAULT_TIMEOUT:
        parts.append(f"--timeout {args.timeout:g}")
    if (args.kube_api_qps, args.kube_api_burst) != (200, 400):
        parts.append(f"--kube-api-qps {args.kube_api_qps} --kube-api-burst {args.kube_api_burst}")
    if args.gang_window != DEFAULT_GANG_WINDOW:
        parts.append(f"--gang-window {args.gang_window:g}")
    if args.kueue:
        parts.append("--kueue")
    if args.without_waiting:
        parts.append("--without-waiting")
    if args.without_gang:
        parts.append("--without-gang")
    return ".venv/bin/python -m benchmarks.job_launch " + " ".join(parts) + " --write docs/benchmarks.md"


def _stack_lines(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """One stack's tables: the launches against its baseline, writes by resource, the waiting Job,
    the truth, memory."""
    facts, launches, waits, kueue = results["facts"], results["launches"], results["waits"], results["kueue"]
    memory = facts["memory_mb"]

    def mem(name: str) -> str:
        now, peak = memory.get(name, (float("nan"), float("nan")))
        return f"{name} {now:.0f} / {peak:.0f}"

    lines = [
        f"{args.pods} pods x 1 GPU, {args.rounds} round(s), "
        f"kube-controller-manager at --kube-api-qps={args.kube_api_qps} --kube-api-burst={args.kube_api_burst}"
        f"{', Kueue beside labgate' if kueue else ', without Kueue'}; medians over rounds. "
        "Measured "
        f"{facts['started']:%Y-%m-%d %H:%M} to {facts['finished']:%H:%M} UTC on {os.cpu_count()} cores, "
        f"load average (1 min) {facts['load_before']:.1f} before, {facts['load_after']:.1f} after "
        "(the load column: at each launch's start).",
        "",
        *_target_rows(launches, kueue),
        "",
        *_launch_rows(launches, kueue),
        "",
        "API writes per pod by resource (every round and shape):",
        "",
        *writes_rows(launches, kueue=kueue),
        "",
    ]
    if waits:
        lines += [
            f"A second Job of {args.pods} pods beyond the free quota (quota {args.pods} GPUs, a first Job "
            f"holds {waits[0].held}), over {args.window:g} s from its apply, against {args.window:g} idle "
            "seconds with the first Job alone:",
            "",
            *_waiting_rows(waits, kueue),
            "",
        ]
    overshoot, peak = facts["max_overshoot"], facts["peak_bound"]
    lines += [
        f"Bound GPUs in each tenant's namespace against its quota, at every pod event: {TENANT} (quota "
        f"{args.pods}) max overshoot {overshoot.get(TENANT, 0)} (must be 0), peak {peak.get(TENANT, 0)}; "
        f"{GANG_TENANT} (quota {GANG_QUOTA}) max overshoot {overshoot.get(GANG_TENANT, 0)}, peak "
        f"{peak.get(GANG_TENANT, 0)}.",
        "",
        "Memory MB now / peak at the end: "
        + ", ".join(
            mem(n)
            for n in (
                "webhook-0",
                "opa",
                "reconciler-0",
                *(["kueue"] if kueue else []),
                "kube-apiserver",
                "etcd",
                "kube-controller-manager",
            )
        )
        + ".",
        "",
    ]
    return lines


def table(stacks: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "**Without Kueue** (labgate alone against the plain cluster).",
        "",
        *_stack_lines(stacks["without"], args),
    ]
    if "with" in stacks:
        lines += [
            "**With Kueue beside labgate** (a second stack started after the first stopped, its own "
            "baseline: the same namespace outside both labgate's webhooks and Kueue's "
            "managedJobsNamespaceSelector; the Kueue Workloads column counts the Workloads Kueue made "
            "for the launch: 1 when Kueue queued it, 0 when it did not look).",
            "",
            *_stack_lines(stacks["with"], args),
            "labgate without and with Kueue, per shape, each against its own stack's baseline:",
            "",
            *kueue_rows(stacks["without"]["launches"], stacks["with"]["launches"]),
            "",
        ]
    if any(results["gangs"] for results in stacks.values()):
        lines += [
            f"A gang: an Indexed Job of {GANG_PODS} pods x {GANG_GPUS} GPUs (parallelism = "
            f"completions = {GANG_PODS}) in a tenant whose quota is {GANG_QUOTA} GPUs; once when it fits, "
            f"then applied while a blocker Job holds {GANG_GPUS} of them, watched for {args.gang_window:g} s "
            "(pods created and bound at every poll; bound pods from the watch), then the blocker deleted:",
            "",
            *_gang_rows(stacks),
            "",
        ]
    lines.append(f"Reproduce: `{command(args)}`")
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
    parser.add_argument(
        "--gang-window", type=float, default=DEFAULT_GANG_WINDOW, help="seconds the blocked gang is watched"
    )
    parser.add_argument("--without-waiting", action="store_true", help="skip the second Job beyond the quota")
    parser.add_argument("--without-gang", action="store_true", help="skip the gang")
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help="which Jobs to launch: job, indexed or both"
    )
    parser.add_argument(
        "--kueue", action="store_true", help="then the same in a second stack with Kueue beside labgate"
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
