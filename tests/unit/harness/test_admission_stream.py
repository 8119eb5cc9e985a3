"""The reasons devcluster.admission_stream gives a create that was not admitted (what the node tests
count): labgate's refusals by rule id, the apiserver's failed webhook calls by cause, and nothing
left unexplained by accident; and the container pid devcluster.node_runtime reads from `ctr`."""

from __future__ import annotations

import subprocess

import pytest

from devcluster.admission_stream import Call
from devcluster.node_runtime import task_pid

WEBHOOK_CALL = 'Internal error occurred: failed calling webhook "mutate.labgate.io": failed to call webhook: '
POST = 'Post "https://labgate-webhook.labgate-system.svc:443/mutate?timeout=3s": '


@pytest.mark.parametrize(
    ("status", "message", "reason"),
    [
        (201, "", "admitted"),
        (
            403,
            'admission webhook "validate.labgate.io" denied the request: [gpu-quota] Pod "gpu-151" asks 1',
            "[gpu-quota]",
        ),
        (
            503,
            'admission webhook "validate.labgate.io" denied the request: [policy-engine-unavailable] labgate',
            "[policy-engine-unavailable]",
        ),
        (
            429,
            'admission webhook "mutate-cluster.labgate.io" denied the request: [admission-overloaded] busy',
            "[admission-overloaded]",
        ),
        (
            500,
            WEBHOOK_CALL + POST + "dial tcp 10.88.0.7:8443: connect: connection refused",
            "webhook connection refused",
        ),
        (500, WEBHOOK_CALL + POST + "context deadline exceeded", "webhook timeout"),
        (
            500,
            WEBHOOK_CALL + 'service "labgate-webhook" has no endpoints available',
            "webhook has no endpoints",
        ),
        (500, WEBHOOK_CALL + POST + "EOF", "webhook connection closed (EOF)"),
        (0, "ReadTimeout: timed out", "client ReadTimeout"),
        (
            403,
            'pods "gpu-1" is forbidden: exceeded quota: labgate-gpu',
            'unexplained 403: pods "gpu-1" is forbidden: exceeded quota: labgate-gpu',
        ),
        (409, 'pods "gpu-1" already exists', 'unexplained 409: pods "gpu-1" already exists'),
    ],
)
def test_a_call_names_why_it_was_not_admitted(status: int, message: str, reason: str) -> None:
    assert Call("pod", 0.0, status, message).reason == reason


def test_only_a_forbidden_labgate_refusal_is_a_policy_verdict() -> None:
    verdict = Call("p", 0.0, 403, 'admission webhook "validate.labgate.io" denied the request: [gpu-quota] x')
    unavailable = Call(
        "p", 0.0, 503, 'admission webhook "validate.labgate.io" denied the request: [policy-x] y'
    )
    assert verdict.is_policy_verdict
    assert not unavailable.is_policy_verdict
    assert unavailable.is_failed


class FakeNode:
    def __init__(self, listing: str):
        self.listing = listing

    def ctr(self, *args: str, namespace: str = "k8s.io") -> subprocess.CompletedProcess[str]:
        assert args == ("tasks", "ls")
        return subprocess.CompletedProcess(["ctr", *args], 0, self.listing, "")


def test_the_pid_of_a_running_container_is_read_from_containerds_task_list() -> None:
    listing = "TASK    PID     STATUS\nabc     4242    RUNNING\ndef     17      STOPPED\n"
    assert task_pid(FakeNode(listing), "containerd://abc") == 4242
    with pytest.raises(LookupError):
        task_pid(FakeNode(listing), "containerd://def")
