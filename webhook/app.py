"""The admission webhook: FastAPI app, its lifespan (OPA and Kubernetes clients) and its routes."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from labgate.core import json_bytes
from labgate.core.errors import BadRequestError
from labgate.core.kube import KubeApi, api_client
from labgate.core.logs import FIELDS_ATTRIBUTE
from labgate.core.metrics import (
    ADMISSION_IN_FLIGHT,
    ADMISSION_OVERLOADED,
    ADMISSION_REQUESTS,
    ADMISSION_SECONDS,
    ADMISSION_WAITING,
    FACTS_AGE,
)
from labgate.gpu_accounting.ledger_store import LedgerCache, LedgerStore
from webhook import failures, refusals
from webhook.admission_gate import NO_TENANT, AdmissionGate, request_namespace
from webhook.admission_line import AdmissionLine
from webhook.claims import ClaimFacts
from webhook.decision_log import DecisionLog
from webhook.failures import Attempt
from webhook.inventory import InventorySync, PersistentVolumes, RestrictedSecrets
from webhook.opa_management import InventoryStore, PolicyStore
from webhook.pod_templates import WorkloadKind, load_workload_kinds
from webhook.policy_engine import PolicyEngine
from webhook.policy_events import PolicyEvents
from webhook.policy_reports import AdmissionReports, KubeReportStore
from webhook.policy_sync import PolicyStatus, PolicySync
from webhook.pool_nodes import PoolNodes, gpu_counting
from webhook.provenance.admission import ImageGatherer
from webhook.provenance.facts import ImageFacts
from webhook.provenance.registry import RegistryClient
from webhook.provenance.settings import ProvenanceSettings, get_provenance_settings
from webhook.review import AdmissionRequest, AdmissionResponse, parse_review
from webhook.scaled_workloads import ScaledWorkloads
from webhook.serving import AdmissionServer, DecisionTrace, InventoryState
from webhook.settings import Settings, get_settings
from webhook.usage_recount import UsageRecount

log = logging.getLogger("labgate.webhook")


async def get_server(request: Request) -> AdmissionServer:
    # async: a plain `def` dependency runs in a worker thread, a hand-off for every request.
    server: AdmissionServer = request.app.state.server
    return server


class BodyTooLargeError(BadRequestError, ValueError):
    """The request body is larger than any AdmissionReview the apiserver sends."""

    status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"request body above {limit} bytes",
            content={"error": "request body too large", "limit_bytes": limit},
        )


class BodyNotReceivedError(BadRequestError):
    """The body did not fully arrive in time after the request's head (a stalled client)."""

    status = 408


class ClientGoneError(BadRequestError):
    """The caller went away mid-body: nothing to answer (no body), nothing to log."""


# A body that has not fully arrived this long after its head is abandoned (a stalled client).
BODY_TIMEOUT_SECONDS = 10.0


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes without reading them all."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(limit)

    async def read() -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLargeError(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout=BODY_TIMEOUT_SECONDS)
    except ClientDisconnect as err:
        raise ClientGoneError("client disconnected") from err
    except TimeoutError as err:
        raise BodyNotReceivedError(
            "body not received in time", content={"error": "request body not received in time"}
        ) from err


def _http_error(err: BadRequestError) -> Response:
    """The HTTP answer to a bad request (never an AdmissionResponse)."""
    if err.content is None:
        return Response(status_code=err.status)
    return JSONResponse(status_code=err.status, content=err.content)


_PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def probes_only(app: ASGIApp) -> ASGIApp:
    """`app` with only its probe and metrics routes (GET), for the plain-HTTP port the kubelet's
    probes and Prometheus use: the admission routes are never served without a client certificate."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["method"] != "GET" or scope["path"] not in _PROBE_PATHS):
            await Response(status_code=404, content="not found")(scope, receive, send)
            return
        await app(scope, receive, send)

    return serve


Handler = Callable[[AdmissionRequest, DecisionTrace], Awaitable[AdmissionResponse]]


async def _serve(
    request: Request,
    handle: Handler,
    *,
    settings: Settings,
    decisions: DecisionLog | None,
    line: AdmissionLine,
    inventory: InventoryState,
) -> Response:
    """Parse, decide within the deadline, count, answer; any failure refuses (never admits)."""
    try:
        body = await _read_body(request, settings.max_body_bytes)
        review = parse_review(body)
    except BadRequestError as err:
        return _http_error(err)
    # The tenant's share of the gate: from the inventory's cache, never a read (an unknown
    # namespace counts as no tenant's).
    namespace = request_namespace(review.request)
    tenant = (inventory.tenant_of(namespace) if namespace else None) or NO_TENANT
    started = time.perf_counter()
    refusal = await line.enter(tenant)
    if refusal is not None:
        ADMISSION_OVERLOADED.inc()
        return JSONResponse(content=refusal.response(review.request).to_review())
    try:
        # The wait for the slot is part of the deadline: the apiserver's timeout counts it too.
        deadline = settings.admission_deadline_seconds - (time.perf_counter() - started)
        trace = DecisionTrace()
        response, reason = await _decide(
            review.request, handle, trace, settings=settings, size=len(body), deadline=deadline
        )
        _account(
            request,
            review.request,
            response,
            trace,
            elapsed=time.perf_counter() - started,
            reason=reason,
            decisions=decisions,
        )
        return Response(content=json_bytes.dumps(response.to_review()), media_type="application/json")
    finally:
        line.leave(tenant)


async def _decide(
    request: AdmissionRequest,
    handle: Handler,
    trace: DecisionTrace,
    *,
    settings: Settings,
    size: int,
    deadline: float,
) -> tuple[AdmissionResponse, str | None]:
    """The answer to `request` within the deadline, and the reason of a refusal of labgate's own
    (its rule id; None for the policies' answer). A failure refuses (webhook/failures.py)."""
    if size > settings.max_request_bytes:
        refusal = refusals.request_too_large(
            kind=request.kind.kind,
            name=refusals.request_name(request),
            size=size,
            limit=settings.max_request_bytes,
            deadline=None,
        )
        return refusal.response(request), refusal.rule
    try:
        return await asyncio.wait_for(handle(request, trace), timeout=deadline), None
    except Exception as err:  # never admit, never a bare 500
        attempt = Attempt(
            request=request,
            size=size,
            deadline=deadline,
            complex_request_bytes=settings.complex_request_bytes,
        )
        refusal = failures.refuse(err, attempt)
        return refusal.response(request), refusal.rule


def _account(
    request: Request,
    admission: AdmissionRequest,
    response: AdmissionResponse,
    trace: DecisionTrace,
    *,
    elapsed: float,
    reason: str | None,
    decisions: DecisionLog | None,
) -> None:
    """Metrics, the decision record and the PolicyReport findings of one answer."""
    webhook = request.url.path.strip("/")
    ADMISSION_SECONDS.labels(webhook).observe(elapsed)
    ADMISSION_REQUESTS.labels(
        webhook, "admitted" if response.allowed else "refused", trace.tenant or ""
    ).inc()
    if not response.allowed:
        _log_refusal(webhook, admission, trace, elapsed=elapsed, reason=reason)
    # The validating webhook's verdict is the one to audit; the mutating one records patches.
    # Written by the log's one thread, in order, off the event loop.
    if decisions is not None and (webhook == "validate" or response.patch is not None):
        decisions.submit(
            request=admission,
            decision=trace.decision,
            tenant=trace.tenant,
            verdict="allowed" if response.allowed else "refused",
            patch_applied=response.patch is not None,
            latency_ms=elapsed * 1000,
            reason=reason,
        )
    # Warn and dry-run findings of an admitted object, for its namespace's PolicyReport: kept in
    # memory here, written by a thread (webhook/policy_reports.py); never raises, never waits.
    reports: AdmissionReports | None = getattr(request.app.state, "reports", None)
    if reports is not None and webhook == "validate" and response.allowed:
        reports.record(admission, trace.decision, trace.tenant)


def refusal_fields(
    webhook: str, admission: AdmissionRequest, trace: DecisionTrace, *, elapsed: float, reason: str | None
) -> dict[str, object]:
    """The fields of a refusal's log line: which request, whose, which rules, how long it took."""
    rules = [finding.rule for finding in trace.decision.denials] if trace.decision is not None else []
    return {
        "webhook": webhook,
        "uid": admission.uid,
        "tenant": trace.tenant or "",
        "namespace": admission.namespace or "",
        "kind": admission.kind.kind,
        "operation": admission.operation,
        "user": admission.user_info.username,
        "rules": rules if rules else [reason] if reason else [],
        "decision_ms": round(elapsed * 1000, 2),
    }


def _log_refusal(
    webhook: str, admission: AdmissionRequest, trace: DecisionTrace, *, elapsed: float, reason: str | None
) -> None:
    """One structured line per refusal (docs/operations.md, Logs), for a pipeline that selects
    refusals by tenant or rule."""
    fields = refusal_fields(webhook, admission, trace, elapsed=elapsed, reason=reason)
    log.info("refused %s %s", fields["kind"], fields["uid"], extra={FIELDS_ATTRIBUTE: fields})


def _start_policy_sync(
    settings: Settings, on_change: Callable[[PolicyStatus, PolicyStatus], None] | None = None
) -> PolicySync | None:
    """Keep OPA's policies equal to LABGATE_POLICY_DIR (webhook/policy_sync.py), when it is set;
    `on_change` hears of a refused policy and its fix (an Event, webhook/policy_events.py)."""
    if settings.policy_dir is None:
        return None
    policies = PolicySync(
        settings.policy_dir,
        PolicyStore(settings.opa_url),
        interval=settings.policy_poll_seconds,
        on_change=on_change,
    )
    policies.start()
    return policies


Watched = InventorySync | LedgerCache | RestrictedSecrets


def cluster_server(
    resolved: Settings,
    engine: PolicyEngine,
    registry: RegistryClient,
    provenance: ProvenanceSettings,
    kinds: tuple[WorkloadKind, ...],
) -> tuple[AdmissionServer, list[Watched]]:
    """The admission server with its watch-fed facts started (inventory, ledgers, secrets), and what
    to stop with the app. A dependency of the app: the lifespan takes it from `app.dependency_overrides`
    when one is there, so tests give a server without a cluster (FastAPI's way; no stand-in here)."""
    api = api_client(resolved.kubeconfig)
    kube = KubeApi(api, field_manager="labgate-webhook")
    watch_timeout = resolved.watch_timeout_seconds
    inventory = InventorySync(
        api,
        InventoryStore(resolved.opa_url),
        platform_namespace=resolved.namespace,
        watch_timeout_seconds=watch_timeout,
        kueue=resolved.kueue,
    )
    ledgers = LedgerCache(
        LedgerStore(kube, namespace=resolved.namespace), watch_timeout_seconds=watch_timeout
    )
    secrets = RestrictedSecrets(kube, watch_timeout_seconds=watch_timeout)
    stoppable: list[Watched] = [inventory, ledgers, secrets]
    for part in stoppable:
        part.start()
    parts = tuple(stoppable)
    # Which resources are GPUs: the policies' config, read once at start (defaults without a dir).
    counting = gpu_counting(resolved.policy_dir)

    def tenant_namespaces(tenant: str) -> list[str]:
        return inventory.snapshot.namespaces_of(tenant)

    server = AdmissionServer(
        engine=engine,
        inventory=inventory,
        ledgers=ledgers,
        secrets=secrets,
        workload_kinds=kinds,
        images=ImageGatherer(ImageFacts(registry, provenance), kube),
        image_timeout=provenance.registry_timeout_seconds,
        reservation_seconds=resolved.reservation_seconds,
        facts_age=lambda: max(part.age() for part in parts),
        facts_max_age=resolved.facts_max_age_seconds,
        volumes=PersistentVolumes(kube),
        claims=ClaimFacts(kube),
        decision_reuse_seconds=resolved.decision_reuse_seconds,
        facts_version=lambda: inventory.writes,
        max_references=resolved.max_references_per_request,
        pool_nodes=PoolNodes(kube, counting),
        # Before a gpu-quota refusal stands: the usage counted from the live pods.
        usage_recount=UsageRecount(
            kube, ledgers.fresh, tenant_namespaces, counting, cached_ledger=ledgers.cached
        ),
        scaled_workloads=ScaledWorkloads(kube),
    )
    FACTS_AGE.set_function(lambda: max(part.age() for part in parts))
    return server, stoppable


def policy_reporting(settings: Settings) -> tuple[PolicyEvents | None, AdmissionReports | None]:
    """The Events about the policies and the PolicyReports of admitted objects' findings. They go
    through a Kubernetes client of their own: their writes never queue in front of, or share a
    connection with, what an admission reads. A dependency of the app, like `cluster_server`
    (tests without a cluster override it)."""
    kube = KubeApi(api_client(settings.kubeconfig), field_manager="labgate-webhook")
    events = PolicyEvents(
        kube, namespace=settings.namespace, configmap=settings.policy_configmap, replica=socket.gethostname()
    )
    if not settings.policy_reports:
        return events, None
    reports = AdmissionReports(
        KubeReportStore(kube),
        interval=settings.policy_report_interval_seconds,
        max_pending=settings.policy_report_max_pending,
    )
    reports.start()
    return events, reports


def _open_decision_log(settings: Settings) -> DecisionLog | None:
    if settings.decision_log_file is None and not settings.decision_log_stdout:
        return None
    return DecisionLog(settings.decision_log_file, stdout=settings.decision_log_stdout)


@dataclass
class _Running:
    """What one run of the app owns, stopped in reverse when it ends."""

    engine: PolicyEngine
    registry: RegistryClient
    decisions: DecisionLog | None
    policies: PolicySync | None
    reports: AdmissionReports | None
    watched: list[Watched]

    async def stop(self) -> None:
        for part in self.watched:
            part.stop()
        if self.policies is not None:
            self.policies.stop()
        if self.reports is not None:
            self.reports.stop()
        await self.engine.close()
        await self.registry.aclose()
        if self.decisions is not None:
            self.decisions.close()


def _start(app: FastAPI, resolved: Settings, kinds: tuple[WorkloadKind, ...]) -> _Running:
    """The app's clients, caches and writers, started; the server in `app.state`."""
    # Blocking calls (API read-through) run in threads; the default pool (cores + 4) queues them
    # behind each other when many pods arrive at once. Ledger writes have threads of their own.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))
    # One decision log (and its writer thread) per run of the app: a stopped one takes no records.
    app.state.decisions = decisions = _open_decision_log(resolved)
    engine = PolicyEngine(resolved.opa_url, timeout=resolved.opa_timeout_seconds)
    reporting: Callable[..., tuple[PolicyEvents | None, AdmissionReports | None]] = (
        app.dependency_overrides.get(policy_reporting, policy_reporting)
    )
    events, reports = reporting(resolved)
    app.state.reports = reports
    app.state.policies = policies = _start_policy_sync(resolved, on_change=events)
    provenance = get_provenance_settings()
    registry = RegistryClient(provenance)
    build: Callable[..., tuple[AdmissionServer, list[Watched]]] = app.dependency_overrides.get(
        cluster_server, cluster_server
    )
    app.state.server, watched = build(resolved, engine, registry, provenance, kinds)
    if policies is not None:
        # A reused decision is one of the policies OPA serves now (webhook/decision_reuse.py).
        facts = app.state.server.facts_version
        app.state.server.facts_version = lambda: (
            facts() if facts is not None else None,
            policies.status.revision,
            policies.status.attempted,
        )
    return _Running(engine, registry, decisions, policies, reports, watched)


def _add_admission_routes(app: FastAPI, resolved: Settings) -> None:
    gate = AdmissionGate(
        resolved.max_in_flight,
        tenant_limit=resolved.max_in_flight_per_tenant,
        max_waiting=resolved.max_waiting_admissions,
    )
    line = AdmissionLine(gate, max_wait_seconds=resolved.max_admission_wait_seconds)
    # Read at scrape time: nothing to count on the request path.
    ADMISSION_IN_FLIGHT.set_function(lambda: gate.in_flight)
    ADMISSION_WAITING.set_function(lambda: gate.waiting_count)

    @app.post("/validate")
    async def validate(request: Request, server: Annotated[AdmissionServer, Depends(get_server)]) -> Response:
        decisions = request.app.state.decisions
        return await _serve(
            request,
            server.validate,
            settings=resolved,
            decisions=decisions,
            line=line,
            inventory=server.inventory,
        )

    @app.post("/mutate")
    async def mutate(request: Request, server: Annotated[AdmissionServer, Depends(get_server)]) -> Response:
        decisions = request.app.state.decisions
        return await _serve(
            request,
            server.mutate,
            settings=resolved,
            decisions=decisions,
            line=line,
            inventory=server.inventory,
        )


def _add_probe_routes(app: FastAPI) -> None:
    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(content=generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(
        request: Request, server: Annotated[AdmissionServer, Depends(get_server)]
    ) -> JSONResponse:
        checks = {"opa": await server.engine.is_healthy(), **server.caches_synced}
        content: dict[str, Any] = dict(checks)
        policies: PolicySync | None = request.app.state.policies
        if policies is not None:
            # Ready once a complete policy set is loaded; a later broken edit keeps the previous
            # policies serving (still ready), and shows here with its error.
            checks["policies"] = policies.status.revision is not None
            content["policies"] = checks["policies"]
            content["policy"] = policies.status.as_dict()
        return JSONResponse(status_code=200 if all(checks.values()) else 503, content=content)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The webhook app; its lifespan owns the OPA and Kubernetes clients (see `cluster_server` and
    `policy_reporting`, which tests replace through `app.dependency_overrides`)."""
    resolved = settings or get_settings()
    kinds = load_workload_kinds(resolved.workload_kinds_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        running = _start(app, resolved, kinds)
        try:
            yield
        finally:
            await running.stop()

    app = FastAPI(title="labgate admission webhook", lifespan=lifespan, docs_url=None, redoc_url=None)
    _add_admission_routes(app, resolved)
    _add_probe_routes(app)
    return app
