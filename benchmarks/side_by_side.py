"""labgate side by side with a no-op webhook, OPA alone and Gatekeeper: open-loop load at fixed rates.

    .venv/bin/python -m benchmarks.side_by_side [--rates 100,200,400,800] [--seconds 5] [--rounds 2]
        [--pod-rates 20,50,100] [--write docs/benchmarks.md]

One run, on one machine, everything on loopback:
  - the real local stack (etcd, kube-apiserver, controllers, OPA, one labgate webhook, reconciler),
    the no-op webhook (benchmarks/noop_webhook.py, same FastAPI/uvicorn/TLS) and Gatekeeper run out
    of cluster (`--operation=webhook --operation=generate --disable-cert-rotation`, with a Pod object
    of its own) with the ConstraintTemplates in benchmarks/gatekeeper/ (labgate's main pod rules, as Gatekeeper can say them);
  - direct HTTPS AdmissionReviews (vegeta, open loop at each fixed rate, the same bodies for every
    target, a fresh pod name per request), targets interleaved in rounds so noise hits all alike:
    latency p50/p99, answered share, CPU seconds per 1,000 admissions, RSS;
  - pods created through the apiserver (vegeta against the pods endpoint) in four namespaces: no
    webhook, two no-op webhooks (mutating + validating), labgate (mutating + validating), Gatekeeper
    (validating), CPU and GPU pods, at each pod rate; and the control plane's cost per GPU pod
    (kube-apiserver + etcd CPU seconds and API writes per pod, labgate's settling included);
  - the GPU quota kept exact under load: more one-GPU pods than the quota, at the top rate.
The load average is recorded beside every row: the machine may be shared. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.report import replace_section
from devcluster.processes import ManagedProcess, free_port, recorded_pids, spawn, wait_until
from devcluster.stack import EXEMPT_NAMESPACES, LABGATE_NAMESPACE, WEBHOOK_CONFIGURATION, LabgateStack
from devcluster.tools import REPO_ROOT, binary, go_module_dir, pinned_versions, tool
from webhook.admission import build_policy_input
from webhook.registration import webhook_configurations
from webhook.review import parse_request

HERE = Path(__file__).resolve().parent
IMAGE = "registry.lab.example/research/trainer:v1"
MEMBER, MEMBER_GROUP = "alice", "bench"
# Namespaces for pods created through the apiserver: which webhooks see them.
NS_LABGATE, NS_NOOP, NS_GATEKEEPER, NS_NONE = "bench", "bench-noop", "bench-gk", "bench-none"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DASH = "\N{EN DASH}"


# --- processes: CPU seconds and memory, from /proc ------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
    return total


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total / 1024


def wait_until_idle(pids: list[int], *, limit: float = 90.0) -> float:
    """Wait until `pids` use under a tenth of a core (over half a second), at most `limit` seconds;
    the seconds waited. A target that fell behind keeps working on requests its client gave up on:
    the next measurement must not run on a machine still busy with them."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = cpu_seconds(pids)
        time.sleep(0.5)
        if cpu_seconds(pids) - before < 0.05:
            break
    return time.monotonic() - started


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- vegeta ---------------------------------------------------------------------------------------


@dataclass
class Attack:
    """One open-loop attack's results."""

    latencies_ms: list[float]
    answered: int  # HTTP 200 with a verdict (admitted, or refused by a policy)
    admitted: int
    overloaded: int  # refused with [admission-overloaded]
    failed: int  # errors, timeouts, non-200, [policy-engine-unavailable]
    seconds: float

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


@dataclass
class Tls:
    ca: Path
    cert: Path | None = None
    key: Path | None = None

    def args(self) -> list[str]:
        args = [f"-root-certs={self.ca}"]
        if self.cert and self.key:
            args += [f"-cert={self.cert}", f"-key={self.key}"]
        return args


def attack(
    url: str,
    bodies: list[bytes],
    *,
    rate: int,
    seconds: float,
    tls: Tls | None,
    judge: Callable[[int, bytes], str],
    workdir: Path,
) -> Attack:
    """POST `bodies` (one per request, in order) to `url` at `rate` per second, open loop."""
    targets = workdir / "targets.jsonl"
    header = {"Content-Type": ["application/json"]}
    with targets.open("w") as out:
        for body in bodies:
            out.write(
                json.dumps(
                    {"method": "POST", "url": url, "header": header, "body": base64.b64encode(body).decode()}
                )
                + "\n"
            )
    vegeta = binary("vegeta")
    argv = [
        vegeta,
        "attack",
        "-format=json",
        f"-targets={targets}",
        f"-rate={rate}/s",
        f"-duration={seconds}s",
        "-timeout=10s",
        "-keepalive=true",
        *(tls.args() if tls else []),
    ]
    started = time.monotonic()
    attacked = subprocess.run(argv, capture_output=True, check=True)
    elapsed = time.monotonic() - started
    encoded = subprocess.run(
        [vegeta, "encode", "-to=json"], input=attacked.stdout, capture_output=True, check=True
    )
    result = Attack([], 0, 0, 0, 0, elapsed)
    for line in encoded.stdout.splitlines():
        hit = json.loads(line)
        result.latencies_ms.append(hit["latency"] / 1e6)
        body = base64.b64decode(hit.get("body") or "")
        verdict = "failed" if hit.get("error") else judge(int(hit.get("code", 0)), body)
        if verdict in ("admitted", "refused"):
            result.answered += 1
        if verdict == "admitted":
            result.admitted += 1
        elif verdict == "overloaded":
            result.overloaded += 1
        elif verdict == "failed":
            result.failed += 1
    return result


def judge_review(code: int, body: bytes) -> str:
    """An AdmissionReview answer: admitted, refused by a policy, overloaded, or failed."""
    if code != 200:
        return "failed"
    try:
        response = json.loads(body)["response"]
    except (ValueError, KeyError):
        return "failed"
    if response.get("allowed"):
        return "admitted"
    message = (response.get("status") or {}).get("message", "")
    if "[admission-overloaded]" in message:
        return "overloaded"
    if "[policy-engine-unavailable]" in message:
        return "failed"
    return "refused"


def judge_opa(code: int, body: bytes) -> str:
    if code != 200:
        return "failed"
    try:
        return "admitted" if json.loads(body)["result"]["allowed"] else "refused"
    except (ValueError, KeyError, TypeError):
        return "failed"


def judge_create(code: int, body: bytes) -> str:
    """A pod create through the apiserver: 201 admitted; 403 from a webhook refused; 429 overloaded."""
    if code == 201:
        return "admitted"
    text = body.decode(errors="replace")
    if "[admission-overloaded]" in text:
        return "overloaded"
    if code == 403 and "denied the request" in text and "policy-engine-unavailable" not in text:
        return "refused"
    return "failed"


# --- request bodies -------------------------------------------------------------------------------


def pod(name: str, namespace: str, *, gpus: int = 0, generate: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    metadata = {"generateName": f"{name}-"} if generate else {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [container]}}


def review(namespace: str, *, gpus: int = 0, distinct: bool = False) -> dict[str, Any]:
    """A member's pod with a fresh name and uid, like a Job's copies; `distinct`: its container also
    gets an environment variable of its own, so that no two pods are alike and labgate cannot reuse
    a decision (webhook/decision_reuse.py): every request is evaluated."""
    name = f"bench-{uuid.uuid4().hex[:12]}"
    obj = pod(name, namespace, gpus=gpus)
    if distinct:
        obj["spec"]["containers"][0]["env"] = [{"name": "RUN_ID", "value": uuid.uuid4().hex}]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": MEMBER, "groups": [MEMBER_GROUP, "system:authenticated"]},
            "object": {
                **obj,
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
            },
        },
    }


def opa_input(namespace: str) -> dict[str, Any]:
    body = build_policy_input(request=parse_request(review(namespace)["request"]))
    body["gpu_usage"] = {"total": 0, "by_model": {}}
    return {"input": body}


# --- profiles (py-spy) ----------------------------------------------------------------------------


def start_profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` (and its threads, GIL holders or not) for `seconds`, as collapsed stacks."""
    py_spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen(
        [
            str(py_spy),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "200",
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def summarize_profile(path: Path, top: int = 25) -> str:
    """Where the samples are: the share of samples in which each function appears (inclusive)
    and at the top of the stack (self), from py-spy's collapsed stacks."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
            for f in stack.split(";")
        ]
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
        own[frames[-1]] = own.get(frames[-1], 0) + count
    lines = [f"{total} samples", "inclusive:"]
    lines += [
        f"  {100 * n / total:5.1f}%  {f}" for f, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]
    ]
    lines += ["self:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(lines)


# --- the stack's parts ----------------------------------------------------------------------------


def tenant(name: str, *, gpus: int, namespaces: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "members": {"researchers": [{"kind": "Group", "name": MEMBER_GROUP}]},
            "namespaces": {"names": namespaces or [name]},
            "gpu": {"total": gpus},
        },
    }


def apply(stack: LabgateStack, *documents: dict[str, Any]) -> None:
    stack.admin_kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=bench",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(list(documents)),
    )


def webhook_entry(name: str, url: str, ca: bytes, namespace: str, *, mutating: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "operations": ["CREATE"],
                "scope": "Namespaced",
            }
        ],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 3,
    }
    if mutating:
        entry["reinvocationPolicy"] = "Never"
    return entry


def gatekeeper_module_dir() -> Path:
    return go_module_dir(
        "github.com/open-policy-agent/gatekeeper/v3", pinned_versions()["GATEKEEPER_VERSION"]
    )


def gatekeeper_crds() -> list[Path]:
    module = gatekeeper_module_dir()
    for sub in ("charts/gatekeeper/crds", "manifest_staging/charts/gatekeeper/crds"):
        if (module / sub).is_dir():
            return sorted((module / sub).glob("*.yaml"))
    raise FileNotFoundError(f"no Gatekeeper CRDs under {module} (run toolchain/build.sh gatekeeper)")


# Gatekeeper owns its per-pod status objects by its Pod. With --debug-use-fake-pod that owner does
# not exist, so the controller manager's garbage collector deletes every status object Gatekeeper
# writes and Gatekeeper writes it again: tens of thousands of API writes in a run, load on the
# apiserver and etcd that every target would pay for. So Gatekeeper gets a Pod object of its own
# (never scheduled: no node runs it), as in a cluster.
GATEKEEPER_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gatekeeper-bench", "namespace": "gatekeeper-system"},
    "spec": {"containers": [{"name": "manager", "image": "openpolicyagent/gatekeeper:v3.23.0"}]},
}


def start_gatekeeper(stack: LabgateStack, workdir: Path, pki: Path) -> tuple[ManagedProcess, str]:
    stack.admin_kubectl("create", "namespace", "gatekeeper-system")
    stack.admin_kubectl("create", "-f", "-", stdin=json.dumps(GATEKEEPER_POD))
    for crd in gatekeeper_crds():
        stack.admin_kubectl("apply", "--server-side", "--field-manager=bench", "-f", str(crd))
    stack.admin_kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    port = free_port()
    process = spawn(
        workdir,
        "gatekeeper",
        [
            binary("gatekeeper"),
            "--operation=webhook",
            # Since v3.2x the constraint CRDs of ConstraintTemplates are made only by `generate`.
            "--operation=generate",
            "--disable-cert-rotation",
            f"--port={port}",
            "--host=127.0.0.1",
            f"--cert-dir={pki}",
            f"--health-addr=127.0.0.1:{free_port()}",
            f"--metrics-addr=127.0.0.1:{free_port()}",
            "--log-level=ERROR",
        ],
        env={
            "KUBECONFIG": str(stack.admin_kubeconfig),
            "POD_NAMESPACE": "gatekeeper-system",
            "POD_NAME": "gatekeeper-bench",
        },
    )
    stack.admin_kubectl("apply", "-f", str(HERE / "gatekeeper" / "templates.yaml"))
    kinds = [
        d["spec"]["crd"]["spec"]["names"]["kind"].lower()
        for d in yaml.safe_load_all((HERE / "gatekeeper" / "templates.yaml").read_text())
    ]

    def constraint_crds_exist() -> bool:
        process.check_alive()
        names = stack.admin_kubectl("get", "crd", "-o", "name")
        return all(f"{k}.constraints.gatekeeper.sh" in names for k in kinds)

    wait_until(constraint_crds_exist, what="Gatekeeper's constraint CRDs", timeout=120, interval=1)
    stack.admin_kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    stack.admin_kubectl("apply", "-f", str(HERE / "gatekeeper" / "constraints.yaml"))
    url = f"https://127.0.0.1:{port}/v1/admit"
    return process, url


def post(url: str, body: dict[str, Any], context: ssl.SSLContext | None) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 - our own https URLs
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, context=context, timeout=5) as response:  # noqa: S310
        return response.status, response.read()


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Row:
    table: str
    target: str
    rate: int
    kind: str
    attacks: list[Attack] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds per 1,000 requests
    rss: list[float] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class HttpTarget:
    name: str
    url: str
    make: Callable[[], dict[str, Any]]
    tls: Tls | None
    pids: Callable[[], list[int]]
    judge: Callable[[int, bytes], str] = judge_review


@contextmanager
def started(process: ManagedProcess | None) -> Iterator[ManagedProcess | None]:
    try:
        yield process
    finally:
        if process is not None:
            process.stop()


def run(args: argparse.Namespace, workdir: Path) -> tuple[list[Row], dict[str, Any]]:  # noqa: PLR0912, PLR0915 - one run, in order
    # Never builds: toolchain/build.sh makes vegeta and Gatekeeper (Gatekeeper is left out when not built).
    if not tool("vegeta").is_built:
        raise SystemExit("vegeta is not built: run toolchain/build.sh vegeta")
    with_gatekeeper = tool("gatekeeper").is_built and not args.without_gatekeeper
    rows: dict[tuple[str, str, int, str], Row] = {}
    facts: dict[str, Any] = {"loads": [load_average()]}
    run_started = time.monotonic()
    with LabgateStack(workdir) as stack:
        pki = workdir / "webhook-pki"
        # labgate answers callers with the apiserver's client certificate only; every target gets it.
        cluster_pki = workdir / "pki"
        tls = Tls(pki / "ca.crt", cluster_pki / "webhook-client.crt", cluster_pki / "webhook-client.key")
        context = ssl.create_default_context(cadata=(pki / "ca.crt").read_text())
        apply(stack, tenant("bench", gpus=1_000_000))
        gpu_tenants = [f"gpu{r}x{rate}" for r in range(args.rounds) for rate in args.rates]
        apply(stack, *(tenant(t, gpus=1_000_000) for t in gpu_tenants))
        apply(stack, tenant("exact", gpus=args.exact_quota))
        for ns in (NS_NOOP, NS_GATEKEEPER, NS_NONE):
            stack.admin_kubectl("create", "namespace", ns)
        stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=120s", "tenant", "--all")
        noop_port = free_port()
        noop = spawn(
            workdir,
            "noop-webhook",
            [
                sys.executable,
                "-m",
                "benchmarks.noop_webhook",
                str(noop_port),
                str(pki / "tls.crt"),
                str(pki / "tls.key"),
            ],
            env={"PYTHONPATH": str(REPO_ROOT)},
        )
        gatekeeper: ManagedProcess | None = None
        gatekeeper_url = ""
        if with_gatekeeper:
            gatekeeper, gatekeeper_url = start_gatekeeper(stack, workdir, pki)
        with started(noop), started(gatekeeper):
            noop_url = f"https://127.0.0.1:{noop_port}/validate"
            wait_until(
                lambda: post(noop_url, review(NS_LABGATE), context)[0] == 200,
                what="no-op webhook",
                timeout=30,
                watch=[noop],
            )

            def gatekeeper_refuses() -> bool:
                bad = review(NS_LABGATE)
                bad["request"]["object"]["spec"]["containers"][0]["image"] = "docker.io/evil:1"
                answer = json.loads(post(gatekeeper_url, bad, context)[1])["response"]
                return not answer["allowed"]

            if gatekeeper is not None:
                wait_until(
                    gatekeeper_refuses,
                    what="Gatekeeper enforcing its constraints",
                    timeout=120,
                    interval=1,
                    watch=[gatekeeper],
                )
            # labgate's webhooks skip the other namespaces; the no-op and Gatekeeper ones see only theirs.
            configurations = webhook_configurations(
                name=WEBHOOK_CONFIGURATION,
                urls=stack.webhook_urls,
                ca_bundle_pem=stack.webhook_ca.cert_pem,
                exempt_namespaces=[*EXEMPT_NAMESPACES, NS_NOOP, NS_GATEKEEPER, NS_NONE],
            )
            ca = stack.webhook_ca.cert_pem
            apply(
                stack,
                *configurations,
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "bench-noop"},
                    "webhooks": [webhook_entry("mutate.noop.bench", noop_url, ca, NS_NOOP, mutating=True)],
                },
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": "bench-noop"},
                    "webhooks": [webhook_entry("validate.noop.bench", noop_url, ca, NS_NOOP, mutating=False)],
                },
            )
            if gatekeeper is not None:
                apply(
                    stack,
                    {
                        "apiVersion": "admissionregistration.k8s.io/v1",
                        "kind": "ValidatingWebhookConfiguration",
                        "metadata": {"name": "bench-gatekeeper"},
                        "webhooks": [
                            webhook_entry(
                                "validation.gatekeeper.sh", gatekeeper_url, ca, NS_GATEKEEPER, mutating=False
                            )
                        ],
                    },
                )
            pids = recorded_pids(workdir)
            webhook_url = stack.webhook_urls[0]
            labgate_pids = [pids["webhook-0"], pids["opa"]]
            gpu_tenant = iter(gpu_tenants)
            current_gpu_tenant = {"name": "bench"}
            targets = [
                HttpTarget(
                    "no-op webhook (FastAPI, TLS)",
                    noop_url,
                    lambda: review(NS_LABGATE),
                    tls,
                    lambda: [pids["noop-webhook"]],
                ),
                HttpTarget(
                    "OPA alone (labgate's decision query)",
                    f"{stack.opa_url}/v1/data/labgate/admission/decision",
                    lambda: opa_input(NS_LABGATE),
                    None,
                    lambda: [pids["opa"]],
                    judge_opa,
                ),
                HttpTarget(
                    "Gatekeeper (7 constraints)",
                    gatekeeper_url,
                    lambda: review(NS_LABGATE),
                    tls,
                    lambda: [pids["gatekeeper"]],
                ),
                HttpTarget(
                    "labgate /validate, CPU pod",
                    f"{webhook_url}/validate",
                    lambda: review(NS_LABGATE),
                    tls,
                    lambda: labgate_pids,
                ),
                HttpTarget(
                    "labgate /validate, CPU pod, no two alike",
                    f"{webhook_url}/validate",
                    lambda: review(NS_LABGATE, distinct=True),
                    tls,
                    lambda: labgate_pids,
                ),
                HttpTarget(
                    "labgate /mutate, CPU pod",
                    f"{webhook_url}/mutate",
                    lambda: review(NS_LABGATE),
                    tls,
                    lambda: labgate_pids,
                ),
                HttpTarget(
                    "labgate /validate, GPU pod (ledger)",
                    f"{webhook_url}/validate",
                    lambda: review(current_gpu_tenant["name"], gpus=1),
                    tls,
                    lambda: labgate_pids,
                ),
            ]
            if gatekeeper is None:
                targets = [t for t in targets if not t.name.startswith("Gatekeeper")]
            if args.targets:
                words = args.targets.split(",")
                targets = [t for t in targets if any(w in t.name for w in words)]
            facts["rss_start"] = {
                "labgate webhook": rss_mb([pids["webhook-0"]]),
                "OPA": rss_mb([pids["opa"]]),
            }
            # Warm up every target (connections, compiled plans, caches).
            for target in targets:
                attack(
                    target.url,
                    [json.dumps(target.make()).encode() for _ in range(200)],
                    rate=100,
                    seconds=2,
                    tls=target.tls,
                    judge=target.judge,
                    workdir=workdir,
                )
            for round_index in range(args.rounds):
                for rate in args.rates:
                    for target in targets:
                        if target.name.startswith("labgate /validate, GPU"):
                            current_gpu_tenant["name"] = next(gpu_tenant)  # a fresh, empty ledger
                        count = int(rate * args.seconds)
                        bodies = [json.dumps(target.make()).encode() for _ in range(count)]
                        target_pids = target.pids()
                        profile: tuple[subprocess.Popen[bytes], Path] | None = None
                        if (
                            args.profile
                            and round_index == 0
                            and rate == args.profile_rate
                            and target.name.startswith("labgate")
                        ):
                            args.profile.mkdir(parents=True, exist_ok=True)
                            out = args.profile / (
                                target.name.replace(" ", "_").replace("/", "").replace(",", "") + ".txt"
                            )
                            profile = (start_profile(pids["webhook-0"], args.seconds, out), out)
                        cpu_before = cpu_seconds(target_pids)
                        result = attack(
                            target.url,
                            bodies,
                            rate=rate,
                            seconds=args.seconds,
                            tls=target.tls,
                            judge=target.judge,
                            workdir=workdir,
                        )
                        cpu = cpu_seconds(target_pids) - cpu_before
                        if profile is not None:
                            profile[0].wait(timeout=60)
                            summary = summarize_profile(profile[1])
                            profile[1].with_suffix(".summary").write_text(summary)
                            print(f"profile of {target.name} at {rate}/s:\n{summary}", file=sys.stderr)
                        row = rows.setdefault(
                            ("http", target.name, rate, ""), Row("http", target.name, rate, "")
                        )
                        row.attacks.append(result)
                        row.cpu.append(cpu / max(1, result.requests) * 1000)
                        row.rss.append(rss_mb(target_pids))
                        row.loads.append(load_average())
                        waited = wait_until_idle(target_pids)
                        print(
                            f"round {round_index + 1} {rate}/s {target.name}: p50 {result.percentile(0.5):.1f} p99 {result.percentile(0.99):.1f} ms, "
                            f"{result.answered}/{result.requests} answered, {result.overloaded} overloaded, load {row.loads[-1]}, "
                            f"RSS {row.rss[-1]:.0f} MB, idle again after {waited:.1f} s",
                            file=sys.stderr,
                        )
            wait_until_idle(labgate_pids)
            facts["exact"] = quota_exactness(stack, args, tls, webhook_url, workdir)
            if not args.skip_pods:
                facts.update(
                    pod_creation(stack, args, workdir, pids, rows, with_gatekeeper=gatekeeper is not None)
                )
            facts["rss_end"] = {
                "labgate webhook": rss_mb([pids["webhook-0"]]),
                "OPA": rss_mb([pids["opa"]]),
                **({"Gatekeeper": rss_mb([pids["gatekeeper"]])} if gatekeeper is not None else {}),
                "no-op webhook": rss_mb([pids["noop-webhook"]]),
                "reconciler": rss_mb([pids["reconciler-0"]]),
            }
            # Whether what the overload took is given back: the same processes a minute later, idle.
            time.sleep(60)
            facts["rss_minute_later"] = {
                "labgate webhook": rss_mb([pids["webhook-0"]]),
                "OPA": rss_mb([pids["opa"]]),
            }
    facts["loads"].append(load_average())
    facts["seconds"] = time.monotonic() - run_started
    versions = pinned_versions()
    facts.update(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        cpu=f"{os.cpu_count()} cores",
        python=platform.python_version(),
        kubernetes=versions["KUBERNETES_VERSION"],
        opa=versions["OPA_VERSION"],
        gatekeeper=versions["GATEKEEPER_VERSION"],
        vegeta=versions["VEGETA_VERSION"],
    )
    return list(rows.values()), facts


def quota_exactness(
    stack: LabgateStack, args: argparse.Namespace, tls: Tls, webhook_url: str, workdir: Path
) -> dict[str, Any]:
    """More one-GPU pods than the tenant's quota, at the top rate: exactly the quota is admitted, and
    the ledger holds exactly that."""
    count = args.exact_quota * 3 // 2
    rate = max(args.rates[:-1] or args.rates)
    bodies = [json.dumps(review("exact", gpus=1)).encode() for _ in range(count)]
    result = attack(
        f"{webhook_url}/validate",
        bodies,
        rate=rate,
        seconds=count / rate,
        tls=tls,
        judge=judge_review,
        workdir=workdir,
    )
    found = stack.cluster_kubectl(
        "get", "configmap", "-n", LABGATE_NAMESPACE, "labgate-gpu-ledger.exact", "-o", "json"
    )
    # No ledger at all: nothing was admitted.
    ledger = json.loads(found.stdout) if found.returncode == 0 else {"data": {}}
    reservations = json.loads(ledger["data"].get("reservations") or "{}")
    held = sum(r["gpus"]["total"] for r in reservations.values()) + json.loads(
        ledger["data"].get("settled") or "{}"
    ).get("total", 0)
    return {
        "quota": args.exact_quota,
        "sent": count,
        "rate": rate,
        "admitted": result.admitted,
        "ledger": held,
        "p99": result.percentile(0.99),
        "failed": result.failed,
        "overloaded": result.overloaded,
    }


def apiserver_metrics(server: str, tls: Tls) -> dict[str, float]:
    """kube-apiserver's request counters: writes (by verb) so far."""
    context = ssl.create_default_context(cafile=str(tls.ca))
    assert tls.cert is not None
    assert tls.key is not None
    context.load_cert_chain(str(tls.cert), str(tls.key))
    with urllib.request.urlopen(f"{server}/metrics", context=context, timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    writes = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and any(
            f'verb="{v}"' in line for v in ("POST", "PUT", "PATCH", "DELETE", "APPLY")
        ):
            writes += float(line.rsplit(" ", 1)[1])
    return {"writes": writes}


def pod_creation(
    stack: LabgateStack,
    args: argparse.Namespace,
    workdir: Path,
    pids: dict[str, int],
    rows: dict[tuple[str, str, int, str], Row],
    *,
    with_gatekeeper: bool,
) -> dict[str, Any]:
    """Pods created through the apiserver at fixed rates, per namespace (which webhooks see them)."""
    config = yaml.safe_load(stack.admin_kubeconfig.read_text())
    user = config["users"][0]["user"]
    cert, key = workdir / "admin.crt", workdir / "admin.key"
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    key.chmod(0o600)
    ca = workdir / "apiserver-ca.crt"
    ca.write_bytes(base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]))
    tls = Tls(ca, cert, key)
    server = config["clusters"][0]["cluster"]["server"]
    control_plane = [pids["kube-apiserver"], pids["etcd"]]
    labgate = [pids["webhook-0"], pids["opa"], pids["reconciler-0"]]
    configs = [
        ("no webhook", NS_NONE),
        ("two no-op webhooks", NS_NOOP),
        ("labgate (mutate + validate)", NS_LABGATE),
        ("Gatekeeper (validate)", NS_GATEKEEPER),
    ]
    if not with_gatekeeper:
        configs = configs[:-1]
    cost: dict[str, dict[str, float]] = {}
    for round_index in range(args.pod_rounds):
        for rate in args.pod_rates:
            for gpus in (0, 1):
                for name, namespace in configs:
                    count = int(rate * args.seconds)
                    prefix = f"r{round_index}-{rate}-{'gpu' if gpus else 'cpu'}"
                    bodies = [
                        json.dumps(pod(prefix, namespace, gpus=gpus, generate=True)).encode()
                        for _ in range(count)
                    ]
                    cpu_before = cpu_seconds(control_plane)
                    mine_before = cpu_seconds(labgate)
                    writes_before = apiserver_metrics(server, tls)["writes"]
                    result = attack(
                        f"{server}/api/v1/namespaces/{namespace}/pods",
                        bodies,
                        rate=rate,
                        seconds=args.seconds,
                        tls=tls,
                        judge=judge_create,
                        workdir=workdir,
                    )
                    if gpus and namespace == NS_LABGATE:
                        wait_until(
                            lambda: settled(stack, "bench"),
                            what="labgate settled the GPU pods",
                            timeout=60,
                            interval=0.5,
                        )
                    time.sleep(1)  # the same tail for every namespace: watchers catch up
                    cpu = cpu_seconds(control_plane) - cpu_before
                    mine = cpu_seconds(labgate) - mine_before
                    writes = apiserver_metrics(server, tls)["writes"] - writes_before
                    kind = "GPU pod" if gpus else "CPU pod"
                    row = rows.setdefault(("pods", name, rate, kind), Row("pods", name, rate, kind))
                    row.attacks.append(result)
                    row.loads.append(load_average())
                    created = max(1, result.admitted)
                    row.extra.setdefault("cp_cpu", []).append(cpu / created * 1000)
                    row.extra.setdefault("writes", []).append(writes / created)
                    row.extra.setdefault("labgate_cpu", []).append(mine / created * 1000)
                    print(
                        f"pods round {round_index + 1} {rate}/s {kind} {name}: p50 {result.percentile(0.5):.1f} p99 {result.percentile(0.99):.1f} ms, "
                        f"{result.admitted}/{result.requests} created, control plane {cpu / created * 1000:.1f} s/1000, {writes / created:.2f} writes/pod, load {row.loads[-1]}",
                        file=sys.stderr,
                    )
                    time.sleep(0.5)
    return {"cost": cost}


def settled(stack: LabgateStack, tenant_name: str) -> bool:
    ledger = json.loads(
        stack.admin_kubectl(
            "get", "configmap", "-n", LABGATE_NAMESPACE, f"labgate-gpu-ledger.{tenant_name}", "-o", "json"
        )
    )
    return not json.loads(ledger["data"].get("reservations") or "{}")


# --- the report -----------------------------------------------------------------------------------


def _spread(values: list[float], fmt: str = "{:.1f}") -> str:
    if not values:
        return DASH
    low, high = min(values), max(values)
    return (
        fmt.format(low)
        if fmt.format(low) == fmt.format(high)
        else f"{fmt.format(low)}{DASH}{fmt.format(high)}"
    )


def markdown(rows: list[Row], facts: dict[str, Any], args: argparse.Namespace) -> str:
    http = [r for r in rows if r.table == "http"]
    names = list(dict.fromkeys(r.target for r in http))
    lines = [
        "| target | "
        + " | ".join(f"{rate}/s p50 / p99 ms (answered)" for rate in args.rates)
        + " | CPU s per 1,000 | RSS MB |",
        "| --- | " + " | ".join("---:" for _ in args.rates) + " | ---: | ---: |",
    ]
    for name in names:
        cells = []
        cpu: list[float] = []
        rss: list[float] = []
        for rate in args.rates:
            row = next((r for r in http if r.target == name and r.rate == rate), None)
            if row is None:
                cells.append(DASH)
                continue
            p50 = _spread([a.percentile(0.5) for a in row.attacks])
            p99 = _spread([a.percentile(0.99) for a in row.attacks])
            answered = _spread([100 * a.answered / max(1, a.requests) for a in row.attacks], "{:.0f}")
            overloaded = sum(a.overloaded for a in row.attacks)
            note = f" ({answered} %" + (f", {overloaded} overloaded" if overloaded else "") + ")"
            cells.append(f"{p50} / {p99}{note}")
            cpu += row.cpu
            rss += row.rss
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {_spread(cpu, '{:.2f}')} | {_spread(rss, '{:.0f}')} |"
        )
    text = "\n".join(lines) + "\n"
    exact = facts.get("exact")
    if exact:
        text += (
            f"\nQuota kept exact: tenant with {exact['quota']} GPUs, {exact['sent']} one-GPU pods sent at {exact['rate']}/s: "
            f"**{exact['admitted']} admitted**, the ledger holds **{exact['ledger']}** GPUs "
            f"(p99 {exact['p99']:.1f} ms, {exact['failed']} failed, {exact['overloaded']} overloaded).\n"
        )
    pods = [r for r in rows if r.table == "pods"]
    if pods:
        text += (
            "\n| pods through the apiserver | pod | "
            + " | ".join(f"{rate}/s p50 / p99 ms (created)" for rate in args.pod_rates)
            + " | control plane CPU s per 1,000 pods | API writes per pod | labgate CPU s per 1,000 pods |\n"
        )
        text += "| --- | --- | " + " | ".join("---:" for _ in args.pod_rates) + " | ---: | ---: | ---: |\n"
        for kind in ("CPU pod", "GPU pod"):
            for name in dict.fromkeys(r.target for r in pods):
                cells = []
                cp: list[float] = []
                writes: list[float] = []
                mine: list[float] = []
                for rate in args.pod_rates:
                    row = next(
                        (r for r in pods if r.target == name and r.rate == rate and r.kind == kind), None
                    )
                    if row is None:
                        cells.append(DASH)
                        continue
                    created = _spread([100 * a.admitted / max(1, a.requests) for a in row.attacks], "{:.0f}")
                    cells.append(
                        f"{_spread([a.percentile(0.5) for a in row.attacks])} / {_spread([a.percentile(0.99) for a in row.attacks])} ({created} %)"
                    )
                    cp += row.extra.get("cp_cpu", [])
                    writes += row.extra.get("writes", [])
                    mine += row.extra.get("labgate_cpu", [])
                lab = _spread(mine, "{:.1f}") if name.startswith("labgate") else DASH
                text += (
                    f"| {name} | {kind} | "
                    + " | ".join(cells)
                    + f" | {_spread(cp)} | {_spread(writes, '{:.2f}')} | {lab} |\n"
                )
    rss_end = facts.get("rss_end", {})
    text += (
        f"\nMeasured {facts['date']} on {facts['cpu']} (shared with other work; load average at start/end "
        f"{facts['loads'][0]} / {facts['loads'][-1]}, per row in the run's output), Python {facts['python']}, "
        f"Kubernetes {facts['kubernetes']}, OPA {facts['opa']}, Gatekeeper {facts['gatekeeper']}, vegeta {facts['vegeta']}; "
        f"{args.rounds} interleaved rounds of {args.seconds:g} s per rate and target (ranges are min to max over rounds), "
        f"{args.pod_rounds} round(s) of pod creation; whole run {facts['seconds'] / 60:.1f} min. "
        "CPU per 1,000 admissions counts the target's processes (labgate: webhook + OPA). RSS before the first "
        "request: "
        + ", ".join(f"{k} {v:.0f} MB" for k, v in facts.get("rss_start", {}).items())
        + "; at the end: "
        + ", ".join(f"{k} {v:.0f} MB" for k, v in rss_end.items())
        + "; a minute later, idle: "
        + ", ".join(f"{k} {v:.0f} MB" for k, v in facts.get("rss_minute_later", {}).items())
        + ".\n"
    )
    return text


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rates", type=lambda s: [int(x) for x in s.split(",")], default=[100, 200, 400, 800]
    )
    parser.add_argument("--pod-rates", type=lambda s: [int(x) for x in s.split(",")], default=[20, 50, 100])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pod-rounds", type=int, default=1)
    parser.add_argument("--exact-quota", type=int, default=1000)
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy the labgate webhook during its first round at --profile-rate into this directory",
    )
    parser.add_argument("--profile-rate", type=int, default=400)
    parser.add_argument("--without-gatekeeper", action="store_true", help="leave Gatekeeper out")
    parser.add_argument(
        "--skip-pods", action="store_true", help="direct admissions only (no pods through the apiserver)"
    )
    parser.add_argument(
        "--targets", help="only the targets whose names contain one of these comma-separated words"
    )
    parser.add_argument("--write", type=Path, help="replace the side-by-side section of this markdown file")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="labgate-side-by-side-"))
    try:
        rows, facts = run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # etcd's data and the logs: about 500 MB
    table = markdown(rows, facts, args)
    print(table)
    if args.write:
        replace_section(args.write, "side-by-side", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
