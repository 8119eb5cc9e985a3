"""The reconciler's and the audit's metrics (every tenant's usage, quota and findings) listen on
loopback unless told otherwise (issue 19 finding 10): the chart passes the pod IP, which its
NetworkPolicies guard; nothing listens on every address by default."""

from __future__ import annotations

import pytest

from labgate.cli.main import build_parser


@pytest.mark.parametrize("argv", [["reconcile"], ["audit", "--every", "60"]])
def test_metrics_listen_on_loopback_by_default(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.metrics_address == "127.0.0.1"
