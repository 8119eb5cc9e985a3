"""A private containerd for running the labgate image on this machine: its own root, state and socket
in a work directory, containers run with runc on the host network (loopback), everything stopped by pid.

    with Containerd(workdir) as containerd:
        reference = containerd.import_image(built.archive)
        process = containerd.run("webhook-0", reference, None, env={...}, mounts=[...])

Needs root and Debian's containerd and runc packages (`containerd_problem()` says why it cannot run).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devcluster.processes import Lifecycle, ManagedProcess, spawn, stop_pid, wait_until

NAMESPACE = "labgate"
BINARIES = ("containerd", "ctr", "runc", "containerd-shim-runc-v2")


def containerd_problem() -> str | None:
    """Why containers cannot run here, or None."""
    if os.geteuid() != 0:
        return "containerd and runc need root here (no rootless set-up)"
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install containerd runc)"
    return None


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(containerd_problem() or f"{name} is not installed")
    return found


@dataclass(frozen=True)
class Mount:
    """A host path (`source`) shown at `target` in the container."""

    source: Path
    target: Path
    writable: bool = False


class Containerd(Lifecycle):
    """One containerd daemon of our own (not the machine's), and the containers it runs."""

    def __init__(self, workdir: Path, *, detached: bool = False):
        self.workdir = workdir
        self.detached = detached
        self.socket = workdir / "containerd.sock"
        self.process: ManagedProcess | None = None
        self.containers: list[str] = []

    def _config(self) -> Path:
        config = self.workdir / "config.toml"
        config.write_text(
            "\n".join(
                [
                    "version = 2",
                    f'root = "{self.workdir / "root"}"',
                    f'state = "{self.workdir / "state"}"',
                    # No Kubernetes CRI here: only `ctr` talks to this daemon.
                    'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
                    "[grpc]",
                    f'  address = "{self.socket}"',
                    "[ttrpc]",
                    f'  address = "{self.socket}.ttrpc"',
                    '[plugins."io.containerd.internal.v1.opt"]',
                    f'  path = "{self.workdir / "opt"}"',
                    "",
                ]
            )
        )
        return config

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = spawn(
            self.workdir,
            "containerd",
            [_binary("containerd"), "--config", str(self._config())],
            detached=self.detached,
        )
        wait_until(
            lambda: self.ctr("version").returncode == 0,
            what="containerd",
            timeout=30,
            interval=0.2,
            watch=[self.process],
        )

    def ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_binary("ctr"), "--address", str(self.socket), "--namespace", NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def _ctr_ok(self, *args: str, timeout: float = 120) -> str:
        result = self.ctr(*args, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {(result.stderr or result.stdout).strip()}")
        return result.stdout

    def import_image(self, archive: Path, base_name: str = "ghcr.io/labgate/labgate") -> str:
        """Import an OCI archive; return the image reference it got (base_name:tag)."""
        before = set(self.images())
        self._ctr_ok("image", "import", "--base-name", base_name, str(archive), timeout=300)
        imported = [ref for ref in self.images() if ref.startswith(f"{base_name}:")]
        new = [ref for ref in imported if ref not in before] or imported
        if len(new) != 1:
            raise RuntimeError(f"expected one image named {base_name}:<tag> after the import, found {new}")
        return new[0]

    def images(self) -> list[str]:
        return self._ctr_ok("image", "ls", "--quiet").split()

    def run(
        self,
        name: str,
        reference: str,
        argv: Sequence[str] | None,
        *,
        env: dict[str, str] | None = None,
        mounts: Sequence[Mount] = (),
    ) -> ManagedProcess:
        """Run a container in the foreground of a `ctr run` process (its log: workdir/logs/NAME.log).
        `argv` None runs the image's own ENTRYPOINT and CMD. The user is the image's (USER). SIGTERM to
        the returned process reaches the container's process (ctr forwards signals)."""
        container_id = f"{name}-{uuid.uuid4().hex[:6]}"
        command = [
            _binary("ctr"),
            "--address",
            str(self.socket),
            "--namespace",
            NAMESPACE,
            "run",
            "--rm",
            "--net-host",
        ]
        for key, value in (env or {}).items():
            command += ["--env", f"{key}={value}"]
        for mount in mounts:
            options = "rbind:rw" if mount.writable else "rbind:ro"
            command += ["--mount", f"type=bind,src={mount.source},dst={mount.target},options={options}"]
        command += [reference, container_id, *(argv or [])]
        self.containers.append(container_id)
        return spawn(self.workdir, name, command, detached=self.detached)

    def run_once(self, name: str, reference: str, argv: Sequence[str], *, timeout: float = 120) -> str:
        """Run `argv` in a fresh container to its end; return its standard output."""
        container_id = f"{name}-{uuid.uuid4().hex[:6]}"
        self.containers.append(container_id)
        result = self.ctr("run", "--rm", "--net-host", reference, container_id, *argv, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(
                f"{shlex.join(argv)} in {reference} exited {result.returncode}: {result.stderr}"
            )
        return result.stdout

    def stop(self) -> None:
        """Kill what still runs (tasks, then their shims), then the daemon; all by pid or id."""
        if self.process is not None and self.process.is_running():
            for container_id in self.containers:  # normally gone already: `ctr run --rm` removes them
                self.ctr("task", "delete", "--force", container_id, timeout=30)
                self.ctr("container", "delete", container_id, timeout=30)
        shims = self._shim_pids()
        if self.process is not None:
            self.process.stop()
            self.process = None
        for pid in shims:
            stop_pid(pid, timeout=5)
        self._unmount_leftovers()

    def leftover_processes(self) -> list[str]:
        """Processes that still name this daemon's socket (its shims and tasks' helpers); empty after stop()."""
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                words = cmdline.read_bytes().split(b"\0")
                if str(self.socket).encode() in words or f"{self.socket}.ttrpc".encode() in words:
                    found.append(f"{cmdline.parent.name}: {b' '.join(words).decode(errors='replace')}")
        return found

    def _shim_pids(self) -> list[int]:
        pids = []
        for pidfile in (self.workdir / "state").glob(f"io.containerd.runtime.v2.task/{NAMESPACE}/*/shim.pid"):
            with contextlib.suppress(ValueError, OSError):
                pids.append(int(pidfile.read_text().strip()))
        return pids

    def _unmount_leftovers(self) -> None:
        """Container root file systems still mounted under our directories (only after a hard kill)."""
        prefix = str(self.workdir) + "/"
        mounted = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if len(line.split()) > 1
        ]
        for target in sorted((m for m in mounted if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run([_binary("umount"), "--lazy", target], check=False, capture_output=True)


class ContainerLauncher:
    """Starts `labgate ARGS...` in the image (a devcluster.stack.LabgateLauncher), as the image's user.

    The command sees every path it was given at the same path: files it reads are copies owned by the
    image's user (the originals are root's, mode 0600, as a Secret's files are the pod user's in a
    cluster), and directories it writes are handed to that user. Arguments equal to the image's CMD run
    the image's own ENTRYPOINT and CMD, so that a container started that way tests them too."""

    def __init__(self, containerd: Containerd, reference: str, *, user: tuple[int, int], cmd: Sequence[str]):
        self.containerd = containerd
        self.reference = reference
        self.uid, self.gid = user
        self.cmd = list(cmd)

    def launch(
        self,
        workdir: Path,
        name: str,
        args: list[str],
        *,
        env: dict[str, str],
        files: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        detached: bool = False,
    ) -> ManagedProcess:
        copies = self.containerd.workdir / "files" / f"{name}-{uuid.uuid4().hex[:6]}"
        mounts = []
        for index, original in enumerate(files):
            copy = copies / str(index) / original.name
            if original.is_dir():
                shutil.copytree(original, copy)
            else:
                copy.parent.mkdir(parents=True)
                shutil.copy2(original, copy)
            for path in [copy, *copy.rglob("*")]:
                os.chown(path, self.uid, self.gid)
            mounts.append(Mount(copy, original))
        for directory in writable:
            directory.mkdir(parents=True, exist_ok=True)
            os.chown(directory, self.uid, self.gid)
            mounts.append(Mount(directory, directory, writable=True))
        argv = None if args == self.cmd else ["labgate", *args]
        return self.containerd.run(name, self.reference, argv, env=env, mounts=mounts)
