"""toolchain/build.sh: a build that finds another build of the same tool under way says so, waits for
it and uses what it built, leaving that build's log whole."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

from devcluster.tools import TOOLCHAIN_DIR, pinned_versions


def test_a_waiting_build_says_so_and_leaves_the_other_builds_log_whole(tmp_path: Path) -> None:
    version = pinned_versions()["OPA_VERSION"]
    (tmp_path / "logs").mkdir()
    other_log = tmp_path / "logs" / f"opa-{version}.log"
    other_log.write_text("+ go build (the other build's progress)\n")
    lock = (tmp_path / f".lock-opa-{version}").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # the other build holds the tool
    env = {**os.environ, "LABGATE_TOOLS_CACHE": str(tmp_path)}
    build = subprocess.Popen(
        [str(TOOLCHAIN_DIR / "build.sh"), "opa"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert build.stdout is not None
        said = []
        for _ in range(50):  # bounded: the preflight line, then the waiting line
            line = build.stdout.readline()
            said.append(line)
            if "being built by another process" in line or not line:
                break
        assert any("opa" in line and "being built by another process" in line for line in said), said
        # The other build finishes: its binary and stamp appear, then it lets go of the lock.
        built = tmp_path / f"opa-{version}"
        (built / "bin").mkdir(parents=True)
        (built / "bin" / "opa").write_text("#!/bin/sh\n")
        (built / "bin" / "opa").chmod(0o755)
        (built / ".complete").write_text("built by the other build\n")
        fcntl.flock(lock, fcntl.LOCK_UN)
        rest, _ = build.communicate(timeout=60)
    finally:
        lock.close()
        if build.poll() is None:
            build.kill()
            build.wait()
    assert build.returncode == 0, rest
    assert "✓ opa" in rest
    assert other_log.read_text() == "+ go build (the other build's progress)\n"
    assert (
        "built meanwhile by the other build" in (tmp_path / "logs" / f"opa-{version}.waiting.log").read_text()
    )
