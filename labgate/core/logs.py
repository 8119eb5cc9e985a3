"""Structured logs: one JSON object per line, as operators of Gatekeeper and Kyverno expect.

Every record carries time, level, logger and message, and an exception's traceback on one line. A
caller may add fields with `extra={"labgate": {...}}`; they are merged in at the top level (keys the
record already has win): the webhook's line per refusal does (uid, tenant, rule ids, decision_ms;
webhook.app.refusal_fields). Every verdict, admitted or not, is in the decision log
(webhook/decision_log.py).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from typing import Any

FIELDS_ATTRIBUTE = "labgate"


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS_ATTRIBUTE, None)
        if isinstance(fields, dict):
            document.update({k: v for k, v in fields.items() if k not in document})
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, separators=(",", ":"))


def configure(*, json_lines: bool | None = None, level: int = logging.INFO) -> None:
    """Log to stderr, as JSON lines unless `json_lines` is False or LABGATE_LOG_FORMAT=text."""
    if json_lines is None:
        json_lines = os.environ.get("LABGATE_LOG_FORMAT", "json").lower() != "text"
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
