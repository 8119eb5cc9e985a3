"""Where the pinned tools live: toolchain/versions.env names the versions, toolchain/build.sh builds them."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOLCHAIN_DIR = REPO_ROOT / "toolchain"

# tool name in build.sh -> (version variable in versions.env, binaries it provides)
_TOOLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "kubernetes": (
        "KUBERNETES_VERSION",
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"),
    ),
    "kube-proxy": ("KUBERNETES_VERSION", ("kube-proxy",)),
    "kube-router": ("KUBE_ROUTER_VERSION", ("kube-router",)),
    "etcd": ("ETCD_VERSION", ("etcd",)),
    "opa": ("OPA_VERSION", ("opa",)),
    "helm": ("HELM_VERSION", ("helm",)),
    "registry": ("REGISTRY_VERSION", ("registry",)),
    "crane": ("CRANE_VERSION", ("crane",)),
    "cosign-v2": ("COSIGN_V2_VERSION", ("cosign",)),
    "cosign-v3": ("COSIGN_V3_VERSION", ("cosign",)),
    "kwok": ("KWOK_VERSION", ("kwok",)),
    "kueue": ("KUEUE_VERSION", ("kueue",)),
    "vegeta": ("VEGETA_VERSION", ("vegeta",)),
    "gatekeeper": ("GATEKEEPER_VERSION", ("gatekeeper",)),
}


class ToolMissingError(RuntimeError):
    """A pinned tool is not built and could not be built."""


def pinned_versions() -> dict[str, str]:
    """The variables of toolchain/versions.env."""
    versions: dict[str, str] = {}
    for raw in (TOOLCHAIN_DIR / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            versions[key.strip()] = shlex.split(value)[0] if value.strip() else ""
    return versions


def tools_cache() -> Path:
    """The cache directory that build.sh writes to (outside the repository)."""
    if env := os.environ.get("LABGATE_TOOLS_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "labgate" / "tools"


@dataclass(frozen=True)
class Tool:
    """One built tool: its directory in the cache and whether build.sh finished it."""

    name: str
    version: str
    binaries: tuple[str, ...]

    @property
    def directory(self) -> Path:
        return tools_cache() / f"{self.name}-{self.version}"

    @property
    def is_built(self) -> bool:
        """build.sh finished it and every expected binary is there (as build.sh's own cache check)."""
        return (self.directory / ".complete").is_file() and all(
            (self.directory / "bin" / name).is_file() for name in self.binaries
        )

    def binary(self, name: str | None = None) -> Path:
        """Path of one of the tool's binaries (the first when not named)."""
        return self.directory / "bin" / (name or self.binaries[0])


def tool(name: str) -> Tool:
    """The pinned tool `name` (as build.sh names it)."""
    variable, binaries = _TOOLS[name]
    return Tool(name=name, version=pinned_versions()[variable], binaries=binaries)


def ensure_tools(*names: str) -> dict[str, Tool]:
    """Build any of `names` that is missing (build.sh shows its progress) and return them all."""
    tools = {n: tool(n) for n in names}
    missing = [n for n, t in tools.items() if not t.is_built]
    if missing:
        result = subprocess.run([str(TOOLCHAIN_DIR / "build.sh"), *missing], check=False)
        if result.returncode != 0:
            raise ToolMissingError(
                f"toolchain/build.sh {' '.join(missing)} failed (exit {result.returncode})"
            )
    return tools


def binary(name: str) -> str:
    """Absolute path of a pinned binary such as 'kubectl' or 'opa' (must already be built)."""
    for tool_name, (_, binaries) in _TOOLS.items():
        if name in binaries and not tool_name.startswith("cosign"):
            found = tool(tool_name)
            if not found.is_built:
                raise ToolMissingError(f"{name} is not built: run toolchain/build.sh {tool_name}")
            return str(found.binary(name))
    raise KeyError(name)


def go_module_cache() -> Path:
    """Go's module cache, where toolchain/build.sh's `go get` leaves the modules it builds from:
    $GOMODCACHE, else what the `go` on PATH says, else Go's default ($GOPATH/pkg/mod, ~/go/pkg/mod)."""
    if env := os.environ.get("GOMODCACHE"):
        return Path(env)
    if go := shutil.which("go"):
        found = subprocess.run(
            [go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False, timeout=60
        )
        if found.returncode == 0 and found.stdout.strip():
            return Path(found.stdout.strip())
    gopath = os.environ.get("GOPATH", "").split(os.pathsep)[0] or str(Path.home() / "go")
    return Path(gopath) / "pkg" / "mod"


def go_module_dir(module: str, version: str) -> Path:
    """Where the Go module cache holds `module`@`version` (present or not). The cache escapes capital
    letters as '!' and the lower-case letter (github.com/!azure/...)."""

    def escaped(text: str) -> str:
        return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), text)

    return go_module_cache() / f"{escaped(module)}@{escaped(version)}"
