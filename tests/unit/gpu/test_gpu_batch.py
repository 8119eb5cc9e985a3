"""A tenant's GPU pods arriving together are decided as if one after the other: each against the
usage the pods before it leave, in a few policy evaluations, and never beyond the quota.

The policy here is a stand-in with the real quota rule's shape (refuse when usage plus demand
exceeds the limit, per total and per model); the real Rego is tested in policies/ and end to end."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from labgate.core.decisions import Decision, Finding, Mutation
from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.ledger import Ledger, LedgerConflictError, usage
from webhook.policy_input import PolicyInput
from webhook.replica import FactSources, admission_server
from webhook.review import AdmissionRequest, parse_request
from webhook.serving import Answer

TENANT = "vision"


class QuotaPolicy:
    """Decides like the gpu-quota rule: demand from the pod's annotation, limits per total/model."""

    def __init__(self, total: int, models: dict[str, int], *, headroom: bool = True):
        self.total, self.models, self.headroom = total, models, headroom
        self.evaluations = 0
        self.calls = 0

    def _decide(self, policy_input: PolicyInput) -> Decision:
        self.evaluations += 1
        obj = policy_input["request"].get("object")
        assert obj is not None
        annotations = obj["metadata"]["annotations"]
        model, count = annotations["model"], int(annotations["gpus"])
        used = policy_input.get("gpu_usage") or {"total": 0, "by_model": {}}
        over = used["total"] + count > self.total or (
            model in self.models and used["by_model"].get(model, 0) + count > self.models[model]
        )
        denials = [Finding(rule="gpu-quota", message=f"[gpu-quota] uses {used['total']}")] if over else []
        return Decision(
            allowed=not over,
            denials=denials,
            tenant=TENANT,
            gpu_demand=GpuAmount(total=count, by_model={model: count}),
            gpu_headroom=GpuAmount(
                total=self.total - count,
                by_model={model: self.models[model] - count} if model in self.models else {},
            )
            if self.headroom
            else None,
            inventory_revision=1,
        )

    async def decide(self, policy_input: PolicyInput) -> Decision:
        self.calls += 1
        return self._decide(policy_input)

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]:
        self.calls += 1
        return [self._decide(i) for i in policy_inputs]

    async def mutate(self, policy_input: PolicyInput) -> Mutation:
        raise NotImplementedError

    async def is_healthy(self) -> bool:
        return True


class Inventory:
    is_synced = True

    def ensure_namespace(self, name: str) -> None:
        """Known already."""

    def is_known(self, name: str) -> bool:
        return True

    def tenant_of(self, namespace: str) -> str | None:
        return TENANT

    def push_all(self) -> None:
        """Nothing to push."""

    def tenant_spec(self, name: str) -> dict[str, Any] | None:
        return None


class Ledgers:
    """An in-memory ledger store with compare-and-swap; `conflicts` writes lose first."""

    is_synced = True

    def __init__(self, conflicts: int = 0):
        self.stored = Ledger(tenant=TENANT, resource_version="1")
        self.conflicts = conflicts
        self.writes = 0

    def cached(self, tenant: str) -> Ledger:
        return self.stored

    def fresh(self, tenant: str) -> Ledger:
        return self.stored

    def write(self, ledger: Ledger) -> Ledger:
        if self.conflicts > 0:
            self.conflicts -= 1
            raise LedgerConflictError(TENANT)
        assert ledger.resource_version == self.stored.resource_version
        self.writes += 1
        self.stored = ledger.model_copy(
            update={"resource_version": str(int(ledger.resource_version or 0) + 1)}
        )
        return self.stored

    async def fresh_async(self, tenant: str) -> Ledger:
        return self.fresh(tenant)

    async def write_async(self, ledger: Ledger) -> Ledger:
        return self.write(ledger)


def request(index: int, model: str, gpus: int) -> AdmissionRequest:
    return parse_request(
        {
            "uid": f"u-{index}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": TENANT,
            "name": f"p-{index}",
            "operation": "CREATE",
            "userInfo": {"username": "vera", "groups": [TENANT]},
            "object": {
                "metadata": {"name": f"p-{index}", "annotations": {"model": model, "gpus": str(gpus)}},
                "spec": {"containers": []},
            },
        }
    )


def sequential(pods: list[tuple[str, int]], total: int, models: dict[str, int]) -> list[bool]:
    used_total, used = 0, dict.fromkeys(models, 0)
    verdicts = []
    for model, count in pods:
        fits = used_total + count <= total and (model not in models or used[model] + count <= models[model])
        verdicts.append(fits)
        if fits:
            used_total += count
            if model in used:
                used[model] += count
    return verdicts


async def admit_together(pods: list[tuple[str, int]], policy: QuotaPolicy, ledgers: Ledgers) -> list[bool]:
    server = admission_server(policy, FactSources(inventory=Inventory(), ledgers=ledgers))
    responses = await asyncio.gather(
        *(server.validate(request(i, model, count)) for i, (model, count) in enumerate(pods))
    )
    return [r.response.allowed for r in responses]


pods_strategy = st.lists(
    st.tuples(st.sampled_from(["h100", "a100"]), st.integers(1, 4)), min_size=1, max_size=30
)


@settings(max_examples=60, deadline=None)
@given(
    pods=pods_strategy,
    total=st.integers(0, 40),
    h100=st.integers(0, 20),
    conflicts=st.integers(0, 2),
    headroom=st.booleans(),
)
def test_a_burst_is_decided_as_one_after_the_other_and_never_beyond_the_quota(
    pods: list[tuple[str, int]], total: int, h100: int, conflicts: int, headroom: bool
) -> None:
    models = {"h100": h100}
    policy, ledgers = QuotaPolicy(total, models, headroom=headroom), Ledgers(conflicts)
    verdicts = asyncio.run(admit_together(pods, policy, ledgers))
    # Pods arrive in order within one event loop tick, so the first decides alone, the rest batch.
    assert verdicts == sequential(pods, total, models)
    held = usage(ledgers.stored)
    assert held.total == sum(c for (_, c), ok in zip(pods, verdicts, strict=True) if ok) <= total
    assert held.by_model.get("h100", 0) <= h100


def test_a_burst_costs_a_few_evaluations_and_writes_not_one_per_pod() -> None:
    pods = [("h100", 1)] * 200
    policy, ledgers = QuotaPolicy(total=150, models={}), Ledgers()
    verdicts = asyncio.run(admit_together(pods, policy, ledgers))
    assert verdicts == [True] * 150 + [False] * 50
    assert usage(ledgers.stored).total == 150
    assert ledgers.writes <= 2
    # one decision per pod on arrival (side by side); within the headroom nothing more, and each pod
    # beyond it once more, at its exact usage (side by side too)
    assert policy.evaluations <= 200 + 50 + 2


def test_within_the_headroom_a_burst_needs_no_evaluation_beyond_the_first() -> None:
    pods = [("h100", 1)] * 100
    policy, ledgers = QuotaPolicy(total=1000, models={}), Ledgers()
    assert asyncio.run(admit_together(pods, policy, ledgers)) == [True] * 100
    assert policy.evaluations == 100


def test_each_answer_carries_its_tenant_and_the_decision_it_was_answered_by() -> None:
    """What the decision log records (webhook.serving.Answer): for a pod decided again in its batch,
    the batch's decision (the refusal quotes the usage the pods before it left), not the first."""
    policy = QuotaPolicy(total=4, models={})

    async def run() -> list[Answer]:
        server = admission_server(policy, FactSources(inventory=Inventory(), ledgers=Ledgers()))
        return list(await asyncio.gather(*(server.validate(request(i, "h100", 2)) for i in range(3))))

    answers = asyncio.run(run())
    assert [a.response.allowed for a in answers] == [True, True, False]
    assert {a.tenant for a in answers} == {TENANT}
    refused = answers[2].decision
    assert refused is not None
    assert [f.message for f in refused.denials] == ["[gpu-quota] uses 4"]
