"""The certificate rotation steps (pure): never a moment where the apiserver and a replica disagree."""

from __future__ import annotations

import datetime as dt

from rbac.cert_lifetimes import Lifetimes
from rbac.cert_rotation import (
    CertificateState,
    Observation,
    fingerprint,
    issuer_fingerprint,
    next_step,
    split_bundle,
)

NOW = dt.datetime.now(dt.UTC)
NAMES = ("labgate-webhook.labgate-system.svc",)
LONG = Lifetimes(ca=dt.timedelta(days=365), serving=dt.timedelta(days=30), renew_before=dt.timedelta(days=7))


def fresh() -> CertificateState:
    state, step = next_step(None, Observation((), frozenset()), now=NOW, lifetimes=LONG, dns_names=NAMES)
    assert step == "create"
    return state


def seen(state: CertificateState, *, served_by: CertificateState | None = None) -> Observation:
    """Everything already carries `state`'s bundle; replicas serve `served_by`'s certificate."""
    bundle = frozenset(fingerprint(c) for c in state.bundle)
    issuer = issuer_fingerprint((served_by or state).serving.cert_pem, [*state.bundle, state.ca.cert_pem])
    return Observation((bundle, bundle), frozenset({issuer or "unknown"}))


def test_create_trusts_one_ca_that_signed_the_serving_certificate() -> None:
    state = fresh()
    assert state.bundle == (state.ca.cert_pem,)
    assert issuer_fingerprint(state.serving.cert_pem, [state.ca.cert_pem]) == fingerprint(state.ca.cert_pem)
    serving = state.serving.certificate
    # Valid for the serving lifetime (plus the few minutes it is backdated against clock skew).
    assert serving.not_valid_after_utc - serving.not_valid_before_utc <= dt.timedelta(days=30, minutes=6)


def test_a_healthy_state_does_nothing() -> None:
    state = fresh()
    assert next_step(state, seen(state), now=NOW, lifetimes=LONG, dns_names=NAMES) == (state, "none")


def test_a_serving_certificate_near_expiry_is_renewed_under_the_same_ca() -> None:
    state = fresh()
    later = NOW + dt.timedelta(days=24)
    renewed, step = next_step(state, seen(state), now=later, lifetimes=LONG, dns_names=NAMES)
    assert step == "renew-serving"
    assert renewed.ca == state.ca
    assert renewed.bundle == state.bundle
    assert renewed.serving != state.serving


def test_a_ca_rotation_takes_three_steps_each_waiting_for_the_last_to_be_visible() -> None:
    state = fresh()
    near_ca_expiry = NOW + dt.timedelta(days=330)
    trusting, step = next_step(state, seen(state), now=near_ca_expiry, lifetimes=LONG, dns_names=NAMES)
    assert step == "trust-next"
    assert trusting.next_ca is not None
    assert trusting.bundle == (state.ca.cert_pem, trusting.next_ca.cert_pem)
    assert trusting.serving == state.serving, "replicas keep the old certificate until both CAs are trusted"

    # The webhook configurations still carry only the old CA: wait.
    stale = seen(state)
    assert next_step(trusting, stale, now=near_ca_expiry, lifetimes=LONG, dns_names=NAMES)[1] == "none"

    serving, step = next_step(trusting, seen(trusting), now=near_ca_expiry, lifetimes=LONG, dns_names=NAMES)
    assert step == "serve-next"
    assert serving.ca == trusting.next_ca
    assert serving.next_ca is None
    assert len(serving.bundle) == 2, "the old CA stays trusted while replicas switch"
    assert issuer_fingerprint(serving.serving.cert_pem, list(serving.bundle)) == fingerprint(
        serving.ca.cert_pem
    )

    # One replica still serves the old certificate: keep both CAs.
    mixed = Observation(
        seen(serving).bundles_in_configurations,
        frozenset({fingerprint(state.ca.cert_pem), fingerprint(serving.ca.cert_pem)}),
    )
    # (At the time the new serving certificate was issued: it is made with the real clock.)
    assert next_step(serving, mixed, now=NOW, lifetimes=LONG, dns_names=NAMES)[1] == "none"

    done, step = next_step(serving, seen(serving), now=near_ca_expiry, lifetimes=LONG, dns_names=NAMES)
    assert step == "drop-previous"
    assert done.bundle == (serving.ca.cert_pem,)


def test_a_replica_that_cannot_be_asked_keeps_the_previous_ca_but_never_stops_renewals() -> None:
    """Mid-rotation (both CAs trusted, the new one served), a replica whose certificate cannot be
    read (a NetworkPolicy in the way) holds the previous CA in the bundle; its serving certificate
    is still renewed before it expires, or the webhook would go dark behind the wait."""
    state = fresh()
    near_ca_expiry = NOW + dt.timedelta(days=330)
    trusting, _ = next_step(state, seen(state), now=near_ca_expiry, lifetimes=LONG, dns_names=NAMES)
    serving, step = next_step(trusting, seen(trusting), now=near_ca_expiry, lifetimes=LONG, dns_names=NAMES)
    assert step == "serve-next"
    unasked = Observation(seen(serving).bundles_in_configurations, frozenset({"unknown"}))
    assert next_step(serving, unasked, now=NOW, lifetimes=LONG, dns_names=NAMES) == (serving, "none")
    renewed, step = next_step(
        serving, unasked, now=NOW + dt.timedelta(days=24), lifetimes=LONG, dns_names=NAMES
    )
    assert step == "renew-serving"
    assert renewed.bundle == serving.bundle, "both CAs stay trusted"
    assert renewed.ca == serving.ca
    assert issuer_fingerprint(renewed.serving.cert_pem, list(renewed.bundle)) == fingerprint(
        serving.ca.cert_pem
    )
    assert renewed.serving != serving.serving


def test_split_bundle_round_trips() -> None:
    a, b = fresh(), fresh()
    bundle = a.ca.cert_pem + b.ca.cert_pem
    assert [fingerprint(c) for c in split_bundle(bundle)] == [
        fingerprint(a.ca.cert_pem),
        fingerprint(b.ca.cert_pem),
    ]
