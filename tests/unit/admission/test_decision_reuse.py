"""Reusing a decision for an identical pod (webhook/decision_reuse.py): what makes two pods identical,
what is never reused, and that a burst of a Job's copies costs one policy evaluation while the quota
stays exact. The policy here is a stand-in; that the shipped rules never decide on a pod's identity
is checked against the real OPA in test_reuse_identity.py."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from labgate.core.decisions import Decision, Finding, Mutation, PatchOperation
from labgate.gpu_accounting.ledger import GpuAmount, now, usage, with_reservation
from tests.unit.gpu.test_gpu_batch import TENANT, Inventory, Ledgers, QuotaPolicy, request, sequential
from webhook.admission import build_policy_input
from webhook.decision_reuse import COMPLETION_INDEX, ReuseCache, is_clean_admission, pod_create_key
from webhook.policy_input import PolicyInput
from webhook.replica import AdmissionOptions, FactSources, admission_server
from webhook.review import AdmissionRequest, parse_request


def pod_review(
    index: int, *, image: str = "registry.lab.example/vision/train:v1", **changes: Any
) -> dict[str, Any]:
    """A Job's pod as the apiserver sends it: name, uid, timestamps and managed fields its own."""
    review: dict[str, Any] = {
        "uid": f"review-{index}",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": TENANT,
        "name": f"sweep-{index:05d}",
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller", "groups": []},
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"sweep-{index:05d}",
                "generateName": "sweep-",
                "uid": f"pod-uid-{index}",
                "creationTimestamp": f"2026-11-30T20:{index % 60:02d}:00Z",
                "resourceVersion": str(1000 + index),
                "managedFields": [{"manager": "kube-controller-manager", "time": f"20:{index % 60:02d}"}],
                "labels": {"job-name": "sweep"},
                "annotations": {"model": "h100", "gpus": "0"},
            },
            "spec": {"containers": [{"name": "main", "image": image}]},
        },
    }
    for path, value in changes.items():
        target = review
        *parents, last = path.split("__")
        for part in parents:
            target = target[part]
        target[last] = value
    return review


def key_of(review: dict[str, Any], version: Any = 1, **extra: Any) -> bytes | None:
    policy_input = build_policy_input(request=parse_request(review))
    return pod_create_key({**policy_input, **extra}, version)  # type: ignore[typeddict-item]


def test_copies_of_one_pod_share_a_key_whatever_their_name_uid_and_timestamps() -> None:
    assert key_of(pod_review(1)) is not None
    assert key_of(pod_review(1)) == key_of(pod_review(2)) == key_of(pod_review(37))


def indexed_pod_review(index: int, **changes: Any) -> dict[str, Any]:
    """An Indexed Job's pod: its index in a label, an annotation, its generated name and hostname."""
    review = pod_review(index, **changes)
    metadata = review["object"]["metadata"]
    metadata["generateName"] = f"sweep-{index}-"
    metadata["labels"] = {**metadata["labels"], COMPLETION_INDEX: str(index)}
    metadata["annotations"] = {**metadata["annotations"], COMPLETION_INDEX: str(index)}
    review["object"]["spec"] = {**review["object"]["spec"], "hostname": f"sweep-{index}"}
    return review


def test_an_indexed_jobs_pods_share_a_key_whatever_their_index() -> None:
    """Issue 21: an Indexed Job's pods were each evaluated (8 ms of OPA a pod at 1,000 pods)."""
    assert key_of(indexed_pod_review(1)) == key_of(indexed_pod_review(2)) == key_of(indexed_pod_review(999))
    other_label = indexed_pod_review(2, object__metadata__labels={"job-name": "other", COMPLETION_INDEX: "2"})
    assert key_of(other_label) != key_of(indexed_pod_review(1))
    other_spec = indexed_pod_review(2, object__spec={"subdomain": "x", "containers": []})
    assert key_of(other_spec) != key_of(indexed_pod_review(1))


def test_the_gpu_usage_is_not_in_the_key() -> None:
    busy = key_of(pod_review(1), gpu_usage={"total": 7, "by_model": {"h100": 7}})
    assert busy == key_of(pod_review(2), gpu_usage={"total": 0, "by_model": {}})


@pytest.mark.parametrize(
    ("what", "review", "extra", "version"),
    [
        ("another image", pod_review(2, image="registry.lab.example/vision/train:v2"), {}, 1),
        ("another label", pod_review(2, object__metadata__labels={"job-name": "other"}), {}, 1),
        ("another user", pod_review(2, userInfo={"username": "vera", "groups": [TENANT]}), {}, 1),
        ("another namespace", pod_review(2, namespace="speech"), {}, 1),
        ("a dry run", pod_review(2, dryRun=True), {}, 1),
        ("host network", pod_review(2, object__spec={"hostNetwork": True, "containers": []}), {}, 1),
        ("other secrets", pod_review(2), {"secrets": {"token": {"restricted_to": "x"}}}, 1),
        ("other image facts", pod_review(2), {"images": {"x": {"signed_by": []}}}, 1),
        ("the facts OPA holds changed", pod_review(2), {}, 2),
    ],
)
def test_anything_else_that_differs_makes_another_key(
    what: str, review: dict[str, Any], extra: dict[str, Any], version: int
) -> None:
    assert key_of(review, version, **extra) != key_of(pod_review(1)), what


@pytest.mark.parametrize(
    "review",
    [
        pod_review(1, operation="UPDATE"),
        pod_review(1, subResource="ephemeralcontainers"),
        pod_review(1, kind={"group": "batch", "version": "v1", "kind": "Job"}),
    ],
)
def test_only_pod_creations_are_reused(review: dict[str, Any]) -> None:
    assert key_of(review) is None


def test_entries_expire_and_the_oldest_go_first() -> None:
    now = [100.0]
    cache: ReuseCache[str] = ReuseCache(2.0, max_entries=2, clock=lambda: now[0])
    cache.put(b"a", "first", None)
    now[0] += 1.9
    held = cache.get(b"a")
    assert held is not None
    assert held.value == "first"
    now[0] += 0.1  # 2 s old: a reuse window of 2 s no longer answers with it
    assert cache.get(b"a") is None
    cache.put(b"a", "a", None)
    cache.put(b"b", "b", None)
    cache.put(b"c", "c", None)
    assert cache.get(b"a") is None
    assert len(cache) == 2
    off: ReuseCache[str] = ReuseCache(0)
    off.put(b"a", "a", None)
    assert not off.enabled
    assert off.get(b"a") is None


def test_only_clean_admissions_are_reused() -> None:
    finding = Finding(rule="r", message="[r] pod sweep-00001 ...")
    assert is_clean_admission(Decision(allowed=True, inventory_revision=1))
    assert not is_clean_admission(Decision(allowed=True))  # OPA held no inventory
    assert not is_clean_admission(Decision(allowed=False, denials=[finding], inventory_revision=1))
    assert not is_clean_admission(Decision(allowed=True, warnings=[finding], inventory_revision=1))
    assert not is_clean_admission(Decision(allowed=True, dry_run=[finding], inventory_revision=1))


class CountingPolicy:
    """Admits pods of image .../train:v1, refuses others naming the pod, warns on label warn=yes."""

    def __init__(self) -> None:
        self.decisions = 0
        self.mutations = 0

    async def decide(self, policy_input: PolicyInput) -> Decision:
        self.decisions += 1
        obj = policy_input["request"].get("object")
        assert obj is not None
        name = obj["metadata"]["name"]
        if obj["spec"]["containers"][0]["image"].endswith(":v1"):
            warned = obj["metadata"].get("labels", {}).get("warn") == "yes"
            warnings = [Finding(rule="w", message=f"[w] pod {name}", mode="warn")] if warned else []
            return Decision(allowed=True, warnings=warnings, tenant=TENANT, inventory_revision=1)
        denial = Finding(rule="image-registry", message=f"[image-registry] pod {name} is refused")
        return Decision(allowed=False, denials=[denial], tenant=TENANT, inventory_revision=1)

    async def decide_all(self, policy_inputs: list[PolicyInput]) -> list[Decision]:
        return [await self.decide(i) for i in policy_inputs]

    async def mutate(self, policy_input: PolicyInput) -> Mutation:
        self.mutations += 1
        patch = [PatchOperation(op="add", path="/spec/priorityClassName", value="research")]
        return Mutation(patch=patch, inventory_revision=1, reads_gpu_usage=False)

    async def is_healthy(self) -> bool:
        return True


def serve(
    policy: Any, reviews: list[dict[str, Any]], *, seconds: float = 2.0, version: list[int] | None = None
) -> list[Any]:
    version = version if version is not None else [1]

    async def run() -> list[Any]:
        server = admission_server(
            policy,
            FactSources(inventory=Inventory()),
            AdmissionOptions(decision_reuse_seconds=seconds),
            version=lambda: version[0],
        )
        answers = []
        for review in reviews:
            req = parse_request(review)
            answers.append(((await server.validate(req)).response, (await server.mutate(req)).response))
        return answers

    return asyncio.run(run())


def test_a_burst_of_copies_costs_one_evaluation_and_each_answer_is_its_own() -> None:
    policy = CountingPolicy()
    answers = serve(policy, [pod_review(i) for i in range(200)])
    assert all(v.allowed and m.patch for v, m in answers)
    assert [v.uid for v, _ in answers] == [f"review-{i}" for i in range(200)]
    assert (policy.decisions, policy.mutations) == (1, 1)


def test_reuse_off_evaluates_every_pod() -> None:
    policy = CountingPolicy()
    serve(policy, [pod_review(i) for i in range(5)], seconds=0)
    assert (policy.decisions, policy.mutations) == (5, 5)


def test_every_refusal_is_evaluated_and_names_its_own_pod() -> None:
    policy = CountingPolicy()
    reviews = [pod_review(i, image="docker.io/evil/miner:latest") for i in range(3)]
    answers = serve(policy, reviews)
    messages = [v.status.message for v, _ in answers]
    assert messages == [f"[image-registry] pod sweep-{i:05d} is refused" for i in range(3)]
    assert policy.decisions == 3


def test_an_admission_with_a_warning_is_evaluated_each_time() -> None:
    policy = CountingPolicy()
    reviews = [pod_review(i, object__metadata__labels={"warn": "yes"}) for i in range(3)]
    answers = serve(policy, reviews)
    assert [v.warnings for v, _ in answers] == [[f"[w] pod sweep-{i:05d}"] for i in range(3)]
    assert policy.decisions == 3


def test_a_change_to_the_facts_opa_holds_ends_reuse() -> None:
    policy = CountingPolicy()
    version = [1]
    decide = policy.decide

    async def decide_then_change(policy_input: PolicyInput) -> Decision:
        decision = await decide(policy_input)
        version[0] += 1  # a Tenant change written into OPA right after this evaluation
        return decision

    policy.decide = decide_then_change  # type: ignore[method-assign]
    serve(policy, [pod_review(i) for i in range(4)], version=version)
    assert policy.decisions == 4


def gpu_pod(index: int, model: str, gpus: int) -> AdmissionRequest:
    """A copy of a GPU pod: only its name and uid differ from the other copies asking the same."""
    review: dict[str, Any] = copy.deepcopy(dict(request(index, model, gpus).document))
    review["object"]["metadata"]["uid"] = f"pod-uid-{index}"
    return parse_request(review)


def test_gpu_copies_reuse_the_decision_within_the_headroom_and_never_pass_the_quota() -> None:
    """The headroom decides whether a decision made at another usage still holds."""
    pods = [("h100", 2)] * 30 + [("a100", 1)] * 10 + [("h100", 2)] * 30

    async def run(policy: QuotaPolicy, ledgers: Ledgers) -> list[bool]:
        server = admission_server(
            policy,
            FactSources(inventory=Inventory(), ledgers=ledgers),
            AdmissionOptions(decision_reuse_seconds=5.0),
            version=lambda: 1,
        )
        verdicts: list[bool] = []
        for start in range(0, len(pods), 7):  # bursts of 7 arriving together
            chunk = list(enumerate(pods))[start : start + 7]
            answers = await asyncio.gather(*(server.validate(gpu_pod(i, m, n)) for i, (m, n) in chunk))
            verdicts.extend(a.response.allowed for a in answers)
        return verdicts

    for headroom in (True, False):
        policy, ledgers = QuotaPolicy(total=50, models={"h100": 40}, headroom=headroom), Ledgers()
        verdicts = asyncio.run(run(policy, ledgers))
        assert verdicts == sequential(pods, 50, {"h100": 40})
        held = usage(ledgers.stored)
        assert held.total == sum(n for (_, n), ok in zip(pods, verdicts, strict=True) if ok) <= 50
        assert held.by_model.get("h100", 0) <= 40


def test_copies_arriving_together_wait_for_the_first_ones_evaluation() -> None:
    """A Job's pods in bursts of 10, well within the quota: one evaluation for all 100."""
    policy, ledgers = QuotaPolicy(total=1000, models={}), Ledgers()

    async def run() -> list[bool]:
        server = admission_server(
            policy,
            FactSources(inventory=Inventory(), ledgers=ledgers),
            AdmissionOptions(decision_reuse_seconds=5.0),
            version=lambda: 1,
        )
        verdicts: list[bool] = []
        for start in range(0, 100, 10):
            burst = [server.validate(gpu_pod(i, "h100", 1)) for i in range(start, start + 10)]
            verdicts.extend(a.response.allowed for a in await asyncio.gather(*burst))
        return verdicts

    assert asyncio.run(run()) == [True] * 100
    assert usage(ledgers.stored).total == 100
    assert policy.evaluations == 1


def test_a_decision_for_a_gpu_pod_is_not_reused_beyond_its_headroom() -> None:
    policy = QuotaPolicy(total=4, models={})

    async def run() -> list[bool]:
        server = admission_server(
            policy,
            FactSources(inventory=Inventory(), ledgers=Ledgers()),
            AdmissionOptions(decision_reuse_seconds=5.0),
            version=lambda: 1,
        )
        return [(await server.validate(gpu_pod(i, "h100", 2))).response.allowed for i in range(4)]

    assert asyncio.run(run()) == [True, True, False, False]


def test_a_mutation_that_reads_the_usage_is_reused_only_at_the_same_usage() -> None:
    class UsagePolicy(CountingPolicy):
        def __init__(self, reads: bool) -> None:
            super().__init__()
            self.reads = reads

        async def mutate(self, policy_input: PolicyInput) -> Mutation:
            self.mutations += 1
            return Mutation(inventory_revision=1, reads_gpu_usage=self.reads)

    async def run(policy: UsagePolicy) -> None:
        ledgers = Ledgers()
        server = admission_server(
            policy,
            FactSources(inventory=Inventory(), ledgers=ledgers),
            AdmissionOptions(decision_reuse_seconds=5.0),
            version=lambda: 1,
        )
        for i in range(4):
            await server.mutate(gpu_pod(i, "h100", 1))
            if i % 2:  # the tenant's usage moves after every second pod
                held = with_reservation(
                    ledgers.stored,
                    f"other-{i}",
                    GpuAmount(total=1, by_model={"h100": 1}),
                    now=now(),
                    pod="x/y",
                )
                ledgers.stored = held

    reading = UsagePolicy(reads=True)
    asyncio.run(run(reading))
    assert reading.mutations == 2  # pods 0 and 1 at usage 0, pods 2 and 3 at usage 1
    blind = UsagePolicy(reads=False)
    asyncio.run(run(blind))
    assert blind.mutations == 1
