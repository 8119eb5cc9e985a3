"""What a new TLS connection costs the webhook replica: one request per connection, as the apiserver
sends most of a burst (it keeps 25 idle connections to a webhook and never resumes a TLS session,
docs/benchmarks.md "Cost per pod"), with and without the apiserver's client certificate, and with
the session tickets uvicorn's TLS context sends by default (two per handshake) against none, as
`labgate serve` serves (webhook/http_guard.py `AdmissionServerConfig`).

    .venv/bin/python -m benchmarks.tls_handshakes      # about a minute

Each case is a replica process of its own (`labgate serve`'s server configuration: uvloop,
httptools, TLS; the bare app of benchmarks/webhook_layers.py), driven over loopback by client
threads in this process that open a connection, send one AdmissionReview and close. Prints µs of
the replica's CPU per connection (user + system, from /proc), the best of the rounds."""

from __future__ import annotations

import argparse
import http.client
import ssl
import sys
import tempfile
from pathlib import Path

import uvicorn

from benchmarks.replica_load import cpu_per_call, post_review, served
from benchmarks.webhook_layers import bare_app, review_body
from devcluster.processes import free_port
from labgate.core.certificates import issue_client_cert, issue_serving_cert, make_ca
from webhook.http_guard import admission_server_config
from webhook.servers import run_servers
from webhook.settings import Settings

# uvicorn's TLS context sends Python's default, two tickets a TLS 1.3 handshake.
UVICORN_DEFAULT_TICKETS = 2


def serve(port: int, pki: Path, *, tickets: int, client_certificate: bool) -> None:
    """The replica: `labgate serve`'s admission server configuration over the bare app; `tickets`
    replaces its number of session tickets, to compare with uvicorn's default."""
    settings = Settings(
        opa_url="http://127.0.0.1:1",
        host="127.0.0.1",
        port=port,
        tls_cert_file=pki / "tls.crt",
        tls_key_file=pki / "tls.key",
        tls_client_ca_file=pki / "client-ca.crt" if client_certificate else None,
    )
    config = admission_server_config(bare_app, settings)
    config.load()
    if config.ssl is None:
        raise RuntimeError("TLS did not load")
    config.ssl.num_tickets = tickets
    run_servers([uvicorn.Server(config)])


def one_run(pki: Path, *, tickets: int, client_certificate: bool, threads: int, connections: int) -> float:
    """µs of the replica's CPU per connection (one request each)."""
    port = free_port()
    argv = [sys.executable, "-m", "benchmarks.tls_handshakes", "--serve", str(port), str(pki), str(tickets)]
    with served([*argv, "1" if client_certificate else "0"], port) as replica:
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        if client_certificate:
            context.load_cert_chain(pki / "client.crt", pki / "client.key")
        body = review_body()

        def client(failures: list[str]) -> None:
            for _ in range(connections // threads):
                connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
                post_review(connection, body, failures)
                connection.close()

        return cpu_per_call(replica.pid, client, threads=threads, calls=threads * (connections // threads))


def write_pki(pki: Path) -> None:
    ca, client_ca = make_ca("benchmark-ca"), make_ca("benchmark-apiserver-client-ca")
    serving = issue_serving_cert(ca, common_name="replica", ip_addresses=("127.0.0.1",))
    client = issue_client_cert(client_ca, user="kube-apiserver-webhook-client")
    files = {
        "tls.crt": serving.cert_pem,
        "tls.key": serving.key_pem,
        "ca.crt": ca.cert_pem,
        "client-ca.crt": client_ca.cert_pem,
        "client.crt": client.cert_pem,
        "client.key": client.key_pem,
    }
    for name, data in files.items():
        (pki / name).write_bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--connections", type=int, default=1200, help="per run, one request each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--serve", nargs=4, metavar=("PORT", "PKI", "TICKETS", "CLIENT_CERT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve:
        port, pki, tickets, client_certificate = args.serve
        serve(int(port), Path(pki), tickets=int(tickets), client_certificate=client_certificate == "1")
        return
    with tempfile.TemporaryDirectory() as directory:
        pki = Path(directory)
        write_pki(pki)
        print(
            f"{args.threads} client threads, {args.connections} connections a run, best of {args.rounds} rounds"
        )
        print(f"OpenSSL: {ssl.OPENSSL_VERSION}")
        print(
            f"| the caller | {UVICORN_DEFAULT_TICKETS} tickets (uvicorn's default), µs CPU / connection "
            "| no tickets (labgate) | difference |"
        )
        print("| --- | ---: | ---: | ---: |")
        for label, client_certificate in (
            ("with the apiserver's client certificate", True),
            ("without", False),
        ):
            cases = (UVICORN_DEFAULT_TICKETS, 0)
            best = dict.fromkeys(cases, float("inf"))
            for _ in range(args.rounds):
                for tickets in cases:
                    cost = one_run(
                        pki,
                        tickets=tickets,
                        client_certificate=client_certificate,
                        threads=args.threads,
                        connections=args.connections,
                    )
                    best[tickets] = min(best[tickets], cost)
            with_tickets, without = best[UVICORN_DEFAULT_TICKETS], best[0]
            print(
                f"| {label} | {with_tickets:.0f} | {without:.0f} "
                f"| {with_tickets - without:.0f} ({(with_tickets - without) / with_tickets:.0%}) |"
            )


if __name__ == "__main__":
    main()
