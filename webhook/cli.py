"""`labgate`: the one command line of the project.

labgate serve                 run the admission webhook (settings from LABGATE_* variables)
labgate dev up [--demo]       start the local control plane with labgate installed (for `make run`)
labgate dev down              stop it
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

DEV_WORKDIR = Path(".labgate-dev")


def _serve(_: argparse.Namespace) -> int:
    import uvicorn

    from webhook.app import create_app
    from webhook.settings import get_settings

    settings = get_settings()
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        print("labgate serve: LABGATE_TLS_CERT_FILE and LABGATE_TLS_KEY_FILE are required", file=sys.stderr)
        return 2
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        ssl_certfile=str(settings.tls_cert_file),
        ssl_keyfile=str(settings.tls_key_file),
        log_level="warning",
        access_log=False,
    )
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    import signal
    import socket
    import threading
    from pathlib import Path as _Path

    from prometheus_client import start_http_server

    from rbac.reconciler import Reconciler
    from webhook.kube import api_client

    kubeconfig = _Path(args.kubeconfig) if args.kubeconfig else None
    reconciler = Reconciler(
        api_client(kubeconfig),
        namespace=args.namespace,
        identity=args.identity or socket.gethostname(),
        lease_seconds=args.lease_seconds,
        resync_seconds=args.resync_seconds,
    )
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_address)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    reconciler.start()
    stop.wait()
    reconciler.stop()
    return 0


def _dev_up(args: argparse.Namespace) -> int:
    from webhook.devcluster.demo import run_demo
    from webhook.devcluster.processes import recorded_pids
    from webhook.devcluster.stack import LabgateStack

    workdir = Path(args.workdir).resolve()
    if recorded_pids(workdir):
        print(f"A local cluster already runs in {workdir}; stop it first: labgate dev down", file=sys.stderr)
        return 1
    stack = LabgateStack(workdir, detached=True)
    stack.start()
    print(f"labgate: control plane, OPA and webhook ready in {stack.start_seconds:.1f}s")
    if args.demo:
        run_demo(stack)
    print()
    print(f"  API server:        {stack.cluster.server}")
    print(f"  admin kubeconfig:  {stack.admin_kubeconfig}")
    print(f"  user kubeconfigs:  {stack.admin_kubeconfig.parent}/<user>@<groups>.kubeconfig")
    print(f"  logs:              {workdir / 'logs'}")
    print("  stop everything:   make stop")
    return 0


def _dev_down(args: argparse.Namespace) -> int:
    from webhook.devcluster.processes import stop_recorded

    stopped = stop_recorded(Path(args.workdir).resolve())
    print("labgate: stopped " + (", ".join(stopped) if stopped else "nothing (no local cluster was running)"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labgate", description="labgate admission control for research clusters"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the admission webhook")
    serve.set_defaults(handler=_serve)

    reconcile = commands.add_parser(
        "reconcile", help="run the tenant reconciler (RBAC, namespaces, quotas, ...)"
    )
    reconcile.add_argument("--kubeconfig", help="kubeconfig; in-cluster service account when omitted")
    reconcile.add_argument(
        "--namespace", default="labgate-system", help="namespace of the leader-election Lease"
    )
    reconcile.add_argument("--identity", help="this replica's name in the Lease (default: host name)")
    reconcile.add_argument("--lease-seconds", type=float, default=15.0, help="leader lease duration")
    reconcile.add_argument("--resync-seconds", type=float, default=300.0, help="full resync period")
    reconcile.add_argument("--metrics-port", type=int, default=0, help="Prometheus /metrics port (0: off)")
    reconcile.add_argument("--metrics-address", default="0.0.0.0", help="address for /metrics")  # noqa: S104
    reconcile.set_defaults(handler=_reconcile)

    dev = commands.add_parser("dev", help="the local control plane for trying labgate out")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    up = dev_commands.add_parser("up", help="start etcd, kube-apiserver, controllers, OPA and the webhook")
    up.add_argument("--workdir", default=str(DEV_WORKDIR), help="where state, logs and kubeconfigs go")
    up.add_argument(
        "--demo", action="store_true", help="create example tenants and show accepted/refused applies"
    )
    up.set_defaults(handler=_dev_up)
    down = dev_commands.add_parser("down", help="stop what `labgate dev up` started")
    down.add_argument("--workdir", default=str(DEV_WORKDIR))
    down.set_defaults(handler=_dev_down)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
