"""The services' defaults. The reconciler's and the audit's metrics (every tenant's usage, quota and findings) listen on
loopback unless told otherwise (issue 19 finding 10): the chart passes the pod IP, which its
NetworkPolicies guard; nothing listens on every address by default."""

from __future__ import annotations

import logging

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
