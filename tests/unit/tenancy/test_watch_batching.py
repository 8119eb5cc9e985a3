"""A busy watch read a burst at a time (labgate.core.watch_batching, the reconciler's pod watch):
the reader pauses only when nothing is waiting to be read, so the events of a burst that came
during a pause are read back to back, every one, in order; `stop` ends a pause at once; and bytes
the TLS layer already decrypted count as waiting, as bytes in the kernel's buffer do."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3

from labgate.core.certificates import issue_serving_cert, make_ca
from labgate.core.kube import Reflector
from labgate.core.watch_batching import ReadBacklog, gathered


def _event(version: int) -> bytes:
    obj = {"metadata": {"name": f"p{version}", "namespace": "team-a", "resourceVersion": str(version)}}
    return json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n"


def test_a_pause_comes_only_after_a_chunk_with_nothing_waiting_behind_it() -> None:
    backlog = iter([True, True, False, True, False])
    read: list[str] = []

    def chunks() -> Iterator[bytes]:
        for chunk in (b"a", b"b", b"c", b"d", b"e"):
            read.append(f"read {chunk.decode()}")
            yield chunk

    out = gathered(chunks(), has_more=lambda: next(backlog), pause=lambda: read.append("pause"))
    assert list(out) == [b"a", b"b", b"c", b"d", b"e"]
    assert read == ["read a", "read b", "read c", "pause", "read d", "read e", "pause"]


def test_bytes_received_or_buffered_by_the_reader_are_waiting_and_read_ones_are_not() -> None:
    """In the kernel's buffer, or already in the reader's own (which the socket no longer shows):
    both can be read without waiting. And the check leaves the socket as it was (blocking)."""
    ours, theirs = socket.socketpair()
    with ours, theirs, ours.makefile("rb") as fp:
        backlog = ReadBacklog(fp, ours)
        assert not backlog()
        theirs.sendall(b"x" * 100)
        assert backlog()
        assert fp.read(10) == b"x" * 10  # the other 90 are in the reader's buffer, none in the kernel's
        assert backlog()
        assert fp.read(90) == b"x" * 90
        assert not backlog()
        assert ours.gettimeout() is None


def test_bytes_the_tls_layer_decrypted_but_not_handed_over_are_waiting(tmp_path: Path) -> None:
    """A TLS record read in part: its rest sits decrypted in the TLS layer, the kernel's buffer is
    empty, and there is still something to read without waiting."""
    ca = make_ca("test-ca")
    served = issue_serving_cert(ca, common_name="localhost", ip_addresses=("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(served.cert_pem)
    (tmp_path / "tls.key").write_bytes(served.key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        sent = threading.Event()

        def serve() -> None:
            connection, _ = listener.accept()
            with server_context.wrap_socket(connection, server_side=True) as tls:
                tls.sendall(b"y" * 1000)  # one record
                sent.set()
                tls.recv(1)  # until the client closes

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        with client_context.wrap_socket(
            socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1"
        ) as tls:
            assert sent.wait(10)
            tls.settimeout(7.0)
            fp = tls.makefile("rb")
            assert tls.recv(10) == b"y" * 10
            assert tls.pending() == 990
            assert ReadBacklog(fp, tls)()
            assert fp.read(990) == b"y" * 990
            assert not ReadBacklog(fp, tls)()
            assert tls.gettimeout() == 7.0
            fp.close()
        server.join(10)


class _WatchServer:
    """One HTTP/1.1 watch on loopback: the response's head, then each event as a chunk of its own
    (as the apiserver flushes them), written when the test says."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.port = self.listener.getsockname()[1]
        self._connection: socket.socket | None = None
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        request = b""
        while b"\r\n\r\n" not in request:
            request += connection.recv(4096)
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        self._connection = connection
        self.connected.set()

    def send(self, *lines: bytes) -> None:
        assert self._connection is not None
        for line in lines:
            self._connection.sendall(b"%x\r\n%s\r\n" % (len(line), line))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self.listener.close()
        self._thread.join(10)


def _reflector(server: _WatchServer, heard: list[tuple[int, float]], batch_seconds: float) -> Reflector:
    pool = urllib3.PoolManager()

    def list_function(**kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            return {"metadata": {"resourceVersion": "1"}, "items": []}
        return pool.request(
            "GET", f"http://127.0.0.1:{server.port}/api/v1/pods?watch=1", preload_content=False
        )

    def on_event(_: str, obj: Any) -> None:
        heard.append((int(obj["metadata"]["resourceVersion"]), time.monotonic()))

    return Reflector(
        "pods", None, list_function, on_list=lambda _: None, on_event=on_event, batch_seconds=batch_seconds
    )


def _until(condition: Any, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_a_burst_written_during_a_pause_is_read_back_to_back_every_event_in_order() -> None:
    """The first event is read as it comes; the reader then pauses (nothing else waits). The burst
    written meanwhile is read without a pause between its events, and none of them is later than the
    window: a reader pausing after every event would take 49 windows over it."""
    server = _WatchServer()
    heard: list[tuple[int, float]] = []
    window = 0.5
    reflector = _reflector(server, heard, window)
    reflector.start()
    try:
        assert server.connected.wait(10)
        server.send(_event(2))
        assert _until(lambda: len(heard) == 1)
        written = time.monotonic()
        server.send(*(_event(version) for version in range(3, 52)))
        assert _until(lambda: len(heard) == 50)
    finally:
        reflector.stop()
        server.close()
    assert [version for version, _ in heard] == list(range(2, 52))
    burst = [at for _, at in heard[1:]]
    assert burst[0] - heard[0][1] > window / 2, "the reader paused after the lone first event"
    assert burst[-1] - burst[0] < window / 2, "the burst was read back to back, not a pause per event"
    assert burst[-1] - written < window + 2


def test_stop_ends_a_pause_at_once() -> None:
    """A reconciler stopping does not wait out its watches' pauses."""
    server = _WatchServer()
    heard: list[tuple[int, float]] = []
    reflector = _reflector(server, heard, batch_seconds=60)
    reflector.start()
    try:
        assert server.connected.wait(10)
        server.send(_event(2))
        assert _until(lambda: len(heard) == 1)  # and now in a pause of a minute
        began = time.monotonic()
        reflector.stop()
        assert not reflector._thread.is_alive()
        assert time.monotonic() - began < 5
    finally:
        server.close()
