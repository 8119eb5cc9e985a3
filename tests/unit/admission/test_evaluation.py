"""The evaluation door (webhook/evaluation.py): an answer OPA made without labgate's inventory (it
dropped the pushed data on a policy reload) makes the webhook push the inventory and ask again, once;
requests that find OPA so at the same time share one push."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labgate.core.decisions import Decision, Mutation
from tests.unit.gpu.test_gpu_batch import Inventory, request
from webhook.evaluation import Evaluator
from webhook.policy_engine import PolicyEngineUnavailableError
from webhook.policy_input import PolicyInput
from webhook.replica import FactSources, admission_server

CONCURRENT = 32


class _CountingInventory(Inventory):
    """An inventory that counts its pushes into OPA (each a write of every document)."""

    def __init__(self, *, synced: bool = True) -> None:
        self.pushes = 0
        self.is_synced = synced

    def push_all(self) -> None:
        self.pushes += 1


class _ReloadedEngine:
    """OPA just after a policy reload: it answers without the inventory until it is pushed again
    (`keeps` False: it never keeps it). Until the inventory is back, each question waits for
    `expected` questions to be asked, so that every request finds OPA without its inventory."""

    def __init__(self, inventory: _CountingInventory, *, expected: int = 1, keeps: bool = True) -> None:
        self.inventory, self.expected, self.keeps = inventory, expected, keeps
        self.asked_without = 0
        self.everyone_asked = asyncio.Event()

    async def _revision(self) -> int | None:
        if self.inventory.pushes and self.keeps:
            return 7
        self.asked_without += 1
        if self.asked_without >= self.expected:
            self.everyone_asked.set()
        await self.everyone_asked.wait()
        return None

    async def decide(self, policy_input: PolicyInput) -> Decision:
        return Decision(allowed=True, inventory_revision=await self._revision())

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]:
        revision = await self._revision()
        return [Decision(allowed=True, inventory_revision=revision) for _ in policy_inputs]

    async def mutate(self, policy_input: PolicyInput) -> Mutation:
        return Mutation(inventory_revision=await self._revision())

    async def is_healthy(self) -> bool:
        return True


def test_requests_that_find_opa_without_its_inventory_at_once_share_one_push() -> None:
    inventory = _CountingInventory()

    async def run() -> list[bool]:
        engine = _ReloadedEngine(inventory, expected=CONCURRENT)
        server = admission_server(engine, FactSources(inventory=inventory))
        async with asyncio.timeout(10):
            answers = await asyncio.gather(
                *(server.validate(request(i, "h100", 0)) for i in range(CONCURRENT))
            )
        assert engine.asked_without == CONCURRENT, "every request found OPA without its inventory"
        return [a.response.allowed for a in answers]

    assert asyncio.run(run()) == [True] * CONCURRENT
    assert inventory.pushes == 1


@pytest.mark.parametrize("question", ["decide", "decide_all", "mutate"])
def test_each_question_is_asked_again_after_the_push(question: str) -> None:
    inventory = _CountingInventory()

    async def run() -> Any:
        evaluator = Evaluator(_ReloadedEngine(inventory), inventory)
        ask = getattr(evaluator, question)
        return await ask([{}] if question == "decide_all" else {})

    answer = asyncio.run(run())
    revisions = (
        [d.inventory_revision for d in answer] if isinstance(answer, list) else [answer.inventory_revision]
    )
    assert revisions == [7]
    assert inventory.pushes == 1


@pytest.mark.parametrize("question", ["decide", "decide_all", "mutate"])
def test_opa_that_does_not_keep_the_inventory_is_unavailable(question: str) -> None:
    inventory = _CountingInventory()

    async def run() -> None:
        evaluator = Evaluator(_ReloadedEngine(inventory, keeps=False), inventory)
        await getattr(evaluator, question)([{}] if question == "decide_all" else {})

    with pytest.raises(PolicyEngineUnavailableError, match="does not keep labgate's inventory"):
        asyncio.run(run())
    assert inventory.pushes == 1


def test_before_the_inventory_is_synced_there_is_nothing_to_push() -> None:
    inventory = _CountingInventory(synced=False)

    async def run() -> Decision:
        return await Evaluator(_ReloadedEngine(inventory), inventory).decide(
            {"request": request(0, "h100", 1).document, "pod_templates": [], "image_references": {}}
        )

    assert asyncio.run(run()).inventory_revision is None
    assert inventory.pushes == 0
