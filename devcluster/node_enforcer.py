"""The real node's NetworkPolicy enforcer, for the `node` tests only (never part of labgate's chart):
kube-router's network policy controller (`--run-firewall` only), in the node's network and mount
namespaces, where it writes iptables rules and ipsets that drop what no NetworkPolicy allows.

    grant_enforcer_access(admin_kubeconfig)          # its ClusterRole: read pods, namespaces, policies
    argv = enforcer_argv(kubeconfig=..., node_name=..., binary=...)

Why kube-router, and why this mode: the reference CNI plugins the node runs (bridge, host-local)
enforce no NetworkPolicy; a cluster that runs labgate's policies runs an enforcer beside its CNI.
kube-router's policy controller is the one k3s embeds as its NetworkPolicy enforcer; it needs only
iptables and ipset, which this kernel has. kube-network-policies (the SIG Network project) queues
packets to user space with nftables' `queue` statement, which needs CONFIG_NFT_QUEUE: this kernel
is built without it. Every other part of kube-router (BGP routing, the IPVS service proxy, its CNI
configuration, its health and metrics listeners) is turned off: docs/operations.md says which
published advisories of v2.1.0 those parts carry and why this mode does not reach them.
"""

from __future__ import annotations

import json
from pathlib import Path

from devcluster.kubectl import kubectl

# The identity the enforcer's client certificate names; bound below to what it reads.
USER = "system:labgate-test-enforcer"
# The controlplane's --service-cluster-ip-range: kube-router lets traffic to Service IPs through
# to kube-proxy's rules, which rewrite it to a pod's address before the policy is judged.
SERVICE_CIDR = "10.96.0.0/16"
# How often the enforcer rebuilds every rule even without a change (a change applies at once).
FULL_SYNC_PERIOD = "5m"


def enforcer_access() -> list[dict[str, object]]:
    """The ClusterRole and binding of USER: read what a policy selects by, and nothing else."""
    name = "labgate-test-network-policy-enforcer"
    rules = [
        {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["networkpolicies"],
            "verbs": ["get", "list", "watch"],
        },
        # The controller's informers start for these too, though firewall-only mode reads none of them.
        {"apiGroups": [""], "resources": ["services", "endpoints"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]


def grant_enforcer_access(admin_kubeconfig: Path) -> None:
    """Apply enforcer_access() to the cluster."""
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": enforcer_access()})
    applied = kubectl(admin_kubeconfig, "apply", "-f", "-", stdin=manifest)
    if applied.returncode != 0:
        raise RuntimeError(f"granting the enforcer its access failed: {applied.stderr.strip()}")


def enforcer_argv(*, binary: Path, kubeconfig: Path, node_name: str) -> list[str]:
    """kube-router's command line: the network policy controller and nothing else."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node_name}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--enable-cni=false",
        "--health-port=0",
        "--metrics-port=0",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--iptables-sync-period={FULL_SYNC_PERIOD}",
        "--v=1",
    ]
