"""Tiny images for a real node, built here from source and pushed to a local registry, referred to by
digest: the pod sandbox's `pause` (Kubernetes' own build/pause/linux/pause.c, from the pinned sources
the toolchain fetched), `echo` (a TCP echo server and client in Go, devcluster/images/echo) and any
other static binary as a one-file image.

    pause = build_pause(workdir)
    reference = push_binary_image(tools, pause, f"{registry.host}/labgate/pause")   # host/repo@sha256:...
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path

from devcluster.registry import ImageTools
from devcluster.tools import go_module_dir, pinned_versions

PLATFORM = "linux/amd64"
ECHO_SOURCE = Path(__file__).parent / "images" / "echo" / "main.go"


def _kubernetes_source() -> Path:
    return go_module_dir("k8s.io/kubernetes", pinned_versions()["KUBERNETES_VERSION"])


def pause_source() -> Path:
    """pause.c of the pinned Kubernetes sources (present once toolchain/build.sh built kubernetes)."""
    return _kubernetes_source() / "build" / "pause" / "linux" / "pause.c"


def build_pause(workdir: Path) -> Path:
    """Compile pause.c statically, as Kubernetes' build/pause/Makefile does; the binary's path."""
    compiler = shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("gcc is not installed (apt-get install gcc libc6-dev)")
    output = workdir / "pause"
    workdir.mkdir(parents=True, exist_ok=True)
    version = f"-DVERSION={pinned_versions()['KUBERNETES_VERSION']}-labgate"
    argv = [compiler, "-Os", "-Wall", "-Werror", "-static", version, "-o", str(output), str(pause_source())]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"building pause failed: {result.stderr.strip()}")
    return output


def build_echo(workdir: Path) -> Path:
    """Compile devcluster/images/echo statically (no cgo, no dependencies); the binary's path."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("go is not on PATH (the toolchain builds the pinned tools with it)")
    module = workdir / "echo-src"
    module.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ECHO_SOURCE, module / "main.go")
    (module / "go.mod").write_text("module labgate.dev/echo\n\ngo 1.21\n")
    output = workdir / "echo"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath", "GOPROXY": "off", "GOTOOLCHAIN": "local"}
    result = subprocess.run(
        [go, "build", "-o", str(output), "."],
        cwd=module,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"building echo failed: {result.stderr.strip()}")
    return output


def binary_layer(binary: Path, archive: Path) -> Path:
    """A layer holding `binary` alone, at /<its name>, executable by all, owned by root."""
    with tarfile.open(archive, "w") as layer:
        member = layer.gettarinfo(str(binary), arcname=binary.name)
        member.mode, member.uid, member.gid, member.uname, member.gname = 0o755, 0, 0, "root", "root"
        with binary.open("rb") as content:
            layer.addfile(member, content)
    return archive


def push_binary_image(
    tools: ImageTools,
    binary: Path,
    repository: str,
    *,
    tag: str = "latest",
    env: Mapping[str, str] | None = None,
) -> str:
    """Push a one-layer image whose entrypoint is `binary` to `repository`:`tag`; its reference by
    digest (repository@sha256:...), the form a kubelet is then asked to pull. `env`: the image's
    environment (e.g. a PATH on which a command given by name is found)."""
    layer = binary_layer(binary, tools.workdir / f"{binary.name}-layer.tar")
    reference = f"{repository}:{tag}"
    tools.crane("append", "--oci-empty-base", "-f", str(layer), "-t", reference)
    variables = [f"--env={name}={value}" for name, value in (env or {}).items()]
    tools.crane(
        "mutate", "--set-platform", PLATFORM, "--entrypoint", f"/{binary.name}", *variables, reference
    )
    return f"{repository}@{tools.crane('digest', reference)}"
