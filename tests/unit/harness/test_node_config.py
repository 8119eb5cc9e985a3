"""What a real node's processes are given (devcluster.node_config): the kernel's settings are checked and
never written, the node's state stays in its own directories, containerd runs pods where this
machine allows it. The node itself runs in tests/e2e/test_node.py."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from devcluster.node import RealNode
from devcluster.node_config import (
    KERNEL_DEFAULTS,
    NodeLayout,
    cni_configuration,
    containerd_configuration,
    kube_proxy_configuration,
    kubelet_configuration,
    mount_namespace_script,
    registry_hosts_toml,
)
from devcluster.node_network import SLOTS, NodeNetwork

LAYOUT = NodeLayout(Path("/tmp/cluster/node/state"))


def _kubelet() -> dict[str, Any]:
    return kubelet_configuration(
        layout=LAYOUT, node_address="172.31.254.2", client_ca_file=Path("/tmp/ca.crt"), cgroup_root="/n0"
    )


def test_the_kubelet_checks_the_kernel_settings_and_never_writes_them() -> None:
    assert _kubelet()["protectKernelDefaults"] is True


def test_the_kubelet_runs_on_cgroup_v1_with_cgroupfs_under_the_nodes_own_root() -> None:
    config = _kubelet()
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/n0"


def test_the_kubelet_api_wants_a_certificate_of_the_cluster_and_the_apiservers_authorization() -> None:
    config = _kubelet()
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"] == {"clientCAFile": "/tmp/ca.crt"}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["readOnlyPort"] == 0
    assert config["address"] == "172.31.254.2"


def test_the_kubelet_talks_to_the_nodes_own_containerd() -> None:
    endpoint = f"unix://{LAYOUT.containerd_socket}"
    assert _kubelet()["containerRuntimeEndpoint"] == endpoint
    assert _kubelet()["imageServiceEndpoint"] == endpoint


def test_the_mount_namespace_shows_the_kubelet_the_values_it_checks_before_it_hides_anything() -> None:
    script = mount_namespace_script(LAYOUT).split("; ")
    binds = [c for c in script if c.startswith("mount --bind") and "/proc/sys/" in c]
    assert [c.rsplit(" ", 1)[1] for c in binds] == [f"/proc/sys/{key}" for key in KERNEL_DEFAULTS]
    # The value files live in the state directory: bound before /run and /var/lib are covered.
    assert script.index(binds[-1]) < script.index("mount -t tmpfs -o mode=0755 labgate-node-run /run")
    assert script[0] == "set -e"
    assert script[-1] == 'exec "$@"'


def test_the_mount_namespace_never_writes_a_kernel_setting() -> None:
    # Only mounts, seen by the namespace alone: no sysctl, no redirection into /proc/sys.
    commands = mount_namespace_script(LAYOUT).split("; ")
    assert all(c.startswith("mount ") for c in commands[1:-1]), commands
    assert ">" not in "".join(commands)


def test_the_kernel_values_are_the_kubelets() -> None:
    # pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables, in Kubernetes v1.34.
    assert KERNEL_DEFAULTS == {
        "vm/overcommit_memory": "1",
        "vm/panic_on_oom": "0",
        "kernel/panic": "10",
        "kernel/panic_on_oops": "1",
        "kernel/keys/root_maxkeys": "1000000",
        "kernel/keys/root_maxbytes": "25000000",
    }


def test_containerd_keeps_its_state_in_the_node_and_runs_pods_with_runc_on_cgroupfs() -> None:
    config = tomllib.loads(containerd_configuration(layout=LAYOUT, sandbox_image="r:5000/pause@sha256:1"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert config["grpc"]["address"] == str(LAYOUT.containerd_socket)
    assert Path(config["root"]).is_relative_to(LAYOUT.state)
    assert Path(config["state"]).is_relative_to(LAYOUT.state)
    assert cri["sandbox_image"] == "r:5000/pause@sha256:1"
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": False}
    assert cri["cni"]["conf_dir"] == str(LAYOUT.cni_conf_dir)
    assert cri["registry"]["config_path"] == str(LAYOUT.registry_hosts)


def test_containerd_raises_oom_scores_it_may_not_lower() -> None:
    config = tomllib.loads(containerd_configuration(layout=LAYOUT, sandbox_image="p"))
    assert config["plugins"]["io.containerd.grpc.v1.cri"]["restrict_oom_score_adj"] is True


def test_the_registry_is_plain_http_for_pulls() -> None:
    hosts = tomllib.loads(registry_hosts_toml("172.31.254.1:5000"))
    assert hosts["server"] == "http://172.31.254.1:5000"
    assert hosts["host"]["http://172.31.254.1:5000"]["capabilities"] == ["pull", "resolve"]


def test_pods_get_addresses_from_the_pod_cidr_with_leases_in_the_node() -> None:
    bridge, portmap = cni_configuration(pod_cidr="10.244.0.0/24", ipam_dir=LAYOUT.ipam_dir)["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/24"}]]
    assert bridge["ipam"]["dataDir"] == str(LAYOUT.ipam_dir)
    assert portmap["type"] == "portmap"


def test_kube_proxy_routes_with_iptables_and_leaves_the_machines_conntrack_settings() -> None:
    config = kube_proxy_configuration(kubeconfig=Path("/k"), node_name="n0", pod_cidr="10.244.0.0/24")
    assert config["mode"] == "iptables"
    assert config["hostnameOverride"] == "n0"
    assert config["clusterCIDR"] == "10.244.0.0/24"
    # nf_conntrack_max is one for the whole machine: 0 here means kube-proxy does not set it.
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["conntrack"]["tcpEstablishedTimeout"] == "0s"
    assert config["conntrack"]["tcpCloseWaitTimeout"] == "0s"


def test_each_slot_has_its_own_namespace_addresses_and_interface() -> None:
    networks = [NodeNetwork.in_slot(slot) for slot in range(SLOTS)]
    assert (networks[0].name, networks[0].host_address, networks[0].node_address) == (
        "labgate-node-0",
        "172.31.254.1",
        "172.31.254.2",
    )
    assert (networks[-1].host_address, networks[-1].node_address) == ("172.31.254.61", "172.31.254.62")
    # The host routes each node's pods into its veth: the CIDRs must not overlap.
    assert [n.pod_cidr for n in networks[:2]] == ["10.244.0.0/24", "10.244.1.0/24"]
    assert len({n.pod_cidr for n in networks}) == SLOTS
    addresses = [n.host_address for n in networks] + [n.node_address for n in networks]
    assert len(set(addresses)) == 2 * SLOTS
    assert len({n.host_interface for n in networks}) == SLOTS
    with pytest.raises(ValueError, match=r"not in 0\.\.15"):
        NodeNetwork.in_slot(SLOTS)


def test_the_hosts_interface_name_fits_the_kernels_limit() -> None:
    network = NodeNetwork("labgate-node-with-a-long-name-0")
    assert len(network.host_interface) <= 15
    assert len(network.host_interface + "n") <= 15  # its peer, before it is renamed in the namespace


@pytest.mark.parametrize("hidden", ["/run/labgate", "/var/lib/labgate", "/var/log/labgate"])
def test_a_node_refuses_state_where_its_own_directories_would_hide_it(hidden: str) -> None:
    with pytest.raises(ValueError, match="must not be under"):
        RealNode(
            Path(hidden),
            network=NodeNetwork("n0"),
            control_plane=None,  # type: ignore[arg-type]  # never reached
            sandbox_image="p",
        )


def test_a_node_refuses_a_directory_too_long_for_its_unix_sockets() -> None:
    with pytest.raises(ValueError, match="too long for its unix sockets"):
        RealNode(
            Path("/tmp") / ("d" * 80),
            network=NodeNetwork("n0"),
            control_plane=None,  # type: ignore[arg-type]  # never reached
            sandbox_image="p",
        )
