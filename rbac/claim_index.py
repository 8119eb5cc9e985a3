"""The reconciler's view of Dynamic Resource Allocation: the GPU devices the scheduler allocated to
each pod's claims (one cluster-wide watch of ResourceClaims), for the settlement.

Only allocated claims that are reserved for pods matter; the rest are dropped on arrival. A change
to one queues the settlement of the tenant that owns the claim's namespace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from labgate.core.api_resources import Object
from labgate.gpu_accounting.claim_allocations import AllocatedDevices, allocated_devices, consumers
from labgate.gpu_accounting.demand import GpuCounting


class ClaimIndex:
    """Per claim ("<namespace>/<name>"): its allocated GPU devices and the pods it is reserved for.
    `tenant_of(namespace)` names the tenant to settle when a claim of that namespace changes."""

    def __init__(
        self,
        gpu_counting: GpuCounting,
        *,
        tenant_of: Callable[[str], str | None],
        on_tenant: Callable[[str], None],
    ):
        self._gpu_counting = gpu_counting
        self._tenant_of = tenant_of
        self._on_tenant = on_tenant
        self._lock = threading.Lock()
        self._claims: dict[str, tuple[tuple[str, ...], tuple[AllocatedDevices, ...]]] = {}

    def _entry(self, obj: Object) -> tuple[tuple[str, ...], tuple[AllocatedDevices, ...]] | None:
        devices = allocated_devices(obj, self._gpu_counting)
        pods = tuple(consumers(obj))
        return (pods, devices) if devices and pods else None

    @staticmethod
    def _key(obj: Object) -> str:
        metadata = obj.get("metadata") or {}
        return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"

    def _changed(self, namespaces: set[str]) -> None:
        for tenant in {self._tenant_of(namespace) for namespace in namespaces}:
            if tenant:
                self._on_tenant(tenant)

    def on_list(self, objects: list[Object]) -> None:
        claims = {self._key(o): entry for o in objects if (entry := self._entry(o)) is not None}
        with self._lock:
            changed = {k for k in set(claims) | set(self._claims) if claims.get(k) != self._claims.get(k)}
            self._claims = claims
        self._changed({key.split("/", 1)[0] for key in changed})

    def on_event(self, event: str, obj: Object) -> None:
        key = self._key(obj)
        entry = None if event == "DELETED" else self._entry(obj)
        with self._lock:
            before = self._claims.pop(key, None)
            if entry is not None:
                self._claims[key] = entry
        if entry != before:
            self._changed({key.split("/", 1)[0]})

    def allocations(self) -> dict[str, tuple[AllocatedDevices, ...]]:
        """Pod uid -> the GPU devices allocated to the claims reserved for it."""
        found: dict[str, tuple[AllocatedDevices, ...]] = {}
        with self._lock:
            for pods, devices in self._claims.values():
                for uid in pods:
                    found[uid] = found.get(uid, ()) + devices
        return found
