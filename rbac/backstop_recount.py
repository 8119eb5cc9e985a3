"""The GPU backstop's count, given back when Kubernetes charged it for pods that never came.

Each tenant namespace has a Kubernetes ResourceQuota, `labgate-gpu` (rbac.desired: hard
`requests.nvidia.com/gpu` = the tenant's total), behind the webhook's tenant-wide ledger. Kubernetes'
ResourceQuota admission charges it before the apiserver writes a pod, and keeps the charge when the
write then fails (kubernetes#110080): most often a generated name that is already a live pod's, which
the apiserver retries under a new name as a create of its own (about n^2 / 28.7 million times for n
pods of one generateName: 3.5 in a Job of 10,000). Kubernetes' quota controller recounts only every
`--resource-quota-sync-period` (5 min by default) or when a pod of the namespace is deleted or
finishes. Until then a tenant at its quota's edge has its last pods refused "exceeded quota:
labgate-gpu" while its pods hold less, and the two counts a researcher sees disagree.

The recount, on the reconciler's periodic sweep, per backstop:

- a status that has not changed for `quiet_seconds` (every charge is a write of it, so no create has
  been charged since, and none charged before is still on its way to storage), and that charges
  more than the reconciler's pod index holds there, is read again and the namespace's pods listed;
- they are counted as Kubernetes counts them or more (`backstop_usage`: every pod not finished and
  not of the preemptible class, deleting or not; a fraction of a GPU rounded up);
- if that is less than the charge, the status is written with it, on the version read: a charge or
  a recount by Kubernetes since makes the write fail (409), and a later sweep looks again.

So the backstop is never set below what the pods in the namespace hold. It is looked at once per
version of its status: a status the list confirmed is not listed again until it changes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from labgate.core.api_resources import POD, RESOURCE_QUOTA, Object
from labgate.core.kube import ApiException, KubeApi
from labgate.core.tenant import PREEMPTIBLE_PRIORITY_CLASS
from labgate.gpu_accounting.demand import quantity
from labgate.gpu_accounting.pod_requests import FINISHED_PHASES, effective_request
from labgate.gpu_accounting.settlement import PodFacts
from rbac.desired import GPU_BACKSTOP_NAME, GPU_RESOURCE
from rbac.runtime import ObjectCache
from rbac.tenant_events import TenantEvents

QUOTA_KEY = f"requests.{GPU_RESOURCE}"
# How often the reconciler's periodic tasks sweep the backstops: with the quiet time, a charge for a
# pod that never came is given back 10 to 15 s after the last create Kubernetes charged.
SWEEP_SECONDS = 5.0

RECOUNTED = Counter(
    "labgate_gpu_backstop_recounted_total",
    "Kubernetes' labgate-gpu quotas whose charge for pods that never came the reconciler gave back",
    ["tenant"],
)

log = logging.getLogger(__name__)


def charged(quota: Mapping[str, Any]) -> int | None:
    """The GPUs the backstop's status says are used, or None when it says nothing yet."""
    used = ((quota.get("status") or {}).get("used") or {}).get(QUOTA_KEY)
    return None if used is None else math.ceil(quantity(used))


def backstop_usage(pods: Iterable[Mapping[str, Any]]) -> int:
    """What the backstop may count of `pods` (one namespace's), at least as much as Kubernetes does:
    the effective GPU request (`effective_request`, as the scheduler and the quota count it) of every
    pod not finished whose priority class is not the preemptible one (the backstop's scope). Pods
    being deleted still count here; Kubernetes stops counting them after their grace period."""
    usage = 0
    for pod in pods:
        if ((pod.get("status") or {}).get("phase") or "") in FINISHED_PHASES:
            continue
        spec = pod.get("spec") or {}
        if spec.get("priorityClassName") == PREEMPTIBLE_PRIORITY_CLASS:
            continue
        usage += effective_request(spec, GPU_RESOURCE)
    return usage


def indexed_usage(pods: Mapping[str, PodFacts]) -> int:
    """The same from the reconciler's pod index (its weighted GPUs): only whether to look closer."""
    return sum(f.gpus.total for f in pods.values() if f.phase not in FINISHED_PHASES and not f.is_preemptible)


def given_back(quota: Object, usage: int) -> Object | None:
    """`quota` with its charge lowered to `usage`, to be written on the version read; None when it
    charges no more than that."""
    count = charged(quota)
    if count is None or count <= usage:
        return None
    status = quota.get("status") or {}
    return {**quota, "status": {**status, "used": {**(status.get("used") or {}), QUOTA_KEY: str(usage)}}}


@dataclass
class _Seen:
    version: str
    since: float
    confirmed: bool = False  # the list found the charge right at this version


class BackstopRecount:
    """Gives back what Kubernetes charged the tenants' `labgate-gpu` quotas for pods that never came
    (the module's docstring); `sweep` runs on the reconciler's periodic tasks, as leader only."""

    def __init__(
        self,
        kube: KubeApi,
        cache: ObjectCache,
        pods_in: Callable[[list[str]], Mapping[str, PodFacts]],
        *,
        events: TenantEvents,
        quiet_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._kube = kube
        self._cache = cache
        self._pods_in = pods_in
        self._events = events
        self.quiet_seconds = quiet_seconds
        self._clock = clock
        self._seen: dict[str, _Seen] = {}  # namespace -> its backstop's status version, first seen

    def _backstops(self) -> list[tuple[str, Object]]:
        found: list[tuple[str, Object]] = []
        for tenant in sorted(self._cache.tenants_named()):
            for key, obj in self._cache.labelled_for(tenant):
                if (
                    key[:2] == (RESOURCE_QUOTA.api_version, RESOURCE_QUOTA.kind)
                    and key[3] == GPU_BACKSTOP_NAME
                ):
                    found.append((tenant, obj))
        return found

    def sweep(self) -> None:
        now = self._clock()
        current: set[str] = set()
        for tenant, quota in self._backstops():
            namespace = str(quota["metadata"]["namespace"])
            version = str(quota["metadata"].get("resourceVersion", ""))
            current.add(namespace)
            seen = self._seen.get(namespace)
            if seen is None or seen.version != version:
                self._seen[namespace] = _Seen(version, now)
                continue
            if seen.confirmed or now - seen.since < self.quiet_seconds:
                continue
            count = charged(quota)
            if count is None or count <= indexed_usage(self._pods_in([namespace])):
                continue
            seen.confirmed = not self._recount(tenant, namespace, version)
        for namespace in set(self._seen) - current:
            del self._seen[namespace]

    def _recount(self, tenant: str, namespace: str, version: str) -> bool:
        """Read the backstop and the namespace's pods; give back the charge of pods that never came.
        Whether it wrote; False also when the backstop changed since `version` (looked at again
        once it is quiet)."""
        live = self._kube.get(RESOURCE_QUOTA, GPU_BACKSTOP_NAME, namespace=namespace)
        if live is None or str(live["metadata"].get("resourceVersion", "")) != version:
            return False
        usage = backstop_usage(
            pod for page in self._kube.pages(POD, namespace=namespace) for pod in page["items"]
        )
        corrected = given_back(live, usage)
        if corrected is None:
            return False
        try:
            self._kube.replace_status(RESOURCE_QUOTA, corrected)
        except ApiException as err:
            if err.status == 409:  # a charge, or Kubernetes' own recount, since the read
                return False
            raise
        was = charged(live)
        RECOUNTED.labels(tenant).inc()
        log.info(
            "gave back %s of %s GPUs labgate-gpu charged in namespace %s",
            was - usage if was else 0,
            was,
            namespace,
        )
        self._events.record(
            tenant,
            "GpuBackstopRecounted",
            f"Kubernetes' ResourceQuota labgate-gpu in namespace {namespace} charged {was} GPUs; its pods "
            f"hold {usage} (a create it charged failed after admission, such as a generated name that "
            f"was taken); set to {usage} so that the tenant's next pods are not refused by it",
        )
        return True
