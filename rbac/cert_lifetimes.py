"""How long labgate's own webhook certificates live and when they are renewed, read from the Go
durations an infra team writes in the chart's values (`certificates.selfSigned`).

    lifetimes = lifetimes_from("720h", "168h", "8760h")   # serving, renew before, CA

A set of lifetimes is refused unless the rotation comes to rest with it: a serving certificate that
is renewed as soon as it is issued (renew before >= its lifetime), or a CA that is replaced as soon
as it is made (its lifetime no longer than a serving certificate's plus the renewal margin), would
rotate at every check.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

# Go's time.ParseDuration units, as cert-manager's durations (and the chart's) are written.
_UNITS = {
    "ns": dt.timedelta(microseconds=0.001),
    "us": dt.timedelta(microseconds=1),
    "µs": dt.timedelta(microseconds=1),
    "ms": dt.timedelta(milliseconds=1),
    "s": dt.timedelta(seconds=1),
    "m": dt.timedelta(minutes=1),
    "h": dt.timedelta(hours=1),
}
_TERM = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")


@dataclass(frozen=True)
class Lifetimes:
    """The CA's and the serving certificate's lifetimes, and how long before expiry each is replaced."""

    ca: dt.timedelta = dt.timedelta(days=365)
    serving: dt.timedelta = dt.timedelta(days=30)
    renew_before: dt.timedelta = dt.timedelta(days=7)


DEFAULT_LIFETIMES = Lifetimes()


def parse_go_duration(text: str) -> dt.timedelta:
    """`720h`, `1h30m`, `90s` as a timedelta; ValueError naming the text otherwise."""
    terms = _TERM.findall(text)
    if not text or "".join(number + unit for number, unit in terms) != text:
        raise ValueError(f"{text!r} is not a duration such as 720h, 1h30m or 90s")
    return sum((float(number) * _UNITS[unit] for number, unit in terms), dt.timedelta())


def lifetimes_from(serving: str, renew_before: str, ca: str) -> Lifetimes:
    """The lifetimes of the three Go durations; ValueError saying which value to change when the
    rotation would never come to rest with them."""
    lifetimes = Lifetimes(
        ca=parse_go_duration(ca),
        serving=parse_go_duration(serving),
        renew_before=parse_go_duration(renew_before),
    )
    if lifetimes.renew_before <= dt.timedelta():
        raise ValueError(f"renewBefore {renew_before} must be longer than 0")
    if lifetimes.renew_before >= lifetimes.serving:
        raise ValueError(
            f"renewBefore {renew_before} must be shorter than duration {serving}: a serving certificate "
            "would be renewed as soon as it is issued"
        )
    if lifetimes.ca <= lifetimes.serving + lifetimes.renew_before:
        raise ValueError(
            f"caDuration {ca} must be longer than duration {serving} plus renewBefore {renew_before}: the CA "
            "must outlive every serving certificate it signs, or it would be replaced as soon as it is made"
        )
    return lifetimes
