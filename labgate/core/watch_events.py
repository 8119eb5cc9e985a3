"""A watch response's body, read as the events it carries (pure: bytes in, event dicts out).

The apiserver streams a watch as one JSON document per line (`{"type": ..., "object": ...}`), in
chunks that need not end at a line's end. Each line is parsed once, straight from its bytes with
orjson: no decoding to text first, no copy of what is left of a chunk per line. (The Kubernetes
client's own `Watch` decodes each line to text, copies the buffer's remainder after every line and
parses with the standard library: about twice the CPU for a pod's event; docs/benchmarks.md.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypedDict

import orjson

from labgate.core.api_resources import Object
from labgate.core.errors import LabgateError


class Event(TypedDict):
    """One change the watch reports: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: Object


class WatchEndedError(LabgateError):
    """The server ended the watch with an ERROR event: `status` is its code (410: the version
    watched from is too old, list again), `reason` what it said."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"watch ended by the server: {status} {reason}")
        self.status = status
        self.reason = reason


class MalformedEventError(LabgateError):
    """A line of the stream that is not a watch event (a broken proxy, a truncated write)."""


def events(chunks: Iterable[bytes]) -> Iterator[Event]:
    """Each event in `chunks` (the response's body as it arrives), in order. An ERROR event raises
    WatchEndedError; a line that is not an event raises MalformedEventError. A line not ended when
    the stream ends is incomplete and dropped (the watch is resumed from the last event's version)."""
    pending = b""
    for chunk in chunks:
        if not chunk:
            continue
        data = pending + chunk if pending else chunk
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            line = data[start:end]
            if line and not line.isspace():
                yield _event(line)
            start = end + 1
        pending = data[start:]


def _event(line: bytes) -> Event:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as err:
        raise MalformedEventError(f"not a watch event: {line[:80]!r}") from err
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise MalformedEventError(f"not a watch event: {line[:80]!r}")
    if event["type"] == "ERROR":
        status = event.get("object") or {}
        code = status.get("code") if isinstance(status, dict) else None
        reason = (
            f"{status.get('reason', '')}: {status.get('message', '')}" if isinstance(status, dict) else ""
        )
        raise WatchEndedError(code if isinstance(code, int) else 500, reason)
    if not isinstance(event.get("object"), dict):
        raise MalformedEventError(f"a watch event without an object: {line[:80]!r}")
    return {"type": event["type"], "object": event["object"]}
