"""Writing the audit's PolicyReports: a namespace deleted while the audit ran is skipped, and one
namespace the API refuses does not keep the others' reports from being written."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from urllib3 import HTTPResponse

from cli.audit_service import ReportWriteError, write_policy_reports
from labgate.core.kube import ApiException, KubeApi


def refusal(status: int, reason: str, details: dict[str, Any]) -> ApiException:
    """The exception the Kubernetes door raises for this answer of the apiserver."""
    body = {"kind": "Status", "status": "Failure", "reason": reason, "details": details}
    response = HTTPResponse(body=json.dumps(body).encode(), status=status, reason=reason)
    try:
        ApiException.from_response(http_resp=response, body=None, data=None)
    except ApiException as err:
        return err
    raise AssertionError(f"no exception for {status}")


# As kube-apiserver 1.34 answers a create into a namespace being deleted, and into one deleted.
TERMINATING = {"name": "labgate-audit", "causes": [{"reason": "NamespaceTerminating"}]}
NAMESPACE_NOT_FOUND = {"name": "gone", "kind": "namespaces"}
# ...and when the PolicyReport CRD is not installed: not a reason to drop anything.
NO_SUCH_RESOURCE = {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]}


class Api:
    """Applies reports, refusing those of the namespaces in `refusals` as the apiserver would."""

    def __init__(self, refusals: dict[str, ApiException]):
        self.refusals = refusals
        self.applied: list[str] = []

    def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        namespace = document["metadata"]["namespace"]
        if namespace in self.refusals:
            raise self.refusals[namespace]
        self.applied.append(namespace)
        return document


def report(namespace: str) -> dict[str, Any]:
    return {"kind": "PolicyReport", "metadata": {"name": "labgate-audit", "namespace": namespace}}


def test_a_namespace_being_deleted_is_skipped_and_the_others_are_written() -> None:
    api = Api(
        {
            "going": refusal(403, "Forbidden", TERMINATING),
            "gone": refusal(404, "NotFound", NAMESPACE_NOT_FOUND),
        }
    )
    reports = [report("team-a"), report("going"), report("gone"), report("team-b")]
    assert write_policy_reports(cast(KubeApi, api), reports) == 2
    assert api.applied == ["team-a", "team-b"]


def test_a_refused_report_is_an_error_after_every_other_report_is_written() -> None:
    api = Api(
        {
            "locked": refusal(403, "Forbidden", {"name": "labgate-audit", "kind": "policyreports"}),
            "no-crd": refusal(404, "NotFound", NO_SUCH_RESOURCE),
        }
    )
    reports = [report("team-a"), report("locked"), report("no-crd"), report("team-b")]
    with pytest.raises(ReportWriteError, match=r"2 PolicyReports not written: locked: 403 .*; no-crd: 404"):
        write_policy_reports(cast(KubeApi, api), reports)
    assert api.applied == ["team-a", "team-b"]
