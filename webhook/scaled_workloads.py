"""The workload a scale call resizes, read live (input.scaled_workload, rule gpu-quota-scale).

A Scale carries only spec.replicas: what each new replica asks of GPUs is in the workload's pod
template. Scale calls are rare and made by people, so the webhook reads the workload by name on a
scale up (one GET, bounded) rather than watching every Deployment, StatefulSet and ReplicaSet. What
cannot be read is said in the fact, and the policy refuses the scale (fail closed).
"""

from __future__ import annotations

import logging

from labgate.core.api_resources import Kind
from labgate.core.kube import ApiException, KubeApi
from labgate.core.workload_catalog import WorkloadKind
from webhook.admission import scaled_workload_document
from webhook.policy_input import ScaledWorkloadDocument

log = logging.getLogger(__name__)

# The read's own bound; the caller bounds the whole fact too (webhook.facts).
READ_TIMEOUT_SECONDS = 1.0


def api_kind(kind: WorkloadKind) -> Kind:
    """Where a workload kind lives in the API."""
    return Kind(kind.kind, kind.group, kind.version, kind.resource, is_namespaced=True)


class ScaledWorkloads:
    """The pod templates of a workload being scaled, read from the API on each call."""

    def __init__(self, kube: KubeApi, *, timeout: float = READ_TIMEOUT_SECONDS):
        self._kube = kube
        self._timeout = timeout

    def fact(self, kind: WorkloadKind, namespace: str, name: str) -> ScaledWorkloadDocument:
        """{"kind", "pod_templates"} of the workload, or {"kind", "error"} saying why it could not be
        read (it does not exist, the API refused or failed)."""
        try:
            workload = self._kube.get(api_kind(kind), name, namespace=namespace, timeout=self._timeout)
        except ApiException as err:
            log.warning(
                "could not read %s %s/%s to judge its scale: %s", kind.kind, namespace, name, err.status
            )
            return {"kind": kind.kind, "error": f"the API answered {err.status} {err.reason}"}
        except Exception as err:  # a timeout, a reset connection
            log.warning("could not read %s %s/%s to judge its scale: %s", kind.kind, namespace, name, err)
            return {"kind": kind.kind, "error": f"the API did not answer: {type(err).__name__}"}
        if workload is None:
            return {"kind": kind.kind, "error": f"no {kind.kind} {name!r} in namespace {namespace!r}"}
        return scaled_workload_document(kind, workload)
