"""When no decision could be had (webhook/failures.py): every failure refuses, with the message,
metric label and decision-log reason it had before the table replaced the `except` ladder; and
every error class labgate defines has one root, in the family that says how it is answered."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil

import pytest

import cli
import labgate
import rbac
import webhook
from labgate.core.errors import BadRequestError, LabgateError, NoDecisionError
from labgate.core.kube import ApiException
from labgate.core.metrics import POLICY_ENGINE_ERRORS
from labgate.gpu_accounting.ledger import LedgerConflictError, LedgerCorruptError
from webhook import failures
from webhook.app import BodyTooLargeError
from webhook.failures import Attempt
from webhook.policy_engine import PolicyEngineTimeoutError, PolicyEngineUnavailableError
from webhook.review import MalformedReviewError, parse_request, parse_review

REQUEST = parse_request(
    {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "vision",
        "operation": "CREATE",
        "userInfo": {"username": "alice"},
        "object": {"metadata": {"name": "train-1"}},
    }
)
UNAVAILABLE = (
    "[policy-engine-unavailable] labgate could not evaluate its policies ({}), so the request was "
    "refused to stay safe. Fix: retry in a minute; if it persists, tell the infra team"
)


def attempt(size: int = 1000) -> Attempt:
    return Attempt(request=REQUEST, size=size, deadline=2.5, complex_request_bytes=256 * 1024)


def count(label: str) -> float:
    value: float = POLICY_ENGINE_ERRORS.labels(label)._value.get()
    return value


@pytest.mark.parametrize(
    ("error", "label", "reason"),
    [
        (TimeoutError(), "timeout", "no decision within 2.5s"),
        (PolicyEngineUnavailableError("cannot reach OPA: refused"), "error", "cannot reach OPA: refused"),
        # OPA's own timeout is a timeout, not an "error" (issue 22 item 13).
        (PolicyEngineTimeoutError("no answer within 1.0s"), "timeout", "no answer within 1.0s"),
        (
            LedgerCorruptError("vision", "not JSON"),
            "error",
            "the GPU ledger of tenant 'vision' (ConfigMap labgate-gpu-ledger.vision) is unreadable: not JSON",
        ),
        (ApiException(status=500, reason="etcd"), "error", str(ApiException(status=500, reason="etcd"))),
        (ConnectionRefusedError("refused"), "error", "refused"),
        (OSError("no route"), "error", "no route"),
        (KeyError("spec"), "internal", "an internal error in labgate's webhook; see its log"),
        (LedgerConflictError("vision"), "internal", "an internal error in labgate's webhook; see its log"),
    ],
)
def test_every_failure_refuses_as_the_policy_engine_unavailable_with_its_reason(
    error: Exception, label: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = count(label)
    with caplog.at_level(logging.ERROR, logger="webhook.failures"):
        refusal = failures.refuse(error, attempt())
    assert (refusal.rule, refusal.code, refusal.reason) == (
        "policy-engine-unavailable",
        503,
        "ServiceUnavailable",
    )
    assert refusal.message == UNAVAILABLE.format(reason)
    assert count(label) == before + 1
    assert caplog.records[-1].getMessage().startswith("no decision for u-1")
    assert (caplog.records[-1].exc_info is not None) == (label == "internal")


def test_a_large_request_out_of_time_is_too_large_not_a_retry() -> None:
    before = count("timeout")
    refusal = failures.refuse(TimeoutError(), attempt(size=300 * 1024))
    assert (refusal.rule, refusal.code) == ("request-too-large", 413)
    assert refusal.message.startswith(
        '[request-too-large] Pod "train-1" is 300 KiB as an admission request and could not be '
        "decided within 2.5s; requests above 256 KiB may be too complex to decide in time"
    )
    assert count("timeout") == before + 1


def test_a_body_that_is_not_an_admission_review_is_a_bad_request_with_its_field() -> None:
    with pytest.raises(MalformedReviewError) as raised:
        parse_review(b'{"apiVersion": "v1"}')
    assert raised.value.status == 400
    assert raised.value.content == {"error": "malformed AdmissionReview", "reason": raised.value.reason}
    assert raised.value.reason.startswith("apiVersion: ")
    assert BodyTooLargeError(10).status == 413
    assert BodyTooLargeError(10).content == {"error": "request body too large", "limit_bytes": 10}


def _error_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for package in (cli, labgate, webhook, rbac):
        for module_info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(module_info.name)
            for _, value in inspect.getmembers(module, inspect.isclass):
                if (
                    issubclass(value, BaseException)
                    and value.__module__ == module.__name__
                    and value.__name__.endswith("Error")
                ):
                    found.append(value)
    return found


def test_every_error_class_labgate_defines_has_one_root() -> None:
    classes = _error_classes()
    assert len(classes) >= 18
    assert [c.__qualname__ for c in classes if not issubclass(c, LabgateError)] == []


def test_the_families_say_how_an_error_is_answered() -> None:
    assert issubclass(PolicyEngineUnavailableError, NoDecisionError)
    assert issubclass(LedgerCorruptError, NoDecisionError)
    assert issubclass(MalformedReviewError, BadRequestError)
    assert issubclass(BodyTooLargeError, BadRequestError)
    # Handled where they are raised: in neither family.
    assert not issubclass(LedgerConflictError, NoDecisionError | BadRequestError)
