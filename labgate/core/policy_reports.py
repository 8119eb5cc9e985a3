"""PolicyReports (`wgpolicyk8s.io/v1alpha2`, the format Kyverno and others write), as plain data (pure).

labgate writes two reports per tenant namespace, each with its own writer so neither overwrites the
other's results:

- `labgate-audit`: what the last audit found about the objects already there (`labgate audit
  --write-reports`, or the scheduled audit), replaced whole on each run;
- `labgate-admission`: the warn and dry-run findings of objects the webhook admitted, one entry per
  (object, rule), updated as objects are admitted again (a re-admitted object with no findings drops
  its results: the finding was fixed). Kept to the newest `MAX_RESULTS` results.

`fail` is what enforce mode refuses, `warn` a warn or dry-run finding (the mode is in `properties`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

API_VERSION = "wgpolicyk8s.io/v1alpha2"
KIND = "PolicyReport"
AUDIT_REPORT = "labgate-audit"
ADMISSION_REPORT = "labgate-admission"
SOURCE = "labgate"
# A report is one etcd object (at most 1.5 MB); a result is a few hundred bytes.
MAX_RESULTS = 1000
RESULT_OF_MODE = {"enforce": "fail", "warn": "warn", "dry-run": "warn"}

Manifest = dict[str, Any]


@dataclass(frozen=True)
class ResourceRef:
    """The object a result is about, as a PolicyReport's `resources[]` names it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None

    def as_dict(self) -> Manifest:
        ref: Manifest = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref

    @property
    def key(self) -> tuple[str, str, str]:
        """Which object, whatever its uid (an object deleted and created again is the same entry)."""
        return (self.api_version.split("/")[0] if "/" in self.api_version else "", self.kind, self.name)


def result(
    *, rule: str, mode: str, message: str, resource: ResourceRef, tenant: str | None, now: float
) -> Manifest:
    """One finding as a PolicyReport result."""
    return {
        "source": SOURCE,
        "policy": rule,
        "rule": rule,
        "result": RESULT_OF_MODE.get(mode, "warn"),
        "message": message,
        "properties": {"mode": mode, "tenant": tenant or ""},
        "resources": [resource.as_dict()],
        "timestamp": {"seconds": int(now), "nanos": 0},
    }


def summary(results: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for entry in results:
        outcome = str(entry.get("result", ""))
        if outcome in counts:
            counts[outcome] += 1
    return counts


def report(namespace: str, name: str, results: list[Manifest]) -> Manifest:
    """A whole PolicyReport object (without resourceVersion)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "labgate"},
        },
        "summary": summary(results),
        "results": results,
    }


def result_key(entry: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The object a stored result is about (its first resource), or None when it names none."""
    resources = entry.get("resources") or []
    if not resources:
        return None
    ref = resources[0]
    api_version = str(ref.get("apiVersion", ""))
    group = api_version.split("/", maxsplit=1)[0] if "/" in api_version else ""
    return (group, str(ref.get("kind", "")), str(ref.get("name", "")))


def merged_results(
    existing: Iterable[Mapping[str, Any]],
    updates: Mapping[tuple[str, str, str], list[Manifest]],
    *,
    max_results: int = MAX_RESULTS,
) -> list[Manifest]:
    """`existing` with every object in `updates` replaced by its new results (none: dropped), the
    newest `max_results` kept, ordered by object then rule (so an unchanged report compares equal)."""
    kept = [dict(e) for e in existing if result_key(e) not in updates]
    merged = kept + [r for results in updates.values() for r in results]
    merged.sort(key=lambda r: int((r.get("timestamp") or {}).get("seconds", 0)), reverse=True)
    merged = merged[:max_results]
    merged.sort(key=lambda r: (result_key(r) or ("", "", ""), str(r.get("rule", ""))))
    return merged


def without_gone(
    results: Iterable[Mapping[str, Any]],
    live: Mapping[tuple[str, str], set[str]],
    *,
    before: float,
) -> list[Manifest]:
    """`results` without those about objects that are gone: of a kind listed in `live` ((group,
    kind) -> the names that exist), not among its names, and recorded before `before` (a result
    written since the list may be about an object created since). Kinds not listed are kept."""
    kept = []
    for entry in results:
        key = result_key(entry)
        names = live.get(key[:2]) if key is not None else None
        recorded = int((entry.get("timestamp") or {}).get("seconds", 0))
        if names is not None and key is not None and key[2] not in names and recorded < before:
            continue
        kept.append(dict(entry))
    return kept


def same_findings(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> bool:
    """Whether two result lists say the same (timestamps aside): no write is needed to go from a to b."""

    def comparable(results: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (result_key(r), r.get("rule"), r.get("result"), r.get("message"), str(r.get("properties")))
            for r in results
        )

    return comparable(a) == comparable(b)
