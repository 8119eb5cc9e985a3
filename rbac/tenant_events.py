"""Events on a Tenant (DriftRepaired, GpuUsageRecounted), for the infra team's `kubectl describe`."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from labgate.core.api_resources import EVENT
from labgate.core.kube import ApiException, KubeApi
from rbac.runtime import FIELD_MANAGER, ObjectCache

log = logging.getLogger(__name__)


def now_timestamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tenant_key(name: str) -> tuple[str, str, str, str]:
    """The object cache's key of Tenant `name`."""
    return ("labgate.io/v1alpha1", "Tenant", "", name)


class TenantEvents:
    """Records Events about Tenants; an Event is a courtesy, so a failure to record one is logged."""

    def __init__(self, kube: KubeApi, cache: ObjectCache):
        self._kube = kube
        self._cache = cache

    def record(self, tenant_name: str, reason: str, message: str, *, kind: str = "Normal") -> None:
        live = self._cache.get(tenant_key(tenant_name)) or {}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{tenant_name}.{uuid.uuid4().hex[:10]}", "namespace": "default"},
            "involvedObject": {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": "Tenant",
                "name": tenant_name,
                "uid": live.get("metadata", {}).get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": now_timestamp(),
            "lastTimestamp": now_timestamp(),
            "count": 1,
        }
        try:
            self._kube.create(EVENT, event, namespace="default")
        except ApiException as err:  # never fail a repair over it
            log.warning("could not record event for tenant %s: %s", tenant_name, err.reason)
