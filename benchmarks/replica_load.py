"""A webhook replica served in a process of its own, and client threads in this one that call it over
loopback TLS while its CPU is read from /proc: what benchmarks/http_protocols.py and
benchmarks/tls_handshakes.py share."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.webhook_layers import ANSWER


def cpu_seconds(pid: int) -> float:
    """The process's CPU so far, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the replica exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the replica did not listen within 30 s")


@contextmanager
def served(argv: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The replica `argv` starts, once it listens on `port`; stopped on leaving."""
    replica = subprocess.Popen(argv)
    try:
        _wait_for(port, replica)
        yield replica
    finally:
        replica.terminate()
        replica.wait(timeout=10)


def post_review(connection: http.client.HTTPSConnection, body: bytes, failures: list[str]) -> None:
    """One AdmissionReview to /validate; an answer that is not the bare app's is a failure."""
    connection.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.read() != ANSWER or response.status != 200:
        failures.append(f"{response.status}")


def cpu_per_call(pid: int, client: Callable[[list[str]], None], *, threads: int, calls: int) -> float:
    """µs of process `pid`'s CPU per call while `threads` threads each run `client(failures)`, which
    makes `calls` calls in all between them; raises if any call failed."""
    failures: list[str] = []
    started = cpu_seconds(pid)
    workers = [threading.Thread(target=client, args=(failures,)) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    spent = cpu_seconds(pid) - started
    if failures:
        raise RuntimeError(f"{len(failures)} requests were not answered as expected: {failures[:3]}")
    return spent / calls * 1e6
