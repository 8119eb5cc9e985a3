"""The admission port as `labgate serve` configures it, served for real on loopback (no cluster):
callers without the apiserver's client certificate fail the TLS handshake, a stalled request head
is cut off, an oversized body gets 413."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from devcluster.processes import free_port
from labgate.core.certificates import issue_client_cert, issue_serving_cert, make_ca
from labgate.core.metrics import ADMISSION_CONNECTIONS
from tests.unit.apps import app_without_cluster
from webhook import http_guard
from webhook.http_guard import admission_server_config
from webhook.settings import Settings


class Served:
    def __init__(self, port: int, trust: ssl.SSLContext, apiserver: ssl.SSLContext):
        self.port = port
        self.trust = trust  # trusts the webhook, presents no certificate
        self.apiserver = apiserver  # presents the apiserver's client certificate

    def connect(self, context: ssl.SSLContext) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return context.wrap_socket(raw, server_hostname="localhost")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    pki = tmp_path_factory.mktemp("pki")
    server_ca, client_ca = make_ca("webhook-ca"), make_ca("apiserver-client-ca")
    serving = issue_serving_cert(server_ca, common_name="w", dns_names=("localhost",), ip_addresses=())
    client = issue_client_cert(client_ca, user="kube-apiserver-webhook-client")
    files = {
        "tls.crt": serving.cert_pem,
        "tls.key": serving.key_pem,
        "client-ca.crt": client_ca.cert_pem,
        "client.crt": client.cert_pem,
        "client.key": client.key_pem,
    }
    for name, data in files.items():
        (pki / name).write_bytes(data)
    settings = Settings(
        opa_url=f"http://127.0.0.1:{free_port()}",
        host="127.0.0.1",
        port=free_port(),
        tls_cert_file=pki / "tls.crt",
        tls_key_file=pki / "tls.key",
        tls_client_ca_file=pki / "client-ca.crt",
    )
    server = uvicorn.Server(admission_server_config(app_without_cluster(settings), settings))
    thread = threading.Thread(target=server.run, daemon=True)
    original = http_guard.HEAD_TIMEOUT_SECONDS
    http_guard.HEAD_TIMEOUT_SECONDS = 1.0
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    trust = ssl.create_default_context(cadata=server_ca.cert_pem.decode())
    apiserver = ssl.create_default_context(cadata=server_ca.cert_pem.decode())
    apiserver.load_cert_chain(Path(pki / "client.crt"), Path(pki / "client.key"))
    try:
        yield Served(settings.port, trust, apiserver)
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        http_guard.HEAD_TIMEOUT_SECONDS = original


def request(body: bytes) -> bytes:
    head = (
        f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


def answer(sock: ssl.SSLSocket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


REVIEW = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "vision",
            "operation": "CREATE",
            "userInfo": {"username": "mallory"},
            "object": {"metadata": {"name": "p"}},
        },
    }
).encode()


def test_a_caller_without_the_apiservers_certificate_fails_the_handshake(served: Served) -> None:
    """TLS 1.3 lets the client finish its side of the handshake before the server checks it: the
    server then ends the connection (an alert or a bare close), and no request reaches the app."""
    try:
        with served.connect(served.trust) as sock:
            sock.sendall(request(REVIEW))
            reply = answer(sock)
    except (ssl.SSLError, ConnectionError) as err:
        reply = str(err).encode()
    assert not reply.startswith(b"HTTP/"), reply[:200]


def test_the_apiserver_is_answered(served: Served) -> None:
    with served.connect(served.apiserver) as sock:
        sock.sendall(request(REVIEW))
        reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert b'"allowed":false' in reply  # no OPA here: refused, never admitted


def test_no_session_ticket_is_sent_and_every_connection_is_served(served: Served) -> None:
    """The apiserver never resumes a session (client-go sets no session cache), so the replica
    sends no TLS 1.3 session ticket; each new connection still completes its handshake with the
    client certificate and is answered (and counted), and one without the certificate still fails
    (and is not)."""
    connections = ADMISSION_CONNECTIONS._value.get()
    for _ in range(2):
        with served.connect(served.apiserver) as sock:
            sock.sendall(request(REVIEW))
            reply = answer(sock)  # read to the end: a ticket, if sent, has arrived by now
            session = sock.session
            assert sock.version() == "TLSv1.3"
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        assert session is not None
        assert not session.has_ticket
    assert ADMISSION_CONNECTIONS._value.get() == connections + 2
    test_a_caller_without_the_apiservers_certificate_fails_the_handshake(served)
    assert ADMISSION_CONNECTIONS._value.get() == connections + 2


def test_an_oversized_body_gets_413(served: Served) -> None:
    with served.connect(served.apiserver) as sock:
        sock.sendall(request(b"x" * (4 * 1024 * 1024))[:4096])  # the declared length is enough
        reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]


def test_a_stalled_request_head_is_cut_off(served: Served) -> None:
    with served.connect(served.apiserver) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: local")
        started = time.monotonic()
        assert answer(sock) == b"", "closed without an answer"
        assert time.monotonic() - started < 5


def test_idle_connections_are_closed_by_the_apiserver_first(tmp_path: Path) -> None:
    """The apiserver's webhook client keeps idle connections 90 s (Go's transport default, which
    k8s.io/apimachinery keeps) and does not retry a POST whose connection the server closed under
    it: that pod would be refused with "use of closed network connection". So the admission port
    keeps an idle connection open longer than the apiserver does."""
    (tmp_path / "tls.crt").write_bytes(b"")
    (tmp_path / "tls.key").write_bytes(b"")
    settings = Settings(
        opa_url="http://127.0.0.1:1",
        tls_cert_file=tmp_path / "tls.crt",
        tls_key_file=tmp_path / "tls.key",
    )
    config = admission_server_config(app_without_cluster(settings), settings)
    go_transport_idle_conn_timeout = 90
    assert config.timeout_keep_alive > go_transport_idle_conn_timeout


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_a_responses_head_and_body_leave_in_one_write_and_closing_sends_what_is_held() -> None:
    """Issue 21: uvicorn writes a response's head and body apart; over TLS that was two records and
    two sends per admission request."""

    async def scenario() -> RecordingTransport:
        inner = RecordingTransport()
        corked = http_guard.CorkedTransport(inner, asyncio.get_running_loop())  # type: ignore[arg-type]
        corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
        corked.write(memoryview(b'{"response": {}}'))
        assert inner.writes == []  # held until the end of this turn
        await asyncio.sleep(0)
        assert inner.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"response": {}}']
        corked.write(b"last")
        corked.close()  # a Connection: close response: written, then closed
        assert corked.get_extra_info("peername") == "info:peername"
        return inner

    inner = asyncio.run(scenario())
    assert inner.writes[1:] == [b"last"]
    assert inner.closed


def test_an_oversized_request_head_is_refused_and_the_connection_closed(served: Served) -> None:
    """llhttp bounds no head's size: the protocol does (MAX_HEAD_BYTES), whether the head comes in
    one write or many, and the next connection is served as usual."""
    filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    head = b"POST /validate HTTP/1.1\r\nHost: localhost\r\n" + filler * (http_guard.MAX_HEAD_BYTES // 1000)
    for chunks in ([head], [head[i : i + 4096] for i in range(0, len(head), 4096)]):
        with served.connect(served.apiserver) as sock:
            for chunk in chunks:
                try:
                    sock.sendall(chunk)
                except (ssl.SSLError, ConnectionError):
                    break  # closed under the write: the refusal was read below or lost with it
            reply = answer(sock)
        assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
        assert b"Request head larger than" in reply
    with served.connect(served.apiserver) as sock:
        sock.sendall(request(REVIEW))
        assert answer(sock).startswith(b"HTTP/1.1 200")


def test_a_head_within_the_bound_is_served(served: Served) -> None:
    """The pair of the refusal above: a head of many headers, under the bound, is answered."""
    filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    extra = filler * (http_guard.MAX_HEAD_BYTES // 2000)
    message = request(REVIEW).replace(b"Host: localhost\r\n", b"Host: localhost\r\n" + extra, 1)
    with served.connect(served.apiserver) as sock:
        sock.sendall(message)
        assert answer(sock).startswith(b"HTTP/1.1 200")


def test_a_pipelined_requests_stalled_head_is_cut_off(served: Served) -> None:
    """A whole request and the start of the next in one write: the second head's deadline runs
    from its first byte, and the first is answered."""
    keep_alive = request(REVIEW).replace(b"Connection: close\r\n", b"")
    with served.connect(served.apiserver) as sock:
        sock.sendall(keep_alive + b"POST /validate HTTP/1.1\r\nHost: local")
        started = time.monotonic()
        reply = answer(sock)
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        assert reply.count(b"HTTP/1.1 ") == 1
        assert time.monotonic() - started < 5
