"""Policy and data management in OPA, through opa-python-client.

What labgate writes into OPA besides asking for decisions goes through opa-python-client's
`AsyncOpaClient`: the policy modules and policy data `webhook.policy_sync` keeps current
(`PolicyStore`), the inventory of tenants and namespaces the inventory threads push
(`InventoryStore`), and the revision marker of the last complete policy load. The writers are
threads, so the client runs on a `LoopThread` of its own, never on the admission loop. The client is
made with no retries (a failed inventory write makes the reflector re-list and write everything
again; a failed policy push is retried by the next sync pass) and without its v0-Rego rewriting
(`rego_compat=False`): a module OPA refuses is reported as OPA refused it, never loaded changed.

The admission decisions themselves are not asked through it: `webhook.policy_engine.OpaSession`
encodes the query with orjson, and the side-by-side benchmark (`benchmarks/opa_door.py`,
docs/benchmarks.md) measured the client's query slower under concurrent load.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient
from opa_client.errors import (
    DeleteDataError,
    DeletePolicyError,
    PatchDataError,
    PolicyNotFoundError,
    RegoParseError,
    TypeException,
)

from labgate.core.errors import LabgateError
from webhook.inventory_snapshot import PatchOperation
from webhook.opa_thread import LoopThread
from webhook.policy_engine import INVENTORY_PATH, OpaUnreachableError

_T = TypeVar("_T")

# What the client raises when OPA answers with an error for a write (its own exception types).
_REFUSALS = (RegoParseError, PatchDataError, DeletePolicyError, DeleteDataError, TypeException)


class PolicyLoadError(LabgateError, RuntimeError):
    """OPA refused a policy module (it does not parse or compile); the message says where and why."""


def _opa_errors(code: Any, message: Any, errors: list[dict[str, Any]] | None) -> str:
    """`file:row: code: message` lines from an OPA error response, as the client hands it over."""
    lines = []
    for error in errors or []:
        location = error.get("location") or {}
        where = f"{location.get('file', '')}:{location.get('row', '?')}: " if location else ""
        lines.append(f"{where}{error.get('code', '')}: {error.get('message', '')}")
    return "; ".join(lines) or f"{code}: {message}"


def _refusal(err: Exception) -> str:
    return _opa_errors(
        getattr(err, "expression", ""), getattr(err, "message", str(err)), getattr(err, "errors", None)
    )


class OpaManagement:
    """Blocking access to OPA's policy and data APIs through one `AsyncOpaClient` on its own loop.

    Every method raises OpaUnreachableError (an OSError) when OPA cannot be reached or answers with an
    unexpected status, and PolicyLoadError when OPA refuses what was written."""

    def __init__(self, url: str, *, timeout: float):
        parts = urlsplit(url)
        self.url = url.rstrip("/")
        # https: the client's default, the system's trust store with the hostname checked
        self._client = AsyncOpaClient(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or (443 if parts.scheme == "https" else 80),
            ssl=parts.scheme == "https",
            retries=0,
            timeout=timeout,
        )
        self._loop = LoopThread("opa-management", deadline=timeout + 5, closer=self._client.close_connection)
        self._loop.run(self._client.__aenter__())

    def _call(self, call: Awaitable[_T], what: str) -> _T:
        async def wrapped() -> _T:
            return await call

        try:
            return self._loop.run(wrapped())
        except _REFUSALS as err:
            raise PolicyLoadError(_refusal(err)) from err
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise OpaUnreachableError(f"OPA at {self.url}: {what}: {err}") from err

    def module_sources(self) -> dict[str, str]:
        """id -> source text of every module OPA holds."""
        ids = self._call(self._client.get_policies_list(), "list policies")
        sources = {}
        for module_id in ids:
            try:
                policy = self._call(self._client.get_policy(module_id), f"get policy {module_id}")
            except PolicyNotFoundError:
                continue  # deleted between the list and the read
            sources[str(module_id)] = str((policy.get("result") or {}).get("raw", ""))
        return sources

    def put_module(self, module_id: str, text: str) -> None:
        self._call(
            self._client.update_policy_from_string(text, module_id, rego_compat=False),
            f"put policy {module_id}",
        )

    def delete_module(self, module_id: str) -> None:
        """Delete one module; one OPA does not hold is deleted already."""
        try:
            self._call(self._client.delete_policy(module_id), f"delete policy {module_id}")
        except PolicyLoadError as err:
            if "resource_not_found" not in str(err):
                raise

    def put_data(self, path: str, document: dict[str, Any]) -> None:
        self._call(self._client.update_or_create_data(document, path), f"put data {path}")

    def patch_data(self, path: str, operations: list[PatchOperation]) -> None:
        self._call(self._client.patch_data(path, operations), f"patch data {path}")

    def get_data(self, path: str) -> Any:
        """The document at data.`path`; None where OPA has none."""
        try:
            return self._call(self._client.get_data(path), f"get data {path}").get("result")
        except PolicyNotFoundError:
            return None

    def close(self) -> None:
        self._loop.close()


class InventoryStore:
    """Synchronous writer of data.inventory (tenants and namespaces) for the inventory threads."""

    def __init__(self, url: str, *, timeout: float = 2.0):
        self._opa = OpaManagement(url, timeout=timeout)

    def replace_all(self, inventory: dict[str, Any]) -> None:
        """Replace the whole inventory (after a list)."""
        self._opa.put_data(INVENTORY_PATH, inventory)

    def put(self, collection: str, name: str, document: dict[str, Any]) -> None:
        """Create or replace one tenant or namespace."""
        self._opa.put_data(f"{INVENTORY_PATH}/{collection}/{name}", document)

    def patch(self, operations: list[PatchOperation]) -> None:
        """Apply a JSON Patch to the inventory (several changes in one request)."""
        self._opa.patch_data(INVENTORY_PATH, operations)

    def close(self) -> None:
        self._opa.close()


class PolicyStore:
    """Synchronous writer of policy modules and policy data into OPA (webhook.policy_sync)."""

    def __init__(self, url: str, *, timeout: float = 5.0):
        self._opa = OpaManagement(url, timeout=timeout)

    def modules(self) -> dict[str, str]:
        """id -> source text of every module OPA holds (used on a first pass only)."""
        return self._opa.module_sources()

    def put_module(self, module_id: str, text: str) -> None:
        """Create or replace one module; PolicyLoadError with OPA's parse or compile error."""
        self._opa.put_module(module_id, text)

    def delete_module(self, module_id: str) -> None:
        self._opa.delete_module(module_id)

    def put_data(self, path: str, document: Any) -> None:
        """Create or replace the data document at `path` (e.g. labgate/config): a JSON object."""
        if not isinstance(document, dict):
            raise PolicyLoadError(f"data at {path} must be a JSON object, not {type(document).__name__}")
        self._opa.put_data(path, document)

    def get_marker(self) -> str | None:
        """The revision policy_sync recorded in OPA after its last complete load (None: OPA has none,
        e.g. it restarted)."""
        result = self._opa.get_data("labgate_policy_sync/revision")
        return result if isinstance(result, str) else None

    def close(self) -> None:
        self._opa.close()
