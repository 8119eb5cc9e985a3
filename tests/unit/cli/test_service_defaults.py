"""The services' defaults. The reconciler's and the audit's metrics (every tenant's usage, quota and findings) listen on
loopback unless told otherwise (issue 19 finding 10): the chart passes the pod IP, which its
NetworkPolicies guard; nothing listens on every address by default."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cli.main import build_parser, main
from labgate.core.logs import JsonFormatter


@pytest.mark.parametrize("argv", [["reconcile"], ["audit", "--every", "60"]])
def test_metrics_listen_on_loopback_by_default(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.metrics_address == "127.0.0.1"


@pytest.mark.parametrize(
    ("argv", "is_json"),
    [
        (["audit", "--every", "60", "--policies", "no-such-dir"], True),  # the scheduled audit: a service
        (["audit", "--policies", "no-such-dir"], False),  # a command a person runs
    ],
)
def test_the_scheduled_audit_logs_json_lines_like_the_other_services(
    argv: list[str], is_json: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LABGATE_LOG_FORMAT", raising=False)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        assert main(argv) == 2  # stops at the missing policy directory, after configuring its logs
        assert isinstance(root.handlers[0].formatter, JsonFormatter) is is_json
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_the_reconciler_reads_the_metadata_addresses_of_the_policy_config(tmp_path: Path) -> None:
    """The chart's --gpu-config is the policies' config: its metadata_addresses are what every
    tenant's baseline egress excepts; an entry that is no address stops the reconciler at start,
    saying which, rather than provisioning egress it cannot close."""
    from cli.main import _reconciler_policy_config
    from devcluster.tools import REPO_ROOT

    shipped = REPO_ROOT / "policies" / "labgate" / "config" / "data.json"
    args = build_parser().parse_args(["reconcile", "--gpu-config", str(shipped)])
    expected = tuple(json.loads(shipped.read_text(encoding="utf-8"))["metadata_addresses"])
    assert _reconciler_policy_config(args).metadata_addresses == expected
    wrong = tmp_path / "data.json"
    wrong.write_text(
        json.dumps({"metadata_addresses": ["169.254.169.254", "169.254.0.0/16"]}), encoding="utf-8"
    )
    args = build_parser().parse_args(["reconcile", "--gpu-config", str(wrong)])
    with pytest.raises(SystemExit, match=r"metadata_addresses: '169.254.0.0/16' does not appear"):
        _reconciler_policy_config(args)
