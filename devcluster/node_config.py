"""What a real node's processes are given (pure: text and dicts from paths and addresses): the kubelet's
KubeletConfiguration, containerd's configuration with its CRI plugin, the pod network's CNI
configuration, the registry's hosts.toml, and the shell line that makes the node's mount namespace.

The node runs in a network namespace of its own (devcluster.node_network) and in a mount namespace of
its own, where it has its own /run, /var/lib and /var/log, and where the kernel settings that the
kubelet's `protectKernelDefaults` checks read as the kubelet wants them: files holding those values
are bind-mounted over their /proc/sys files there, so the kubelet starts without writing the shared
machine's settings (and refuses to start if it would have to).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The values the kubelet's protectKernelDefaults requires (pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables), by /proc/sys path.
KERNEL_DEFAULTS: dict[str, str] = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}

# Directories a node writes to outside the paths it is configured with (pod netns pins and runc
# state under /run, CNI result caches under /var/lib/cni, /var/log/containers links): in the node's
# mount namespace each is a directory of the node's own.
PRIVATE_DIRECTORIES = ("/var/lib", "/var/log")

CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
CNI_BIN_DIR = Path("/usr/lib/cni")


@dataclass(frozen=True)
class NodeLayout:
    """Where one node keeps its state: everything below `state`, removed when the node stops."""

    state: Path

    @property
    def containerd_socket(self) -> Path:
        return self.state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.state / "containerd" / "config.toml"

    @property
    def containerd_root(self) -> Path:
        return self.state / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.state / "containerd" / "state"

    @property
    def registry_hosts(self) -> Path:
        return self.state / "containerd" / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.state / "cni" / "net.d"

    @property
    def ipam_dir(self) -> Path:
        return self.state / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.state / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.state / "kubelet-config.yaml"

    @property
    def kube_proxy_config(self) -> Path:
        return self.state / "kube-proxy-config.yaml"

    @property
    def client_ca_file(self) -> Path:
        """The cluster's CA: the kubelet's API accepts client certificates it signed."""
        return self.state / "ca.crt"

    @property
    def sysctl_dir(self) -> Path:
        return self.state / "sysctl"

    def private_directory(self, path: str) -> Path:
        """The node's own copy of a host directory such as /var/lib."""
        return self.state / "private" / path.strip("/").replace("/", "-")


def kubelet_configuration(
    *, layout: NodeLayout, node_address: str, client_ca_file: Path, cgroup_root: str
) -> dict[str, Any]:
    """The KubeletConfiguration: the API on the node's address, clients authenticated by the cluster's
    CA and authorized by the apiserver (as a real node), cgroup v1 with the cgroupfs driver under a
    cgroup of this node's own, and the kernel's settings checked, never written."""
    endpoint = f"unix://{layout.containerd_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        # This machine runs cgroup v1, which the kubelet of 1.34 refuses unless told.
        "failCgroupV1": False,
        "protectKernelDefaults": True,
        "failSwapOn": False,
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
        # A shared disk that other work fills: evict at a nearly full disk, not at 85 %.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "imageGCHighThresholdPercent": 98,
        "imageGCLowThresholdPercent": 95,
    }


def kube_proxy_configuration(*, kubeconfig: Path, node_name: str, pod_cidr: str) -> dict[str, Any]:
    """kube-proxy in iptables mode, inside the node's network namespace. It leaves the conntrack
    settings as they are: nf_conntrack_max is the whole machine's (0 = do not set)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "clusterCIDR": pod_cidr,
        "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def containerd_configuration(*, layout: NodeLayout, sandbox_image: str) -> str:
    """containerd's config.toml: its own root, state and socket, the CRI plugin with runc (cgroupfs),
    the CNI plugins of Debian's containernetworking-plugins, and registries as hosts.toml says."""
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f"root = {json.dumps(str(layout.containerd_root))}",
        f"state = {json.dumps(str(layout.containerd_state))}",
        "[grpc]",
        f"  address = {json.dumps(str(layout.containerd_socket))}",
        "[ttrpc]",
        f"  address = {json.dumps(str(layout.containerd_socket) + '.ttrpc')}",
        '[plugins."io.containerd.internal.v1.opt"]',
        f"  path = {json.dumps(str(layout.state / 'containerd' / 'opt'))}",
        f"{cri}]",
        f"  sandbox_image = {json.dumps(sandbox_image)}",
        # The kubelet asks for oom_score_adj -998 for sandboxes; lowering it needs CAP_SYS_RESOURCE,
        # which this machine withholds even from root (runc then fails "failed to update
        # /proc/self/oom_score_adj"): containerd raises such scores to its own, as rootless set-ups do.
        "  restrict_oom_score_adj = true",
        f"{cri}.containerd]",
        '  default_runtime_name = "runc"',
        f"{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f"{cri}.cni]",
        f"  bin_dir = {json.dumps(str(CNI_BIN_DIR))}",
        f"  conf_dir = {json.dumps(str(layout.cni_conf_dir))}",
        f"{cri}.registry]",
        f"  config_path = {json.dumps(str(layout.registry_hosts))}",
        "",
    ]
    return "\n".join(lines)


def registry_hosts_toml(registry_host: str) -> str:
    """containerd's hosts.toml for a plain-HTTP registry at `registry_host` (host:port)."""
    server = f"http://{registry_host}"
    return f'server = "{server}"\n\n[host."{server}"]\n  capabilities = ["pull", "resolve"]\n'


def cni_configuration(*, pod_cidr: str, ipam_dir: Path) -> dict[str, Any]:
    """The pod network: a bridge with the pods' gateway on it, addresses from `pod_cidr` (host-local,
    its leases in `ipam_dir`), masquerade for traffic leaving the node, and host ports (portmap)."""
    return {
        "cniVersion": "1.0.0",
        "name": "labgate-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def mount_namespace_script(layout: NodeLayout) -> str:
    """The shell program that, run as the first process of a new mount namespace, gives the node its own /run and private directories and the kernel settings the
    kubelet checks, then execs its arguments (containerd)."""
    commands = ["set -e"]
    for key in KERNEL_DEFAULTS:
        value_file = shlex.quote(str(layout.sysctl_dir / key.replace("/", ".")))
        commands.append(f"mount --bind {value_file} /proc/sys/{key}")
    commands.append("mount -t tmpfs -o mode=0755 labgate-node-run /run")
    for directory in PRIVATE_DIRECTORIES:
        own = shlex.quote(str(layout.private_directory(directory)))
        commands.append(f"mount --bind {own} {directory}")
    commands.append('exec "$@"')
    return "; ".join(commands)
