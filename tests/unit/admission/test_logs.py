"""Structured logs carry the admission's fields as JSON keys."""

from __future__ import annotations

import json
import logging

import pytest

from labgate.core.logs import JsonFormatter


def test_a_refusal_log_line_is_json_with_its_fields() -> None:
    record = logging.LogRecord("labgate.webhook", logging.INFO, __file__, 1, "refused %s", ("u-1",), None)
    record.labgate = {"uid": "u-1", "tenant": "team-a", "rules": ["gpu-quota"], "decision_ms": 3.2}
    document = json.loads(JsonFormatter().format(record))
    assert document["message"] == "refused u-1"
    assert document["level"] == "info"
    assert document["tenant"] == "team-a"
    assert document["rules"] == ["gpu-quota"]
    assert document["decision_ms"] == pytest.approx(3.2)


def test_an_exception_is_kept_in_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exception"]
