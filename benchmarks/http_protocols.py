"""What the HTTP protocol under the admission routes costs the webhook per request: uvicorn's h11
protocol (pure Python) against its httptools protocol (llhttp, in C), each as `labgate serve` runs
it (webhook/http_guard.py: uvloop, TLS, every response in one write), served by a replica process of
its own and driven over loopback TLS by client threads in this one.

    .venv/bin/python -m benchmarks.http_protocols      # about a minute

The app under both is a bare ASGI callable that reads the body and sends a fixed answer, so the
difference is the protocol's (and TLS's, the same on both). The body is the AdmissionReview of a
Job's 1-GPU pod (benchmarks/webhook_layers.py). Two ways of connecting: a new connection every
7 requests, as the apiserver did in the 1,000-pod launch (about 235 connections for 1,600 requests,
docs/benchmarks.md "Cost per pod"), and one connection a client thread for all its requests.

Prints µs of the replica's CPU per request (user + system, from /proc), the best of the rounds."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from benchmarks.replica_load import cpu_per_call, post_review, served
from benchmarks.webhook_layers import bare_app, review_body
from devcluster.processes import free_port
from labgate.core.certificates import issue_serving_cert, make_ca
from webhook.http_guard import CorkedTransport, admission_server_config
from webhook.settings import Settings

PROTOCOLS = ("h11", "httptools")


class CorkedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with labgate's one write per response (what `labgate serve` ran
    before it moved to httptools)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        corked: Any = CorkedTransport(transport, asyncio.get_running_loop())
        super().connection_made(corked)


def serve(protocol: str, port: int, pki: Path) -> None:
    """The replica: `labgate serve`'s server configuration, with `protocol` under the bare app."""
    settings = Settings(
        opa_url="http://127.0.0.1:1",
        host="127.0.0.1",
        port=port,
        tls_cert_file=pki / "tls.crt",
        tls_key_file=pki / "tls.key",
    )
    config = admission_server_config(bare_app, settings)
    if protocol == "h11":
        config.http = CorkedH11Protocol
    uvicorn.Server(config).run()


def one_run(protocol: str, pki: Path, *, threads: int, requests: int, reconnect_every: int | None) -> float:
    """µs of the replica's CPU per request."""
    port = free_port()
    argv = [sys.executable, "-m", "benchmarks.http_protocols", "--serve", protocol, str(port), str(pki)]
    with served(argv, port) as replica:
        trust = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        body = review_body()

        def client(failures: list[str]) -> None:
            connection: http.client.HTTPSConnection | None = None
            for i in range(requests):
                if connection is None or (reconnect_every and i % reconnect_every == 0):
                    if connection is not None:
                        connection.close()
                    connection = http.client.HTTPSConnection("127.0.0.1", port, context=trust, timeout=10)
                post_review(connection, body, failures)
            if connection is not None:
                connection.close()

        return cpu_per_call(replica.pid, client, threads=threads, calls=threads * requests)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--requests", type=int, default=400, help="per client thread and run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", nargs=3, metavar=("PROTOCOL", "PORT", "PKI"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        protocol, port, pki = args.serve
        serve(protocol, int(port), Path(pki))
        return
    with tempfile.TemporaryDirectory() as directory:
        pki = Path(directory)
        ca = make_ca("benchmark-ca")
        serving = issue_serving_cert(ca, common_name="replica", ip_addresses=("127.0.0.1",))
        (pki / "tls.crt").write_bytes(serving.cert_pem)
        (pki / "tls.key").write_bytes(serving.key_pem)
        (pki / "ca.crt").write_bytes(ca.cert_pem)
        print(f"{args.threads} client threads x {args.requests} requests a run, best of {args.rounds} rounds")
        print("| connections | h11, µs CPU / request | httptools | difference |")
        print("| --- | ---: | ---: | ---: |")
        for label, reconnect in (("a new one every 7 requests", 7), ("one a client, kept", None)):
            best = {p: float("inf") for p in PROTOCOLS}
            for _ in range(args.rounds):
                for protocol in PROTOCOLS:
                    cost = one_run(
                        protocol, pki, threads=args.threads, requests=args.requests, reconnect_every=reconnect
                    )
                    best[protocol] = min(best[protocol], cost)
            h11, httptools = best["h11"], best["httptools"]
            print(
                f"| {label} | {h11:.1f} | {httptools:.1f} | {h11 - httptools:.1f} ({(h11 - httptools) / h11:.0%}) |"
            )


if __name__ == "__main__":
    main()
