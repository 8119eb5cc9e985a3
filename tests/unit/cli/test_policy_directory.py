"""The CLI installed from the wheel ships no policies: every command that reads them says so in the
same words when there are none, never OPA's raw error (issue 22 item 16)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main

POD = """apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team-a}
spec: {containers: [{name: c, image: busybox}]}
"""


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("check", ["check", "-f", "pod.yaml", "--as", "alice"]),
        ("policy test", ["policy", "test"]),
        ("policy rule-ids", ["policy", "rule-ids"]),
        ("policy diff", ["policy", "diff", "--policies", "candidate", "--snapshot", "snapshot.json"]),
        ("audit", ["audit", "--snapshot", "snapshot.json"]),
    ],
)
def test_every_command_without_policies_says_so_in_one_clear_line(
    command: str,
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # where the wheel's user stands: no policies/ here
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "snapshot.json").write_text('{"items": []}')
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"labgate {command}: no policy directory ")
    assert "labgate ships no policies" in err
    assert "--policies DIR" in err
    assert "{" not in err  # not OPA's JSON


def test_policy_diff_names_the_missing_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "candidate").mkdir()
    assert main(["policy", "diff", "--policies", "candidate", "--snapshot", "s.json"]) == 2
    err = capsys.readouterr().err
    assert "no policy directory policies" in err
    assert "--current DIR" in err
