"""The Job launch benchmark's readings (benchmarks/job_launch.py): the apiserver's writes from its
metrics, FailedCreate reasons from the Job's events, and the check that the baseline namespace is one
labgate's webhooks never see."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from benchmarks.job_launch import (
    api_writes,
    excludes_unlabelled_namespaces,
    failed_create_reason,
    failed_creates,
    is_labgate_reason,
)
from webhook.registration import webhook_configurations

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, ...
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="403",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 1000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2.5e+03
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="PUT",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="LIST",version="v1"} 99
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="WATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1007
"""


def test_writes_are_counted_by_resource_over_codes_and_reads_are_not() -> None:
    assert api_writes(METRICS) == Counter(
        {
            "pods": 1007,
            "pods/binding": 1000,
            "pods/status": 2500,
            "jobs.batch/status": 12,
            "configmaps": 40,
            "events.events.k8s.io": 5,
        }
    )


def test_a_difference_of_two_readings_is_what_happened_between_them() -> None:
    later = METRICS.replace('verb="POST",version="v1"} 1000', 'verb="POST",version="v1"} 1200')
    assert api_writes(later) - api_writes(METRICS) == Counter({"pods": 200, "pods/binding": 200})


LABGATE_DENIAL = (
    'Error creating: admission webhook "validate.labgate.io" denied the request: [gpu-quota] Pod '
    '"sweep-abc" asks 1 GPU; tenant "launch" uses 8 of 8 GPUs. Fix: wait'
)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (LABGATE_DENIAL, "labgate [gpu-quota]"),
        (
            'Error creating: admission webhook "labgate.io" denied the request: no rule id here',
            "labgate [no rule id]",
        ),
        (
            'Error creating: admission webhook "vpod.kb.io" denied the request: [x] no',
            "webhook vpod.kb.io",
        ),
        (
            'Error creating: pods "sweep-abc" is forbidden: exceeded quota: gpus, requested: '
            "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8",
            "ResourceQuota",
        ),
        (
            "Error creating: Internal error occurred: etcdserver: request timed out",
            "Error creating: Internal error occurred: etcdserver: request timed",
        ),
    ],
)
def test_a_failed_create_names_what_refused_the_pod(message: str, reason: str) -> None:
    assert failed_create_reason(message) == reason
    assert is_labgate_reason(reason) == reason.startswith("labgate")


def test_failed_creates_count_every_occurrence_of_an_aggregated_event() -> None:
    events: list[dict[str, Any]] = [
        {"reason": "FailedCreate", "message": LABGATE_DENIAL, "count": 3},
        {"reason": "FailedCreate", "message": LABGATE_DENIAL, "series": {"count": 5}, "count": 1},
        {"reason": "FailedCreate", "message": "Error creating: exceeded quota: gpus"},
        {"reason": "SuccessfulCreate", "message": "Created pod: sweep-abc", "count": 40},
    ]
    assert failed_creates(events) == Counter({"labgate [gpu-quota]": 8, "ResourceQuota": 1})


def test_labgate_registration_never_sends_an_unlabelled_namespace() -> None:
    configurations = webhook_configurations(
        name="labgate",
        urls=["https://127.0.0.1:9443"],
        ca_bundle_pem=b"-----BEGIN CERTIFICATE-----\n",
        exempt_namespaces=["kube-system", "labgate-system"],
    )
    assert configurations
    assert all(excludes_unlabelled_namespaces(c) for c in configurations)


def test_a_webhook_without_the_tenant_selector_would_see_the_baseline() -> None:
    configuration = {
        "webhooks": [
            {
                "name": "validate.labgate.io",
                "rules": [{"resources": ["pods"], "scope": "Namespaced"}],
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                    ]
                },
            }
        ]
    }
    assert not excludes_unlabelled_namespaces(configuration)
    cluster_scoped = {"webhooks": [{"rules": [{"resources": ["tenants"], "scope": "Cluster"}]}]}
    assert excludes_unlabelled_namespaces(cluster_scoped)


def test_a_labgate_webhook_that_did_not_answer_in_time_is_labgate_s_failed_create() -> None:
    message = (
        'Error creating: Internal error occurred: failed calling webhook "mutate.labgate.io": failed to '
        'call webhook: Post "https://127.0.0.1:40123/mutate?timeout=3s": context deadline exceeded'
    )
    reason = failed_create_reason(message)
    assert reason == "labgate [call failed: context deadline exceeded]"
    assert is_labgate_reason(reason)
    other = message.replace("mutate.labgate.io", "mpod.kb.io")
    assert failed_create_reason(other) == "webhook mpod.kb.io [call failed: context deadline exceeded]"
