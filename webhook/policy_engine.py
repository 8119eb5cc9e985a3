"""The one door to OPA: evaluate the admission decision, and keep OPA's copy of the inventory current.

Queries go over one aiohttp session with keep-alive connections to OPA's REST API, encoded and
decoded with orjson (the standard library's json on the event loop cost a fifth of the webhook's
time), with no retries (a retry would spend the apiserver's deadline) and a hard deadline of
`timeout` seconds. Any failure becomes PolicyEngineUnavailableError, which the webhook turns into
a refusal, never an admission. The inventory writer (threads, not the admission path) uses
opa-python-client.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from opa_client import OpaClient
from pydantic import TypeAdapter, ValidationError

from labgate.core.decisions import Decision, Mutation

DECISION_PATH = "labgate/admission/decision"
# One decision per element of input.batch, in one evaluation (the webhook's GPU batches).
BATCH_DECISION_PATH = "labgate/admission/decisions"
MUTATION_PATH = "labgate/mutation"
# Outside data.labgate on purpose: OPA checks every write under a policy root against the
# policies (about 23 ms a write here, against 0.5 ms for a root of its own).
INVENTORY_PATH = "inventory"


class PolicyEngineUnavailableError(RuntimeError):
    """OPA could not give a decision in time (down, slow, no policy loaded, or a malformed answer)."""


def _host_port(url: str) -> tuple[str, int, bool]:
    parts = urlsplit(url)
    is_tls = parts.scheme == "https"
    return parts.hostname or "127.0.0.1", parts.port or (443 if is_tls else 80), is_tls


class PolicyEngine:
    """Async access to the OPA server for admission decisions."""

    def __init__(self, url: str, *, timeout: float, connections: int = 32):
        self.timeout = timeout
        self._base = url.rstrip("/")
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use, inside the running loop; connections stay open between queries.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections, keepalive_timeout=60),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._session

    async def _post(self, path: str, policy_input: dict[str, Any]) -> Any:
        body = orjson.dumps({"input": policy_input})
        async with self._open().post(
            f"{self._base}/v1/data/{path}", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            response.raise_for_status()
            return orjson.loads(await response.read())

    async def _query(self, policy_input: dict[str, Any], path: str) -> Any:
        try:
            result = await asyncio.wait_for(self._post(path, policy_input), timeout=self.timeout)
        except TimeoutError as err:
            raise PolicyEngineUnavailableError(f"no answer within {self.timeout:.1f}s") from err
        except (aiohttp.ClientError, OSError, orjson.JSONDecodeError) as err:
            raise PolicyEngineUnavailableError(f"cannot reach OPA: {err}") from err
        if not isinstance(result, dict) or "result" not in result:
            raise PolicyEngineUnavailableError(f"OPA has no labgate policy loaded ({path} undefined)")
        return result["result"]

    async def decide(self, policy_input: dict[str, Any]) -> Decision:
        """Evaluate data.labgate.admission.decision for `policy_input`."""
        result = await self._query(policy_input, DECISION_PATH)
        try:
            return Decision.model_validate(result)
        except ValidationError as err:
            raise PolicyEngineUnavailableError(
                f"malformed decision from OPA: {err.error_count()} errors"
            ) from err

    async def decide_all(self, policy_inputs: list[dict[str, Any]]) -> list[Decision]:
        """data.labgate.admission.decision for each of `policy_inputs`, in one evaluation."""
        result = await self._query({"batch": policy_inputs}, BATCH_DECISION_PATH)
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

    async def mutate(self, policy_input: dict[str, Any]) -> Mutation:
        """Evaluate data.labgate.mutation (patch and warnings) for `policy_input`."""
        result = await self._query(policy_input, MUTATION_PATH)
        try:
            return Mutation.model_validate(result)
        except ValidationError as err:
            raise PolicyEngineUnavailableError(
                f"malformed mutation from OPA: {err.error_count()} errors"
            ) from err

    async def is_healthy(self) -> bool:
        """True when OPA answers its health endpoint with the policies loaded."""
        try:
            async with asyncio.timeout(self.timeout), self._open().get(f"{self._base}/health") as response:
                return response.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


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
