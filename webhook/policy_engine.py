"""The one door to OPA: evaluate the admission decision, and keep OPA's copy of the inventory current.

Queries go through opa-python-client's AsyncOpaClient, with no retries (a retry would spend the
apiserver's deadline) and a hard deadline of `timeout` seconds. Any failure becomes
PolicyEngineUnavailableError, which the webhook turns into a refusal, never an admission.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient, OpaClient
from pydantic import ValidationError

from labgate.core.decisions import Decision, Mutation

DECISION_PACKAGE = "labgate/admission"
DECISION_RULE = "decision"
MUTATION_PACKAGE = "labgate/mutation"
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

    def __init__(self, url: str, *, timeout: float):
        host, port, is_tls = _host_port(url)
        self.timeout = timeout
        self._client = AsyncOpaClient(host=host, port=port, ssl=is_tls, retries=0, timeout=timeout)
        self._opened = False

    async def _ensure_open(self) -> None:
        if not self._opened:
            await self._client.__aenter__()
            self._opened = True

    async def _query(self, policy_input: dict[str, Any], package: str, rule: str | None) -> Any:
        try:
            await self._ensure_open()
            result = await asyncio.wait_for(
                self._client.query_rule(policy_input, package, rule), timeout=self.timeout
            )
        except TimeoutError as err:
            raise PolicyEngineUnavailableError(f"no answer within {self.timeout:.1f}s") from err
        except (aiohttp.ClientError, OSError) as err:
            raise PolicyEngineUnavailableError(f"cannot reach OPA: {err}") from err
        if "result" not in result:
            raise PolicyEngineUnavailableError(f"OPA has no labgate policy loaded ({package} undefined)")
        return result["result"]

    async def decide(self, policy_input: dict[str, Any]) -> Decision:
        """Evaluate data.labgate.admission.decision for `policy_input`."""
        result = await self._query(policy_input, DECISION_PACKAGE, DECISION_RULE)
        try:
            return Decision.model_validate(result)
        except ValidationError as err:
            raise PolicyEngineUnavailableError(
                f"malformed decision from OPA: {err.error_count()} errors"
            ) from err

    async def mutate(self, policy_input: dict[str, Any]) -> Mutation:
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
