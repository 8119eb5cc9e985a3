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
from pydantic import BaseModel, ConfigDict, Field, ValidationError

DECISION_PACKAGE = "labgate/admission"
DECISION_RULE = "decision"
INVENTORY_PATH = "labgate/inventory"


class Finding(BaseModel):
    """One rule's verdict on the request: its id, the message for people, and how it is enforced."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    rule: str
    message: str
    mode: str = "enforce"
    field: str | None = None


class Decision(BaseModel):
    """data.labgate.admission.decision, as OPA returns it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    allowed: bool
    denials: list[Finding] = Field(default_factory=list)
    warnings: list[Finding] = Field(default_factory=list)
    dry_run: list[Finding] = Field(default_factory=list)
    tenant: str | None = None


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

    async def decide(self, policy_input: dict[str, Any]) -> Decision:
        """Evaluate data.labgate.admission.decision for `policy_input`."""
        try:
            await self._ensure_open()
            result = await asyncio.wait_for(
                self._client.query_rule(policy_input, DECISION_PACKAGE, DECISION_RULE), timeout=self.timeout
            )
        except TimeoutError as err:
            raise PolicyEngineUnavailableError(f"no answer within {self.timeout:.1f}s") from err
        except (aiohttp.ClientError, OSError) as err:
            raise PolicyEngineUnavailableError(f"cannot reach OPA: {err}") from err
        if "result" not in result:
            raise PolicyEngineUnavailableError("OPA has no labgate policy loaded (decision undefined)")
        try:
            return Decision.model_validate(result["result"])
        except ValidationError as err:
            raise PolicyEngineUnavailableError(
                f"malformed decision from OPA: {err.error_count()} errors"
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
    """Synchronous writer of data.labgate.inventory (tenants and namespaces) for the inventory threads."""

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

    def delete(self, collection: str, name: str) -> None:
        """Forget one tenant or namespace."""
        self._client.patch_data(INVENTORY_PATH, [{"op": "remove", "path": f"/{collection}/{name}"}])

    def close(self) -> None:
        self._client.close_connection()
