"""labgate's errors (pure): one root, and the two families an admission answer depends on.

Every error class labgate defines derives from `LabgateError`. Two families say how the webhook
answers when one escapes a request:

- `BadRequestError`: the request is bad (a body that is not an AdmissionReview, too large, not
  received in time). The caller's to fix; answered with an HTTP error (`status`, 400 unless the
  class says otherwise) and `content`, never an AdmissionResponse.
- `NoDecisionError`: no decision could be had (OPA unreachable or answering nonsense, a corrupt GPU
  ledger). Answered with the `[policy-engine-unavailable]` refusal: an error never admits.

The other classes (a lost compare-and-swap, a policy OPA refused, an offline check that cannot run,
...) are handled where they are raised and derive from the root alone. A policy's denial is not an
error: it is a finding in the decision (`labgate.core.decisions`).
"""

from __future__ import annotations

from typing import Any


class LabgateError(Exception):
    """The root of every error class labgate defines."""


class BadRequestError(LabgateError):
    """The request is bad: the webhook answers it with HTTP `status` and the JSON body `content`
    (no body when `content` is None)."""

    status = 400

    def __init__(self, message: str, *, content: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.content = content


class NoDecisionError(LabgateError):
    """No decision could be had: the webhook refuses with `[policy-engine-unavailable]`, naming this
    error's message as the reason."""


class NoDecisionInTimeError(NoDecisionError):
    """No decision because something on the way (OPA) did not answer in time: refused like any
    NoDecisionError, counted as a timeout (labgate_policy_engine_errors_total{reason="timeout"})."""
