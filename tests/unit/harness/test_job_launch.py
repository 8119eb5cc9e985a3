"""The Job launch benchmark's readings (benchmarks/job_launch.py): the apiserver's writes from its
metrics, FailedCreate reasons from the Job's events, the check that the baseline namespace is one
labgate's webhooks (and Kueue's Job management) never see, a gang's pods bound while blocked, and the
table of labgate without and with Kueue."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from benchmarks.job_launch import (
    Launch,
    admission_connections,
    admission_overloads,
    api_writes,
    bound_before,
    created_by_share,
    excludes_unlabelled_namespaces,
    failed_create_reason,
    failed_creates,
    is_labgate_reason,
    kueue_rows,
    quota_refused_creates,
    refused_creates,
    selector_matches,
    webhook_refusals,
    writes_rows,
)
from devcluster.kueue import kueue_configuration
from labgate.core.metrics import (
    ADMISSION_CONNECTIONS,
    ADMISSION_OVERLOADED,
    ADMISSION_WAIT_SECONDS,
    POLICY_ENGINE_ERRORS,
    RULE_FINDINGS,
)
from labgate.core.tenant import TENANT_LABEL
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


def test_kueue_manages_the_tenant_s_jobs_and_not_the_baseline_s() -> None:
    selector = kueue_configuration(webhook_port=1, health_port=2, metrics_port=3, cert_dir=Path())[
        "managedJobsNamespaceSelector"
    ]
    baseline = {"kubernetes.io/metadata.name": "launch-baseline"}
    assert not selector_matches(selector, baseline)
    assert selector_matches(selector, {**baseline, TENANT_LABEL: "launch"})


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        ({}, {}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            {"team": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {"team": "a"}, False),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {"team": "a"}, False),
        (
            {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "spot", "operator": "Exists"}]},
            {"team": "a"},
            False,
        ),
    ],
)
def test_a_label_selector_selects_as_the_apiserver_reads_it(
    selector: dict[str, Any], labels: dict[str, str], selected: bool
) -> None:
    assert selector_matches(selector, labels) is selected


def test_an_unknown_selector_operator_is_an_error_not_a_match() -> None:
    with pytest.raises(ValueError, match="Gt"):
        selector_matches({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1"]}]}, {"n": "2"})


def test_a_gang_pod_bound_before_the_blocker_went_counts_and_one_bound_after_does_not() -> None:
    assert bound_before([10.0, 11.5, 30.0, 31.0], 20.0) == 2
    assert bound_before([20.0], 20.0) == 0
    assert bound_before([], 20.0) == 0


def _launch(target: str, shape: str, bound_s: float, writes: int, cpu: dict[str, float]) -> Launch:
    return Launch(
        target,
        shape,
        1,
        10,
        to_bound_s=bound_s,
        writes=Counter({"pods": writes}),
        cpu=cpu,
        failed_create=Counter({"labgate [gpu-quota]": 2, "ResourceQuota": 1})
        if target == "labgate"
        else Counter(),
        refused=30 if target == "labgate" else 0,
    )


def test_the_kueue_table_sets_each_stack_s_labgate_against_that_stack_s_baseline() -> None:
    without = [
        _launch("baseline", "job", 2.0, 50, {"kube-apiserver": 0.1}),
        _launch("labgate", "job", 3.0, 60, {"kube-apiserver": 0.2, "webhook-0": 0.05, "opa": 0.03}),
    ]
    with_kueue = [
        _launch("baseline", "job", 4.0, 40, {"kube-apiserver": 0.1}),
        _launch("labgate", "job", 5.0, 80, {"kube-apiserver": 0.3, "reconciler-0": 0.01, "kueue": 0.02}),
    ]
    rows = kueue_rows(without, with_kueue)
    assert rows[2:] == [
        "| job | labgate | 3.0 s (1.50) | 3 (2) / 30 | 6.00 (1.20) | 20.00 | 8.00 | - |",
        "| job | labgate + Kueue | 5.0 s (1.25) | 3 (2) / 30 | 8.00 (2.00) | 30.00 | 1.00 | 2.00 |",
    ]


def test_kueue_s_writes_are_shown_even_when_they_are_not_among_the_most_written() -> None:
    writes = Counter({"pods": 100, "pods/binding": 100, "workloads.kueue.x-k8s.io/status": 2, "leases": 1})
    launches = [
        Launch("baseline", "job", 1, 100, writes=Counter({"pods": 100, "pods/binding": 100})),
        Launch("labgate", "job", 1, 100, writes=writes),
    ]
    rows = writes_rows(launches, top=2, kueue=True)
    assert rows[0] == "| resource | baseline writes / pod | labgate + Kueue writes / pod |"
    assert rows[2:] == [
        "| pods | 1.000 | 1.000 |",
        "| pods/binding | 1.000 | 1.000 |",
        "| workloads.kueue.x-k8s.io/status | 0.000 | 0.020 |",
    ]


def test_refused_creates_are_the_apiservers_count_of_labgates_webhook_rejections_of_creates() -> None:
    """FailedCreate events stop at 25 an object (client-go's spam filter); the apiserver's own
    counter of webhook rejections does not."""
    metrics = "\n".join(
        [
            "# TYPE apiserver_admission_webhook_rejection_count counter",
            'apiserver_admission_webhook_rejection_count{error_type="no_error",name="validate.labgate.io",'
            'operation="CREATE",rejection_code="403",type="validating"} 41',
            'apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",'
            'name="validate.labgate.io",operation="CREATE",rejection_code="0",type="validating"} 2',
            'apiserver_admission_webhook_rejection_count{error_type="no_error",name="validate.labgate.io",'
            'operation="UPDATE",rejection_code="403",type="validating"} 7',
            'apiserver_admission_webhook_rejection_count{error_type="no_error",name="mpod.kueue.x-k8s.io",'
            'operation="CREATE",rejection_code="403",type="admit"} 5',
        ]
    )
    assert refused_creates(metrics) == 43
    assert refused_creates("") == 0


def test_quota_refused_creates_are_the_resourcequota_plugin_s_rejected_creates_only() -> None:
    """The apiserver's ResourceQuota admission runs after the validating webhooks: its rejected
    creates are creates labgate admitted that never became pods."""
    metric = "apiserver_admission_controller_admission_duration_seconds_count"
    metrics = "\n".join(
        [
            f'{metric}{{name="ResourceQuota",operation="CREATE",rejected="true",type="validate"}} 3',
            f'{metric}{{name="ResourceQuota",operation="CREATE",rejected="false",type="validate"}} 9000',
            f'{metric}{{name="ResourceQuota",operation="UPDATE",rejected="true",type="validate"}} 4',
            f'{metric}{{name="LimitRanger",operation="CREATE",rejected="true",type="validate"}} 5',
            f'{metric.replace("_count", "_sum")}{{name="ResourceQuota",operation="CREATE",rejected="true",type="validate"}} 0.5',
        ]
    )
    assert quota_refused_creates(metrics) == 3
    assert quota_refused_creates("") == 0


def test_the_share_created_is_read_in_order_of_creation_from_the_launch_s_start() -> None:
    """A launch whose last pods come long after the rest shows it: 99 % early, 100 % late."""
    created = [100.0 + i / 100 for i in range(999)] + [400.0]
    shares = created_by_share(list(reversed(created)), start=100.0, shares=(0.5, 0.99, 1.0))
    assert shares == pytest.approx({0.5: 4.99, 0.99: 9.89, 1.0: 300.0})
    assert created_by_share([], start=0.0) == {}


def test_admission_overloads_read_the_webhooks_own_exposition() -> None:
    """The webhook's /metrics text (prometheus_client's exposition of labgate's own metrics): its
    [admission-overloaded] refusals by cause and its waits, as a launch's difference of two reads."""
    before = admission_overloads(generate_latest(REGISTRY).decode())
    ADMISSION_OVERLOADED.labels("waited").inc()
    ADMISSION_OVERLOADED.labels("line-full").inc(2)
    ADMISSION_WAIT_SECONDS.observe(0.25)
    ADMISSION_WAIT_SECONDS.observe(1.0)
    after = admission_overloads(generate_latest(REGISTRY).decode())
    assert after - before == Counter(
        {"line-full": 2, "waited": 1, "waits": 2, "waited_ms": 1250, "waits_over_500ms": 1}
    )
    assert admission_overloads("") == Counter()


def test_admission_connections_read_the_webhooks_own_exposition() -> None:
    """The TLS connections the webhook accepted, from the same exposition, as a launch's difference
    of two reads (the counter's `_created` sample is not a connection)."""
    before = admission_connections(generate_latest(REGISTRY).decode())
    ADMISSION_CONNECTIONS.inc(3)
    assert admission_connections(generate_latest(REGISTRY).decode()) - before == 3
    assert admission_connections("") == 0


def test_webhook_refusals_are_its_enforced_findings_by_rule_and_its_missing_decisions() -> None:
    """What else the webhook refused in a launch, by rule id, from the same exposition: warnings and
    dry-run findings refuse nothing and are not counted."""
    before = webhook_refusals(generate_latest(REGISTRY).decode())
    RULE_FINDINGS.labels("gpu-quota", "enforce", "t").inc(3)
    RULE_FINDINGS.labels("image-digest", "warn", "t").inc()
    POLICY_ENGINE_ERRORS.labels("timeout").inc(2)
    after = webhook_refusals(generate_latest(REGISTRY).decode())
    assert after - before == Counter({"gpu-quota": 3, "no-decision:timeout": 2})
    assert webhook_refusals("") == Counter()
