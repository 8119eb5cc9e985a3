"""The webhook configurations that register labgate with the apiserver (pure; the chart renders the
same shape from its templates)."""

from __future__ import annotations

import base64
from typing import Any, Literal

VALIDATING_WEBHOOK_NAME = "validate.labgate.io"

# Workloads whose pods run experiments. Leases, Events and Nodes are never listed: intercepting them
# could stall leader election or the nodes themselves.
WORKLOAD_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs", "cronjobs"]},
    {
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "resources": ["deployments", "statefulsets", "replicasets"],
    },
]


def exempt_namespace_selector(exempt_namespaces: list[str]) -> dict[str, Any]:
    """Never intercept kube-system or labgate's own namespace: a broken webhook must not brick the cluster."""
    return {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": sorted(set(exempt_namespaces)),
            }
        ]
    }


def validating_webhook_configuration(
    *,
    name: str,
    url: str,
    ca_bundle_pem: bytes,
    exempt_namespaces: list[str],
    failure_policy: Literal["Fail", "Ignore"] = "Fail",
    timeout_seconds: int = 3,
) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration that sends workload requests to `url` + /validate."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "labgate"}},
        "webhooks": [
            {
                "name": VALIDATING_WEBHOOK_NAME,
                "clientConfig": {
                    "url": url.rstrip("/") + "/validate",
                    "caBundle": base64.b64encode(ca_bundle_pem).decode(),
                },
                "rules": [
                    {**rule, "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
                    for rule in WORKLOAD_RULES
                ],
                "namespaceSelector": exempt_namespace_selector(exempt_namespaces),
                "failurePolicy": failure_policy,
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": timeout_seconds,
            }
        ],
    }
