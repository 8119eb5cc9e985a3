"""The policy loader's poll reads the policy files only when their stamp changed (issue 21: a pass a
second read and hashed every module, on the webhook's CPU); what changed is still loaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.admission.test_policy_events import FakeOpa
from webhook import policy_sync
from webhook.policy_sync import PolicySync


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    reads: list[Path] = []
    real = policy_sync.policy_files

    def counted(directory: Path) -> dict[str, bytes]:
        reads.append(directory)
        return real(directory)

    monkeypatch.setattr(policy_sync, "policy_files", counted)
    return reads


def test_unchanged_files_are_not_read_again_and_a_change_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _counting_reads(monkeypatch)
    rule = tmp_path / "labgate" / "rules" / "r.rego"
    rule.parent.mkdir(parents=True)
    rule.write_text("package labgate.rules.r\n")
    opa = FakeOpa()
    sync = PolicySync(tmp_path, opa, interval=3600)
    first = sync.sync_once()
    for _ in range(5):
        assert sync.sync_once() == first
    assert len(reads) == 1
    rule.write_text("package labgate.rules.r\n# changed\n")
    changed = sync.sync_once()
    assert len(reads) == 2
    assert changed.revision != first.revision
    assert "# changed" in next(iter(opa.held.values()))


def test_a_configmap_swap_of_its_data_link_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet updates a mounted ConfigMap by pointing `..data` at a new folder: the same names,
    maybe the same sizes, other files."""
    reads = _counting_reads(monkeypatch)
    for version, text in (("v1", "package labgate.r\n# one\n"), ("v2", "package labgate.r\n# two\n")):
        (tmp_path / f"..{version}").mkdir()
        (tmp_path / f"..{version}" / "r.rego").write_text(text)
    os.symlink("..v1", tmp_path / "..data")
    os.symlink("..data/r.rego", tmp_path / "r.rego")
    opa = FakeOpa()
    sync = PolicySync(tmp_path, opa, interval=3600)
    sync.sync_once()
    sync.sync_once()
    assert len(reads) == 1
    os.symlink("..v2", tmp_path / "..data.tmp")
    os.replace(tmp_path / "..data.tmp", tmp_path / "..data")
    sync.sync_once()
    assert len(reads) == 2
    assert "# two" in next(iter(opa.held.values()))
