"""The admission webhook: FastAPI app, its lifespan (OPA and Kubernetes clients) and its routes."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from labgate.core import json_bytes
from labgate.core.kube import ApiException, KubeApi, api_client
from labgate.core.metrics import (
    ADMISSION_OVERLOADED,
    ADMISSION_REQUESTS,
    ADMISSION_SECONDS,
    FACTS_AGE,
    POLICY_ENGINE_ERRORS,
)
from labgate.gpu_accounting.ledger import LedgerCorruptError
from labgate.gpu_accounting.ledger_store import LedgerCache, LedgerStore
from webhook import refusals
from webhook.claims import ClaimFacts
from webhook.decision_log import DecisionLog
from webhook.inventory import InventorySync, PersistentVolumes, RestrictedSecrets
from webhook.policy_engine import InventoryStore, PolicyEngine, PolicyEngineUnavailableError, PolicyStore
from webhook.policy_events import PolicyEvents
from webhook.policy_reports import AdmissionReports, KubeReportStore
from webhook.policy_sync import PolicyStatus, PolicySync
from webhook.provenance.admission import ImageGatherer
from webhook.provenance.facts import ImageFacts
from webhook.provenance.registry import RegistryClient
from webhook.provenance.settings import ProvenanceSettings, get_provenance_settings
from webhook.review import AdmissionRequest, AdmissionResponse, AdmissionReview
from webhook.serving import AdmissionServer, DecisionTrace
from webhook.settings import Settings, get_settings
from webhook.workloads import WorkloadKind, load_workload_kinds

log = logging.getLogger("labgate.webhook")


async def get_server(request: Request) -> AdmissionServer:
    # async: a plain `def` dependency runs in a worker thread, a hand-off for every request.
    server: AdmissionServer = request.app.state.server
    return server


def _bad_request(reason: str) -> JSONResponse:
    return JSONResponse(status_code=400, content={"error": "malformed AdmissionReview", "reason": reason})


class BodyTooLargeError(ValueError):
    """The request body is larger than any AdmissionReview the apiserver sends."""


# A body that has not fully arrived this long after its head is abandoned (a stalled client).
BODY_TIMEOUT_SECONDS = 10.0


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes without reading them all."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError

    async def read() -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLargeError
            chunks.append(chunk)
        return b"".join(chunks)

    return await asyncio.wait_for(read(), timeout=BODY_TIMEOUT_SECONDS)


class AdmissionGate:
    """Bounds the admission requests one replica decides at once. Past the bound a request is
    refused at once, with the rate, rather than queued until the apiserver's timeout: latency stays
    flat under overload and the apiserver's other replicas (or the client's retry) take the rest."""

    RATE_WINDOW_SECONDS = 5.0

    def __init__(self, limit: int):
        self.limit = limit
        self.in_flight = 0
        self._arrivals: deque[float] = deque()  # monotonic times of the last few seconds' requests

    def rate(self) -> float:
        """Admission requests per second over the last few seconds."""
        horizon = time.monotonic() - self.RATE_WINDOW_SECONDS
        while self._arrivals and self._arrivals[0] < horizon:
            self._arrivals.popleft()
        return len(self._arrivals) / self.RATE_WINDOW_SECONDS

    def arrive(self) -> bool:
        """Count one request in; False when it must be refused (the bound is reached)."""
        self._arrivals.append(time.monotonic())
        self.rate()  # drops arrivals older than the window
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1

    def refusal(self, request: AdmissionRequest) -> AdmissionResponse:
        return refusals.overloaded(in_flight=self.in_flight, rate=self.rate()).response(request)


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


async def _serve(
    request: Request,
    server: AdmissionServer,
    handle: Callable[[AdmissionRequest, DecisionTrace], Awaitable[AdmissionResponse]],
    *,
    settings: Settings,
    decisions: DecisionLog | None,
    gate: AdmissionGate,
) -> Response:
    """Parse, decide within the deadline, count, answer; any failure refuses (never admits)."""
    max_body_bytes = settings.max_body_bytes
    try:
        body = await _read_body(request, max_body_bytes)
        review = AdmissionReview.model_validate_json(body)
    except BodyTooLargeError:
        return JSONResponse(
            status_code=413,
            content={"error": "request body too large", "limit_bytes": max_body_bytes},
        )
    except ClientDisconnect:  # the caller went away mid-body: nothing to answer, nothing to log
        return Response(status_code=400)
    except TimeoutError:
        return JSONResponse(status_code=408, content={"error": "request body not received in time"})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return _bad_request(f"{where}: {first['msg']}")
    if not gate.arrive():
        ADMISSION_OVERLOADED.inc()
        return JSONResponse(content=gate.refusal(review.request).to_review())
    try:
        return await _decide(
            request,
            review,
            handle,
            settings=settings,
            size=len(body),
            decisions=decisions,
        )
    finally:
        gate.leave()


async def _decide(
    request: Request,
    review: AdmissionReview,
    handle: Callable[[AdmissionRequest, DecisionTrace], Awaitable[AdmissionResponse]],
    *,
    settings: Settings,
    size: int,
    decisions: DecisionLog | None,
) -> Response:
    deadline = settings.admission_deadline_seconds
    started = time.perf_counter()
    trace = DecisionTrace()
    reason = None
    try:
        if size > settings.max_request_bytes:
            reason = "request-too-large"
            response = refusals.request_too_large(
                kind=review.request.kind.kind,
                name=refusals.request_name(review.request),
                size=size,
                limit=settings.max_request_bytes,
                deadline=None,
            ).response(review.request)
        else:
            response = await asyncio.wait_for(handle(review.request, trace), timeout=deadline)
    except TimeoutError:
        POLICY_ENGINE_ERRORS.labels("timeout").inc()
        log.error("no decision for %s (%d bytes) within %.1fs", review.request.uid, size, deadline)
        if size >= settings.complex_request_bytes:
            # A large request that runs out of time would run out again: say so, not "retry".
            reason = "request-too-large"
            response = refusals.request_too_large(
                kind=review.request.kind.kind,
                name=refusals.request_name(review.request),
                size=size,
                limit=settings.complex_request_bytes,
                deadline=deadline,
            ).response(review.request)
        else:
            reason = "policy-engine-unavailable"
            response = refusals.engine_unavailable(f"no decision within {deadline:.1f}s").response(
                review.request
            )
    except (PolicyEngineUnavailableError, ApiException, OSError, LedgerCorruptError) as err:
        POLICY_ENGINE_ERRORS.labels("error").inc()
        log.error("no decision for %s: %s", review.request.uid, err)
        reason = "policy-engine-unavailable"
        response = refusals.engine_unavailable(str(err)).response(review.request)
    except Exception:  # a bug of labgate's: refuse with a message (never admit, never a bare 500)
        POLICY_ENGINE_ERRORS.labels("internal").inc()
        log.exception("no decision for %s: internal error", review.request.uid)
        reason = "policy-engine-unavailable"
        response = refusals.engine_unavailable(
            "an internal error in labgate's webhook; see its log"
        ).response(review.request)
    elapsed = time.perf_counter() - started
    webhook = request.url.path.strip("/")
    ADMISSION_SECONDS.labels(webhook).observe(elapsed)
    ADMISSION_REQUESTS.labels(
        webhook, "admitted" if response.allowed else "refused", trace.tenant or ""
    ).inc()
    # The validating webhook's verdict is the one to audit; the mutating one records patches.
    # Written by the log's one thread, in order, off the event loop.
    if decisions is not None and (webhook == "validate" or response.patch is not None):
        decisions.submit(
            request=review.request,
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
        reports.record(review.request, trace.decision, trace.tenant)
    return Response(content=json_bytes.dumps(response.to_review()), media_type="application/json")


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
    )
    ledgers = LedgerCache(
        LedgerStore(kube, namespace=resolved.namespace), watch_timeout_seconds=watch_timeout
    )
    secrets = RestrictedSecrets(kube, watch_timeout_seconds=watch_timeout)
    stoppable: list[Watched] = [inventory, ledgers, secrets]
    for part in stoppable:
        part.start()
    parts = tuple(stoppable)
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


def create_app(settings: Settings | None = None) -> FastAPI:
    """The webhook app; its lifespan owns the OPA and Kubernetes clients (see `cluster_server` and
    `policy_reporting`, which tests replace through `app.dependency_overrides`)."""
    resolved = settings or get_settings()
    kinds = load_workload_kinds(resolved.workload_kinds_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # One decision log (and its writer thread) per run of the app: a stopped one takes no records.
        decisions = (
            DecisionLog(resolved.decision_log_file, stdout=resolved.decision_log_stdout)
            if resolved.decision_log_file is not None or resolved.decision_log_stdout
            else None
        )
        app.state.decisions = decisions
        # Blocking calls (API read-through, ledger compare-and-swap) run in threads; the default pool
        # (cores + 4) queues them behind each other when many GPU pods arrive at once.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))
        engine = PolicyEngine(resolved.opa_url, timeout=resolved.opa_timeout_seconds)
        reporting: Callable[..., tuple[PolicyEvents | None, AdmissionReports | None]] = (
            app.dependency_overrides.get(policy_reporting, policy_reporting)
        )
        events, reports = reporting(resolved)
        app.state.reports = reports
        policies = _start_policy_sync(resolved, on_change=events)
        app.state.policies = policies
        provenance = get_provenance_settings()
        registry = RegistryClient(provenance)
        build: Callable[..., tuple[AdmissionServer, list[Watched]]] = app.dependency_overrides.get(
            cluster_server, cluster_server
        )
        stoppable: list[Watched] = []
        app.state.server, stoppable = build(resolved, engine, registry, provenance, kinds)
        if policies is not None:
            # A reused decision is one of the policies OPA serves now (webhook/decision_reuse.py).
            facts = app.state.server.facts_version
            app.state.server.facts_version = lambda: (
                facts() if facts is not None else None,
                policies.status.revision,
                policies.status.attempted,
            )
        try:
            yield
        finally:
            for part in stoppable:
                part.stop()
            if policies is not None:
                policies.stop()
            if reports is not None:
                reports.stop()
            await engine.close()
            await registry.aclose()
            if decisions is not None:
                decisions.close()

    app = FastAPI(title="labgate admission webhook", lifespan=lifespan, docs_url=None, redoc_url=None)
    gate = AdmissionGate(resolved.max_in_flight)

    @app.post("/validate")
    async def validate(request: Request, server: Annotated[AdmissionServer, Depends(get_server)]) -> Response:
        return await _serve(
            request,
            server,
            server.validate,
            settings=resolved,
            decisions=request.app.state.decisions,
            gate=gate,
        )

    @app.post("/mutate")
    async def mutate(request: Request, server: Annotated[AdmissionServer, Depends(get_server)]) -> Response:
        return await _serve(
            request,
            server,
            server.mutate,
            settings=resolved,
            decisions=request.app.state.decisions,
            gate=gate,
        )

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

    return app
