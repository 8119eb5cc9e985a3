"""A watch's body read as events: whatever the chunking, every event once and in order; the server's
ERROR ends the watch with its code; a line that is not an event is never passed on as one. And the
reflector built on it: events reach the cache, a 410 lists afresh and watches on from the new list."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from labgate.core.kube import Reflector
from labgate.core.watch_events import MalformedEventError, WatchEndedError, events


def _pod(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "resourceVersion": str(version)}, "spec": {}}


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


STREAM = b"".join(
    [
        _line("ADDED", _pod("a", 11)),
        _line("MODIFIED", _pod("a\u00e9\u4e2d", 12)),  # a name in UTF-8, split across chunks below
        _line("BOOKMARK", {"metadata": {"resourceVersion": "13"}}),
        _line("DELETED", _pod("a", 14)),
    ]
)
EXPECTED = [("ADDED", "a"), ("MODIFIED", "a\u00e9\u4e2d"), ("BOOKMARK", None), ("DELETED", "a")]


def _read(chunks: list[bytes]) -> list[tuple[str, str | None]]:
    return [(e["type"], e["object"]["metadata"].get("name")) for e in events(chunks)]


@pytest.mark.parametrize("size", [1, 2, 7, 64, len(STREAM)])
def test_every_event_once_in_order_however_the_body_is_chunked(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert _read(chunks) == EXPECTED


def test_blank_lines_and_empty_chunks_are_no_events() -> None:
    chunks = [b"", b"\n", b"  \n", STREAM, b"\r\n", b""]
    assert _read(chunks) == EXPECTED


def test_a_line_cut_off_by_the_stream_s_end_is_not_an_event() -> None:
    cut = STREAM + _line("ADDED", _pod("b", 15))[:-10]
    assert _read([cut]) == EXPECTED


def test_the_server_s_410_ends_the_watch_with_its_code_after_the_events_before_it() -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 5 (11)"}
    seen: list[str] = []
    stream = events([STREAM, _line("ERROR", gone), _line("ADDED", _pod("after", 20))])
    with pytest.raises(WatchEndedError) as ended:
        seen.extend(event["type"] for event in stream)
    assert seen == ["ADDED", "MODIFIED", "BOOKMARK", "DELETED"]
    assert ended.value.status == 410
    assert "too old resource version" in ended.value.reason


@pytest.mark.parametrize(
    "line",
    [b"{not json\n", b"[1, 2]\n", b'{"object": {}}\n', b'{"type": "ADDED", "object": "pod"}\n'],
)
def test_a_line_that_is_not_an_event_is_refused_not_passed_on(line: bytes) -> None:
    with pytest.raises(MalformedEventError):
        list(events([line]))


class _Response:
    """A watch response's body, as urllib3 streams it (chunks), with the calls the reflector makes."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.closed = self.released = False

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        yield from (self.body[i : i + 5] for i in range(0, len(self.body), 5))

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


def test_the_reflector_feeds_events_and_lists_afresh_after_a_410() -> None:
    """First list (version 10), a watch with two changes then the server's 410; a second list
    (version 30) and a watch from 30; the cache hears both lists and every change, in order."""
    heard: list[tuple[str, str]] = []
    watched_from: list[str | None] = []
    responses: list[_Response] = []
    lists = iter(["10", "30"])
    done = threading.Event()
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    bodies = iter(
        [
            _line("ADDED", _pod("b", 11)) + _line("MODIFIED", _pod("b", 12)) + _line("ERROR", gone),
            _line("DELETED", _pod("b", 31)),
        ]
    )

    def list_function(**kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            return {"metadata": {"resourceVersion": next(lists)}, "items": [_pod("a", 1)]}
        # The client returns a response to stream only when asked not to read and deserialize it.
        assert kwargs.get("_preload_content") is False, kwargs
        watched_from.append(kwargs["resource_version"])
        body = next(bodies, None)
        if body is None:
            done.set()
            raise TimeoutError("no more test events")  # the reflector lists afresh after a pause
        responses.append(_Response(body))
        return responses[-1]

    reflector = Reflector(
        "pods",
        None,
        list_function,
        on_list=lambda items: heard.append(("list", str(len(items)))),
        on_event=lambda kind, obj: heard.append((kind, obj["metadata"]["resourceVersion"])),
    )
    reflector.start()
    try:
        assert done.wait(timeout=10)
    finally:
        reflector.stop()
    assert heard[:5] == [("list", "1"), ("ADDED", "11"), ("MODIFIED", "12"), ("list", "1"), ("DELETED", "31")]
    assert watched_from[:3] == ["10", "30", "31"]
    assert all(r.closed and r.released for r in responses)


class _Socket:
    """The response's socket: shutting it down ends the read that waits on it, as a real one does."""

    def __init__(self) -> None:
        self.shut = threading.Event()

    def shutdown(self, how: int) -> None:
        self.shut.set()


class _QuietResponse(_Response):
    """A watch on which nothing changes: its read waits until the socket is shut down, then ends
    as a read of a shut-down socket does (here: the end of the stream)."""

    def __init__(self) -> None:
        super().__init__(b"")
        self.connection = SimpleNamespace(sock=_Socket())
        self.reading = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        self.reading.set()
        self.connection.sock.shut.wait()
        yield from ()


def test_stop_ends_a_watch_waiting_for_its_next_event(caplog: pytest.LogCaptureFixture) -> None:
    """A process stopping does not wait out each reflector's quiet watch: `stop` shuts the socket
    the read waits on, the thread ends, the response is closed, and nothing is logged as a failure."""
    response = _QuietResponse()

    def list_function(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return response
        return {"metadata": {"resourceVersion": "5"}, "items": []}

    reflector = Reflector("pods", None, list_function, on_list=lambda items: None, on_event=lambda *_: None)
    reflector.start()
    assert response.reading.wait(timeout=10), "the reflector started its watch"
    reflector.stop()
    assert response.connection.sock.shut.is_set()
    assert not reflector._thread.is_alive(), "the reflector's thread ended with stop"
    assert response.closed
    assert response.released
    assert [r.message for r in caplog.records if r.levelname == "WARNING"] == []
