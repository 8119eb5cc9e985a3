"""The webhook configurations labgate registers."""

from __future__ import annotations

from webhook.registration import webhook_configurations


def test_exempt_namespaces_and_never_leases_events_or_nodes() -> None:
    configurations = webhook_configurations(
        name="labgate",
        urls=["https://127.0.0.1:1"],
        ca_bundle_pem=b"CA",
        exempt_namespaces=["kube-system", "labgate-system"],
    )
    assert [c["kind"] for c in configurations] == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    exempt = {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", "labgate-system"],
    }
    for configuration in configurations:
        namespaced, cluster = configuration["webhooks"][0], configuration["webhooks"][-1]
        for webhook in configuration["webhooks"]:
            assert webhook["failurePolicy"] == "Fail"
            assert webhook["timeoutSeconds"] == 3
            resources = {r for rule in webhook["rules"] for r in rule["resources"]}
            assert not resources & {"leases", "events", "nodes", "*"}
        # Objects in namespaces: tenant namespaces only, so an outage of labgate touches no one else.
        assert namespaced["namespaceSelector"]["matchExpressions"][:2] == [
            exempt,
            {"key": "labgate.io/tenant", "operator": "Exists"},
        ]
        # The validating one spares only the Job controller taking its finalizer off a pod.
        assert [c["name"] for c in namespaced.get("matchConditions", [])] == (
            ["not-a-job-controller-finalizer-removal"]
            if configuration["kind"] == "ValidatingWebhookConfiguration"
            else []
        )
        assert {r["scope"] for r in namespaced["rules"]} == {"Namespaced"}
        assert {"pods", "jobs", "pytorchjobs", "rayclusters", "jobsets"} <= {
            r for rule in namespaced["rules"] for r in rule["resources"]
        }
        # Namespaces and Tenants: CEL decides which namespace requests are labgate's.
        assert cluster["namespaceSelector"]["matchExpressions"] == [exempt]
        assert {r["scope"] for r in cluster["rules"]} == {"Cluster"}
        assert [c["name"] for c in cluster["matchConditions"]] == ["tenant-namespaces-and-tenants"]
    validating_rules = configurations[1]["webhooks"][0]["rules"]
    assert {"resources": ["pods/ephemeralcontainers"], "operations": ["UPDATE"]}.items() <= next(
        r for r in validating_rules if r["resources"] == ["pods/ephemeralcontainers"]
    ).items()
    assert "DELETE" in next(r for r in validating_rules if r["resources"] == ["secrets"])["operations"]
    # A Namespace's labels change through its status and finalize subresources as through the object.
    cluster_rules = configurations[1]["webhooks"][-1]["rules"]
    namespace_resources = {
        r for rule in cluster_rules for r in rule["resources"] if r.startswith("namespaces")
    }
    assert namespace_resources == {"namespaces", "namespaces/status", "namespaces/finalize"}
    mutating = configurations[0]["webhooks"][0]
    assert mutating["reinvocationPolicy"] == "IfNeeded"
    assert mutating["clientConfig"]["url"] == "https://127.0.0.1:1/mutate"


def test_shards_split_objects_between_replicas() -> None:
    validating = webhook_configurations(
        name="labgate",
        urls=["https://a", "https://b"],
        ca_bundle_pem=b"CA",
        exempt_namespaces=["kube-system"],
        shard_label="shard",
    )[1]["webhooks"]
    assert [w["clientConfig"]["url"] for w in validating] == [
        "https://a/validate",
        "https://a/validate",
        "https://b/validate",
        "https://b/validate",
    ]
    assert validating[0]["objectSelector"] == {
        "matchExpressions": [{"key": "shard", "operator": "NotIn", "values": ["1"]}]
    }
    assert validating[2]["objectSelector"] == {"matchLabels": {"shard": "1"}}


def test_the_mutating_webhook_sees_creates_and_kubectl_debug_only() -> None:
    """Never a pod's UPDATE: it would sit in front of every label and finalizer change controllers
    make to running pods. The ephemeral containers kubectl debug adds (their pull policy) are a
    subresource of their own, already judged by the validating webhook."""
    mutating = webhook_configurations(
        name="labgate", urls=["https://a"], ca_bundle_pem=b"CA", exempt_namespaces=["kube-system"]
    )[0]["webhooks"]
    updated = {
        resource
        for webhook in mutating
        for rule in webhook["rules"]
        if "UPDATE" in rule["operations"]
        for resource in rule["resources"]
    }
    assert updated == {"pods/ephemeralcontainers"}
    assert {op for webhook in mutating for rule in webhook["rules"] for op in rule["operations"]} == {
        "CREATE",
        "UPDATE",
    }


def test_the_mutating_webhook_is_split_by_whether_the_tenant_refuses_gpu_pods_beyond_quota() -> None:
    """Every tenant namespace reaches exactly one of the two namespaced mutating webhooks, with the
    same rules: those labelled refuse the one that spares a Job controller's settled pod, every other
    (preemptible, or not labelled yet) the one that sees every pod."""
    mutating, validating = webhook_configurations(
        name="labgate", urls=["https://127.0.0.1:1"], ca_bundle_pem=b"CA", exempt_namespaces=["kube-system"]
    )
    names = [w["name"] for w in mutating["webhooks"]]
    assert names == ["mutate.labgate.io", "mutate-refusing-tenants.labgate.io", "mutate-cluster.labgate.io"]
    every, refusing, _ = mutating["webhooks"]
    assert every["rules"] == refusing["rules"]
    assert every["namespaceSelector"]["matchExpressions"][-1] == {
        "key": "labgate.io/gpu-over-quota",
        "operator": "NotIn",
        "values": ["refuse"],
    }
    assert refusing["namespaceSelector"]["matchExpressions"][-1] == {
        "key": "labgate.io/gpu-over-quota",
        "operator": "In",
        "values": ["refuse"],
    }
    assert [c["name"] for c in refusing["matchConditions"]] == ["not-a-settled-job-pod"]
    assert refusing["reinvocationPolicy"] == "IfNeeded"
    # The validating webhook sees every pod in every tenant namespace, settled or not.
    assert [w["name"] for w in validating["webhooks"]] == [
        "validate.labgate.io",
        "validate-cluster.labgate.io",
    ]
    assert "not-a-settled-job-pod" not in str(validating["webhooks"][0].get("matchConditions"))


def test_only_the_job_controller_taking_finalizers_off_a_pod_skips_the_validating_webhook() -> None:
    """The condition names the Job controller's identities, the pods resource without a
    subresource, UPDATE only, and compares the spec and every metadata field but the bookkeeping
    ones; the finalizers may only shrink."""
    validating = webhook_configurations(
        name="labgate", urls=["https://a"], ca_bundle_pem=b"CA", exempt_namespaces=["kube-system"]
    )[1]["webhooks"][0]
    (condition,) = validating["matchConditions"]
    expression = condition["expression"]
    assert expression.startswith("!(")
    assert expression.endswith(")")
    for needle in (
        "request.resource.resource == 'pods'",
        "request.subResource == ''",
        "request.operation == 'UPDATE'",
        "'system:serviceaccount:kube-system:job-controller'",
        "object.spec == oldObject.spec",
        "k in ['finalizers', 'resourceVersion', 'managedFields']",
        "f in oldObject.metadata.finalizers",
    ):
        assert needle in expression, needle
    assert "CREATE" not in expression
    assert "generation" not in expression
