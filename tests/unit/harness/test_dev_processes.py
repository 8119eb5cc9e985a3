"""`make stop` / `make run`: the pids file identifies processes, so stopping never hits a stranger."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devcluster.__main__ import main as devcluster_main
from devcluster.processes import free_port, process_identity, recorded_pids, spawn, stop_pid, stop_recorded

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_stop_signals_only_the_processes_it_started(tmp_path: Path) -> None:
    ours = spawn(tmp_path, "ours", SLEEPER)
    assert recorded_pids(tmp_path) == {"ours": ours.pid}
    assert stop_recorded(tmp_path) == [f"ours (pid {ours.pid})"]
    assert not ours.is_running()
    ours.stop()  # reaps the child and closes its log
    # Idempotent: nothing left to stop, no stale pids file.
    assert stop_recorded(tmp_path) == []
    assert not (tmp_path / "pids.json").exists()


def test_a_recorded_pid_now_held_by_another_process_is_not_signalled(tmp_path: Path) -> None:
    # Regression: `labgate dev down` signalled whatever process held a recorded pid. Simulate pid reuse:
    # the record of a process that is gone now names the pid of an unrelated process.
    gone = spawn(tmp_path, "gone", SLEEPER)
    gone.stop()
    stranger = subprocess.Popen(SLEEPER)
    try:
        records = json.loads((tmp_path / "pids.json").read_text())
        records["gone"]["pid"] = stranger.pid
        (tmp_path / "pids.json").write_text(json.dumps(records))
        assert recorded_pids(tmp_path) == {}
        assert stop_recorded(tmp_path) == []
        assert stranger.poll() is None, "the unrelated process was signalled"
    finally:
        stop_pid(stranger.pid)
        stranger.wait(timeout=5)


def test_bare_pids_of_an_older_pids_file_are_never_signalled(tmp_path: Path) -> None:
    stranger = subprocess.Popen(SLEEPER)
    try:
        (tmp_path / "pids.json").write_text(json.dumps({"etcd": stranger.pid}))
        assert stop_recorded(tmp_path) == []
        assert stranger.poll() is None
    finally:
        stop_pid(stranger.pid)
        stranger.wait(timeout=5)


def test_identity_names_start_time_and_command_line() -> None:
    process = subprocess.Popen(SLEEPER)
    try:
        identity = process_identity(process.pid)
        assert identity is not None
        assert identity["cmdline"].endswith("time.sleep(60)")
        assert identity["start_time"].isdigit()
    finally:
        stop_pid(process.pid)
        process.wait(timeout=5)
    assert process_identity(process.pid) is None


def test_up_on_a_running_cluster_refuses_and_leaves_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `make run` used to stop the running cluster and wipe its etcd data without a word.
    running = spawn(tmp_path, "kube-apiserver", SLEEPER)
    (tmp_path / "etcd").mkdir()
    (tmp_path / "etcd" / "member").write_text("the researcher's objects")
    try:
        assert devcluster_main(["up", "--workdir", str(tmp_path)]) == 1
        said = capsys.readouterr().err
        assert "already runs" in said
        assert "make stop && make run" in said
        assert running.is_running()
        assert (tmp_path / "etcd" / "member").read_text() == "the researcher's objects"
    finally:
        stop_recorded(tmp_path)
        running.stop()


def test_ports_handed_out_are_never_an_outgoing_connections_and_never_twice() -> None:
    # A port from the kernel's ephemeral range could be taken, before the process told to listen on
    # it starts, as the source port of any outgoing connection (a kube-scheduler failed so in CI).
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < min(low, 30000) for p in ports)  # below NodePorts (30000-32767) too
