"""When no decision could be had: one table from what went wrong to the refusal, the metric and the
log line. An error never admits, and never gives the apiserver a bare 500.

| raised                                          | POLICY_ENGINE_ERRORS | refusal                      |
| ----------------------------------------------- | -------------------- | ---------------------------- |
| TimeoutError (the deadline), a large request    | timeout              | request-too-large            |
| TimeoutError (the deadline)                     | timeout              | policy-engine-unavailable    |
| NoDecisionInTimeError (OPA did not answer)      | timeout              | policy-engine-unavailable    |
| NoDecisionError (OPA, a corrupt GPU ledger),    | error                | policy-engine-unavailable    |
| the API's ApiException, OSError                 |                      |                              |
| anything else (a bug of labgate's)              | internal             | policy-engine-unavailable    |
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from labgate.core.errors import NoDecisionError, NoDecisionInTimeError
from labgate.core.kube import ApiException
from labgate.core.metrics import POLICY_ENGINE_ERRORS
from webhook import refusals
from webhook.refusals import Refusal
from webhook.review import AdmissionRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Attempt:
    """The request that could not be decided, with what its refusal quotes."""

    request: AdmissionRequest
    size: int  # bytes of its AdmissionReview
    deadline: float  # seconds it was given
    complex_request_bytes: int  # above this, running out of time means "too large", not "retry"


@dataclass(frozen=True, slots=True)
class Failure:
    """How one kind of failure is answered: its POLICY_ENGINE_ERRORS label, its log line (with the
    traceback when `is_bug`) and its refusal."""

    label: str
    describe: Callable[[BaseException, Attempt], str]
    refusal: Callable[[BaseException, Attempt], Refusal]
    is_bug: bool = False


def _timed_out(_: BaseException, attempt: Attempt) -> Refusal:
    if attempt.size >= attempt.complex_request_bytes:
        # A large request that runs out of time would run out again: say so, not "retry".
        return refusals.request_too_large(
            kind=attempt.request.kind.kind,
            name=refusals.request_name(attempt.request),
            size=attempt.size,
            limit=attempt.complex_request_bytes,
            deadline=attempt.deadline,
        )
    return refusals.engine_unavailable(f"no decision within {attempt.deadline:.1f}s")


# The first row whose classes match answers (TimeoutError is an OSError: it comes first).
FAILURES: tuple[tuple[tuple[type[Exception], ...], Failure], ...] = (
    (
        (TimeoutError,),
        Failure(
            "timeout",
            lambda _, a: f"no decision for {a.request.uid} ({a.size} bytes) within {a.deadline:.1f}s",
            _timed_out,
        ),
    ),
    (
        (NoDecisionInTimeError,),
        Failure(
            "timeout",
            lambda err, a: f"no decision for {a.request.uid}: {err}",
            lambda err, _: refusals.engine_unavailable(str(err)),
        ),
    ),
    (
        (NoDecisionError, ApiException, OSError),
        Failure(
            "error",
            lambda err, a: f"no decision for {a.request.uid}: {err}",
            lambda err, _: refusals.engine_unavailable(str(err)),
        ),
    ),
    (
        (Exception,),
        Failure(
            "internal",
            lambda _, a: f"no decision for {a.request.uid}: internal error",
            lambda _, __: refusals.engine_unavailable("an internal error in labgate's webhook; see its log"),
            is_bug=True,
        ),
    ),
)


def failure_of(err: Exception) -> Failure:
    """The row of FAILURES that answers `err`."""
    for classes, failure in FAILURES:
        if isinstance(err, classes):
            return failure
    raise AssertionError("FAILURES ends with Exception")  # pragma: no cover


def refuse(err: Exception, attempt: Attempt) -> Refusal:
    """The refusal for `attempt`, which raised `err`; counted and logged."""
    failure = failure_of(err)
    POLICY_ENGINE_ERRORS.labels(failure.label).inc()
    log.error(failure.describe(err, attempt), exc_info=err if failure.is_bug else None)
    return failure.refusal(err, attempt)
