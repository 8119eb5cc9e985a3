"""The cgroups of one real node (cgroup v1): a root of its own in every hierarchy, under which the
kubelet (cgroupRoot, cgroupfs driver) makes kubepods and the pods' cgroups. Stopping the node kills
every process left in them by pid and removes them, deepest first."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")


def cgroup_v1_problem() -> str | None:
    """Why the node's cgroups cannot be made here, or None (cgroup v1 hierarchies are mounted)."""
    if (CGROUP_MOUNT / "cgroup.controllers").exists():
        return "the real node supports cgroup v1 hosts only (this one runs the unified cgroup v2 hierarchy)"
    if not (CGROUP_MOUNT / "pids" / "cgroup.procs").exists():
        return f"no cgroup v1 pids hierarchy at {CGROUP_MOUNT / 'pids'}"
    return None


class NodeCgroups:
    """The cgroup `root` (e.g. /labgate-node-0) in every mounted hierarchy."""

    def __init__(self, root: str):
        self.root = root

    def hierarchies(self) -> list[Path]:
        return sorted(p for p in CGROUP_MOUNT.iterdir() if (p / "cgroup.procs").exists())

    def paths(self) -> list[Path]:
        return [h / self.root.strip("/") for h in self.hierarchies()]

    def create(self) -> None:
        """Make the root in every hierarchy (the kubelet requires it to exist); cpuset's gets the
        parent's CPUs and memory nodes, which a new v1 cpuset lacks."""
        for path in self.paths():
            path.mkdir(exist_ok=True)
            if path.parent.name == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / name).write_text((path.parent / name).read_text())

    def existing(self) -> list[Path]:
        return [p for p in self.paths() if p.exists()]

    def pids(self) -> set[int]:
        """Every process in the node's cgroups, in any hierarchy."""
        found: set[int] = set()
        for directory in self._directories():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(line) for line in (directory / "cgroup.procs").read_text().split())
        return found

    def _directories(self) -> list[Path]:
        """Every cgroup under the node's roots, deepest first. The walk skips what vanishes while it
        reads: a container's shim removes its cgroup as the container ends, at any moment."""
        found: list[Path] = []
        for path in self.existing():
            found += [Path(top) for top, _, _ in os.walk(path, topdown=False)]
        return found

    def kill_all(self, *, timeout: float = 15.0) -> None:
        """SIGKILL every process in the node's cgroups, by pid, until none is left (bounded)."""
        deadline = time.monotonic() + timeout
        while pids := self.pids():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {sorted(pids)} stay in the node's cgroups after SIGKILL")
            time.sleep(0.1)

    def remove(self, *, timeout: float = 15.0) -> None:
        """Remove the node's cgroups, deepest first (a cgroup whose last process just died may be
        busy for a moment: retried, bounded)."""
        deadline = time.monotonic() + timeout
        for directory in self._directories():
            _rmdir(directory, deadline)


def _rmdir(directory: Path, deadline: float) -> None:
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
