"""The admission webhook: FastAPI app, its lifespan (OPA and Kubernetes clients) and its routes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from webhook.admission import build_policy_input, build_response, engine_unavailable_response
from webhook.inventory import InventorySync
from webhook.kube import api_client
from webhook.policy_engine import Decision, InventoryStore, PolicyEngine, PolicyEngineUnavailableError
from webhook.review import AdmissionResponse, AdmissionReview
from webhook.settings import Settings, get_settings

log = logging.getLogger("labgate.webhook")


class DecisionSource(Protocol):
    """What the routes need of the policy engine (tests may override it with another real engine)."""

    async def decide(self, policy_input: dict[str, Any]) -> Decision: ...

    async def is_healthy(self) -> bool: ...


class InventoryState(Protocol):
    @property
    def is_synced(self) -> bool: ...

    def ensure_namespace(self, name: str) -> None: ...


def get_engine(request: Request) -> DecisionSource:
    engine: DecisionSource = request.app.state.engine
    return engine


def get_inventory(request: Request) -> InventoryState:
    inventory: InventoryState = request.app.state.inventory
    return inventory


def _bad_request(reason: str) -> JSONResponse:
    return JSONResponse(status_code=400, content={"error": "malformed AdmissionReview", "reason": reason})


async def _decide(
    review: AdmissionReview, engine: DecisionSource, inventory: InventoryState
) -> AdmissionResponse:
    request = review.request
    namespace = request.namespace or (request.name if request.kind.kind == "Namespace" else None)
    if namespace:
        await asyncio.to_thread(inventory.ensure_namespace, namespace)
    decision = await engine.decide(build_policy_input(request=request))
    return build_response(request=request, decision=decision)


def create_app(settings: Settings | None = None, *, watch_cluster: bool = True) -> FastAPI:
    """The webhook app. `watch_cluster=False` skips the inventory reflectors (offline use)."""
    resolved = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = PolicyEngine(resolved.opa_url, timeout=resolved.opa_timeout_seconds)
        app.state.engine = engine
        inventory: InventorySync | None = None
        if watch_cluster:
            inventory = InventorySync(api_client(resolved.kubeconfig), InventoryStore(resolved.opa_url))
            inventory.start()
        app.state.inventory = inventory or _AlwaysSynced()
        try:
            yield
        finally:
            if inventory is not None:
                inventory.stop()
            await engine.close()

    app = FastAPI(title="labgate admission webhook", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.post("/validate")
    async def validate(
        request: Request,
        engine: Annotated[DecisionSource, Depends(get_engine)],
        inventory: Annotated[InventoryState, Depends(get_inventory)],
    ) -> JSONResponse:
        body = await request.body()
        try:
            review = AdmissionReview.model_validate_json(body)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return _bad_request(f"{where}: {first['msg']}")
        try:
            response = await asyncio.wait_for(
                _decide(review, engine, inventory), timeout=resolved.admission_deadline_seconds
            )
        except TimeoutError:
            reason = f"no decision within {resolved.admission_deadline_seconds:.1f}s"
            log.error("policy engine unavailable for %s: %s", review.request.uid, reason)
            response = engine_unavailable_response(request=review.request, reason=reason)
        except (PolicyEngineUnavailableError, ApiException, OSError) as err:
            log.error("policy engine unavailable for %s: %s", review.request.uid, err)
            response = engine_unavailable_response(request=review.request, reason=str(err))
        return JSONResponse(content=response.to_review())

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(
        engine: Annotated[DecisionSource, Depends(get_engine)],
        inventory: Annotated[InventoryState, Depends(get_inventory)],
    ) -> JSONResponse:
        checks = {"opa": await engine.is_healthy(), "inventory": inventory.is_synced}
        return JSONResponse(
            status_code=200 if all(checks.values()) else 503, content=json.loads(json.dumps(checks))
        )

    return app


class _AlwaysSynced:
    is_synced = True

    def ensure_namespace(self, name: str) -> None:
        """Offline: there is no cluster to read through to."""
