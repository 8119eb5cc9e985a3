"""Reusing a decision for an identical pod (pure: no I/O; the evaluation door and the clock are given).

A Job of a thousand copies arrives as a thousand Pod CREATEs that differ only in the pod's name, uid
and timestamps (an Indexed Job's also in their index: a label, an annotation, the hostname).
labgate's rules never decide on those (they only quote the name in messages; the
unit tests check the shipped rules for it, and docs/infra.md asks the same of new ones), so one
policy evaluation serves the burst: the answer for the first pod is reused for the next identical
one, for a few seconds.

What is reused, and when:
- only Pod CREATEs (the burst), keyed by the whole policy input (the request, the user, the pod
  spec, labels and annotations, the gathered facts: secrets, images, claims) minus the pod's
  identity (`IDENTITY_FIELDS`), plus the version of the facts OPA holds (`facts_version`: the
  inventory writes and the policy revision this replica made): any change to them starts afresh;
- only clean admissions: admitted with no denial, warning or dry-run finding, so that no message
  naming another pod is ever shown, and every refusal is evaluated (and explained) on its own;
- GPU pods: the key leaves out the tenant's GPU usage, which moves with every admission; the
  decision is reused only at the usage it was made at or within the headroom the policy returned
  (the usage up to which the pod still fits), the same test the GPU batch applies;
- mutations: only when OPA says the patch does not read the GPU usage (`reads_gpu_usage`), or at
  the same usage;
- for at most `seconds` (LABGATE_DECISION_REUSE_SECONDS; 0 turns reuse off): a bound for what the
  version does not see (policies OPA loads by itself).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from labgate.core import json_bytes
from labgate.core.decisions import Decision, Mutation
from labgate.core.expiring_cache import ExpiringCache
from labgate.core.metrics import DECISIONS_REUSED
from webhook.policy_input import PolicyInput
from webhook.reservation_batch import holds_at, input_usage

# Metadata fields that differ between the copies of one pod and that no rule decides on
# (generateName too: an Indexed Job's pods are "<job>-<index>-...").
IDENTITY_FIELDS = frozenset(
    {"name", "generateName", "uid", "creationTimestamp", "managedFields", "resourceVersion", "generation"}
)
# An Indexed Job's pods differ by their index too: in this label and annotation, and in the spec's
# hostname ("<job>-<index>"). No rule decides on them either (tests/unit/policies/test_reuse_identity.py).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_SPEC_FIELDS = frozenset({"hostname"})

DEFAULT_MAX_ENTRIES = 4096

Value = TypeVar("Value")


def _without_identity(metadata: Any) -> Any:
    if not isinstance(metadata, dict):
        return metadata
    kept = {k: v for k, v in metadata.items() if k not in IDENTITY_FIELDS}
    for field in ("labels", "annotations"):
        if isinstance(found := kept.get(field), dict) and COMPLETION_INDEX in found:
            kept[field] = {k: v for k, v in found.items() if k != COMPLETION_INDEX}
    return kept


def _without_index(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A pod (or pod template document) without its identity and index: its metadata stripped of
    them, its spec of the fields an Indexed Job sets per index."""
    stripped = {**pod, "metadata": _without_identity(pod.get("metadata"))}
    spec = pod.get("spec")
    if isinstance(spec, dict) and not INDEX_SPEC_FIELDS.isdisjoint(spec):
        stripped["spec"] = {k: v for k, v in spec.items() if k not in INDEX_SPEC_FIELDS}
    return stripped


def pod_create_key(policy_input: PolicyInput, facts_version: Hashable) -> bytes | None:
    """The reuse key of a Pod CREATE's policy input (its GPU usage left out), or None for any other
    request. Two pods get one key exactly when their inputs differ in nothing but the pod's identity."""
    request = policy_input.get("request")
    if not isinstance(request, dict):
        return None
    kind = request.get("kind") or {}
    if (kind.get("group"), kind.get("kind"), request.get("operation")) != ("", "Pod", "CREATE"):
        return None
    if request.get("subResource"):
        return None
    obj = request.get("object")
    if not isinstance(obj, dict):
        return None
    stripped_request = {k: v for k, v in request.items() if k not in ("uid", "name", "object", "oldObject")}
    stripped_request["object"] = _without_index(obj)
    templates = [
        _without_index(t) if isinstance(t, dict) else t for t in policy_input.get("pod_templates") or []
    ]
    document = {
        **{k: v for k, v in policy_input.items() if k not in ("request", "pod_templates", "gpu_usage")},
        "request": stripped_request,
        "pod_templates": templates,
        "facts_version": repr(facts_version),
    }
    return hashlib.blake2b(json_bytes.dumps_sorted(document), digest_size=20).digest()


def is_clean_admission(decision: Decision) -> bool:
    """Admitted with nothing to say: the only decisions worth reusing (no other pod's name in them)."""
    return (
        decision.allowed
        and not decision.denials
        and not decision.warnings
        and not decision.dry_run
        and decision.inventory_revision is not None
    )


@dataclass(frozen=True)
class Reused(Generic[Value]):
    """A stored answer and the GPU usage (comparable form) it was made at."""

    value: Value
    usage: Hashable


class ReuseCache(Generic[Value]):
    """Answers by key for `seconds`, the most recent `max_entries` of them (an ExpiringCache: an
    answer `seconds` old is no longer given)."""

    def __init__(
        self,
        seconds: float,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.seconds = seconds
        self._entries: ExpiringCache[bytes, Reused[Value]] = ExpiringCache(max_entries, clock)

    @property
    def enabled(self) -> bool:
        return self.seconds > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Reused[Value] | None:
        held = self._entries.get(key)
        return held.value if held is not None else None

    def put(self, key: bytes, value: Value, usage: Hashable) -> None:
        self._entries.put(key, Reused(value, usage), self.seconds)


class Evaluations(Protocol):
    """What reuse asks of the evaluation door (webhook.evaluation.Evaluator)."""

    async def decide(self, policy_input: PolicyInput) -> Decision: ...

    async def mutate(self, policy_input: PolicyInput) -> Mutation: ...


class DecisionReuse:
    """Decisions and mutations of Pod CREATEs, each reused for the identical pods that follow."""

    def __init__(self, evaluations: Evaluations, *, seconds: float, facts_version: Callable[[], Hashable]):
        """`facts_version()`: the version of the facts OPA holds (a change starts afresh)."""
        self.evaluations = evaluations
        self.facts_version = facts_version
        self._decisions: ReuseCache[Decision] = ReuseCache(seconds)
        self._mutations: ReuseCache[Mutation] = ReuseCache(seconds)
        # Not labgate.core.coalesce's single flight: copies wait for the first one's evaluation and
        # then look in the cache (its answer may not hold at their GPU usage), and the first evaluates
        # in its own task, not one apart, which keeps a burst's order of arrival into the GPU batch.
        self._deciding: dict[bytes, asyncio.Future[None]] = {}

    def _key(self, cache: ReuseCache[Any], policy_input: PolicyInput) -> bytes | None:
        return pod_create_key(policy_input, self.facts_version()) if cache.enabled else None

    async def decide(self, policy_input: PolicyInput) -> Decision:
        """The decision of an identical pod decided moments before (or being decided now: copies
        arriving together wait for the first one's evaluation), when it holds at this pod's GPU usage
        (it asks none, the same usage, or one within the headroom the policy returned); else one policy
        query, kept for the next identical pod when it is a clean admission."""
        key = self._key(self._decisions, policy_input)
        if key is None:
            return await self.evaluations.decide(policy_input)
        at = input_usage(policy_input)
        if (held := self._decisions.get(key)) is None and (first := self._deciding.get(key)):
            await asyncio.wait([first])
            held = self._decisions.get(key)
        if held is not None and holds_at(held.value, held.usage, at):
            DECISIONS_REUSED.labels("validate").inc()
            return held.value
        if key in self._deciding:
            return await self.evaluations.decide(policy_input)
        deciding = asyncio.get_running_loop().create_future()
        self._deciding[key] = deciding
        try:
            decision = await self.evaluations.decide(policy_input)
            if is_clean_admission(decision):
                self._decisions.put(key, decision, at)
            return decision
        finally:
            del self._deciding[key]
            deciding.set_result(None)

    async def mutate(self, policy_input: PolicyInput) -> Mutation:
        """The mutation of an identical pod mutated moments before, when its patch does not read the
        GPU usage or this pod's usage is the same; else one policy query."""
        key = self._key(self._mutations, policy_input)
        at = input_usage(policy_input)
        held = self._mutations.get(key) if key is not None else None
        if held is not None and (not held.value.reads_gpu_usage or held.usage == at):
            DECISIONS_REUSED.labels("mutate").inc()
            return held.value
        mutation = await self.evaluations.mutate(policy_input)
        if key is not None and mutation.inventory_revision is not None:
            self._mutations.put(key, mutation, at)
        return mutation
