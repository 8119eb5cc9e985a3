"""Limits on slow clients, below the app: uvicorn's h11 protocol with a deadline for each request's
head (request line and headers). uvicorn closes idle keep-alive connections, but a connection that
sends part of a request head and stalls would otherwise be held open forever (slowloris).

The same protocol sends each response in one piece (`CorkedTransport`): uvicorn writes a response's
head and body separately, which over TLS were two records and two socket sends per admission
request, for the webhook and for the apiserver that reads them."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from webhook.servers import EVENT_LOOP
from webhook.settings import Settings

HEAD_TIMEOUT_SECONDS = 10.0

# The apiserver's webhook client (Go's net/http, through k8s.io/apimachinery's transport defaults)
# keeps an idle connection for 90 s. If the server closes an idle connection first, a request the
# apiserver is writing on it at that moment fails with "use of closed network connection", and the
# apiserver does not retry a POST: the pod is refused with an InternalError. The client must always
# be the side that closes idle connections, so the server waits longer than the client's 90 s.
APISERVER_IDLE_CONNECTION_SECONDS = 90
KEEP_ALIVE_SECONDS = APISERVER_IDLE_CONNECTION_SECONDS + 30


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


class GuardedH11Protocol(H11Protocol):
    """Closes a connection whose request head is not complete within HEAD_TIMEOUT_SECONDS of its
    first byte (or of the connection, for a client that sends nothing); sends each response in one
    piece (`CorkedTransport`)."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
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
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:  # a new request's head is arriving
            self._arm()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def admission_server_config(app: Any, settings: Settings) -> uvicorn.Config:
    """How `labgate serve` serves the admission routes: HTTPS, a client certificate from the
    apiserver when a client CA is set (callers without one fail the TLS handshake, so nothing they
    send reaches the app), request heads within seconds and 64 KiB, idle connections closed after the apiserver's own
    idle timeout (never before it: see KEEP_ALIVE_SECONDS)."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        raise ValueError("LABGATE_TLS_CERT_FILE and LABGATE_TLS_KEY_FILE are required")
    client_auth: dict[str, Any] = {}
    if settings.tls_client_ca_file is not None:
        client_auth = {"ssl_ca_certs": str(settings.tls_client_ca_file), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        ssl_certfile=str(settings.tls_cert_file),
        ssl_keyfile=str(settings.tls_key_file),
        log_level="warning",
        access_log=False,
        loop=EVENT_LOOP,
        http=GuardedH11Protocol,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        h11_max_incomplete_event_size=64 * 1024,
        **client_auth,
    )
