"""The admission webhook: FastAPI app, its lifespan (OPA and Kubernetes clients) and its routes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from labgate.core.gpu_ledger import LedgerCorruptError
from labgate.core.kube import ApiException, KubeApi, api_client
from labgate.core.ledger_store import LedgerCache, LedgerStore
from labgate.core.metrics import (
    ADMISSION_OVERLOADED,
    ADMISSION_REQUESTS,
    ADMISSION_SECONDS,
    POLICY_ENGINE_ERRORS,
)
from webhook.decision_log import DecisionLog
from webhook.inventory import InventorySync, RestrictedSecrets
from webhook.overload import AdmissionGate, overloaded_response
from webhook.policy_engine import InventoryStore, PolicyEngine, PolicyEngineUnavailableError
from webhook.provenance.admission import ImageGatherer
from webhook.provenance.facts import ImageFacts
from webhook.provenance.registry import RegistryClient
from webhook.provenance.settings import get_provenance_settings
from webhook.review import AdmissionRequest, AdmissionResponse, AdmissionReview
from webhook.serving import AdmissionServer, DecisionTrace, refuse_unavailable
from webhook.settings import Settings, get_settings
from webhook.workloads import load_workload_kinds

log = logging.getLogger("labgate.webhook")


async def get_server(request: Request) -> AdmissionServer:
    # async: a plain `def` dependency runs in a worker thread, a hand-off for every request.
    server: AdmissionServer = request.app.state.server
    return server


def _review(response: AdmissionResponse) -> Response:
    """The AdmissionReview answer, encoded with orjson."""
    return Response(content=orjson.dumps(response.to_review()), media_type="application/json")


def _bad_request(reason: str) -> JSONResponse:
    return JSONResponse(status_code=400, content={"error": "malformed AdmissionReview", "reason": reason})


class _Offline:
    """Stands in for the cluster caches when the app runs without a cluster (`watch_cluster=False`)."""

    is_synced = True

    def ensure_namespace(self, name: str) -> None:
        """There is no cluster to read through to."""

    def is_known(self, name: str) -> bool:
        return True

    def tenant_of(self, namespace: str) -> str | None:
        return None

    def push_all(self) -> None:
        """Nothing to push without a cluster."""

    def tenant_spec(self, name: str) -> dict[str, Any] | None:
        return None


async def _serve(
    request: Request,
    server: AdmissionServer,
    handle: Callable[[AdmissionRequest, DecisionTrace], Awaitable[AdmissionResponse]],
    *,
    deadline: float,
    decisions: DecisionLog | None,
    recorder: Executor,
    gate: AdmissionGate,
) -> Response:
    """Parse, decide within `deadline`, count, answer; any failure refuses (never admits); beyond
    the gate's limit refuse at once as overloaded."""
    try:
        review = AdmissionReview.model_validate_json(await request.body())
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return _bad_request(f"{where}: {first['msg']}")
    webhook = request.url.path.strip("/")
    if not gate.try_enter():
        ADMISSION_OVERLOADED.labels(webhook).inc()
        refusal = overloaded_response(review.request, limit=gate.limit, rate=gate.rate())
        return _review(refusal)
    try:
        return await _decide(
            webhook=webhook,
            review=review,
            handle=handle,
            deadline=deadline,
            decisions=decisions,
            recorder=recorder,
        )
    finally:
        gate.leave()


async def _decide(
    *,
    webhook: str,
    review: AdmissionReview,
    handle: Callable[[AdmissionRequest, DecisionTrace], Awaitable[AdmissionResponse]],
    deadline: float,
    decisions: DecisionLog | None,
    recorder: Executor,
) -> Response:
    started = time.perf_counter()
    trace = DecisionTrace()
    reason = None
    try:
        response = await asyncio.wait_for(handle(review.request, trace), timeout=deadline)
    except TimeoutError:
        POLICY_ENGINE_ERRORS.labels("timeout").inc()
        log.error("no decision for %s within %.1fs", review.request.uid, deadline)
        reason = "policy-engine-unavailable"
        response = refuse_unavailable(review.request, f"no decision within {deadline:.1f}s")
    except (PolicyEngineUnavailableError, ApiException, OSError, LedgerCorruptError) as err:
        POLICY_ENGINE_ERRORS.labels("error").inc()
        log.error("no decision for %s: %s", review.request.uid, err)
        reason = "policy-engine-unavailable"
        response = refuse_unavailable(review.request, str(err))
    except Exception:  # a bug of labgate's: refuse with a message (never admit, never a bare 500)
        POLICY_ENGINE_ERRORS.labels("internal").inc()
        log.exception("no decision for %s: internal error", review.request.uid)
        reason = "policy-engine-unavailable"
        response = refuse_unavailable(review.request, "an internal error in labgate's webhook; see its log")
    elapsed = time.perf_counter() - started
    ADMISSION_SECONDS.labels(webhook).observe(elapsed)
    ADMISSION_REQUESTS.labels(
        webhook, "admitted" if response.allowed else "refused", trace.tenant or ""
    ).inc()
    # The validating webhook's verdict is the one to audit; the mutating one records patches.
    # Written by one thread, in order, off the event loop (hashing, formatting, the file's stat and write).
    if decisions is not None and (webhook == "validate" or response.patch is not None):
        recorder.submit(
            decisions.record,
            request=review.request,
            decision=trace.decision,
            tenant=trace.tenant,
            verdict="allowed" if response.allowed else "refused",
            patch_applied=response.patch is not None,
            latency_ms=elapsed * 1000,
            reason=reason,
        )
    return _review(response)


def create_app(settings: Settings | None = None, *, watch_cluster: bool = True) -> FastAPI:
    """The webhook app. `watch_cluster=False` runs without Kubernetes (no inventory, ledger or secrets)."""
    resolved = settings or get_settings()
    kinds = load_workload_kinds(resolved.workload_kinds_file)
    decisions = (
        DecisionLog(resolved.decision_log_file, stdout=resolved.decision_log_stdout)
        if resolved.decision_log_file is not None or resolved.decision_log_stdout
        else None
    )
    recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decision-log")
    gate = AdmissionGate(resolved.max_concurrent_admissions)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Blocking calls (API read-through, ledger compare-and-swap) run in threads; the default pool
        # (cores + 4) queues them behind each other when many GPU pods arrive at once.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))
        engine = PolicyEngine(resolved.opa_url, timeout=resolved.opa_timeout_seconds)
        stoppable: list[InventorySync | LedgerCache | RestrictedSecrets] = []
        provenance = get_provenance_settings()
        registry = RegistryClient(provenance)
        if watch_cluster:
            api = api_client(resolved.kubeconfig)
            kube = KubeApi(api, field_manager="labgate-webhook")
            inventory = InventorySync(
                api, InventoryStore(resolved.opa_url), platform_namespace=resolved.namespace
            )
            ledgers = LedgerCache(LedgerStore(kube, namespace=resolved.namespace))
            secrets = RestrictedSecrets(kube)
            stoppable = [inventory, ledgers, secrets]
            for part in stoppable:
                part.start()
            app.state.server = AdmissionServer(
                engine=engine,
                inventory=inventory,
                ledgers=ledgers,
                secrets=secrets,
                workload_kinds=kinds,
                images=ImageGatherer(ImageFacts(registry, provenance), kube),
                image_timeout=provenance.registry_timeout_seconds,
            )
        else:
            app.state.server = AdmissionServer(
                engine=engine, inventory=_Offline(), ledgers=None, secrets=None, workload_kinds=kinds
            )
        try:
            yield
        finally:
            for part in stoppable:
                part.stop()
            await engine.close()
            await registry.aclose()
            recorder.shutdown(wait=True)

    app = FastAPI(title="labgate admission webhook", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.post("/validate")
    async def validate(request: Request, server: Annotated[AdmissionServer, Depends(get_server)]) -> Response:
        return await _serve(
            request,
            server,
            server.validate,
            deadline=resolved.admission_deadline_seconds,
            decisions=decisions,
            recorder=recorder,
            gate=gate,
        )

    @app.post("/mutate")
    async def mutate(request: Request, server: Annotated[AdmissionServer, Depends(get_server)]) -> Response:
        return await _serve(
            request,
            server,
            server.mutate,
            deadline=resolved.admission_deadline_seconds,
            decisions=decisions,
            recorder=recorder,
            gate=gate,
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(content=generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(server: Annotated[AdmissionServer, Depends(get_server)]) -> JSONResponse:
        checks = {"opa": await server.engine.is_healthy(), **server.caches_synced}
        return JSONResponse(status_code=200 if all(checks.values()) else 503, content=checks)

    return app
