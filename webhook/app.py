"""The admission webhook: FastAPI app, its routes, and its lifespan, which builds, starts and stops one
replica (webhook/replica.py: the OPA and Kubernetes clients, the caches, the admission server)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from labgate.core import json_bytes
from labgate.core.errors import BadRequestError
from labgate.core.logs import FIELDS_ATTRIBUTE
from labgate.core.metrics import (
    ADMISSION_IN_FLIGHT,
    ADMISSION_REQUESTS,
    ADMISSION_SECONDS,
    ADMISSION_WAITING,
)
from webhook import failures, refusals
from webhook.admission_gate import NO_TENANT, AdmissionGate, request_namespace
from webhook.admission_line import AdmissionLine
from webhook.failures import Attempt
from webhook.memory_return import returning_memory
from webhook.pod_templates import WorkloadKind, load_workload_kinds
from webhook.replica import Replica, build_replica
from webhook.review import AdmissionRequest, parse_review
from webhook.serving import AdmissionServer, Answer
from webhook.settings import Settings, get_settings

# The refusal line names this logger (webhook.app): docs/operations.md and tests/unit/admission/test_app.py.
log = logging.getLogger(__name__)


# FastAPI's native OpenTelemetry, off: labgate exports none (its metrics are Prometheus', its record
# of decisions the decision log), and while on it looks up the global tracer, meter and logger
# providers on every request, about 5 % of the event loop's CPU in a Job launch.
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


async def get_replica(request: Request) -> Replica:
    # async: a plain `def` dependency runs in a worker thread, a hand-off for every request.
    replica: Replica = request.app.state.replica
    return replica


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


Handler = Callable[[AdmissionRequest], Awaitable[Answer]]


async def _serve(
    request: Request, handle: Handler, *, settings: Settings, replica: Replica, line: AdmissionLine
) -> Response:
    """Parse, decide within the deadline, count, answer; any failure refuses (never admits)."""
    try:
        body = await _read_body(request, settings.max_body_bytes)
        admission = parse_review(body)
    except BadRequestError as err:
        return _http_error(err)
    # The tenant's share of the gate: from the inventory's cache, never a read (an unknown
    # namespace counts as no tenant's).
    namespace = request_namespace(admission)
    tenant = (replica.server.inventory.tenant_of(namespace) if namespace else None) or NO_TENANT
    started = time.perf_counter()
    refusal = await line.enter(tenant)
    if refusal is not None:
        return JSONResponse(content=refusal.response(admission).to_review())
    try:
        # The wait for the slot is part of the deadline: the apiserver's timeout counts it too.
        deadline = settings.admission_deadline_seconds - (time.perf_counter() - started)
        answer, reason = await _decide(
            admission,
            handle,
            settings=settings,
            size=len(body),
            deadline=deadline,
            tenant=None if tenant == NO_TENANT else tenant,
        )
        _account(
            request,
            admission,
            answer,
            elapsed=time.perf_counter() - started,
            reason=reason,
            replica=replica,
        )
        content = json_bytes.dumps(answer.response.to_review())
        return Response(content=content, media_type="application/json")
    finally:
        line.leave(tenant)


async def _decide(
    request: AdmissionRequest,
    handle: Handler,
    *,
    settings: Settings,
    size: int,
    deadline: float,
    tenant: str | None,
) -> tuple[Answer, str | None]:
    """The answer to `request` within the deadline, and the reason of a refusal of labgate's own
    (its rule id; None for the policies' answer). A failure refuses (webhook/failures.py), under
    `tenant`, the one the gate counted it for (the failed decision returned none)."""
    if size > settings.max_request_bytes:
        refusal = refusals.request_too_large(
            kind=request.kind.kind,
            name=refusals.request_name(request),
            size=size,
            limit=settings.max_request_bytes,
            deadline=None,
        )
        return Answer(refusal.response(request)), refusal.rule
    try:
        return await asyncio.wait_for(handle(request), timeout=deadline), None
    except Exception as err:  # never admit, never a bare 500
        attempt = Attempt(
            request=request,
            size=size,
            deadline=deadline,
            complex_request_bytes=settings.complex_request_bytes,
        )
        refusal = failures.refuse(err, attempt)
        return Answer(refusal.response(request), tenant), refusal.rule


def _account(
    request: Request,
    admission: AdmissionRequest,
    answer: Answer,
    *,
    elapsed: float,
    reason: str | None,
    replica: Replica,
) -> None:
    """Metrics, the decision record and the PolicyReport findings of one answer."""
    webhook = request.url.path.strip("/")
    response = answer.response
    ADMISSION_SECONDS.labels(webhook).observe(elapsed)
    ADMISSION_REQUESTS.labels(
        webhook, "admitted" if response.allowed else "refused", answer.tenant or ""
    ).inc()
    if not response.allowed:
        _log_refusal(webhook, admission, answer, elapsed=elapsed, reason=reason)
    # The validating webhook's verdict is the one to audit; the mutating one records patches.
    # Written by the log's one thread, in order, off the event loop.
    decisions = replica.decisions
    if decisions is not None and (webhook == "validate" or response.patch is not None):
        decisions.submit(
            request=admission,
            decision=answer.decision,
            tenant=answer.tenant,
            verdict="allowed" if response.allowed else "refused",
            patch_applied=response.patch is not None,
            latency_ms=elapsed * 1000,
            reason=reason,
        )
    # Warn and dry-run findings of an admitted object, for its namespace's PolicyReport: kept in
    # memory here, written by a thread (webhook/policy_reports.py); never raises, never waits.
    reports = replica.reports
    if reports is not None and webhook == "validate" and response.allowed:
        reports.record(admission, answer.decision, answer.tenant)


def refusal_fields(
    webhook: str, admission: AdmissionRequest, answer: Answer, *, elapsed: float, reason: str | None
) -> dict[str, object]:
    """The fields of a refusal's log line: which request, whose, which rules, how long it took."""
    decision = answer.decision
    rules = [finding.rule for finding in decision.denials] if decision is not None else []
    return {
        "webhook": webhook,
        "uid": admission.uid,
        "tenant": answer.tenant or "",
        "namespace": admission.namespace or "",
        "kind": admission.kind.kind,
        "operation": admission.operation,
        "user": admission.user_info.username,
        "rules": rules if rules else [reason] if reason else [],
        "decision_ms": round(elapsed * 1000, 2),
    }


def _log_refusal(
    webhook: str, admission: AdmissionRequest, answer: Answer, *, elapsed: float, reason: str | None
) -> None:
    """One structured line per refusal (docs/operations.md, Logs), for a pipeline that selects
    refusals by tenant or rule."""
    fields = refusal_fields(webhook, admission, answer, elapsed=elapsed, reason=reason)
    log.info("refused %s %s", fields["kind"], fields["uid"], extra={FIELDS_ATTRIBUTE: fields})


Build = Callable[[Settings, tuple[WorkloadKind, ...]], Replica]
Webhook = Callable[[AdmissionServer, AdmissionRequest], Awaitable[Answer]]


def _admission_route(
    webhook: Webhook, settings: Settings, line: AdmissionLine
) -> Callable[[Request], Awaitable[Response]]:
    """A plain Starlette endpoint, not a FastAPI one: FastAPI's dependency solving and response
    handling cost an admission request more than the protocol's parsing does
    (docs/benchmarks.md, "Cost per pod": 81 µs a request against 32), and the route needs neither."""

    async def route(request: Request) -> Response:
        replica = await get_replica(request)
        return await _serve(
            request,
            partial(webhook, replica.server),
            settings=settings,
            replica=replica,
            line=line,
        )

    return route


def admission_gate(settings: Settings) -> AdmissionGate:
    return AdmissionGate(
        settings.max_in_flight,
        tenant_limit=settings.max_in_flight_per_tenant,
        max_waiting=settings.max_waiting_admissions,
    )


def admission_router(settings: Settings, gate: AdmissionGate) -> APIRouter:
    """/validate and /mutate: each request through the same line (of `gate`) for a slot, deadline,
    answer and accounting, to the replica's server's `validate` or `mutate`."""
    line = AdmissionLine(gate, max_wait_seconds=settings.max_admission_wait_seconds)
    # Read at scrape time: nothing to count on the request path.
    ADMISSION_IN_FLIGHT.set_function(lambda: gate.in_flight)
    ADMISSION_WAITING.set_function(lambda: gate.waiting_count)
    router = APIRouter()
    webhooks: dict[str, Webhook] = {"validate": AdmissionServer.validate, "mutate": AdmissionServer.mutate}
    for name, webhook in webhooks.items():
        router.add_route(f"/{name}", _admission_route(webhook, settings, line), methods=["POST"], name=name)
    return router


def _add_probe_routes(app: FastAPI) -> None:
    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(content=generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(replica: Annotated[Replica, Depends(get_replica)]) -> JSONResponse:
        checks = {"opa": await replica.engine.is_healthy(), **replica.server.caches_synced}
        content: dict[str, Any] = dict(checks)
        policies = replica.policies
        if policies is not None:
            # Ready once a complete policy set is loaded; a later broken edit keeps the previous
            # policies serving (still ready), and shows here with its error.
            checks["policies"] = policies.status.revision is not None
            content["policies"] = checks["policies"]
            content["policy"] = policies.status.as_dict()
        return JSONResponse(status_code=200 if all(checks.values()) else 503, content=content)


def create_app(settings: Settings | None = None, *, build: Build = build_replica) -> FastAPI:
    """The webhook app. Each run of its lifespan builds one replica (`build`: webhook/replica.py's
    `build_replica`; tests give a builder of their own), starts it, and stops it at the end."""
    resolved = settings or get_settings()
    kinds = load_workload_kinds(resolved.workload_kinds_file)
    gate = admission_gate(resolved)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.replica = replica = build(resolved, kinds)
        try:
            replica.start()
            async with returning_memory(lambda: gate.arrived, window_seconds=resolved.memory_return_seconds):
                yield
        finally:
            await replica.stop()

    app = FastAPI(
        title="labgate admission webhook",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        telemetry=NO_TELEMETRY,
    )
    app.include_router(admission_router(resolved, gate))
    _add_probe_routes(app)
    return app
