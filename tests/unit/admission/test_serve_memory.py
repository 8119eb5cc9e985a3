"""What a TLS connection to the admission port costs in memory, served in a process of its own as
`labgate serve` serves it. The apiserver opens one connection per concurrent call (HTTP/1.1), so a
burst is hundreds of connections; on the standard library's event loop each held a 256 KiB buffer
that was never given back, and an open-loop flood left the webhook at 1.7 GB (docs/benchmarks.md,
"Memory under an open-loop flood")."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devcluster.processes import free_port
from labgate.core.certificates import issue_client_cert, issue_serving_cert, make_ca
from tests.unit.admission.test_http_guard import REVIEW, request

CONNECTIONS = 300
BURST_CONNECTIONS = 800
# uvloop's TLS connection measured 31 KB here, the standard library's 284 KB; the bound leaves room
# for the allocator's rounding and the app's per-connection state, and fails the old 284 KB.
KB_PER_CONNECTION_AT_MOST = 96

REPO = Path(__file__).resolve().parents[3]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


class Replica:
    def __init__(self, process: subprocess.Popen[bytes], port: int, apiserver: ssl.SSLContext):
        self.process = process
        self.port = port
        self.apiserver = apiserver

    def call(self) -> ssl.SSLSocket:
        """A connection as the apiserver opens it, one admission request answered on it, kept open."""
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock = self.apiserver.wrap_socket(raw, server_hostname="localhost")
        sock.sendall(request(REVIEW).replace(b"Connection: close", b"Connection: keep-alive"))
        head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        return sock


@pytest.fixture
def replica(serve: Callable[..., Replica]) -> Replica:
    return serve()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    """Starts a replica per call, with `LABGATE_*` settings from the keywords; stops them all."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        yield lambda **settings: _serve(tmp_path, processes, settings)
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _serve(tmp_path: Path, processes: list[subprocess.Popen[bytes]], settings: dict[str, object]) -> Replica:
    server_ca, client_ca = make_ca("webhook-ca"), make_ca("apiserver-client-ca")
    serving = issue_serving_cert(server_ca, common_name="w", dns_names=("localhost",), ip_addresses=())
    client = issue_client_cert(client_ca, user="kube-apiserver-webhook-client")
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    (tmp_path / "client.crt").write_bytes(client.cert_pem)
    (tmp_path / "client.key").write_bytes(client.key_pem)
    port = free_port()
    env = {**os.environ, **{f"LABGATE_{k.upper()}": str(v) for k, v in settings.items()}}
    with (tmp_path / "replica.log").open(
        "wb"
    ) as log:  # each answer logs OPA's absence: kept out of the output
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.unit.admission.serve_replica", str(tmp_path), str(port)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    processes.append(process)
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, f"the replica exited with {process.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the replica did not listen within 30 s"
            time.sleep(0.1)
    apiserver = ssl.create_default_context(cadata=server_ca.cert_pem.decode())
    apiserver.load_cert_chain(tmp_path / "client.crt", tmp_path / "client.key")
    return Replica(process, port, apiserver)


def test_hundreds_of_apiserver_connections_cost_tens_of_kilobytes_each(replica: Replica) -> None:
    for _ in range(20):  # the app's first requests build what every later one shares
        replica.call().close()
    before = rss_kb(replica.process.pid)
    held = [replica.call() for _ in range(CONNECTIONS)]
    try:
        grown = rss_kb(replica.process.pid) - before
    finally:
        for sock in held:
            sock.close()
    per_connection = grown / CONNECTIONS
    assert per_connection <= KB_PER_CONNECTION_AT_MOST, (
        f"{CONNECTIONS} connections held open grew the replica by {grown} KB "
        f"({per_connection:.0f} KB each; at most {KB_PER_CONNECTION_AT_MOST})"
    )


def test_after_a_burst_the_replica_gives_the_memory_back(serve: Callable[..., Replica]) -> None:
    replica = serve(memory_return_seconds=1)
    for _ in range(20):
        replica.call().close()
    before = rss_kb(replica.process.pid)
    with ThreadPoolExecutor(
        max_workers=32
    ) as pool:  # a burst: many calls at once, each on its own connection
        held = list(pool.map(lambda _: replica.call(), range(BURST_CONNECTIONS)))
    peak = rss_kb(replica.process.pid)
    for sock in held:
        sock.close()
    grown = peak - before
    assert grown > 10_000, f"the burst grew the replica by {grown} KB only: nothing to give back"
    # Given back within a few of the replica's 1 s windows once the burst is over.
    deadline = time.monotonic() + 15
    while (now := rss_kb(replica.process.pid)) > before + grown / 2:
        assert time.monotonic() < deadline, (
            f"{BURST_CONNECTIONS} connections grew the replica from {before} to {peak} KB; "
            f"15 s after they closed it still holds {now} KB (at most {before + grown // 2})"
        )
        time.sleep(0.2)
