"""A real node's network: a network namespace of its own, joined to the host by a veth pair.

    network = NodeNetwork.claim()   # the first free slot, created; before the control plane, which
    ...                             # listens on network.host_address
    network.delete()

The host end (172.31.254.1 in slot 0) is where the node reaches the apiserver and the registry; the
node end (172.31.254.2) is the node's InternalIP, where the apiserver reaches the kubelet; the host
routes the node's pod CIDR (10.244.<slot>.0/24) into the veth, where the apiserver reaches webhooks
in pods. Pod
networking (the CNI bridge, its iptables rules) lives inside the namespace: nothing of it touches the
host's interfaces or firewall.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Node networks that may exist side by side (test runs of several people on one machine): each a /30.
SLOTS = 16


def _ip() -> str:
    found = shutil.which("ip")
    if found is None:
        raise RuntimeError("the `ip` command (iproute2) is not installed")
    return found


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip ARGS...`; raise with its error when `check` and it fails."""
    result = subprocess.run([_ip(), *args], capture_output=True, text=True, check=False, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


@dataclass(frozen=True)
class NodeNetwork:
    """The network namespace `name` and the veth pair between it and the host (a /30)."""

    name: str
    host_address: str = "172.31.254.1"
    node_address: str = "172.31.254.2"
    prefix_length: int = 30
    pod_cidr: str = "10.244.0.0/24"

    @property
    def host_interface(self) -> str:
        # Interface names hold at most 15 bytes: a short hash of the namespace's name.
        return "lgn" + hashlib.sha256(self.name.encode()).hexdigest()[:8]

    @property
    def node_interface(self) -> str:
        return "eth0"

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.name

    @classmethod
    def in_slot(cls, slot: int, *, prefix: str = "labgate-node") -> NodeNetwork:
        """The network of slot `slot`: namespace <prefix>-<slot>, the slot's /30 of 172.31.254.0/24."""
        if not 0 <= slot < SLOTS:
            raise ValueError(f"slot {slot} is not in 0..{SLOTS - 1}")
        return cls(
            f"{prefix}-{slot}",
            host_address=f"172.31.254.{4 * slot + 1}",
            node_address=f"172.31.254.{4 * slot + 2}",
            pod_cidr=f"10.244.{slot}.0/24",
        )

    @classmethod
    def claim(cls) -> NodeNetwork:
        """Create the network of the first free slot (`ip netns add` fails on a taken one, so two runs
        side by side never share one); raise when all are taken."""
        for slot in range(SLOTS):
            network = cls.in_slot(slot)
            if (
                not network.netns_path.exists()
                and run_ip("netns", "add", network.name, check=False).returncode == 0
            ):
                network._join_to_host()
                return network
        raise RuntimeError(
            f"all {SLOTS} node networks are taken (ip netns list): other runs, or leftovers of killed ones"
            " (`ip netns delete labgate-node-N` removes one that no process uses)"
        )

    def create(self) -> None:
        """Make the namespace and the veth pair, addresses up; undo what was made if a step fails."""
        if self.netns_path.exists():
            raise RuntimeError(f"network namespace {self.name} exists already (another node, or a leftover)")
        run_ip("netns", "add", self.name)
        self._join_to_host()

    def _join_to_host(self) -> None:
        """The veth pair between the (new) namespace and the host; undone with the namespace on failure."""
        try:
            peer = f"{self.host_interface}n"
            run_ip("link", "add", self.host_interface, "type", "veth", "peer", "name", peer)
            run_ip("link", "set", peer, "netns", self.name)
            self.exec("ip", "link", "set", peer, "name", self.node_interface)
            run_ip("addr", "add", f"{self.host_address}/{self.prefix_length}", "dev", self.host_interface)
            run_ip("link", "set", self.host_interface, "up")
            self.exec("ip", "addr", "add", f"{self.node_address}/{self.prefix_length}", "dev", "eth0")
            self.exec("ip", "link", "set", "eth0", "up")
            self.exec("ip", "link", "set", "lo", "up")
            # Forwarding between the pods' bridge and eth0, inside the namespace only.
            self.exec("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
            # The apiserver calls webhooks in pods at their addresses: the host routes the node's pod
            # CIDR into the veth (the route goes with the veth).
            run_ip("route", "add", self.pod_cidr, "via", self.node_address, "dev", self.host_interface)
        except BaseException:
            self.delete()
            raise

    def exec(self, *argv: str) -> str:
        """Run `argv` in the namespace (`ip netns exec`); its standard output."""
        result = run_ip("netns", "exec", self.name, *argv, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {self.name} failed: {result.stderr.strip()}")
        return result.stdout

    def delete(self) -> None:
        """Remove the namespace and the host's end of the veth (idempotent). The namespace itself goes
        when its last process has exited; stop the node's processes first."""
        if self.netns_path.exists():
            run_ip("netns", "delete", self.name, check=False)
        if self.has_host_interface():
            run_ip("link", "delete", self.host_interface, check=False)

    def has_host_interface(self) -> bool:
        return run_ip("link", "show", self.host_interface, check=False).returncode == 0

    def leftovers(self) -> list[str]:
        """What of this network is still on the host: empty after delete()."""
        found = []
        if self.netns_path.exists():
            found.append(f"network namespace {self.name}")
        if self.has_host_interface():
            found.append(f"interface {self.host_interface}")
        if run_ip("route", "show", self.pod_cidr).stdout.strip():
            found.append(f"route to {self.pod_cidr}")
        return found
