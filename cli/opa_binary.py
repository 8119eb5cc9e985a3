"""Where the `opa` binary for offline checks is: $LABGATE_OPA, else `opa` on PATH, else the build
pinned by a checkout's toolchain/versions.env in the tool cache (~/.cache/labgate/tools). Works the
same from a wheel or the container image as from a checkout."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from labgate.core.errors import LabgateError


class OpaNotFoundError(LabgateError, RuntimeError):
    """No opa binary could be found; the message says where it was looked for."""


def _pinned_cache_binary(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        versions = folder / "toolchain" / "versions.env"
        if versions.is_file():
            for raw in versions.read_text(encoding="utf-8").splitlines():
                key, _, value = raw.strip().partition("=")
                if key == "OPA_VERSION" and value.strip():
                    version = shlex.split(value)[0]
                    cache = Path(
                        os.environ.get("LABGATE_TOOLS_CACHE")
                        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                        / "labgate"
                        / "tools"
                    )
                    return cache / f"opa-{version}" / "bin" / "opa"
            return None
    return None


def find_opa(explicit: str | None = None) -> str:
    """The opa binary to run: `explicit`, $LABGATE_OPA, PATH, or a checkout's pinned build."""
    for candidate in (explicit, os.environ.get("LABGATE_OPA")):
        if candidate:
            if shutil.which(candidate) is None:
                raise OpaNotFoundError(f"opa binary {candidate!r} does not exist or is not executable")
            return candidate
    if (on_path := shutil.which("opa")) is not None:
        return on_path
    pinned = _pinned_cache_binary(Path.cwd())
    if pinned is not None and os.access(pinned, os.X_OK):
        return str(pinned)
    hint = f"; the checkout pins {pinned}, build it with toolchain/build.sh opa" if pinned else ""
    raise OpaNotFoundError("no opa binary: pass --opa, set LABGATE_OPA or put opa on PATH" + hint)
