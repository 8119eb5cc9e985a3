"""Child processes that the local control plane starts, and the bounded waits around them."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Self

_PR_SET_PDEATHSIG = 1


# Ports handed out below the kernel's ephemeral range and below Services' NodePort range (30000-32767).
_PORTS_FROM, _PORTS_BEFORE = 10000, 30000
_handed_out: collections.deque[int] = collections.deque(maxlen=4096)
_handing_out = threading.Lock()


def _ephemeral_low() -> int:
    """The first port the kernel gives outgoing connections (net.ipv4.ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, for a process started later.

    Not one the kernel picks (bind to port 0): those come from the ephemeral range, which the outgoing
    connections of every process here (an apiserver calling etcd and webhooks, a kubelet) draw their
    source ports from, so one could take the port before the process that was told it binds it (a
    kube-scheduler started a minute after its port was chosen failed so). Ports below that range
    are never given to an outgoing connection; each is handed out once in the last 4,096."""
    before = min(_PORTS_BEFORE, _ephemeral_low())
    with _handing_out:
        for _ in range(1000) if before - _PORTS_FROM >= 1000 else ():
            port = _PORTS_FROM + secrets.randbelow(before - _PORTS_FROM)
            if port not in _handed_out and _is_free(port):
                _handed_out.append(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a machine with a low range
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # If the test runner is killed outright, the kernel stops its control plane too.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Lifecycle:
    """A part of the local cluster started with `start()` and stopped with `stop()`; as a context
    manager, started on entry and stopped on exit, whatever ended the block."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class ProcessFailedError(RuntimeError):
    """A child process exited or never became ready; the message carries its log tail."""


class ManagedProcess:
    """One child process with its own log file, stopped by its pid."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._popen.pid

    def start(self, *, detached: bool = False) -> None:
        """Start the process. Detached processes outlive this Python process (for `make run`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._popen = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(self.env or {})},
            start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop children in order.
            preexec_fn=None if detached else _die_with_parent,  # noqa: PLW1509 - prctl only, no locks
        )

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def check_alive(self) -> None:
        """Raise with the log tail if the process has exited."""
        if self._popen is not None and self._popen.poll() is not None:
            raise ProcessFailedError(
                f"{self.name} exited with code {self._popen.returncode}; last lines of {self.log_path}:\n"
                f"{self.log_tail()}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds; always reaps the child."""
        if self._popen is not None:
            stop_pid(self._popen.pid, timeout=timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=1)
        if self._log is not None:
            self._log.close()
            self._log = None


def _is_alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass  # not our child (e.g. `python -m devcluster down` stopping a detached stack)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_pid(pid: int, *, timeout: float = 10.0) -> None:
    """Stop one process by pid: SIGTERM, wait up to `timeout`, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _is_alive(pid):
        time.sleep(0.05)


def wait_until(
    is_ready: Callable[[], bool],
    *,
    what: str,
    timeout: float,
    interval: float = 0.1,
    watch: list[ManagedProcess] | None = None,
) -> None:
    """Poll `is_ready` until True, at most `timeout` seconds; fail early if a watched process dies."""
    deadline = time.monotonic() + timeout
    while True:
        for process in watch or []:
            process.check_alive()
        try:
            if is_ready():
                return
        except Exception:  # noqa: S110 - a refused connection while starting means "not yet"
            pass
        if time.monotonic() >= deadline:
            tails = "".join(f"\n--- {p.name} ({p.log_path}):\n{p.log_tail()}" for p in watch or [])
            raise ProcessFailedError(f"{what} was not ready after {timeout:.0f}s{tails}")
        time.sleep(interval)


PIDS_FILE = "pids.json"


def spawn(
    workdir: Path, name: str, argv: list[str], *, detached: bool = False, env: dict[str, str] | None = None
) -> ManagedProcess:
    """Start `argv` with its log in workdir/logs/NAME.log and record it in workdir/pids.json: its pid,
    and what identifies the process behind that pid (start time, command line), so that a later
    `python -m devcluster down` never signals another process that got the same pid."""
    process = ManagedProcess(name, argv, workdir / "logs" / f"{name}.log", env=env)
    process.start(detached=detached)
    records = _read_records(workdir)
    identity = process_identity(process.pid)
    records[name] = {"pid": process.pid, **(identity or {})}
    (workdir / PIDS_FILE).write_text(json.dumps(records, indent=2))
    return process


def process_identity(pid: int) -> dict[str, str] | None:
    """What tells this process from a later one with the same pid: its start time (clock ticks since
    boot, /proc/<pid>/stat field 22) and its command line; None when no such process exists."""
    # Popen returns once the child's exec has closed its close-on-exec pipe, which the kernel does
    # before it sets up the new program's arguments: for a moment the command line reads empty.
    # Every process labgate records has one, so an empty read is retried (bounded), never recorded.
    for _ in range(200):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if cmdline:
            break
        time.sleep(0.005)
    # The command name (field 2) is in parentheses and may hold spaces: split after its last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    return {
        "start_time": fields[19],
        "cmdline": cmdline.replace(b"\0", b" ").decode(errors="replace").strip(),
    }


def _read_records(workdir: Path) -> dict[str, dict[str, object]]:
    path = workdir / PIDS_FILE
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    # An older pids.json held bare pids: they cannot be verified, so they are never signalled.
    return {str(k): (v if isinstance(v, dict) else {"pid": int(v)}) for k, v in raw.items()}


def _is_recorded_process(record: dict[str, object]) -> bool:
    """The pid still belongs to the process that was recorded (same start time and command line)."""
    pid = record.get("pid")
    if not isinstance(pid, int) or "start_time" not in record:
        return False
    identity = process_identity(pid)
    return identity is not None and identity == {
        "start_time": record["start_time"],
        "cmdline": record.get("cmdline"),
    }


def recorded_pids(workdir: Path) -> dict[str, int]:
    """name -> pid of the processes started in `workdir` that still run, oldest first. A recorded pid
    that has exited, or now belongs to another process, is not listed."""
    return {
        name: int(str(record["pid"]))
        for name, record in _read_records(workdir).items()
        if _is_recorded_process(record)
    }


def stop_recorded(workdir: Path) -> list[str]:
    """Stop the processes recorded in workdir/pids.json that are still the ones started, newest first
    (used by `python -m devcluster down`); forget the file. Idempotent: a second call stops nothing."""
    stopped = []
    for name, pid in reversed(list(recorded_pids(workdir).items())):
        stop_pid(pid)
        stopped.append(f"{name} (pid {pid})")
    (workdir / PIDS_FILE).unlink(missing_ok=True)
    return stopped


def rerecord(workdir: Path, process: ManagedProcess) -> None:
    """Record `process` again in workdir/pids.json, after it exec'd into another program (the pid is
    the same, its command line is not): what `python -m devcluster down` checks is what runs now."""
    records = _read_records(workdir)
    identity = process_identity(process.pid)
    records[process.name] = {"pid": process.pid, **(identity or {})}
    (workdir / PIDS_FILE).write_text(json.dumps(records, indent=2))
