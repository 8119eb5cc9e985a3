"""A broken policy, visible on a cluster object: Events on the policies ConfigMap.

The policy loader (webhook/policy_sync.py) keeps serving the last complete revision when OPA refuses
a change; besides /readyz and the metrics, each webhook replica says so where `kubectl describe
configmap <release>-policies -n <namespace>` (and `kubectl get events`) shows it:

- `PolicyReloadFailed` (Warning): the revision on disk that OPA refused, the one still served, and
  OPA's error with file and line; once per distinct error, per replica;
- `PolicyReloaded` (Normal): a revision loaded after a failure, or a new revision replacing another.

An Event is a courtesy: writing it never delays or fails the loader beyond a short timeout, and a
failure to write it is logged, nothing more.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from typing import Any

from labgate.core.api_resources import EVENT, Kind
from labgate.core.kube import KubeApi
from webhook.policy_sync import PolicyStatus

log = logging.getLogger(__name__)

CONFIG_MAP = Kind("ConfigMap", "", "v1", "configmaps", is_namespaced=True)
COMPONENT = "labgate-webhook"
MAX_MESSAGE = 1024  # what `kubectl describe` shows comfortably; OPA's errors can run long

Manifest = dict[str, Any]


def _timestamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def policy_event(
    old: PolicyStatus,
    new: PolicyStatus,
    *,
    namespace: str,
    configmap: str,
    uid: str | None,
    replica: str,
    now: float,
) -> Manifest | None:
    """The Event for a change of the loader's status, or None when there is nothing to tell (pure)."""
    if new.error is not None and new.error != old.error:
        reason, kind = "PolicyReloadFailed", "Warning"
        serving = f"still serving revision {new.revision}" if new.revision else "no revision loaded yet"
        message = (
            f"replica {replica}: policy revision {new.attempted} not loaded, {serving}: {new.error}. "
            "Fix: correct the file (labgate policy test --policies DIR shows the error) and roll it out again"
        )
    elif new.error is None and new.revision is not None and old.revision is not None:
        if old.error is None and new.revision == old.revision:
            return None
        reason, kind = "PolicyReloaded", "Normal"
        was = f"after a failed revision ({old.attempted})" if old.error else f"replacing {old.revision}"
        message = f"replica {replica}: policy revision {new.revision} loaded, {was}"
    else:
        return None
    if len(message) > MAX_MESSAGE:
        tail = " ... (see the webhook's /readyz)"
        message = message[: MAX_MESSAGE - len(tail)] + tail
    stamp = _timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{configmap}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": configmap,
            "namespace": namespace,
            **({"uid": uid} if uid else {}),
        },
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": COMPONENT, "host": replica},
        "reportingComponent": COMPONENT,
        "reportingInstance": replica,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class PolicyEvents:
    """Records the loader's status changes as Events on the policies ConfigMap (PolicySync's on_change)."""

    def __init__(self, kube: KubeApi, *, namespace: str, configmap: str, replica: str, timeout: float = 5.0):
        self.kube = kube
        self.namespace = namespace
        self.configmap = configmap
        self.replica = replica
        self.timeout = timeout

    def __call__(self, old: PolicyStatus, new: PolicyStatus) -> None:
        try:
            event = policy_event(
                old,
                new,
                namespace=self.namespace,
                configmap=self.configmap,
                uid=None,
                replica=self.replica,
                now=time.time(),
            )
            if event is None:
                return
            # The ConfigMap's uid makes `kubectl describe configmap` list the Event (without it, only
            # `kubectl get events` does: the local stack loads a directory, not a ConfigMap).
            live = self.kube.get(CONFIG_MAP, self.configmap, namespace=self.namespace, timeout=self.timeout)
            if uid := ((live or {}).get("metadata") or {}).get("uid"):
                event["involvedObject"]["uid"] = uid
            self.kube.create(EVENT, event, namespace=self.namespace)
        except Exception as err:  # an Event is a courtesy; the error is in /readyz and the log already
            log.warning("could not record the policy status as an Event: %s", err)
