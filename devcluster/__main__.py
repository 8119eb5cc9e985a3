"""`python -m devcluster up [--demo] [--nodes POOLS_FILE] [--kueue]` / `python -m devcluster down`: the local control plane with
labgate installed, for `make run` and `make stop`. `python -m devcluster up --real-node`: instead, a
control plane with one real node (devcluster.node_cluster; root), a registry it pulls from, and no
labgate. A development tool, run from a checkout; it is not
part of the shipped package or the container image."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from devcluster.demo import run_demo
from devcluster.node import node_problem
from devcluster.node_cluster import NodeCluster, stop_detached
from devcluster.nodes import load_pools
from devcluster.processes import recorded_pids, stop_recorded
from devcluster.stack import LabgateStack, NodeSimulation

DEV_WORKDIR = Path(".labgate-dev")


def _up(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    running = recorded_pids(workdir)  # only processes that are still the ones recorded
    if running:
        print(
            f"labgate: a local cluster already runs in {workdir} ({', '.join(running)}); it and its"
            " objects are left as they are. To start afresh (this deletes the cluster's objects):"
            " make stop && make run",
            file=sys.stderr,
        )
        return 1
    # Nothing of a previous run is alive: start from a clean cluster (its etcd data and pids file go),
    # so `make stop` then `make run` shows the same as the first run.
    shutil.rmtree(workdir / "etcd", ignore_errors=True)
    (workdir / "pids.json").unlink(missing_ok=True)
    if args.real_node:
        if args.demo or args.nodes or args.kueue:
            print(
                "labgate: --real-node starts no labgate and no KWOK nodes: it takes no other option",
                file=sys.stderr,
            )
            return 2
        return _up_real_node(workdir)
    nodes = None if args.nodes is None else NodeSimulation(pools=load_pools(Path(args.nodes)))
    # With Kueue the stack serves policies that trust it (as the chart's kueue.enabled); each Tenant
    # opts in (team-b's spec.queue: Kueue's; team-a: not), so team-a's bare GPU pods still run.
    stack = LabgateStack(workdir, detached=True, nodes=nodes, kueue=args.kueue, kueue_every_tenant=False)
    stack.start()
    with_nodes = "" if nodes is None else f", scheduler and {sum(p.nodes for p in nodes.pools)} KWOK nodes"
    with_nodes += ", Kueue" if args.kueue else ""
    print(f"labgate: control plane, OPA, webhook{with_nodes} ready in {stack.start_seconds:.1f}s")
    if args.demo:
        run_demo(stack)
    print()
    for line in where_things_are(stack, workdir):
        print(line)
    return 0


def _up_real_node(workdir: Path) -> int:
    problem = node_problem()
    if problem is not None:
        print(f"labgate: a real node cannot run here: {problem}", file=sys.stderr)
        return 1
    shutil.rmtree(workdir / "controlplane" / "etcd", ignore_errors=True)
    cluster = NodeCluster(workdir, detached=True)
    cluster.start()
    seconds = sum(cluster.bring_up_seconds.values())
    print(f"labgate: control plane and real node {cluster.node.name} ready in {seconds:.1f}s")
    for line in (
        f"  API server:        {cluster.control_plane.server}",
        f"  admin kubeconfig:  {cluster.control_plane.admin_kubeconfig}",
        f"  node:              {cluster.node.name} ({cluster.network.node_address}, pods {cluster.network.pod_cidr})",
        f"  registry:          {cluster.registry.host} (plain HTTP; pods pull from it, by digest)",
        f"  logs:              {workdir / 'controlplane' / 'logs'}, {workdir / 'node' / 'logs'}",
        "  stop everything:   python -m devcluster down",
    ):
        print(line)
    return 0


def where_things_are(stack: LabgateStack, workdir: Path) -> list[str]:
    """What `make run` prints last: every address and file an operator looks at."""
    lines = [
        f"  API server:        {stack.cluster.server}",
        f"  admin kubeconfig:  {stack.admin_kubeconfig}",
        f"  user kubeconfigs:  {stack.admin_kubeconfig.parent}/<user>@<groups>.kubeconfig",
    ]
    for index, url in enumerate(stack.webhook_urls):
        health = stack.health_urls[url]
        lines.append(
            f"  webhook {index}:         {url} (health {health}/healthz, {health}/readyz; metrics {health}/metrics)"
        )
        lines.append(f"  decision log:      {workdir / 'logs' / f'decisions-{index}.jsonl'}")
    lines.append(f"  OPA:               {stack.opa_url} (the policies loaded: {stack.opa_url}/v1/policies)")
    for index, url in enumerate(stack.reconciler_metrics_urls):
        log_file = workdir / "logs" / f"reconciler-{index}.log"
        lines.append(f"  reconciler {index}:      metrics {url}; each drift repair is logged in {log_file}")
    lines.append(f"  logs:              {workdir / 'logs'}")
    lines.append("  stop everything:   make stop")
    return lines


def _down(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    stopped = stop_recorded(workdir) + stop_detached(workdir)
    print("labgate: stopped " + (", ".join(stopped) if stopped else "nothing (no local cluster was running)"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start etcd, kube-apiserver, controllers, OPA and the webhook")
    up.add_argument("--workdir", default=str(DEV_WORKDIR), help="where state, logs and kubeconfigs go")
    up.add_argument(
        "--demo", action="store_true", help="create example tenants and show accepted/refused applies"
    )
    up.add_argument(
        "--nodes",
        metavar="POOLS_FILE",
        help="also run kube-scheduler, every default controller and KWOK nodes from a pool description"
        " file (e.g. devcluster/pools/lab.yaml)",
    )
    up.add_argument(
        "--kueue",
        action="store_true",
        help="also run Kueue beside labgate (Jobs queue whole; devcluster/kueue.py)",
    )
    up.add_argument(
        "--real-node",
        action="store_true",
        help="instead: a control plane with one real node (kubelet, containerd, kube-proxy) and a"
        " registry, without labgate (needs root; devcluster/node_cluster.py)",
    )
    up.set_defaults(handler=_up)
    down = commands.add_parser("down", help="stop what `up` started")
    down.add_argument("--workdir", default=str(DEV_WORKDIR))
    down.set_defaults(handler=_down)
    args = parser.parse_args(argv)
    handler = args.handler
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())
