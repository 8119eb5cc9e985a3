"""The chart's certificate lifetimes (Go durations) as the rotation reads them, and the sets that
would never come to rest refused with the value to change."""

from __future__ import annotations

import datetime as dt

import pytest

from rbac.cert_lifetimes import Lifetimes, lifetimes_from, parse_go_duration
from rbac.cert_rotation import CertificateState, Observation, fingerprint, next_step

NAMES = ("labgate-webhook.labgate-system.svc",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("720h", dt.timedelta(days=30)),
        ("1h30m", dt.timedelta(minutes=90)),
        ("90s", dt.timedelta(seconds=90)),
        ("1.5h", dt.timedelta(minutes=90)),
        ("250ms", dt.timedelta(milliseconds=250)),
    ],
)
def test_go_durations_are_read_as_go_reads_them(text: str, expected: dt.timedelta) -> None:
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30d", "720", "h", "1h 30m", "-1h", "1h30"])
def test_what_is_not_a_go_duration_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration such as 720h"):
        parse_go_duration(text)


def test_the_charts_defaults_are_the_rotations_defaults() -> None:
    assert lifetimes_from("720h", "168h", "8760h") == Lifetimes()


@pytest.mark.parametrize(
    ("serving", "renew_before", "ca", "says"),
    [
        ("720h", "720h", "8760h", "renewBefore 720h must be shorter than duration 720h"),
        ("720h", "0s", "8760h", "renewBefore 0s must be longer than 0"),
        ("720h", "168h", "888h", "caDuration 888h must be longer than duration 720h plus renewBefore 168h"),
    ],
)
def test_lifetimes_that_would_rotate_at_every_check_are_refused(
    serving: str, renew_before: str, ca: str, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        lifetimes_from(serving, renew_before, ca)


def steps_until_rest(lifetimes: Lifetimes, now: dt.datetime, state: CertificateState) -> list[str]:
    """The steps the rotation takes at `now` with every replica and configuration caught up."""
    taken: list[str] = []
    for _ in range(6):
        bundle = frozenset(fingerprint(c) for c in state.bundle)
        observation = Observation((bundle, bundle), frozenset({fingerprint(state.ca.cert_pem)}))
        state, step = next_step(state, observation, now=now, lifetimes=lifetimes, dns_names=NAMES)
        if step == "none":
            return taken
        taken.append(step)
    raise AssertionError(f"no rest after {taken}")


def test_new_lifetimes_rotate_once_and_then_rest() -> None:
    """What a `helm upgrade` of the chart's values does: certificates made under the old lifetimes
    whose CA the new ones find too short are rotated (three steps), and then the rotation rests;
    under the old lifetimes nothing happens."""
    now = dt.datetime.now(dt.UTC)
    old = lifetimes_from("1h", "30m", "3h")
    state, _ = next_step(None, Observation((), frozenset()), now=now, lifetimes=old, dns_names=NAMES)
    assert steps_until_rest(old, now, state) == []
    # The CA's 3h left is within the new 2h + 1h: replaced by one of 4h, which is not.
    assert steps_until_rest(lifetimes_from("2h", "1h", "4h"), now, state) == [
        "trust-next",
        "serve-next",
        "drop-previous",
    ]
