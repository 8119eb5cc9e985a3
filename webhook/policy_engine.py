"""The one door to OPA: evaluate the admission decision, and keep OPA's copy of the inventory current.

Queries go through opa-python-client's AsyncOpaClient over one aiohttp session with keep-alive
connections, its request bodies encoded with orjson (the standard library's json on the event loop
cost a fifth of the webhook's time under load), with no retries (a retry would spend the
apiserver's deadline) and a hard deadline of `timeout` seconds. Any failure becomes
PolicyEngineUnavailableError, which the webhook turns into a refusal, never an admission. The
inventory writer (threads, not the admission path) uses the synchronous OpaClient.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import requests
from opa_client import AsyncOpaClient, OpaClient
from pydantic import TypeAdapter, ValidationError

from labgate.core import json_bytes
from labgate.core.decisions import Decision, Mutation
from labgate.core.errors import LabgateError, NoDecisionError
from webhook.policy_input import PolicyBatch, PolicyInput

DECISION_PACKAGE = "labgate/admission"
DECISION_RULE = "decision"
# One decision per element of input.batch, in one evaluation (the webhook's GPU batches).
BATCH_DECISION_RULE = "decisions"
MUTATION_PACKAGE = "labgate/mutation"
# Outside data.labgate on purpose: OPA checks every write under a policy root against the
# policies (about 23 ms a write here, against 0.5 ms for a root of its own).
INVENTORY_PATH = "inventory"


class PolicyEngineUnavailableError(NoDecisionError, RuntimeError):
    """OPA could not give a decision in time (down, slow, no policy loaded, or a malformed answer)."""


def _host_port(url: str) -> tuple[str, int, bool]:
    parts = urlsplit(url)
    is_tls = parts.scheme == "https"
    return parts.hostname or "127.0.0.1", parts.port or (443 if is_tls else 80), is_tls


def _orjson_text(document: Any) -> str:
    return json_bytes.dumps(document).decode()


class _OrjsonOpaClient(AsyncOpaClient):  # type: ignore[misc]
    """AsyncOpaClient whose session encodes request bodies with orjson and keeps `connections`
    connections to OPA alive between queries."""

    def __init__(self, *, connections: int, **options: Any):
        super().__init__(**options)
        self._connections = connections

    async def _init_session(self) -> None:
        self._session = aiohttp.ClientSession(
            headers=self.headers,
            connector=aiohttp.TCPConnector(limit=self._connections, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            json_serialize=_orjson_text,
        )


class PolicyEngine:
    """Async access to the OPA server for admission decisions."""

    def __init__(self, url: str, *, timeout: float, connections: int = 32):
        host, port, is_tls = _host_port(url)
        self.timeout = timeout
        if is_tls:  # the session above has no TLS options of its own; use the library's
            self._client = AsyncOpaClient(host=host, port=port, ssl=True, retries=0, timeout=timeout)
        else:
            self._client = _OrjsonOpaClient(
                connections=connections, host=host, port=port, ssl=False, retries=0, timeout=timeout
            )
        self._opened = False

    async def _ensure_open(self) -> None:
        if not self._opened:
            await self._client.__aenter__()
            self._opened = True

    async def _query(self, policy_input: PolicyInput | PolicyBatch, package: str, rule: str | None) -> Any:
        try:
            await self._ensure_open()
            result = await asyncio.wait_for(
                self._client.query_rule(policy_input, package, rule), timeout=self.timeout
            )
        except TimeoutError as err:
            raise PolicyEngineUnavailableError(f"no answer within {self.timeout:.1f}s") from err
        except (aiohttp.ClientError, OSError, ValueError) as err:
            raise PolicyEngineUnavailableError(f"cannot reach OPA: {err}") from err
        if not isinstance(result, dict) or "result" not in result:
            raise PolicyEngineUnavailableError(f"OPA has no labgate policy loaded ({package} undefined)")
        return result["result"]

    async def decide(self, policy_input: PolicyInput) -> Decision:
        """Evaluate data.labgate.admission.decision for `policy_input`."""
        result = await self._query(policy_input, DECISION_PACKAGE, DECISION_RULE)
        try:
            return Decision.model_validate(result)
        except ValidationError as err:
            raise PolicyEngineUnavailableError(
                f"malformed decision from OPA: {err.error_count()} errors"
            ) from err

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]:
        """data.labgate.admission.decision for each of `policy_inputs`, in one evaluation."""
        result = await self._query({"batch": policy_inputs}, DECISION_PACKAGE, BATCH_DECISION_RULE)
        try:
            decisions = _DECISIONS.validate_python(result)
        except ValidationError as err:
            raise PolicyEngineUnavailableError(
                f"malformed decisions from OPA: {err.error_count()} errors"
            ) from err
        if len(decisions) != len(policy_inputs):
            raise PolicyEngineUnavailableError(
                f"OPA gave {len(decisions)} decisions for {len(policy_inputs)} requests"
            )
        return decisions

    async def mutate(self, policy_input: PolicyInput) -> Mutation:
        """Evaluate data.labgate.mutation (patch and warnings) for `policy_input`."""
        result = await self._query(policy_input, MUTATION_PACKAGE, None)
        try:
            return Mutation.model_validate(result)
        except ValidationError as err:
            raise PolicyEngineUnavailableError(
                f"malformed mutation from OPA: {err.error_count()} errors"
            ) from err

    async def is_healthy(self) -> bool:
        """True when OPA answers its health endpoint with the policies loaded."""
        try:
            await self._ensure_open()
            status = await asyncio.wait_for(self._client.check_health(), timeout=self.timeout)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False
        return bool(status)

    async def close(self) -> None:
        if self._opened:
            await self._client.close_connection()
            self._opened = False


_DECISIONS: TypeAdapter[list[Decision]] = TypeAdapter(list[Decision])


class InventoryStore:
    """Synchronous writer of data.inventory (tenants and namespaces) for the inventory threads."""

    def __init__(self, url: str, *, timeout: float = 2.0):
        host, port, is_tls = _host_port(url)
        # No retries: a failed write makes the reflector re-list, which writes everything again.
        self._client = OpaClient(host=host, port=port, ssl=is_tls, retries=0, timeout=timeout)

    def replace_all(self, inventory: dict[str, Any]) -> None:
        """Replace the whole inventory (after a list)."""
        self._client.update_or_create_data(inventory, INVENTORY_PATH)

    def put(self, collection: str, name: str, document: dict[str, Any]) -> None:
        """Create or replace one tenant or namespace."""
        self._client.update_or_create_data(document, f"{INVENTORY_PATH}/{collection}/{name}")

    def patch(self, operations: list[dict[str, Any]]) -> None:
        """Apply a JSON Patch to the inventory (several changes in one request)."""
        self._client.patch_data(INVENTORY_PATH, operations)

    def close(self) -> None:
        self._client.close_connection()


class PolicyLoadError(LabgateError, RuntimeError):
    """OPA refused a policy module (it does not parse or compile); the message says where and why."""


def _opa_errors(body: Any) -> str:
    """`file:row: code: message` lines from an OPA error response."""
    if not isinstance(body, dict):
        return str(body)
    lines = []
    for error in body.get("errors") or []:
        location = error.get("location") or {}
        where = f"{location.get('file', '')}:{location.get('row', '?')}: " if location else ""
        lines.append(f"{where}{error.get('code', '')}: {error.get('message', '')}")
    return "; ".join(lines) or str(body.get("message") or body)


class PolicyStore:
    """Synchronous writer of policy modules and policy data into OPA (webhook.policy_sync)."""

    def __init__(self, url: str, *, timeout: float = 5.0):
        self._root = url.rstrip("/") + "/v1"
        self._timeout = timeout
        self._session = requests.Session()

    def modules(self) -> dict[str, str]:
        """id -> source text of every module OPA holds (one request; used on a first pass only)."""
        response = self._session.get(f"{self._root}/policies", timeout=self._timeout)
        response.raise_for_status()
        return {str(m["id"]): str(m.get("raw", "")) for m in response.json().get("result", [])}

    def put_module(self, module_id: str, text: str) -> None:
        """Create or replace one module; PolicyLoadError with OPA's parse or compile error."""
        response = self._session.put(
            f"{self._root}/policies/{module_id}",
            data=text.encode("utf-8"),
            headers={"Content-Type": "text/plain"},
            timeout=self._timeout,
        )
        if response.status_code != 200:
            raise PolicyLoadError(_opa_errors(response.json()))

    def delete_module(self, module_id: str) -> None:
        response = self._session.delete(f"{self._root}/policies/{module_id}", timeout=self._timeout)
        if response.status_code not in (200, 404):
            raise PolicyLoadError(_opa_errors(response.json()))

    def put_data(self, path: str, document: Any) -> None:
        """Create or replace the data document at `path` (e.g. labgate/config)."""
        response = self._session.put(f"{self._root}/data/{path}", json=document, timeout=self._timeout)
        if response.status_code not in (200, 204):
            raise PolicyLoadError(_opa_errors(response.json()))

    def get_marker(self) -> str | None:
        """The revision policy_sync recorded in OPA after its last complete load (None: OPA has none,
        e.g. it restarted)."""
        response = self._session.get(f"{self._root}/data/labgate_policy_sync/revision", timeout=self._timeout)
        response.raise_for_status()
        result = response.json().get("result")
        return result if isinstance(result, str) else None

    def close(self) -> None:
        self._session.close()
