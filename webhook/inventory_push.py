"""Writes the webhook's copy of the cluster (webhook.inventory.InventorySync) into OPA as
data.inventory: whole after every list, as batched JSON Patches after watch events, at once for a
document read through.

A burst of thousands of namespace events becomes a few JSON Patch requests from one pusher thread,
not thousands of PUTs queued behind each other. A patch OPA refuses (it lost the inventory when
--watch reloaded its policies) or an OPA that is down is answered by writing the whole inventory
again, under a new revision: each decision carries the revision OPA holds, so the webhook can tell a
decision made without the inventory (webhook.evaluation).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from webhook.inventory_snapshot import InventorySnapshot, PatchOperation

log = logging.getLogger(__name__)


class InventoryWriter(Protocol):
    """Where the inventory is written: data.inventory in OPA (webhook.policy_engine.InventoryStore)."""

    def replace_all(self, inventory: dict[str, Any]) -> None: ...

    def put(self, collection: str, name: str, document: dict[str, Any]) -> None: ...

    def patch(self, operations: list[PatchOperation]) -> None: ...

    def close(self) -> None: ...


def patch_of(snapshot: InventorySnapshot, changed: set[tuple[str, str]]) -> list[PatchOperation]:
    """The JSON Patch that brings OPA's data.inventory from before `changed` to `snapshot`."""
    patch: list[PatchOperation] = []
    for collection, name in sorted(changed):
        document = snapshot.collections[collection].get(name)
        path = f"/{collection}/{name.replace('~', '~0').replace('/', '~1')}"
        if document is None:
            patch.append({"op": "remove", "path": path})
        else:
            patch.append({"op": "add", "path": path, "value": document})
    return patch


class InventoryPush:
    """The one writer of data.inventory. The copy hands it every snapshot it publishes (`follow`,
    with the document that changed, if one did), so what is pushed is never older than the copy."""

    def __init__(self, store: InventoryWriter, initial: InventorySnapshot):
        self._store = store
        # `_lock` guards the latest snapshot, the changes not yet written, the revision and the write
        # count; `_push_lock` orders writes to OPA, which may be slow or hang. Never hold `_lock`
        # across network I/O.
        self._lock = threading.Lock()
        self._push_lock = threading.Lock()
        self._latest = initial
        self._dirty: set[tuple[str, str]] = set()
        self._revision = 0
        # Writes into OPA that completed: a decision made before one is not reused after it.
        self._writes = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._pusher = threading.Thread(target=self._push_changes, name="inventory-pusher", daemon=True)

    @property
    def latest(self) -> InventorySnapshot:
        """The last snapshot the copy handed over (the first: the one this push was made with)."""
        return self._latest

    def follow(self, snapshot: InventorySnapshot, changed: tuple[str, str] | None = None) -> None:
        """The copy's new snapshot; `changed` (collection, name) is written with the next patch."""
        with self._lock:
            self._latest = snapshot
            if changed is not None:
                self._dirty.add(changed)
        if changed is not None:
            self._wake.set()

    def put(self, collection: str, name: str, document: dict[str, Any]) -> None:
        """A document read through, written at once (not queued behind a burst of watch events: the
        request that read it waits for it)."""
        self._store.put(collection, name, document)
        self._count_write()

    def push_all(self) -> None:
        """Write the whole inventory into OPA under a new revision (OPA forgets pushed data when
        --watch reloads its policies; the revision lets the webhook tell that it still holds it)."""
        with self._push_lock:
            self._push_all_holding_push_lock()

    def _push_all_holding_push_lock(self) -> None:
        with self._lock:
            self._revision += 1
            document = self._latest.document(self._revision)
        self._store.replace_all(document)
        self._count_write()

    def _push_changes(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            with self._push_lock:
                with self._lock:
                    dirty, self._dirty = self._dirty, set()
                    patch = patch_of(self._latest, dirty)
                if patch:
                    self._write_patch(patch, dirty)

    def _write_patch(self, patch: list[PatchOperation], dirty: set[tuple[str, str]]) -> None:
        try:
            self._store.patch(patch)
            self._count_write()
        except Exception:  # OPA lost the inventory (a reload) or is down: write it all
            log.warning("inventory patch of %d changes failed; pushing the whole inventory", len(patch))
            try:
                self._push_all_holding_push_lock()
            except Exception:
                log.exception("inventory push failed; retrying")
                with self._lock:
                    self._dirty |= dirty
                self._stopping.wait(1.0)

    def _count_write(self) -> None:
        with self._lock:
            self._writes += 1

    @property
    def writes(self) -> int:
        """How many writes into OPA have completed: what OPA holds is the same while this is."""
        return self._writes

    def start(self) -> None:
        self._pusher.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._pusher.join(timeout=5)
        self._store.close()
