"""The GPU ledger's I/O: compare-and-swap reads and writes through the Kubernetes door, and the
watch-fed copy of every tenant's ledger (the model and its arithmetic are `labgate.gpu_accounting.ledger`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor

from labgate.core.api_resources import Object
from labgate.core.kube import WATCH_TIMEOUT_SECONDS, ApiException, KubeApi, Reflector, WatchFed
from labgate.gpu_accounting.ledger import (
    CONFIG_MAP,
    LEDGER_LABEL,
    Ledger,
    LedgerConflictError,
    LedgerCorruptError,
    config_map_from_ledger,
    ledger_from_config_map,
    ledger_name,
    newer,
)

log = logging.getLogger(__name__)


class LedgerStore:
    """Reads and compare-and-swap writes of ledgers, through the Kubernetes door."""

    def __init__(self, kube: KubeApi, *, namespace: str):
        self.kube = kube
        self.namespace = namespace

    def read(self, tenant: str) -> Ledger:
        return ledger_from_config_map(
            tenant, self.kube.get(CONFIG_MAP, ledger_name(tenant), namespace=self.namespace)
        )

    def write(self, ledger: Ledger, *, sending: Callable[[Object], None] | None = None) -> Ledger:
        """Write `ledger` only if nobody changed it since it was read (its resource_version);
        `sending(data)` is told the ConfigMap's data just before it is sent."""
        body = config_map_from_ledger(ledger, namespace=self.namespace)
        if sending is not None:
            sending(body["data"])
        try:
            if ledger.resource_version is None:
                result = self.kube.create(CONFIG_MAP, body, namespace=self.namespace)
            else:
                result = self.kube.replace(CONFIG_MAP, body)
        except ApiException as err:
            if err.status == 409:  # changed since read, or created by another replica meanwhile
                raise LedgerConflictError(ledger.tenant) from err
            raise
        return ledger.model_copy(
            update={"resource_version": result.get("metadata", {}).get("resourceVersion")}
        )


# Threads for the asynchronous ledger calls (`write_async`, `fresh_async`), the webhook's pool of
# ledger writers (webhook/replica.py). A replica has at most one compare-and-swap under way per
# tenant (the webhook's group commit), so this bounds how many tenants write at once; their own
# pool keeps them from queueing behind the API read-throughs, and those from queueing behind them.
LEDGER_WRITERS = 4


class LedgerCache(WatchFed):
    """Watch-fed copies of every ledger, so that admitting a GPU pod reads no ledger from the API;
    a compare-and-swap that loses re-reads the one ledger it needs."""

    def __init__(
        self,
        store: LedgerStore,
        *,
        on_unsettled: Callable[[str], None] | None = None,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        writers: Executor | None = None,
    ):
        """`on_unsettled(tenant)` is called whenever a tenant's ledger is seen holding reservations
        (the reconciler settles them; the webhook passes nothing). `writers` run the asynchronous
        calls (`write_async`, `fresh_async`; the loop's default executor without them); whoever
        gives them shuts them down, after `stop`."""
        self.store = store
        self._writers = writers
        self._on_unsettled = on_unsettled
        self._corrupt: dict[str, LedgerCorruptError] = {}
        self._lock = threading.Lock()
        self._ledgers: dict[str, Ledger] = {}
        # Per tenant, the data of a write under way and the ledger it encodes.
        self._sending: dict[str, tuple[Object, Ledger]] = {}
        self._reflector = Reflector(
            "gpu-ledgers",
            store.kube.api,
            # Only labgate's namespace: the webhook's RBAC reaches ConfigMaps nowhere else.
            store.kube.lister(CONFIG_MAP, label_selector=f"{LEDGER_LABEL}=true", namespace=store.namespace),
            on_list=self._on_list,
            on_event=self._on_event,
            watch_timeout_seconds=watch_timeout_seconds,
        )

    def _tenant(self, obj: Object) -> str | None:
        metadata = obj.get("metadata", {})
        if metadata.get("namespace") != self.store.namespace:
            return None
        name = str(metadata.get("name", ""))
        prefix = ledger_name("")
        return name[len(prefix) :] if name.startswith(prefix) else None

    def _parse(self, tenant: str, obj: Object) -> Ledger | LedgerCorruptError:
        try:
            return ledger_from_config_map(tenant, obj)
        except LedgerCorruptError as err:
            log.error("%s; that tenant's GPU pods are refused until it is repaired", err)
            return err

    def _on_list(self, objects: list[Object]) -> None:
        ledgers: dict[str, Ledger] = {}
        corrupt: dict[str, LedgerCorruptError] = {}
        for obj in objects:
            if (tenant := self._tenant(obj)) is not None:
                parsed = self._parse(tenant, obj)
                if isinstance(parsed, LedgerCorruptError):
                    corrupt[tenant] = parsed
                else:
                    ledgers[tenant] = parsed
        with self._lock:
            self._ledgers, self._corrupt = ledgers, corrupt
        for ledger in ledgers.values():
            self._notify(ledger)

    def _on_event(self, event: str, obj: Object) -> None:
        if (tenant := self._tenant(obj)) is None:
            return
        if event == "DELETED":
            with self._lock:
                self._ledgers.pop(tenant, None)
                self._corrupt.pop(tenant, None)
            return
        version = obj.get("metadata", {}).get("resourceVersion")
        with self._lock:
            known = self._ledgers.get(tenant)
            sending = self._sending.get(tenant)
        if known is not None and version is not None and known.resource_version == version:
            # This replica's own write, already remembered: parsing it again was a third of the
            # GPU path's time.
            self._notify(known)
            return
        parsed: Ledger | LedgerCorruptError
        if sending is not None and sending[0] == obj.get("data"):
            # This replica's own write, seen before its answer came back: the same data, not parsed.
            parsed = sending[1].model_copy(update={"resource_version": version})
        else:
            parsed = self._parse(tenant, obj)
        with self._lock:
            if isinstance(parsed, LedgerCorruptError):
                self._corrupt[tenant] = parsed
                return
            self._corrupt.pop(tenant, None)
            self._remember_holding_lock(parsed)
        self._notify(parsed)

    def _notify(self, ledger: Ledger) -> None:
        if self._on_unsettled is not None and ledger.reservations:
            self._on_unsettled(ledger.tenant)

    def remember(self, ledger: Ledger) -> None:
        """Keep `ledger` unless a newer version is already known."""
        with self._lock:
            self._remember_holding_lock(ledger)

    def _remember_holding_lock(self, ledger: Ledger) -> None:
        # Compare and replace in one step: two threads remembering at once must keep the newer.
        current = self._ledgers.get(ledger.tenant)
        if current is None or newer(ledger.resource_version, current.resource_version):
            self._ledgers[ledger.tenant] = ledger

    def cached(self, tenant: str) -> Ledger:
        """The tenant's last known ledger; raises LedgerCorruptError if it does not parse."""
        with self._lock:
            if (corrupt := self._corrupt.get(tenant)) is not None:
                raise corrupt
            return self._ledgers.get(tenant) or Ledger(tenant=tenant)

    def fresh(self, tenant: str) -> Ledger:
        """The tenant's ledger read from the API (after a lost compare-and-swap), remembered."""
        ledger = self.store.read(tenant)
        self.remember(ledger)
        return ledger

    def write(self, ledger: Ledger) -> Ledger:
        """Compare-and-swap `ledger` (LedgerConflictError when it changed since read); the written
        ledger is remembered and returned."""

        def sending(data: Object) -> None:
            with self._lock:
                self._sending[ledger.tenant] = (data, ledger)

        try:
            written = self.store.write(ledger, sending=sending)
        finally:
            with self._lock:
                self._sending.pop(ledger.tenant, None)
        self.remember(written)
        return written

    async def write_async(self, ledger: Ledger) -> Ledger:
        """`write` from the event loop, in the ledger's own threads."""
        return await asyncio.get_running_loop().run_in_executor(self._writers, self.write, ledger)

    async def fresh_async(self, tenant: str) -> Ledger:
        """`fresh` from the event loop, in the ledger's own threads (the re-read of a lost race)."""
        return await asyncio.get_running_loop().run_in_executor(self._writers, self.fresh, tenant)

    def stop(self) -> None:
        """Stop the watch (the writers' owner lets a write under way complete: its reservation is
        then in the ledger)."""
        super().stop()
