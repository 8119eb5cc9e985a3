"""Run the real, pinned kubectl as a given user."""

from __future__ import annotations

import subprocess
from pathlib import Path

from devcluster.tools import binary


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`kubectl --kubeconfig KUBECONFIG ARGS...`; never raises on a non-zero exit (callers assert)."""
    return subprocess.run(
        [binary("kubectl"), f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
