"""devcluster.tools.go_module_dir: where Go's module cache holds a module the toolchain downloaded
(the benchmarks' Gatekeeper CRDs, the Pod Security fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster.tools import go_module_dir


def test_a_module_is_found_in_gomodcache_with_capitals_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOMODCACHE", str(tmp_path))
    assert go_module_dir("k8s.io/pod-security-admission", "v0.34.4") == (
        tmp_path / "k8s.io" / "pod-security-admission@v0.34.4"
    )
    assert go_module_dir("github.com/Azure/go-ansiterm", "v0.0.0-RC1") == (
        tmp_path / "github.com" / "!azure" / "go-ansiterm@v0.0.0-!r!c1"
    )


def test_without_go_the_default_cache_is_under_gopath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOMODCACHE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no go
    monkeypatch.setenv("GOPATH", str(tmp_path / "gopath"))
    assert (
        go_module_dir("sigs.k8s.io/kueue", "v0.17.0")
        == tmp_path / "gopath" / "pkg" / "mod" / "sigs.k8s.io" / "kueue@v0.17.0"
    )
