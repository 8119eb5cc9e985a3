"""The GPUs of each tenant's settled pods, one entry per pod (keyed by the pod's uid), kept by the
reconciler alone.

The ledger (`labgate.gpu_accounting.ledger`) holds only their sum, so that admitting a GPU pod never reads or
rewrites a record per running pod. The reconciler needs the per-pod record to take a pod's GPUs off
the sum when it is deleted or finishes: the GPU demand was decided by the policy at admission, and
is not recomputed from the pod. The records are spread over `SETTLED_SHARDS` ConfigMaps per tenant
in labgate's namespace (`labgate-gpu-settled.<tenant>.<shard>`), so that a tenant can hold far more
pods than one ConfigMap's 1 MiB. A record stays in the shard that holds it, and new records fill one
shard at a time (the first with room), so that settling a burst of pods rewrites one shard, not all
of them (`placed_in_shards`); a shard is rewritten again only when one of its pods ends.

Only the reconciler's leader writes them. The webhook never watches them (its ledger watch selects
another label), so their size costs admissions nothing. Deleting them loses nothing for good: the
reconciler records every live GPU pod that has neither a record nor a reservation again, counted
from its spec, and says so (an Event `GpuUsageRecounted` on the Tenant).
"""

from __future__ import annotations

import functools
import threading
import zlib
from collections.abc import Callable

from pydantic import TypeAdapter

from labgate.core.api_resources import Object
from labgate.core.kube import ApiException, KubeApi, Reflector, WatchFed
from labgate.core.tenant import TENANT_LABEL
from labgate.gpu_accounting.ledger import CONFIG_MAP, GpuAmount, LedgerConflictError, newer

SETTLED_LABEL = "labgate.io/gpu-settled"
SETTLED_SHARDS = 8
# What one shard's records may take (a ConfigMap holds 1 MiB, with its metadata).
SHARD_MAX_BYTES = 900_000
_PODS: TypeAdapter[dict[str, GpuAmount]] = TypeAdapter(dict[str, GpuAmount])
_AMOUNT: TypeAdapter[GpuAmount] = TypeAdapter(GpuAmount)


def settled_name(tenant: str, shard: int) -> str:
    return f"labgate-gpu-settled.{tenant}.{shard}"


def shard_of(pod_uid: str) -> int:
    return zlib.crc32(pod_uid.encode()) % SETTLED_SHARDS


def split_into_shards(pods: dict[str, GpuAmount]) -> dict[int, dict[str, GpuAmount]]:
    """`pods` spread over the shards by a hash of their keys (the placement before records stayed
    put; stores written so then are read and kept as they are)."""
    shards: dict[int, dict[str, GpuAmount]] = {shard: {} for shard in range(SETTLED_SHARDS)}
    for key, gpus in pods.items():
        shards[shard_of(key)][key] = gpus
    return shards


def record_size(key: str, gpus: GpuAmount) -> int:
    """The bytes one record adds to its shard's stored form (an estimate within a few bytes)."""
    return len(key) + _amount_size(gpus) + 4


@functools.lru_cache(maxsize=1024)
def _amount_size(gpus: GpuAmount) -> int:
    return len(_AMOUNT.dump_json(gpus))


def placed_in_shards(
    pods: dict[str, GpuAmount], current: dict[int, dict[str, GpuAmount]], *, capacity: int = SHARD_MAX_BYTES
) -> dict[int, dict[str, GpuAmount]]:
    """`pods` by shard: a pod `current` holds stays in its shard; a new pod goes to the first shard
    with room for it (within `capacity` bytes), so new pods fill one shard at a time. With no room
    anywhere, the least full shard takes it (its write then fails, as a full ConfigMap does)."""
    placed: dict[int, dict[str, GpuAmount]] = {shard: {} for shard in range(SETTLED_SHARDS)}
    sizes = dict.fromkeys(range(SETTLED_SHARDS), 0)
    where = {key: shard for shard in sorted(current, reverse=True) for key in current[shard]}
    new: list[str] = []
    for key, gpus in pods.items():
        if (shard := where.get(key)) is None or shard not in placed:
            new.append(key)
            continue
        placed[shard][key] = gpus
        sizes[shard] += record_size(key, gpus)
    for key in sorted(new):
        size = record_size(key, pods[key])
        shard = next((s for s in range(SETTLED_SHARDS) if sizes[s] + size <= capacity), None)
        if shard is None:
            shard = min(sizes, key=lambda s: sizes[s])
        placed[shard][key] = pods[key]
        sizes[shard] += size
    return placed


class _Shard:
    __slots__ = ("pods", "resource_version")

    def __init__(self, resource_version: str | None, pods: dict[str, GpuAmount]):
        self.resource_version = resource_version
        self.pods = pods


class SettledPods(WatchFed):
    """Watch-fed copies of every tenant's settled-pod shards, and the leader's writes to them."""

    def __init__(self, kube: KubeApi, *, namespace: str, on_deleted: Callable[[str], None] | None = None):
        """`on_deleted(tenant)` is called when one of a tenant's shards is deleted (to recount it)."""
        self.kube = kube
        self.namespace = namespace
        self._on_deleted = on_deleted
        self._lock = threading.Lock()
        self._shards: dict[tuple[str, int], _Shard] = {}
        self._reflector = Reflector(
            "gpu-settled-pods",
            kube.api,
            kube.lister(CONFIG_MAP, label_selector=f"{SETTLED_LABEL}=true", namespace=namespace),
            on_list=self._on_list,
            on_event=self._on_event,
        )

    # -- reading -----------------------------------------------------------------------------------

    def _address(self, obj: Object) -> tuple[str, int] | None:
        metadata = obj.get("metadata", {})
        labels = metadata.get("labels") or {}
        name = str(metadata.get("name", ""))
        tenant = labels.get(TENANT_LABEL)
        if metadata.get("namespace") != self.namespace or not tenant:
            return None
        shard = name.rsplit(".", 1)[-1]
        if not shard.isdigit() or name != settled_name(tenant, int(shard)):
            return None
        return tenant, int(shard)

    @staticmethod
    def _parse(obj: Object) -> _Shard:
        raw = (obj.get("data") or {}).get("pods") or "{}"
        return _Shard(obj.get("metadata", {}).get("resourceVersion"), _PODS.validate_json(raw))

    def _remember(self, address: tuple[str, int], shard: _Shard) -> None:
        """Keep `shard` unless a newer version is known (call with the lock held)."""
        current = self._shards.get(address)
        if current is None or newer(shard.resource_version, current.resource_version):
            self._shards[address] = shard

    def _on_list(self, objects: list[Object]) -> None:
        shards = {}
        for obj in objects:
            if (address := self._address(obj)) is not None:
                shards[address] = self._parse(obj)
        with self._lock:
            self._shards = shards

    def _on_event(self, event: str, obj: Object) -> None:
        if (address := self._address(obj)) is None:
            return
        if event != "DELETED" and self._is_known(address, obj):
            # This replica's own write, remembered when it was written: a shard fills to some
            # 13,000 records, and parsing each write again was a tenth of the reconciler's time.
            return
        with self._lock:
            if event == "DELETED":
                self._shards.pop(address, None)
            else:
                self._remember(address, self._parse(obj))
        if event == "DELETED" and self._on_deleted is not None:
            self._on_deleted(address[0])

    def _is_known(self, address: tuple[str, int], obj: Object) -> bool:
        """Whether the cache holds `obj`'s very version (one resourceVersion, one content)."""
        version = obj.get("metadata", {}).get("resourceVersion")
        with self._lock:
            known = self._shards.get(address)
        return version is not None and known is not None and known.resource_version == version

    def pods(self, tenant: str) -> dict[str, GpuAmount]:
        """Every settled pod of `tenant` (by uid), with its GPUs."""
        merged: dict[str, GpuAmount] = {}
        with self._lock:
            for shard in range(SETTLED_SHARDS):
                if (found := self._shards.get((tenant, shard))) is not None:
                    merged.update(found.pods)
        return merged

    def versions(self, tenant: str) -> dict[str, str]:
        """The resourceVersion of each of the tenant's shards that exists."""
        with self._lock:
            return {
                str(shard): found.resource_version
                for shard in range(SETTLED_SHARDS)
                if (found := self._shards.get((tenant, shard))) is not None
                and found.resource_version is not None
            }

    def ensure_at_least(self, tenant: str, versions: dict[str, str]) -> None:
        """Read afresh each shard whose cached copy is older than `versions` (those a ledger's sum
        was computed from): a reconciler taking over must not settle against a lagging cache."""
        for shard_name, wanted in versions.items():
            if not shard_name.isdigit():
                continue
            address = (tenant, int(shard_name))
            with self._lock:
                cached = self._shards.get(address)
            if cached is not None and newer(cached.resource_version, wanted):
                continue
            obj = self.kube.get(CONFIG_MAP, settled_name(tenant, address[1]), namespace=self.namespace)
            if obj is not None:
                with self._lock:
                    self._remember(address, self._parse(obj))

    # -- writing (the reconciler's leader only) ----------------------------------------------------

    def write(self, tenant: str, pods: dict[str, GpuAmount]) -> dict[str, str]:
        """Store `pods` as the tenant's settled pods, rewriting only the shards that change; return
        the versions of all of the tenant's shards."""
        with self._lock:
            current = {
                shard: found.pods
                for shard in range(SETTLED_SHARDS)
                if (found := self._shards.get((tenant, shard))) is not None
            }
        for shard, wanted in placed_in_shards(pods, current).items():
            address = (tenant, shard)
            with self._lock:
                cached = self._shards.get(address)
            if (cached.pods if cached is not None else {}) == wanted:
                continue
            written = self._write_shard(tenant, shard, wanted, cached)
            with self._lock:
                self._remember(address, written)
        return self.versions(tenant)

    def _write_shard(
        self, tenant: str, shard: int, pods: dict[str, GpuAmount], cached: _Shard | None
    ) -> _Shard:
        metadata: dict[str, object] = {
            "name": settled_name(tenant, shard),
            "namespace": self.namespace,
            "labels": {
                SETTLED_LABEL: "true",
                TENANT_LABEL: tenant,
                "app.kubernetes.io/managed-by": "labgate",
            },
        }
        body: Object = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": {"pods": _PODS.dump_json(dict(sorted(pods.items()))).decode()},
        }
        if cached is None or cached.resource_version is None:
            try:
                result = self.kube.create(CONFIG_MAP, body, namespace=self.namespace)
            except ApiException as err:
                if err.status != 409:  # it exists: a cache that lagged; overwrite it below
                    raise
                result = None
            if result is not None:
                return _Shard(result.get("metadata", {}).get("resourceVersion"), pods)
        # Only what this replica read is overwritten: a deposed leader that still thinks it leads, or
        # a cache that lagged, loses the compare-and-swap instead of undoing a newer write.
        address = (tenant, shard)
        version = cached.resource_version if cached is not None else None
        if version is None:  # created meanwhile by someone else: read what is there first
            self._refresh(address)
            raise LedgerConflictError(tenant)
        metadata["resourceVersion"] = version
        try:
            result = self.kube.replace(CONFIG_MAP, body)
        except ApiException as err:
            if err.status in (404, 409):  # changed, or deleted (by hand?) since it was read
                self._refresh(address)
                raise LedgerConflictError(tenant) from err
            raise
        return _Shard(result.get("metadata", {}).get("resourceVersion"), pods)

    def _refresh(self, address: tuple[str, int]) -> None:
        """Read one shard afresh into the cache (after losing a compare-and-swap on it)."""
        obj = self.kube.get(CONFIG_MAP, settled_name(*address), namespace=self.namespace)
        with self._lock:
            if obj is None:
                self._shards.pop(address, None)
            else:
                self._remember(address, self._parse(obj))
