"""A real Kubernetes node beside the local control plane: the pinned kubelet talking CRI to Debian's
containerd (runc, the reference CNI plugins), in a network namespace (devcluster.node_network) and a
mount namespace of its own (devcluster.node_config says what the mount namespace holds).

    network = NodeNetwork.claim()
    control_plane = LocalControlPlane(workdir, address=network.host_address, real_nodes=True, ...)
    with RealNode(workdir / "node", network=network, control_plane=control_plane,
                  sandbox_image=pause_reference, registries=[registry.host]) as node:
        ...   # node.name is Ready

kube-proxy (iptables mode) routes Services inside the node's network namespace; with
`network_policies=True`, kube-router's policy controller (devcluster.node_enforcer) enforces
NetworkPolicies there. The kubelet
authenticates with a client certificate from the control plane's CA (system:node:<name> in
system:nodes, authorized by the Node authorizer). Processes are stopped by pid: kube-proxy, the
kubelet, every process in the node's cgroups (the pods' containers), containerd, its shims; then
the node's cgroups and state directory are removed. The network namespace is the caller's (see NodeNetwork.delete).
`node_problem()` says why a node cannot run here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Protocol

from devcluster.kubectl import kubectl
from devcluster.node_cgroups import NodeCgroups, cgroup_v1_problem
from devcluster.node_config import (
    CNI_BIN_DIR,
    CNI_PLUGINS,
    PRIVATE_DIRECTORIES,
    NodeLayout,
    mount_namespace_script,
)
from devcluster.node_enforcer import USER as ENFORCER_USER
from devcluster.node_enforcer import enforcer_argv, grant_enforcer_access
from devcluster.node_files import NodeFacts, write_node_files
from devcluster.node_network import NodeNetwork
from devcluster.processes import Lifecycle, ManagedProcess, rerecord, spawn, stop_pid, wait_until
from devcluster.tools import ensure_tools, tool

BINARIES = (
    "containerd",
    "ctr",
    "runc",
    "containerd-shim-runc-v2",
    "ip",
    "nsenter",
    "unshare",
    "iptables",
    "gcc",
    "go",  # the echo image's binary (the toolchain builds the pinned tools with it too)
)


def node_problem() -> str | None:
    """Why a real node cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real node needs root (network and mount namespaces, cgroups, containerd)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    missing += [f"{CNI_BIN_DIR}/{p}" for p in CNI_PLUGINS if not (CNI_BIN_DIR / p).is_file()]
    if missing:
        return (
            f"not installed: {', '.join(missing)} (toolchain/debian-packages.sh installs containerd, "
            "runc, containernetworking-plugins, iptables, gcc; go as for toolchain/build.sh)"
        )
    return cgroup_v1_problem()


class ClusterForNode(Protocol):
    """What a node needs of its control plane (devcluster.controlplane.LocalControlPlane)."""

    @property
    def ca_pem(self) -> bytes: ...

    @property
    def admin_kubeconfig(self) -> Path: ...

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path: ...


class RealNode(Lifecycle):
    """containerd and the kubelet of node `name`, in `network`'s namespaces, registered with `control_plane`."""

    def __init__(
        self,
        workdir: Path,
        *,
        network: NodeNetwork,
        control_plane: ClusterForNode,
        sandbox_image: str,
        registries: tuple[str, ...] = (),
        name: str | None = None,
        network_policies: bool = False,
        detached: bool = False,
    ):
        """`sandbox_image`: the pause image by digest, pullable from one of `registries` (host:port of
        plain-HTTP registries the node may pull from). `name`: the Node's, by default the network's.
        `network_policies`: run the tests' NetworkPolicy enforcer (devcluster.node_enforcer) too.
        `detached`: the processes outlive this Python process (`python -m devcluster up --real-node`)."""
        self.workdir = workdir
        self.layout = NodeLayout(workdir / "state")
        for hidden in ("/run", *PRIVATE_DIRECTORIES):
            if workdir.resolve().is_relative_to(hidden):
                raise ValueError(
                    f"the node's directory ({workdir}) must not be under {hidden}: the node hides it"
                )
        # Unix sockets live under the state (the kubelet's pod-resources/<10 digits>, containerd's
        # .ttrpc): their paths must fit sun_path (108 bytes).
        longest = max(
            len(str(self.layout.kubelet_root / "pod-resources" / "0123456789")),
            len(str(self.layout.containerd_socket)) + 6,
        )
        if longest >= 108:
            raise ValueError(
                f"the node's directory ({workdir}) is too long for its unix sockets: use a shorter one"
            )
        self.network = network
        self.control_plane = control_plane
        self.sandbox_image = sandbox_image
        self.registries = registries
        self.name = name or network.name
        self.network_policies = network_policies
        self.detached = detached
        self.cgroups = NodeCgroups(f"/{network.name}")
        self.containerd: ManagedProcess | None = None
        self.kubelet: ManagedProcess | None = None
        self.kube_proxy: ManagedProcess | None = None
        self.enforcer: ManagedProcess | None = None
        self._stopped_pids: set[int] = set()

    # -- start ------------------------------------------------------------------------------------

    def start(self, *, timeout: float = 180.0) -> None:
        """Start containerd, then the kubelet and kube-proxy; return when the Node is Ready. Stops
        what it started if any step fails."""
        try:
            self._write_files()
            self.cgroups.create()
            self._start_containerd(timeout)
            self._start_kubelet()
            self._start_kube_proxy()
            if self.network_policies:
                self._start_enforcer()
            wait_until(
                self.is_ready,
                what=f"node {self.name} Ready",
                timeout=timeout,
                interval=0.5,
                watch=self._processes(),
            )
        except BaseException:
            self.stop()
            raise

    def _write_files(self) -> None:
        facts = NodeFacts(
            node_name=self.name,
            node_address=self.network.node_address,
            pod_cidr=self.network.pod_cidr,
            cgroup_root=self.cgroups.root,
            sandbox_image=self.sandbox_image,
            registries=self.registries,
            ca_pem=self.control_plane.ca_pem,
            # The user the bootstrap ClusterRoleBinding system:node-proxier names.
            kube_proxy_kubeconfig=self.control_plane.kubeconfig_for("system:kube-proxy"),
        )
        write_node_files(self.layout, facts)

    def _start_containerd(self, timeout: float) -> None:
        # nsenter joins the network namespace and unshare makes a new mount namespace (not `ip netns
        # exec`, which mounts a fresh /sys without the cgroup hierarchies); the script there makes
        # the mount namespace the node's, then execs containerd: one pid from nsenter to containerd.
        argv = [
            shutil.which("nsenter") or "nsenter",
            f"--net={self.network.netns_path}",
            "--",
            shutil.which("unshare") or "unshare",
            "--mount",
            "--propagation=slave",
            "--",
            "sh",
            "-c",
            mount_namespace_script(self.layout),
            "node-mounts",
            shutil.which("containerd") or "containerd",
            "--config",
            str(self.layout.containerd_config),
        ]
        self.containerd = spawn(self.workdir, "containerd", argv, detached=self.detached)
        wait_until(
            self._containerd_answers,
            what="containerd",
            timeout=timeout,
            interval=0.2,
            watch=[self.containerd],
        )
        rerecord(self.workdir, self.containerd)

    def _containerd_answers(self) -> bool:
        return self.ctr("version").returncode == 0

    def ctr(self, *args: str, namespace: str = "k8s.io") -> subprocess.CompletedProcess[str]:
        """`ctr` against this node's containerd (its socket is a path: reachable from the host)."""
        return subprocess.run(
            [
                shutil.which("ctr") or "ctr",
                "--address",
                str(self.layout.containerd_socket),
                "-n",
                namespace,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def _start_kubelet(self) -> None:
        kubeconfig = self.control_plane.kubeconfig_for(f"system:node:{self.name}", groups=("system:nodes",))
        self.kubelet = self._spawn_in_node(
            "kubelet",
            [
                str(tool("kubernetes").binary("kubelet")),
                f"--config={self.layout.kubelet_config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.layout.kubelet_root}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.network.node_address}",
                "--v=1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        binary = ensure_tools("kube-proxy")["kube-proxy"].binary()
        self.kube_proxy = self._spawn_in_node(
            "kube-proxy", [str(binary), f"--config={self.layout.kube_proxy_config}", "--v=1"]
        )

    def _start_enforcer(self) -> None:
        grant_enforcer_access(self.control_plane.admin_kubeconfig)
        argv = enforcer_argv(
            binary=ensure_tools("kube-router")["kube-router"].binary(),
            kubeconfig=self.control_plane.kubeconfig_for(ENFORCER_USER),
            node_name=self.name,
        )
        self.enforcer = self._spawn_in_node("kube-router", argv)

    def _spawn_in_node(self, name: str, argv: list[str]) -> ManagedProcess:
        """Start `argv` in the node's network and mount namespaces (containerd's)."""
        if self.containerd is None:
            raise RuntimeError("containerd is not running")
        nsenter = [
            shutil.which("nsenter") or "nsenter",
            f"--target={self.containerd.pid}",
            "--mount",
            "--net",
        ]
        process = spawn(self.workdir, name, [*nsenter, "--", *argv], detached=self.detached)
        # nsenter execs the program (same pid): record it as the program, so that `python -m devcluster
        # down` recognizes it (it signals a pid only while its command line is the one recorded).
        wait_until(
            lambda: Path(f"/proc/{process.pid}/exe").resolve() == Path(argv[0]).resolve(),
            what=f"{name} started",
            timeout=30,
            interval=0.05,
            watch=[process],
        )
        rerecord(self.workdir, process)
        return process

    def read_as_node(self, path: str) -> str:
        """The file at `path` as the node's processes see it (in their mount namespace)."""
        if self.kubelet is None:
            raise RuntimeError("the kubelet is not running")
        argv = [shutil.which("nsenter") or "nsenter", f"--target={self.kubelet.pid}", "--mount", "cat", path]
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout

    def node_object(self) -> dict[str, object]:
        """The Node as the apiserver has it."""
        result = kubectl(self.control_plane.admin_kubeconfig, "get", "node", self.name, "-o", "json")
        if result.returncode != 0:
            raise RuntimeError(result.stderr.strip())
        node: dict[str, object] = json.loads(result.stdout)
        return node

    def is_ready(self) -> bool:
        status = self.node_object().get("status")
        conditions = status.get("conditions", []) if isinstance(status, dict) else []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def resident_memory_mib(self) -> dict[str, float]:
        """What the node's processes hold in memory now (VmRSS): the kubelet, kube-proxy, containerd,
        its shims."""
        pids = {p.name: [p.pid] for p in self._processes()}
        pids["shims"] = self._shim_pids()
        return {name: round(sum(_rss_kib(pid) for pid in group) / 1024, 1) for name, group in pids.items()}

    # -- stop -------------------------------------------------------------------------------------

    def _processes(self) -> list[ManagedProcess]:
        return [p for p in (self.containerd, self.kubelet, self.kube_proxy, self.enforcer) if p is not None]

    def stop(self) -> None:
        """Stop everything the node started, by pid, and remove its cgroups and state (idempotent)."""
        for process in (self.enforcer, self.kube_proxy, self.kubelet):
            if process is not None:
                self._stopped_pids.add(process.pid)
                process.stop()
        self.enforcer = self.kube_proxy = self.kubelet = None
        self.cgroups.kill_all()  # the pods' containers: the kubelet does not stop them on its way out
        if self.containerd is not None:
            self._stopped_pids.add(self.containerd.pid)
            self.containerd.stop()
            self.containerd = None
        for pid in self._shim_pids():
            self._stopped_pids.add(pid)
            stop_pid(pid, timeout=5)
        self.cgroups.remove()
        self._remove_state()

    def _shim_pids(self) -> list[int]:
        """The shims of this node's containerd: they name its socket (`-address`), live in no cgroup
        of the node, and outlive containerd (as they should, for a restart)."""
        socket = str(self.layout.containerd_socket).encode()
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                words = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if words[0].endswith(b"containerd-shim-runc-v2") and socket in words:
                found.append(int(cmdline.parent.name))
        return found

    def _remove_state(self) -> None:
        if self.mounts():
            # Mounts of the node's namespace never show here; one that does came from elsewhere.
            raise RuntimeError(f"mounts remain under {self.layout.state}: {self.mounts()}")
        shutil.rmtree(self.layout.state, ignore_errors=True)

    def mounts(self) -> list[str]:
        """Mount points under the node's state directory that the host sees (none, ever)."""
        prefix = str(self.layout.state) + "/"
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        return [line.split()[4] for line in lines if line.split()[4].startswith(prefix)]

    def leftovers(self) -> list[str]:
        """What of the node remains on the host after stop(): processes, cgroups, mounts, state."""
        found = [f"process {pid} in the node's cgroups" for pid in self.cgroups.pids()]
        found += [f"cgroup {path}" for path in self.cgroups.existing()]
        found += [f"mount {path}" for path in self.mounts()]
        found += [f"containerd shim {pid}" for pid in self._shim_pids()]
        found += [f"process {pid}" for pid in sorted(self._stopped_pids) if Path(f"/proc/{pid}").exists()]
        if self.layout.state.exists():
            found.append(f"directory {self.layout.state}")
        return found


def _rss_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    lines = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(lines[0].split()[1]) if lines else 0
