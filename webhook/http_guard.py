"""Limits on slow clients, below the app: uvicorn's httptools protocol (llhttp, in C) with a deadline
for each request's head (request line and headers) and a bound on its size. uvicorn closes idle
keep-alive connections, but a connection that sends part of a request head and stalls would
otherwise be held open forever (slowloris), and llhttp itself sets no bound on a head's size.

The same protocol sends each response in one piece (`CorkedTransport`): uvicorn writes a response's
head and body separately, which over TLS were two records and two socket sends per admission
request, for the webhook and for the apiserver that reads them.

httptools rather than h11 (pure Python): 241 µs of a replica's CPU a request against 353, a sixth of
the webhook's CPU in a 1,000-pod launch (docs/benchmarks.md, "Cost per pod", the HTTP protocol and
the route under each admission request)."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from labgate.core.metrics import ADMISSION_CONNECTIONS
from webhook.servers import EVENT_LOOP
from webhook.settings import Settings

HEAD_TIMEOUT_SECONDS = 10.0
# A request head larger than this is answered 400 and its connection closed (the apiserver's are
# well under 2 KiB).
MAX_HEAD_BYTES = 64 * 1024

# The apiserver's webhook client (Go's net/http, through k8s.io/apimachinery's transport defaults)
# keeps an idle connection for 90 s. If the server closes an idle connection first, a request the
# apiserver is writing on it at that moment fails with "use of closed network connection", and the
# apiserver does not retry a POST: the pod is refused with an InternalError. The client must always
# be the side that closes idle connections, so the server waits longer than the client's 90 s.
APISERVER_IDLE_CONNECTION_SECONDS = 90
KEEP_ALIVE_SECONDS = APISERVER_IDLE_CONNECTION_SECONDS + 30


class AdmissionServerConfig(uvicorn.Config):
    """uvicorn's configuration, and what it has no option for: the TLS context sends no session
    tickets.

    The apiserver's webhook client never resumes a TLS session: client-go's transport
    (`k8s.io/client-go/transport`, v0.34) sets no `ClientSessionCache`, and without one Go's TLS
    client ignores the tickets it is sent. It keeps 25 idle connections to a webhook, so a burst
    above that concurrency opens a new connection for nearly every request (about 650 in a 1,000-pod
    Job launch). Each TLS 1.3 handshake ended with two tickets the server built for nothing: each
    one the whole session, the apiserver's client certificate in it, encrypted. Without them a new
    connection that presents the client certificate costs the replica 1.2 ms of CPU, not 1.5
    (`benchmarks/tls_handshakes.py`; docs/benchmarks.md, "Cost per pod")."""

    def load(self) -> None:
        super().load()
        if self.ssl is not None:
            self.ssl.num_tickets = 0


class CorkedTransport:
    """A transport whose writes of one turn of the event loop go out as one write at the end of it
    (a response's head and body: one TLS record, one send). Everything else is the transport's own;
    closing sends what is held first."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def flush(self) -> None:
        """Send what is held (at the end of the turn that wrote it, or before closing)."""
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """Closes a connection whose request head is not complete within HEAD_TIMEOUT_SECONDS of its
    first byte (or of the connection, for a client that sends nothing), answers a head larger than
    MAX_HEAD_BYTES with 400 and closes; sends each response in one piece (`CorkedTransport`)."""

    _head_timer: asyncio.TimerHandle | None = None
    _awaiting_head = True  # from the connection, and again once each request has been read whole
    _head_bytes = 0  # received of the head awaited (counted by chunk: bytes after it may be included)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        ADMISSION_CONNECTIONS.inc()  # after the TLS handshake: a caller that failed it is not counted
        corked: Any = CorkedTransport(transport, asyncio.get_running_loop())
        super().connection_made(corked)
        self._arm()

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_SECONDS, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._awaiting_head and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._awaiting_head:  # a new request's head is arriving
            self._arm()
            self._head_bytes += len(data)
        super().data_received(data)
        if self._awaiting_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._disarm()
            self.send_400_response(f"Request head larger than {MAX_HEAD_BYTES} bytes.")

    def on_message_begin(self) -> None:
        self._arm()  # also a pipelined request's head that began in the chunk that ended the last
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._awaiting_head, self._head_bytes = False, 0
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # The next request's head: its deadline starts with its first byte (uvicorn's keep-alive
        # timeout closes the connection if none comes).
        self._awaiting_head, self._head_bytes = True, 0

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def admission_server_config(app: Any, settings: Settings) -> uvicorn.Config:
    """How `labgate serve` serves the admission routes: HTTPS without session tickets
    (AdmissionServerConfig), a client certificate from the
    apiserver when a client CA is set (callers without one fail the TLS handshake, so nothing they
    send reaches the app), request heads within seconds and 64 KiB, idle connections closed after the apiserver's own
    idle timeout (never before it: see KEEP_ALIVE_SECONDS)."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        raise ValueError("LABGATE_TLS_CERT_FILE and LABGATE_TLS_KEY_FILE are required")
    client_auth: dict[str, Any] = {}
    if settings.tls_client_ca_file is not None:
        client_auth = {"ssl_ca_certs": str(settings.tls_client_ca_file), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return AdmissionServerConfig(
        app,
        host=settings.host,
        port=settings.port,
        ssl_certfile=str(settings.tls_cert_file),
        ssl_keyfile=str(settings.tls_key_file),
        log_level="warning",
        access_log=False,
        loop=EVENT_LOOP,
        http=GuardedHttpToolsProtocol,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        **client_auth,
    )
