"""Deleting what a controller read, only as it read it.

Two tenants' passes run at once, and a namespace may change hands between them: the tenant it left
removes its objects there while the tenant it joined applies its own of the same names. A plain
DELETE landing after the other's apply would take the new tenant's baseline NetworkPolicy with it.
So each delete names the `resourceVersion` the controller read (a DELETE precondition, refused with
409 when the object was written since); the object is then read again, and deleted only if it is
still labelled for the tenant it was read for (a quota's status written by the quota controller
meanwhile changes nothing about whose it is).
"""

from __future__ import annotations

import logging

from labgate.core.api_resources import Kind, Object
from labgate.core.kube import ApiException, KubeApi
from labgate.core.tenant import TENANT_LABEL
from rbac.runtime import WRITES, Key, LeaderGate, labels

log = logging.getLogger(__name__)


class Removal:
    """Deletes cached objects of the kinds it is given, each only as it was read."""

    def __init__(self, kube: KubeApi, *, gate: LeaderGate, kinds: tuple[Kind, ...]):
        self._kube = kube
        self._gate = gate
        self._kinds = kinds

    def remove(self, key: Key, read: Object) -> bool:
        """Delete `key` as read (`read`, from the cache). False when it stays: written since and now
        labelled for another tenant (or written again between the second read and its delete); the
        write's watch event brings whoever owns it now, with the cache up to date."""
        self._gate.check()
        kind = next(k for k in self._kinds if (k.api_version, k.kind) == key[:2])
        if not self._delete_version(kind, key, read):
            fresh = self._kube.get(kind, key[3], namespace=key[2] or None)
            if fresh is None:
                return True
            if labels(fresh).get(TENANT_LABEL) != labels(read).get(TENANT_LABEL):
                log.info("left %s %s/%s: now labelled for another tenant", key[1], key[2], key[3])
                return False
            if not self._delete_version(kind, key, fresh):
                return False
        WRITES.labels("delete").inc()
        return True

    def _delete_version(self, kind: Kind, key: Key, read: Object) -> bool:
        """Delete `read`'s version of `key`; False if the API holds a newer one (409)."""
        version = str(read.get("metadata", {}).get("resourceVersion") or "") or None
        try:
            self._kube.delete(kind, key[3], namespace=key[2] or None, resource_version=version)
        except ApiException as err:
            if err.status != 409:
                raise
            return False
        return True
