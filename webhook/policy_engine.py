"""The door to OPA for decisions: evaluate the admission decision and the mutation.

Every decision query goes through one aiohttp session type (`OpaSession`): keep-alive connections,
request bodies encoded with orjson (the standard library's json on the event loop cost a fifth of the
webhook's time under load; opa-python-client's query encodes with it, and measured slower side by
side: docs/benchmarks.md), no retries (a retry would spend the apiserver's deadline) and a hard
deadline of `timeout` seconds. The admission path (`PolicyEngine`) uses it on the webhook's event
loop; any failure becomes PolicyEngineUnavailableError, which the webhook turns into a refusal, never
an admission. The scheduled audit (`cli.audit_service.ServerOpa`) asks its decisions through
`BlockingOpa`, the same session on a private event loop thread. Writing policies and data into OPA is
`webhook.opa_management`'s (opa-python-client).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
from pydantic import TypeAdapter, ValidationError

from labgate.core import json_bytes
from labgate.core.decisions import Decision, Mutation
from labgate.core.errors import LabgateError, NoDecisionError, NoDecisionInTimeError
from webhook.opa_thread import LoopThread
from webhook.policy_input import PolicyBatch, PolicyInput

DECISION_PACKAGE = "labgate/admission"
DECISION_RULE = "decision"
# One decision per element of input.batch, in one evaluation (the webhook's GPU batches).
BATCH_DECISION_RULE = "decisions"
MUTATION_PACKAGE = "labgate/mutation"
# Outside data.labgate on purpose: OPA checks every write under a policy root against the
# policies (about 23 ms a write here, against 0.5 ms for a root of its own).
INVENTORY_PATH = "inventory"

_JSON = "application/json"


class PolicyEngineUnavailableError(NoDecisionError, RuntimeError):
    """OPA could not give a decision in time (down, slow, no policy loaded, or a malformed answer)."""


class PolicyEngineTimeoutError(PolicyEngineUnavailableError, NoDecisionInTimeError):
    """OPA did not answer within the engine's timeout."""


class OpaUnreachableError(LabgateError, OSError):
    """A blocking call found OPA down, slow or answering an unexpected status (an OSError, as the
    threads' callers treat an unreachable server)."""


@dataclass(frozen=True)
class OpaAnswer:
    """One HTTP answer from OPA: its status and its JSON body (None when empty)."""

    status: int
    body: Any

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300


class OpaSession:
    """One keep-alive aiohttp session to OPA's REST API (opened on first use, on the caller's loop)."""

    def __init__(self, url: str, *, timeout: float, connections: int):
        self.root = url.rstrip("/")
        self.timeout = timeout
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._connections,
                    keepalive_timeout=60,
                ),  # https: aiohttp's default, the system's trust store with the hostname checked
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        document: Any = None,
        text: str | None = None,
        content_type: str = _JSON,
    ) -> OpaAnswer:
        """`method` on `root + path`, with `document` as JSON (orjson) or `text` as the body."""
        body: bytes | None = None
        if text is not None:
            body = text.encode("utf-8")
        elif document is not None:
            body = json_bytes.dumps(document)
        headers = {"Content-Type": content_type} if body is not None else None
        async with self._open().request(method, self.root + path, data=body, headers=headers) as response:
            raw = await response.read()
            # the standard library decodes: exact for any integer, as the answers were read before
            return OpaAnswer(response.status, json.loads(raw) if raw.strip() else None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class PolicyEngine:
    """Async access to the OPA server for admission decisions."""

    def __init__(self, url: str, *, timeout: float, connections: int = 32):
        self.timeout = timeout
        self._session = OpaSession(url, timeout=timeout, connections=connections)

    async def _query(self, policy_input: PolicyInput | PolicyBatch, package: str, rule: str | None) -> Any:
        path = f"/v1/data/{package}" + (f"/{rule}" if rule else "")
        try:
            answer = await asyncio.wait_for(
                self._session.request("POST", path, document={"input": policy_input}), timeout=self.timeout
            )
        except TimeoutError as err:
            raise PolicyEngineTimeoutError(f"no answer within {self.timeout:.1f}s") from err
        except (aiohttp.ClientError, OSError, ValueError) as err:
            raise PolicyEngineUnavailableError(f"cannot reach OPA: {err}") from err
        if not answer.is_success:
            raise PolicyEngineUnavailableError(f"cannot reach OPA: HTTP {answer.status} for {path}")
        result = answer.body
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
            answer = await asyncio.wait_for(self._session.request("GET", "/health"), timeout=self.timeout)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
            return False
        return answer.status == 200

    async def close(self) -> None:
        await self._session.close()


_DECISIONS: TypeAdapter[list[Decision]] = TypeAdapter(list[Decision])


class BlockingOpa:
    """`OpaSession` for threads and the command line: each call runs on a private event loop thread
    and returns its answer. A failure to reach OPA is an OpaUnreachableError (an OSError). The
    session is closed by `close()`, or when the client is dropped without it."""

    def __init__(self, url: str, *, timeout: float):
        self.timeout = timeout
        self._session = OpaSession(url, timeout=timeout, connections=4)
        # A margin over the session's own deadline, which ends every request first.
        self._loop = LoopThread("opa-session", deadline=timeout + 5, closer=self._session.close)

    def request(
        self,
        method: str,
        path: str,
        *,
        document: Any = None,
        text: str | None = None,
        content_type: str = _JSON,
    ) -> OpaAnswer:
        try:
            return self._loop.run(
                self._session.request(method, path, document=document, text=text, content_type=content_type)
            )
        except aiohttp.ClientError as err:
            raise OpaUnreachableError(f"OPA at {self._session.root}: {err}") from err

    def expect(self, method: str, path: str, **body: Any) -> OpaAnswer:
        """`request`, an OpaUnreachableError unless OPA answers with success."""
        answer = self.request(method, path, **body)
        if not answer.is_success:
            raise OpaUnreachableError(
                f"OPA at {self._session.root}: HTTP {answer.status} for {method} {path}"
            )
        return answer

    def close(self) -> None:
        self._loop.close()
