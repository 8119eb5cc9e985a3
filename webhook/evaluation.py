"""The evaluation door: the one place the admission server asks the policy engine.

OPA drops the data pushed into it when it reloads its policies; an answer made without labgate's
inventory (no `inventory_revision`) would decide without tenants. So every question goes through
`Evaluator`: such an answer makes it push the inventory again and ask once more, and a second such
answer is a PolicyEngineUnavailableError (the request is refused, never admitted by accident).
Requests that find OPA so while a push is under way wait for that push instead of each pushing the
whole inventory again (after a reload, every request in flight finds it so at once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from labgate.core.coalesce import Coalescer
from labgate.core.decisions import Decision, Mutation
from webhook.policy_engine import PolicyEngineUnavailableError
from webhook.policy_input import PolicyInput

log = logging.getLogger(__name__)

Answer = TypeVar("Answer")


class DecisionSource(Protocol):
    async def decide(self, policy_input: PolicyInput) -> Decision: ...

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]: ...

    async def mutate(self, policy_input: PolicyInput) -> Mutation: ...

    async def is_healthy(self) -> bool: ...


class InventoryPush(Protocol):
    @property
    def is_synced(self) -> bool: ...

    def push_all(self) -> None: ...


class Evaluator:
    """Asks `engine` for decisions and mutations, each made with the inventory `inventory` pushes."""

    def __init__(self, engine: DecisionSource, inventory: InventoryPush):
        self.engine = engine
        self.inventory = inventory
        self._pushes: Coalescer[str, None] = Coalescer()

    async def decide(self, policy_input: PolicyInput) -> Decision:
        """One decision (data.labgate.admission.decision)."""
        return await self._with_inventory(
            lambda: self.engine.decide(policy_input), lambda d: d.inventory_revision is not None
        )

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]:
        """One decision per input, in one evaluation (data.labgate.admission.decisions)."""
        return await self._with_inventory(
            lambda: self.engine.decide_all(policy_inputs),
            lambda ds: all(d.inventory_revision is not None for d in ds),
        )

    async def mutate(self, policy_input: PolicyInput) -> Mutation:
        """The mutation (data.labgate.mutation)."""
        return await self._with_inventory(
            lambda: self.engine.mutate(policy_input), lambda m: m.inventory_revision is not None
        )

    async def _with_inventory(
        self, ask: Callable[[], Awaitable[Answer]], has_inventory: Callable[[Answer], bool]
    ) -> Answer:
        """`ask()`; if OPA answered without the inventory, push it again and ask once more (while
        the inventory is not synced yet there is nothing to push: the answer stands as it is)."""
        answer = await ask()
        if has_inventory(answer) or not self.inventory.is_synced:
            return answer
        await self._pushes.run("inventory", self._push)
        answer = await ask()
        if not has_inventory(answer):
            raise PolicyEngineUnavailableError("OPA does not keep labgate's inventory of tenants")
        return answer

    async def _push(self) -> None:
        log.warning("OPA has no inventory (policies reloaded?); pushing it again")
        await asyncio.to_thread(self.inventory.push_all)
