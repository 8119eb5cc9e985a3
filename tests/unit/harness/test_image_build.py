"""The Dockerfile and the Docker-less build (devcluster.image) describe one image: what the Dockerfile
copies is what pyproject ships, every dependency is pinned by the lock both use, and the build's cache
key follows exactly the files the Dockerfile copies. (tests/e2e/test_image.py builds and runs it.)"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from devcluster.image import (
    BUILD_ONLY,
    DOCKERFILE,
    LOCK_FILE,
    REPO_ROOT,
    ImageBuildError,
    copied_packages,
    copies,
    expected_distributions,
    image_config,
    inputs_hash,
    manylinux_platforms,
    normalise,
    parse_dockerfile,
    python_minor_of_base,
    read_lock,
)

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _dockerfile_instructions() -> list:  # type: ignore[type-arg]
    return parse_dockerfile(DOCKERFILE.read_text())


def test_the_dockerfile_copies_exactly_the_packages_pyproject_ships() -> None:
    patterns = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = {
        path.name
        for path in REPO_ROOT.iterdir()
        if (path / "__init__.py").is_file()
        and any(re.fullmatch(p.replace("*", ".*"), path.name) for p in patterns)
    }
    assert shipped == {"cli", "labgate", "webhook", "rbac"}
    assert copied_packages(_dockerfile_instructions()) == shipped
    # The local control plane and the tests are development tools: in neither the wheel nor the image.
    assert "devcluster" not in shipped
    sources = {source for copy in copies(_dockerfile_instructions()) for source in copy.sources}
    assert not {"devcluster", "tests", "benchmarks", "policies"} & sources


def test_the_image_config_of_the_dockerfile() -> None:
    config = image_config(_dockerfile_instructions())
    assert python_minor_of_base(config.base) == PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert config.user == "65532:65532"
    assert config.entrypoint == ["labgate"]
    assert config.cmd == ["serve"]
    assert config.exposed_ports == ["8443/tcp", "8080/tcp"]
    assert config.workdir == "/"
    assert config.env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_the_dockerfiles_pip_install_uses_the_copied_lock_file() -> None:
    instructions = _dockerfile_instructions()
    (run,) = [step for step in instructions if step.keyword == "RUN"]
    constraint = re.search(r"PIP_CONSTRAINT=(\S+) pip install \.", run.argument)
    assert constraint is not None, run.argument
    copied_to = {
        str(Path(copy.workdir, copy.destination, Path(source).name))
        for copy in copies(instructions)
        for source in copy.sources
        if source == str(LOCK_FILE.relative_to(REPO_ROOT))
    }
    assert copied_to == {constraint.group(1)}


def test_every_dependency_is_pinned_within_pyprojects_ranges() -> None:
    lock = read_lock()
    requirements = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    requirements += [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    for requirement in requirements:
        name = normalise(requirement.name)
        assert name in lock, f"{name} is not pinned in {LOCK_FILE.name}: python -m devcluster.image lock"
        assert requirement.specifier.contains(lock[name], prereleases=True), (name, lock[name])
    assert "pip" in lock
    assert expected_distributions(lock) == {"labgate"} | set(lock) - set(BUILD_ONLY)


def test_parse_joins_continuations_and_refuses_what_the_build_cannot_carry_out() -> None:
    steps = parse_dockerfile('FROM python:3.11-slim\n# note\nRUN a \\\n    # inside\n    && b\nCMD ["x"]\n')
    assert [(s.keyword, s.argument) for s in steps] == [
        ("FROM", "python:3.11-slim"),
        ("RUN", "a && b"),
        ("CMD", '["x"]'),
    ]
    with pytest.raises(ImageBuildError, match="line 2: ADD is not supported"):
        parse_dockerfile("FROM python:3.11-slim\nADD x /x\n")
    with pytest.raises(ImageBuildError, match=re.escape("only `COPY src... dest`")):
        copies(parse_dockerfile("FROM python:3.11-slim\nCOPY --from=build /a /b\n"))
    with pytest.raises(ImageBuildError, match="JSON"):
        image_config(parse_dockerfile("FROM python:3.11-slim\nCMD serve\n"))
    with pytest.raises(ImageBuildError, match="python:<version>"):
        python_minor_of_base("debian:bookworm")


def test_manylinux_tags_of_bookworms_glibc() -> None:
    tags = manylinux_platforms((2, 36))
    assert tags[0] == "manylinux_2_36_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_37_x86_64" not in tags


def _fake_checkout(root: Path) -> Path:
    shutil.copy(DOCKERFILE, root / "Dockerfile")
    for name in ("pyproject.toml", "README.md"):
        (root / name).write_text(name)
    (root / "toolchain").mkdir()
    (root / "toolchain" / LOCK_FILE.name).write_text("pip==1\n")
    for package in ("cli", "labgate", "webhook", "rbac", "devcluster"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text(f'"""{package}"""\n')
    return root


def test_the_cache_key_follows_the_copied_files_and_nothing_else(tmp_path: Path) -> None:
    repo = _fake_checkout(tmp_path)
    first = inputs_hash(repo)
    (repo / "devcluster" / "stack.py").write_text("not shipped")
    (repo / "webhook" / "__pycache__").mkdir()
    (repo / "webhook" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0")
    assert inputs_hash(repo) == first
    (repo / "webhook" / "app.py").write_text("shipped")
    second = inputs_hash(repo)
    assert second != first
    (repo / "toolchain" / LOCK_FILE.name).write_text("pip==2\n")
    assert inputs_hash(repo) not in (first, second)
