"""labgate's own refusals (pure): the answers the webhook gives when it refuses for a reason of its
own rather than a policy's (no decision could be had, the replica is overloaded, its facts are old,
the request is too large, the GPU ledger cannot take the reservation).

One type, `Refusal`: a stable rule id, the HTTP code and reason the apiserver shows, and the message
for the researcher, which names the rule and says how to fix it. Policy denials are built from
OPA's findings by `webhook.admission.build_response`; every other refusal is one of these."""

from __future__ import annotations

from dataclasses import dataclass

from webhook.review import AdmissionRequest, AdmissionResponse, ResponseStatus


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refusal of labgate's own: `rule` is the id its message starts with (`[rule] ...`)."""

    rule: str
    code: int
    reason: str
    message: str

    def response(self, request: AdmissionRequest) -> AdmissionResponse:
        """The AdmissionResponse refusing `request` (its uid echoed)."""
        return AdmissionResponse(
            uid=request.uid,
            allowed=False,
            status=ResponseStatus(code=self.code, reason=self.reason, message=self.message),
        )


def engine_unavailable(reason: str) -> Refusal:
    """No policy decision could be had: an error must never admit by accident."""
    message = (
        f"[policy-engine-unavailable] labgate could not evaluate its policies ({reason}), so the request "
        "was refused to stay safe. Fix: retry in a minute; if it persists, tell the infra team"
    )
    return Refusal("policy-engine-unavailable", 503, "ServiceUnavailable", message)


def facts_stale(*, age: float, bound: float) -> Refusal:
    """A replica that cannot prove its watch-fed facts are current."""
    heard = (
        "never heard from the Kubernetes API"
        if age == float("inf")
        else f"not heard from the Kubernetes API for {age:.0f}s"
    )
    message = (
        f"[facts-stale] this labgate webhook replica has {heard} (its bound is {bound:.0f}s), so it "
        "cannot know the current tenants, namespaces and GPU usage, and refuses rather than decide on "
        "old facts. Fix: retry; the other replicas answer while this one reports not ready. If it "
        "persists, tell the infra team (docs/operations.md, 'Stale facts')"
    )
    return Refusal("facts-stale", 503, "ServiceUnavailable", message)


def ledger_full(tenant: str, reservations: int) -> Refusal:
    """The tenant's GPU ledger cannot take one more reservation: pods admitted and not yet settled
    by the reconciler (which does so within seconds when it runs)."""
    message = (
        f"[gpu-ledger-full] tenant {tenant!r} has {reservations} GPU pods admitted that labgate has not "
        "yet seen start, the most its quota ledger can hold. Fix: retry in a minute (Jobs retry by "
        "themselves); if it persists, labgate's reconciler is not running: tell the infra team "
        "(docs/operations.md, 'GPU ledger capacity')"
    )
    return Refusal("gpu-ledger-full", 403, "Forbidden", message)


def ledger_busy(tenant: str, attempts: int) -> Refusal:
    """A GPU pod whose reservation lost the ledger's compare-and-swap `attempts` times."""
    message = (
        f"[gpu-ledger-busy] tenant {tenant!r} is admitting many GPU pods at once and this one lost "
        f"the race {attempts} times. Fix: retry; Jobs retry by themselves"
    )
    return Refusal("gpu-ledger-busy", 429, "TooManyRequests", message)


def overloaded(*, in_flight: int, waiting: int, waited_ms: float, rate: float, line_full: bool) -> Refusal:
    """The replica's slots are all taken and this request waited its bound for one, or found the
    line of waiting requests full."""
    if line_full:
        why = (
            "the line of requests waiting for a slot is full (LABGATE_MAX_WAITING_ADMISSIONS), so this "
            "one was refused at once"
        )
    else:
        why = (
            f"this one waited {waited_ms:.0f} ms for a slot, the most it may "
            "(LABGATE_MAX_ADMISSION_WAIT_SECONDS), and was refused rather than left to wait past the "
            "apiserver's timeout"
        )
    message = (
        f"[admission-overloaded] this labgate webhook replica is deciding {in_flight} requests "
        f"at once, its bound (LABGATE_MAX_IN_FLIGHT), with {waiting} more waiting for a slot and "
        f"{rate:.0f} arriving per second; {why}. Fix: retry (controllers retry by themselves); if it "
        "persists, tell the infra team to add webhook replicas (webhook.replicas) or slow the client "
        "creating objects this fast"
    )
    return Refusal("admission-overloaded", 429, "TooManyRequests", message)


def tenant_overloaded(
    *,
    tenant: str | None,
    held: int,
    waiting: int,
    limit: int,
    waited_ms: float,
    rate: float,
    pushed_out: bool,
) -> Refusal:
    """The requests of one tenant (or of no tenant's namespace) hold their whole share of the
    replica's slots and this one waited its bound behind them, or gave its place in a full line up
    to another tenant's request: the rest of the replica stays for the other tenants."""
    whose = f"of tenant {tenant!r}" if tenant else "outside any tenant's namespace"
    if pushed_out:
        why = (
            f"the line of requests waiting for a slot was full (LABGATE_MAX_WAITING_ADMISSIONS) and "
            f"this one, after waiting {waited_ms:.0f} ms, gave its place up to another tenant's request"
        )
    else:
        why = (
            f"this one waited {waited_ms:.0f} ms for a slot, the most it may "
            "(LABGATE_MAX_ADMISSION_WAIT_SECONDS), so that other tenants' requests are still decided"
        )
    message = (
        f"[admission-overloaded] this labgate webhook replica is deciding {held} requests {whose} at "
        f"once (one tenant may have at most LABGATE_MAX_IN_FLIGHT_PER_TENANT decided at once, of "
        f"{limit} in all), with {waiting} more of them waiting for a slot and {rate:.0f} arriving per "
        f"second in all; {why}. Fix: retry (controllers retry by themselves); if it persists, slow "
        "the client creating objects this fast"
    )
    return Refusal("admission-overloaded", 429, "TooManyRequests", message)


def too_many_references(*, kind: str, name: str, counts: dict[str, int], bound: int) -> Refusal:
    """A request whose pod templates name more objects than labgate reads to decide one request
    (DRA claims, the PersistentVolumes of claim templates, checked images): each is a read of the
    API or a registry, and a retry would fail the same way."""
    total = sum(counts.values())
    named = ", ".join(f"{count} {what}" for what, count in counts.items() if count)
    message = (
        f'[too-many-references] {kind} "{name}" names {total} objects labgate must read to decide it '
        f"({named}); labgate reads at most {bound} per request (LABGATE_MAX_REFERENCES_PER_REQUEST). "
        "Fix: split the workload into objects that each name fewer claims, volumes and images (one "
        "ResourceClaimTemplate can serve every pod of a workload), or ask the infra team about the bound"
    )
    return Refusal("too-many-references", 403, "Forbidden", message)


def _size_text(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.0f} KiB"
    return f"{size} bytes"


def request_too_large(*, kind: str, name: str, size: int, limit: int, deadline: float | None) -> Refusal:
    """A request too large to decide (above `limit`), or too complex to decide within `deadline`:
    a retry would fail the same way, so the message says how to make it smaller."""
    if deadline is None:
        what = (
            f"is {_size_text(size)} as an admission request; labgate decides requests up to "
            f"{_size_text(limit)}"
        )
    else:
        what = (
            f"is {_size_text(size)} as an admission request and could not be decided within "
            f"{deadline:.1f}s; requests above {_size_text(limit)} may be too complex to decide in time"
        )
    message = (
        f'[request-too-large] {kind} "{name}" {what}. Fix: split it into smaller objects (fewer pod '
        "templates, containers, env entries or volumes each; bulky data belongs in a volume, not in "
        "the spec), or ask the infra team about the limit"
    )
    return Refusal("request-too-large", 413, "RequestEntityTooLarge", message)


def request_name(request: AdmissionRequest) -> str:
    """The name a refusal quotes: the request's, the object's, or its generateName."""
    metadata = (request.object or {}).get("metadata") or {}
    return str(request.name or metadata.get("name") or metadata.get("generateName") or "")
