"""The labgate container image, built from the Dockerfile without Docker (debootstrap, umoci).

The labgate container image, built without Docker: the Dockerfile's own instructions run against a
Debian root filesystem and packed as an OCI image.

    python -m devcluster.image build      # (toolchain/build-image.sh) -> an OCI archive for `ctr image import`
    python -m devcluster.image lock       # re-pin toolchain/image-constraints.txt from PyPI

The Dockerfile is the single description of what the image holds. This module reads it and carries it
out without a Docker engine or a registry:

- `FROM python:3.11-slim` becomes `debootstrap --variant=minbase` of the Debian release whose python3 has
  the same minor version (bookworm: 3.11), plus ca-certificates, as in the slim image. The base is cached
  outside the repository (~/.cache/labgate/image-base-<release>), so only the first build downloads it.
- `ENV`, `WORKDIR`, `COPY`, `RUN`, `USER`, `EXPOSE`, `ENTRYPOINT`, `CMD` are carried out as written: COPY
  copies from the checkout, RUN runs in a chroot with `/bin/sh -c`. The Dockerfile's `pip install` runs
  offline from a wheelhouse downloaded from PyPI with exactly the versions of the lock file
  (toolchain/image-constraints.txt, which the Dockerfile's pip install also uses through PIP_CONSTRAINT).
- `umoci` makes the OCI image: one layer for the Debian base, one for what the Dockerfile adds, and the
  image config (entrypoint, cmd, user, exposed ports, env) from the Dockerfile.

Builds are cached by a hash of their inputs (the Dockerfile, every file it copies, the lock file, the
base and this module), so an unchanged checkout costs only the hashing. Needs root (debootstrap,
chroot, umoci's ownership of files) and Debian's debootstrap and umoci packages.

Only the standard library is imported here: toolchain/build-image.sh runs this with any python3.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO_ROOT / "Dockerfile"
LOCK_FILE = REPO_ROOT / "toolchain" / "image-constraints.txt"
IMAGE_NAME = "ghcr.io/labgate/labgate"

# The base that stands in for the Dockerfile's FROM. bookworm's python3 is 3.11, as in python:3.11-slim;
# its glibc (2.36) decides which manylinux wheels fit.
DEBIAN_RELEASE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_GLIBC = (2, 36)
BASE_PACKAGES = ("python3", "ca-certificates")
# What python:3.11-slim's own config sets and a bare Debian root file system lacks.
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
# Left out of the base layer: package caches and documentation (the slim image has neither).
BASE_PRUNE = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
)
# Never copied into the image, as .dockerignore says for a Docker build.
IGNORED_NAMES = ("__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache")
IGNORED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
# Build-time tools pinned in the lock file but not installed into the image: the installer (pip, run from
# its wheel) and the build backend pip fetches for `pip install .` (pyproject's build-system).
BUILD_ONLY = ("pip", "setuptools")
# Inside the root file system while RUN steps run; removed before the layer is packed.
_BUILD_DIR = "labgate-build"


class ImageBuildError(RuntimeError):
    """The image could not be built; the message says which step and why."""


# --- the Dockerfile --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its keyword (upper case) and the rest of its (joined) lines."""

    keyword: str
    argument: str
    line: int


SUPPORTED = frozenset({"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "ENTRYPOINT", "CMD"})


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile (comments dropped, `\\` continuations joined). Anything outside
    the subset this builder carries out is an error rather than a silently different image."""
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        keyword, _, argument = whole.partition(" ")
        keyword = keyword.upper()
        if keyword not in SUPPORTED:
            raise ImageBuildError(f"Dockerfile line {start}: {keyword} is not supported by devcluster.image")
        instructions.append(Instruction(keyword, argument.strip(), start))
    if pending:
        raise ImageBuildError("Dockerfile ends inside a continued line")
    return instructions


def _env_pairs(argument: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for word in shlex.split(argument):
        key, sep, value = word.partition("=")
        if not sep:
            raise ImageBuildError(f"ENV {argument!r}: only the KEY=VALUE form is supported")
        pairs[key] = value
    return pairs


def _exec_form(argument: str) -> list[str]:
    try:
        value = json.loads(argument)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageBuildError(f"{argument!r}: ENTRYPOINT and CMD must use the JSON (exec) form")
    return value


@dataclass(frozen=True)
class Copy:
    """A COPY: repository paths to a destination (absolute, or relative to the WORKDIR at that point)."""

    sources: tuple[str, ...]
    destination: str
    workdir: str


@dataclass
class ImageConfig:
    """What the Dockerfile says about the image besides its files."""

    base: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = ""
    exposed_ports: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)


def image_config(instructions: Sequence[Instruction]) -> ImageConfig:
    """The image config (the last WORKDIR/USER/ENTRYPOINT/CMD win, ENV and EXPOSE accumulate)."""
    config = ImageConfig()
    for step in instructions:
        if step.keyword == "FROM":
            config.base = step.argument
        elif step.keyword == "ENV":
            config.env.update(_env_pairs(step.argument))
        elif step.keyword == "WORKDIR":
            config.workdir = _resolve(config.workdir, step.argument)
        elif step.keyword == "USER":
            config.user = step.argument
        elif step.keyword == "EXPOSE":
            config.exposed_ports += [p if "/" in p else f"{p}/tcp" for p in step.argument.split()]
        elif step.keyword == "ENTRYPOINT":
            config.entrypoint = _exec_form(step.argument)
        elif step.keyword == "CMD":
            config.cmd = _exec_form(step.argument)
    return config


def copies(instructions: Sequence[Instruction]) -> list[Copy]:
    """Every COPY, with the WORKDIR it runs in."""
    found = []
    workdir = "/"
    for step in instructions:
        if step.keyword == "WORKDIR":
            workdir = _resolve(workdir, step.argument)
        elif step.keyword == "COPY":
            words = shlex.split(step.argument)
            if any(w.startswith("--") for w in words) or len(words) < 2:
                raise ImageBuildError(f"Dockerfile line {step.line}: only `COPY src... dest` is supported")
            found.append(Copy(tuple(words[:-1]), words[-1], workdir))
    return found


def copied_packages(instructions: Sequence[Instruction]) -> set[str]:
    """Top-level Python packages the Dockerfile copies (directories with an __init__.py)."""
    return {
        Path(source).name
        for copy in copies(instructions)
        for source in copy.sources
        if (REPO_ROOT / source / "__init__.py").is_file()
    }


def python_minor_of_base(base: str) -> str:
    """`python:3.11-slim` -> "3.11"."""
    match = re.fullmatch(r"python:(\d+\.\d+)(?:\.\d+)?(?:-[\w.-]+)?", base)
    if match is None:
        raise ImageBuildError(f"FROM {base}: this builder stands in only for the python:<version> images")
    return match.group(1)


def _resolve(workdir: str, path: str) -> str:
    return os.path.normpath(path if path.startswith("/") else os.path.join(workdir, path))


# --- the lock file ---------------------------------------------------------------------------------------


def read_lock(path: Path = LOCK_FILE) -> dict[str, str]:
    """Normalised distribution name -> pinned version, from a `name==version` constraints file."""
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ImageBuildError(f"{path.name}: {line!r} is not pinned with ==")
        pins[normalise(name)] = version.strip()
    return pins


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def expected_distributions(lock: dict[str, str], project: str = "labgate") -> set[str]:
    """What `pip install .` leaves in site-packages: the project and every pinned runtime dependency."""
    return {normalise(project)} | {name for name in lock if name not in BUILD_ONLY}


# --- inputs and cache ------------------------------------------------------------------------------------


def cache_root() -> Path:
    """~/.cache/labgate (or $XDG_CACHE_HOME/labgate): outside the repository, shared by checkouts."""
    if env := os.environ.get("LABGATE_IMAGE_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "labgate"


def _ignored(path: Path) -> bool:
    return path.name in IGNORED_NAMES or path.name.endswith(IGNORED_SUFFIXES)


def _walk(path: Path) -> Iterator[Path]:
    if _ignored(path):
        return
    if path.is_dir():
        for child in sorted(path.iterdir()):
            yield from _walk(child)
    else:
        yield path


def base_key() -> str:
    """What the cached Debian base depends on."""
    return json.dumps({"release": DEBIAN_RELEASE, "packages": BASE_PACKAGES, "prune": BASE_PRUNE})


def inputs_hash(repo: Path = REPO_ROOT) -> str:
    """A hash of everything the image is made of: the Dockerfile, the files it copies (as a Docker build
    would copy them), the lock file, the base and this builder."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    dockerfile = repo / "Dockerfile"
    add("Dockerfile", dockerfile.read_bytes())
    add("base", base_key().encode())
    add("builder", Path(__file__).read_bytes())
    for copy in copies(parse_dockerfile(dockerfile.read_text())):
        for source in copy.sources:
            for path in _walk(repo / source):
                add(str(path.relative_to(repo)), path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class BuiltImage:
    """An OCI archive ready for `ctr image import --base-name IMAGE_NAME`."""

    archive: Path
    reference: str
    inputs: str
    seconds: float
    cached: bool


def project_version(repo: Path = REPO_ROOT) -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (repo / "pyproject.toml").read_text(), re.MULTILINE)
    if match is None:
        raise ImageBuildError("pyproject.toml has no version")
    return match.group(1)


def _run(
    argv: Sequence[str], *, what: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> str:
    result = subprocess.run(
        list(argv), capture_output=True, text=True, env=env, cwd=cwd, check=False, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise ImageBuildError(f"{what} failed (exit {result.returncode}): {shlex.join(argv)}\n{tail}")
    return result.stdout


_STARTED = time.monotonic()


def _say(message: str) -> None:
    print(f"build-image: [{time.monotonic() - _STARTED:5.1f}s] {message}", file=sys.stderr, flush=True)


def missing_build_tools() -> list[str]:
    """The programs a build needs that are not installed (Debian packages debootstrap, umoci)."""
    return [tool for tool in ("debootstrap", "umoci", "chroot") if shutil.which(tool) is None]


@contextlib.contextmanager
def _scratch(path: Path) -> Iterator[Path]:
    """A work directory that becomes a cache entry only if the step finishes (removed otherwise)."""
    shutil.rmtree(path, ignore_errors=True)
    try:
        yield path
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def ensure_base(cache: Path) -> Path:
    """The Debian base root file system, made once with debootstrap and kept in the cache."""
    base = cache / f"image-base-{DEBIAN_RELEASE}"
    stamp = base / ".labgate-base"
    if stamp.is_file() and stamp.read_text() == base_key():
        return base / "rootfs"
    _say(f"debootstrap --variant=minbase {DEBIAN_RELEASE} (once; cached in {base})")
    with _scratch(cache / f"image-base-{DEBIAN_RELEASE}.tmp-{os.getpid()}") as scratch:
        scratch.mkdir(parents=True)
        _debootstrap(scratch)
    shutil.rmtree(base, ignore_errors=True)
    scratch.rename(base)
    return base / "rootfs"


def _debootstrap(scratch: Path) -> None:
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            DEBIAN_RELEASE,
            str(scratch / "rootfs"),
            DEBIAN_MIRROR,
        ],
        what="debootstrap",
    )
    for relative in BASE_PRUNE:
        target = scratch / "rootfs" / relative
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    (scratch / ".labgate-base").write_text(base_key())


def ensure_wheelhouse(cache: Path, lock: Path = LOCK_FILE) -> Path:
    """Every pinned wheel (and pip itself, the installer), from PyPI only, for the base's Python and glibc."""
    key = hashlib.sha256(lock.read_bytes() + base_key().encode()).hexdigest()[:16]
    wheelhouse = cache / f"image-wheels-{key}"
    if (wheelhouse / ".complete").is_file():
        os.utime(wheelhouse)
        return wheelhouse
    _say(f"pip download of {len(read_lock(lock))} pinned wheels from PyPI (once; cached in {wheelhouse})")
    with _scratch(Path(f"{wheelhouse}.tmp-{os.getpid()}")) as scratch:
        _download_wheels(lock, scratch)
        (scratch / ".complete").write_text("")
    shutil.rmtree(wheelhouse, ignore_errors=True)
    scratch.rename(wheelhouse)
    # Keep the two most recently used wheelhouses (e.g. two checkouts with different locks).
    finished = [p for p in cache.glob("image-wheels-*") if ".tmp-" not in p.name]
    for old in sorted(finished, key=lambda p: p.stat().st_mtime, reverse=True)[2:]:
        shutil.rmtree(old, ignore_errors=True)
    return wheelhouse


def _download_wheels(lock: Path, scratch: Path) -> None:
    python = _base_python_minor()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT",)}
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--implementation=cp",
            f"--python-version={python}",
            f"--abi=cp{python.replace('.', '')}",
            "--abi=abi3",
            "--abi=none",
            *[f"--platform={platform}" for platform in manylinux_platforms(DEBIAN_GLIBC)],
            "--dest",
            str(scratch),
            "--requirement",
            str(lock),
        ],
        what="pip download",
        env=env,
    )


def manylinux_platforms(glibc: tuple[int, int], arch: str = "x86_64") -> list[str]:
    """Every manylinux tag a system with this glibc runs, newest first (pip does not expand them itself
    when told a --platform), with the legacy aliases of 2.17, 2.12 and 2.5."""
    major, newest = glibc
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(newest, 4, -1):
        tags.append(f"manylinux_{major}_{minor}_{arch}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{arch}")
    return tags


def _base_python_minor() -> str:
    return python_minor_of_base(image_config(parse_dockerfile(DOCKERFILE.read_text())).base)


def _copy_into(repo: Path, rootfs: Path, copy: Copy) -> None:
    destination = _resolve(copy.workdir, copy.destination)
    target = rootfs / destination.lstrip("/")
    into_directory = copy.destination.endswith("/") or len(copy.sources) > 1
    for source in copy.sources:
        origin = repo / source
        if not origin.exists():
            raise ImageBuildError(f"COPY {source}: no such file in {repo}")
        final = target / origin.name if into_directory and origin.is_file() else target
        if origin.is_dir():
            # Docker copies a directory's contents into the destination.
            for path in _walk(origin):
                out = final / path.relative_to(origin)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, final)


def _pip_shim(rootfs: Path, wheelhouse: Path) -> dict[str, str]:
    """Put the pinned wheels and a `pip` command (pip run from its wheel, offline) into the root file
    system; return the environment that makes the Dockerfile's `pip install` use them."""
    build = rootfs / _BUILD_DIR
    (build / "bin").mkdir(parents=True)
    shutil.copytree(wheelhouse, build / "wheels", ignore=shutil.ignore_patterns(".complete"))
    pips = sorted((build / "wheels").glob("pip-*.whl"))
    if len(pips) != 1:
        raise ImageBuildError(f"the wheelhouse needs exactly one pip wheel (lock: pip==...), found {pips}")
    shim = build / "bin" / "pip"
    shim.write_text(f'#!/bin/sh\nexec python3 /{_BUILD_DIR}/wheels/{pips[0].name}/pip "$@"\n')
    shim.chmod(0o755)
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"/{_BUILD_DIR}/wheels",
        # The Debian python3 is "externally managed"; the image is the environment, as in python:3.11-slim.
        "PIP_BREAK_SYSTEM_PACKAGES": "1",
        "PIP_ROOT_USER_ACTION": "ignore",
    }


def carry_out(repo: Path, rootfs: Path, instructions: Sequence[Instruction], wheelhouse: Path) -> ImageConfig:
    """Run the Dockerfile's file-changing instructions (COPY, RUN, WORKDIR) in `rootfs`."""
    env = dict(BASE_ENV)
    build_env = _pip_shim(rootfs, wheelhouse)
    workdir = "/"
    for step in instructions:
        if step.keyword == "ENV":
            env.update(_env_pairs(step.argument))
        elif step.keyword == "WORKDIR":
            workdir = _resolve(workdir, step.argument)
            (rootfs / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif step.keyword == "COPY":
            (copy,) = copies([Instruction("WORKDIR", workdir, 0), step])
            _copy_into(repo, rootfs, copy)
        elif step.keyword == "RUN":
            run_env = {
                **env,
                **build_env,
                "HOME": "/root",
                "PATH": f"/{_BUILD_DIR}/bin:{env['PATH']}",
            }
            _say(f"RUN (Dockerfile line {step.line}) in a chroot")
            _run(
                [
                    "chroot",
                    str(rootfs),
                    "/usr/bin/env",
                    "-i",
                    *[f"{k}={v}" for k, v in run_env.items()],
                    "/bin/sh",
                    "-c",
                    f"cd {shlex.quote(workdir)} && {step.argument}",
                ],
                what=f"RUN at Dockerfile line {step.line}",
            )
    shutil.rmtree(rootfs / _BUILD_DIR)
    return image_config(instructions)


def build(repo: Path = REPO_ROOT, *, cache: Path | None = None, keep: int = 3) -> BuiltImage:
    """Build the image (or return the cached one for the same inputs)."""
    started = time.monotonic()
    cache = cache or cache_root()
    version = project_version(repo)
    reference = f"{IMAGE_NAME}:{version}"
    key = inputs_hash(repo)
    images = cache / "images"
    out = images / key[:24]
    archive = out / f"labgate-{version}.oci.tar"
    if archive.is_file():
        os.utime(out)  # most recently used: kept by the pruning below
        return BuiltImage(archive, reference, key, time.monotonic() - started, cached=True)
    if os.geteuid() != 0:
        raise ImageBuildError("building the image needs root (debootstrap, chroot, file ownership)")
    if missing := missing_build_tools():
        raise ImageBuildError(f"not installed: {', '.join(missing)} (apt-get install debootstrap umoci)")

    instructions = parse_dockerfile((repo / "Dockerfile").read_text())
    config = image_config(instructions)
    python = python_minor_of_base(config.base)
    base = ensure_base(cache)
    base_python = _run(
        ["chroot", str(base), "python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        what="python3 of the base",
    ).strip()
    if base_python != python:
        raise ImageBuildError(f"FROM {config.base} wants Python {python}; {DEBIAN_RELEASE} has {base_python}")
    wheelhouse = ensure_wheelhouse(cache, repo / "toolchain" / LOCK_FILE.name)
    images.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=images) as scratch:
        staged = _assemble(Path(scratch), repo, base, wheelhouse, key=key, version=version)
        out.mkdir(parents=True, exist_ok=True)
        staged.rename(archive)
    _prune(images, keep=keep)
    return BuiltImage(archive, reference, key, time.monotonic() - started, cached=False)


def _assemble(work: Path, repo: Path, base: Path, wheelhouse: Path, *, key: str, version: str) -> Path:
    """The two layers and the config, with umoci in `work`; returns the OCI archive (a tar of the layout)."""
    instructions = parse_dockerfile((repo / "Dockerfile").read_text())
    config = image_config(instructions)
    layout, bundle = work / "oci", work / "bundle"
    tag = f"{layout}:build"
    _run(["umoci", "init", "--layout", str(layout)], what="umoci init")
    _run(["umoci", "new", "--image", tag], what="umoci new")
    _run(["umoci", "unpack", "--image", tag, str(bundle)], what="umoci unpack")
    rootfs = bundle / "rootfs"
    rootfs.rmdir()
    _run(["cp", "-a", str(base), str(rootfs)], what="copy of the base")
    _say("umoci repack: the Debian base layer")
    _run(
        [
            "umoci",
            "repack",
            "--refresh-bundle",
            "--history.created_by",
            f"debootstrap --variant=minbase --include={','.join(BASE_PACKAGES)} {DEBIAN_RELEASE}",
            "--image",
            tag,
            str(bundle),
        ],
        what="umoci repack (base)",
    )
    carry_out(repo, rootfs, instructions, wheelhouse)
    _say("umoci repack: the layer of the Dockerfile's COPY and RUN")
    _run(
        [
            "umoci",
            "repack",
            "--history.created_by",
            "Dockerfile: COPY and RUN (devcluster.image)",
            "--image",
            tag,
            str(bundle),
        ],
        what="umoci repack (labgate)",
    )
    options = [f"--config.env={k}={v}" for k, v in {**BASE_ENV, **config.env}.items()]
    options += [f"--config.entrypoint={word}" for word in config.entrypoint]
    options += [f"--config.cmd={word}" for word in config.cmd]
    options += [f"--config.exposedports={port}" for port in config.exposed_ports]
    if config.user:
        options.append(f"--config.user={config.user}")
    options += [f"--config.workingdir={config.workdir}", f"--config.label=dev.labgate.inputs={key}"]
    _run(
        ["umoci", "config", "--image", tag, "--tag", version, "--history.created_by", "config", *options],
        what="umoci config",
    )
    _run(["umoci", "rm", "--image", tag], what="umoci rm")
    _run(["umoci", "gc", "--layout", str(layout)], what="umoci gc")
    staged = work / f"labgate-{version}.oci.tar"
    _run(["tar", "-C", str(layout), "-cf", str(staged), "."], what="tar of the OCI layout")
    return staged


def _prune(images: Path, *, keep: int) -> None:
    built = sorted(
        (p for p in images.iterdir() if p.is_dir() and not p.name.startswith("build-")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in built[keep:]:
        shutil.rmtree(old, ignore_errors=True)


# --- lock ------------------------------------------------------------------------------------------------


def lock(repo: Path = REPO_ROOT) -> str:
    """Resolve `pip install .` against PyPI for the base's Python and return the constraints file text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT",)}
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                str(repo),
            ],
            what="pip install --dry-run",
            env=env,
        )
        resolved = {
            normalise(item["metadata"]["name"]): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]
        }
        tools = {}
        for tool in BUILD_ONLY:
            out = _run(
                [sys.executable, "-m", "pip", "index", "versions", tool], what=f"pip index {tool}", env=env
            )
            tools[tool] = out.split("(", 1)[1].split(")", 1)[0]
    resolved.pop("labgate", None)
    lines = [
        "# The labgate image's Python packages, pinned: `pip install .` in the Dockerfile (PIP_CONSTRAINT)",
        "# and `toolchain/build-image.sh` (devcluster.image) install exactly these versions from PyPI.",
        "# Regenerate after changing pyproject's dependencies: python -m devcluster.image lock",
        *(f"{name}=={version}" for name, version in sorted(resolved.items())),
        "# Build-time only, not in the image's site-packages: the installer and pyproject's build backend.",
        *(f"{name}=={version}" for name, version in sorted(tools.items())),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.image", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build the OCI archive (cached by a hash of its inputs)")
    build_cmd.add_argument("--print-archive", action="store_true", help="print only the archive's path")
    commands.add_parser("lock", help=f"re-pin {LOCK_FILE.relative_to(REPO_ROOT)} from PyPI")
    commands.add_parser("inputs", help="print the inputs hash (the cache key)")
    args = parser.parse_args(argv)
    try:
        if args.command == "lock":
            LOCK_FILE.write_text(lock())
            print(f"wrote {LOCK_FILE}")
        elif args.command == "inputs":
            print(inputs_hash())
        else:
            image = build()
            if args.print_archive:
                print(image.archive)
            else:
                state = "cached" if image.cached else "built"
                print(f"{image.reference}: {state} in {image.seconds:.1f}s")
                print(f"  OCI archive: {image.archive}")
                print(f"  import:      ctr image import --base-name {IMAGE_NAME} {image.archive}")
    except ImageBuildError as error:
        print(f"build-image: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
