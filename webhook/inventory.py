"""OPA's copy of the cluster's tenants and namespaces (data.inventory), fed by watches.

Rego needs to know which tenant owns a namespace, who its members are and how other namespaces
are labelled (network policy peers). The webhook keeps that in OPA as data, so each admission
query carries only the request itself and nothing on the admission path waits for the API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from labgate.core.api_resources import (
    NAMESPACE,
    PERSISTENT_VOLUME,
    PRIORITY_CLASS,
    SECRET,
    TENANT,
    WORKLOAD_PRIORITY_CLASS,
    Object,
)
from labgate.core.kube import WATCH_TIMEOUT_SECONDS, ApiClient, KubeApi, Reflector, WatchFed
from labgate.core.tenant import RESTRICTED_SECRET_ANNOTATION, TENANT_LABEL
from webhook.admission import (
    namespace_document,
    priority_class_document,
    tenant_document,
    workload_priority_class_document,
)
from webhook.policy_input import SecretDocument, VolumeDocument

log = logging.getLogger(__name__)


class InventoryWriter(Protocol):
    """Where the inventory is written: data.inventory in OPA (webhook.policy_engine.InventoryStore)."""

    def replace_all(self, inventory: dict[str, Any]) -> None: ...

    def put(self, collection: str, name: str, document: dict[str, Any]) -> None: ...

    def patch(self, operations: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


Document = dict[str, Any]


@dataclass(frozen=True, slots=True)
class InventorySnapshot:
    """The inventory at one moment: never changed once published, so readers use it without a lock
    or a copy, and a change publishes a new one (copying only the collection it changes; the
    documents in it are shared, never changed either)."""

    # "namespaces", "tenants", "priority_classes": name -> what policies see of it
    collections: Mapping[str, Mapping[str, Document]]
    revision: int
    # labgate's own namespace, whose service accounts (the reconciler) the policies trust as the
    # platform, whatever namespace the chart was installed in.
    platform_namespace: str

    @property
    def namespaces(self) -> Mapping[str, Document]:
        return self.collections["namespaces"]

    @property
    def tenants(self) -> Mapping[str, Document]:
        return self.collections["tenants"]

    def namespaces_of(self, tenant: str) -> list[str]:
        """The namespaces that carry the tenant's label."""
        return [
            name for name, ns in self.namespaces.items() if ns.get("labels", {}).get(TENANT_LABEL) == tenant
        ]

    def with_collection(self, name: str, documents: Mapping[str, Document]) -> InventorySnapshot:
        """This snapshot with collection `name` replaced by `documents`."""
        return replace(self, collections={**self.collections, name: documents})

    def with_document(self, collection: str, name: str, document: Document | None) -> InventorySnapshot:
        """This snapshot with one document set (or removed, when None)."""
        documents = dict(self.collections[collection])
        if document is None:
            documents.pop(name, None)
        else:
            documents[name] = document
        return self.with_collection(collection, documents)

    def document(self) -> dict[str, Any]:
        """data.inventory as OPA holds it (the collections shared, not copied)."""
        return {
            **self.collections,
            "revision": self.revision,
            "platform": {"namespace": self.platform_namespace},
        }


def _no_listener(tenant: Object) -> None:
    return None


class InventorySync:
    """Reflectors (Namespaces, Tenants, PriorityClasses; with Kueue its WorkloadPriorityClasses) that
    write every change into OPA. A Tenant's status is never pushed: each Tenant seen is handed to
    `tenant_seen` (webhook.tenant_status_facts.TenantStatusFacts keeps what the refusals quote)."""

    def __init__(
        self,
        kube: KubeApi,
        store: InventoryWriter,
        *,
        platform_namespace: str,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        kueue: bool = False,
        tenant_seen: Callable[[Object], None] = _no_listener,
    ):
        """`kube`: the door its watches and read-throughs use (reads only). `kueue`: Kueue runs beside
        labgate (its CRDs are installed), so its WorkloadPriorityClasses are watched too.
        `tenant_seen`: told of every Tenant listed, changed or read through (not of a deleted one)."""
        self._store = store
        self._tenant_seen = tenant_seen
        self._watch_timeout = watch_timeout_seconds
        # Two locks, neither taken by the event loop: `_lock` orders the writers of snapshots (the
        # watches, a read-through) and guards `_dirty`; `_push_lock` orders writes to OPA, which may
        # be slow or hang. Never hold `_lock` across network I/O.
        self._lock = threading.Lock()
        self._push_lock = threading.Lock()
        # Changes waiting for OPA, written in batches by one pusher thread (a burst of thousands of
        # namespace events becomes a few JSON Patch requests, not thousands of PUTs in a queue).
        self._dirty: set[tuple[str, str]] = set()
        # Writes into OPA that completed: a decision made before one is not reused after it.
        self._writes = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._pusher = threading.Thread(target=self._push_changes, name="inventory-pusher", daemon=True)
        # Replaced whole under `_lock`, read without it (one attribute read is atomic).
        self._snapshot = InventorySnapshot(
            collections={
                "namespaces": {},
                "tenants": {},
                "priority_classes": {},
                **({"workload_priority_classes": {}} if kueue else {}),
            },
            revision=0,
            platform_namespace=platform_namespace,
        )
        self._kube = kube
        api = kube.api
        self._reflectors = [
            self._reflector("namespaces", api, self._kube.lister(NAMESPACE), namespace_document),
            self._reflector("tenants", api, self._kube.lister(TENANT), self._tenant_document),
            # The priority-class rule judges a workload's class by its value (a Pod's own priority
            # is resolved by the apiserver before the webhook sees it; a template's is not).
            self._reflector(
                "priority_classes", api, self._kube.lister(PRIORITY_CLASS), priority_class_document
            ),
        ]
        if kueue:  # queue-priority judges a workload's Kueue priority by its class's value
            self._reflectors.append(
                self._reflector(
                    "workload_priority_classes",
                    api,
                    self._kube.lister(WORKLOAD_PRIORITY_CLASS),
                    workload_priority_class_document,
                )
            )

    def _tenant_document(self, tenant: Object) -> Document:
        """What OPA sees of a Tenant; the whole Tenant, status and all, goes to `tenant_seen`."""
        self._tenant_seen(tenant)
        return tenant_document(tenant)

    @property
    def snapshot(self) -> InventorySnapshot:
        """The inventory as it is now (never changes; a later change is a later snapshot)."""
        return self._snapshot

    def _reflector(self, collection: str, api: ApiClient, list_fn: Any, to_doc: Any) -> Reflector:
        def on_list(objects: list[Object]) -> None:
            documents = {o["metadata"]["name"]: to_doc(o) for o in objects}
            with self._lock:
                self._snapshot = self._snapshot.with_collection(collection, documents)
            try:
                self.push_all()
            except Exception as err:
                # The API's answer is fresh even when OPA cannot take it: an unreachable OPA must
                # read as [policy-engine-unavailable], not make this copy look stale ([facts-stale]).
                # A decision that finds OPA without the inventory pushes it again before deciding.
                if not self.is_synced:
                    raise
                log.warning("inventory %s listed, but not written to OPA: %s", collection, err)

        def on_event(kind: str, obj: Object) -> None:
            name = obj["metadata"]["name"]
            document = None if kind == "DELETED" else to_doc(obj)
            with self._lock:
                known = self._snapshot.collections[collection].get(name)
                if known == document:
                    return  # a status-only change, or the delete of what was never known: nothing for OPA
                self._snapshot = self._snapshot.with_document(collection, name, document)
                self._dirty.add((collection, name))
            self._wake.set()

        return Reflector(
            collection,
            api,
            list_fn,
            on_list=on_list,
            on_event=on_event,
            watch_timeout_seconds=self._watch_timeout,
        )

    def is_known(self, name: str) -> bool:
        """Whether the namespace, and the tenant it names, are already in the inventory (no I/O)."""
        snapshot = self._snapshot
        namespace = snapshot.namespaces.get(name)
        if namespace is None:
            return False
        tenant = namespace["labels"].get(TENANT_LABEL)
        return not tenant or tenant in snapshot.tenants

    def _learn(self, collection: str, name: str, document: Document) -> None:
        """A document read through: kept, and written into OPA at once (not queued behind a burst
        of watch events: the request that read it waits for it)."""
        with self._lock:
            self._snapshot = self._snapshot.with_document(collection, name, document)
        self._store.put(collection, name, document)
        self._count_write()

    def ensure_namespace(self, name: str) -> None:
        """Read through on a cache miss: a namespace created an instant before its first pod may not
        have reached the watch yet, and deciding without it could admit what its owner would refuse."""
        namespace = self._snapshot.namespaces.get(name)
        if namespace is None:
            obj = self._kube.get(NAMESPACE, name, timeout=2)
            if obj is None:
                return
            namespace = namespace_document(obj)
            self._learn("namespaces", name, namespace)
        tenant_name = namespace["labels"].get(TENANT_LABEL)
        if not tenant_name or tenant_name in self._snapshot.tenants:
            return
        tenant = self._kube.get(TENANT, tenant_name, timeout=2)
        if tenant is None:
            return
        self._learn("tenants", tenant_name, self._tenant_document(tenant))

    def _push_changes(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            with self._push_lock:
                with self._lock:
                    dirty, self._dirty = self._dirty, set()
                    snapshot = self._snapshot
                patch: list[dict[str, Any]] = []
                for collection, name in sorted(dirty):
                    document = snapshot.collections[collection].get(name)
                    path = f"/{collection}/{name.replace('~', '~0').replace('/', '~1')}"
                    if document is None:
                        patch.append({"op": "remove", "path": path})
                    else:
                        patch.append({"op": "add", "path": path, "value": document})
                if not patch:
                    continue
                try:
                    self._store.patch(patch)
                    self._count_write()
                except Exception:  # OPA lost the inventory (a reload) or is down: write it all
                    log.warning(
                        "inventory patch of %d changes failed; pushing the whole inventory", len(patch)
                    )
                    try:
                        self._push_all_holding_push_lock()
                    except Exception:
                        log.exception("inventory push failed; retrying")
                        with self._lock:
                            self._dirty |= dirty
                        self._stopping.wait(1.0)

    def _push_all_holding_push_lock(self) -> None:
        with self._lock:
            self._snapshot = replace(self._snapshot, revision=self._snapshot.revision + 1)
            snapshot = self._snapshot
        self._store.replace_all(snapshot.document())
        self._count_write()

    def _count_write(self) -> None:
        with self._lock:
            self._writes += 1

    @property
    def writes(self) -> int:
        """How many writes into OPA have completed: what OPA holds is the same while this is."""
        return self._writes

    def push_all(self) -> None:
        """Write the whole inventory into OPA. Its revision lets the webhook tell that OPA still holds
        it (OPA forgets pushed data when --watch reloads its policies)."""
        with self._push_lock:
            self._push_all_holding_push_lock()

    def tenant_spec(self, name: str) -> dict[str, Any] | None:
        """The spec of tenant `name`, as the inventory knows it."""
        tenant = self._snapshot.tenants.get(name)
        return None if tenant is None else dict(tenant.get("spec") or {})

    def tenant_of(self, namespace: str) -> str | None:
        """The tenant whose label the namespace carries, as the inventory knows it."""
        labels = self._snapshot.namespaces.get(namespace, {}).get("labels", {})
        tenant = labels.get(TENANT_LABEL)
        return str(tenant) if tenant else None

    def start(self) -> None:
        self._pusher.start()
        for reflector in self._reflectors:
            reflector.start()

    @property
    def is_synced(self) -> bool:
        """True once every collection was listed and written to OPA."""
        return all(r.has_synced.is_set() for r in self._reflectors)

    def age(self) -> float:
        """Seconds since the API last proved the stalest collection current."""
        return max(r.age() for r in self._reflectors)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        for reflector in self._reflectors:
            reflector.stop()
        self._pusher.join(timeout=5)
        self._store.close()


class RestrictedSecrets(WatchFed):
    """Which Secrets are restricted to a service account, per namespace (metadata only: the webhook
    never holds secret data), for the secret-scope rule's input.secrets."""

    def __init__(self, kube: KubeApi, *, watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS):
        self._lock = threading.Lock()
        self._by_namespace: dict[str, dict[str, dict[str, str]]] = {}
        self._reflector = Reflector(
            "secrets",
            kube.api,
            kube.lister(SECRET, metadata_only=True),
            on_list=self._on_list,
            on_event=self._on_event,
            watch_timeout_seconds=watch_timeout_seconds,
        )

    @staticmethod
    def _restricted(obj: Object) -> tuple[str, str, dict[str, str]] | None:
        metadata = obj.get("metadata", {})
        annotations = metadata.get("annotations") or {}
        if RESTRICTED_SECRET_ANNOTATION not in annotations:
            return None
        return (
            metadata["namespace"],
            metadata["name"],
            {RESTRICTED_SECRET_ANNOTATION: annotations[RESTRICTED_SECRET_ANNOTATION]},
        )

    def _on_list(self, objects: list[Object]) -> None:
        by_namespace: dict[str, dict[str, dict[str, str]]] = {}
        for obj in objects:
            if (found := self._restricted(obj)) is not None:
                by_namespace.setdefault(found[0], {})[found[1]] = found[2]
        with self._lock:
            self._by_namespace = by_namespace

    def _on_event(self, event: str, obj: Object) -> None:
        metadata = obj.get("metadata", {})
        namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
        found = None if event == "DELETED" else self._restricted(obj)
        with self._lock:
            secrets = self._by_namespace.setdefault(namespace, {})
            if found is None:
                secrets.pop(name, None)
            else:
                secrets[name] = found[2]

    def in_namespace(self, namespace: str) -> dict[str, SecretDocument]:
        """name -> {"annotations": {...}} for the restricted Secrets of `namespace`."""
        with self._lock:
            return {n: {"annotations": dict(a)} for n, a in self._by_namespace.get(namespace, {}).items()}


class PersistentVolumes:
    """What the volume-claim rule needs of the PersistentVolume a claim names (spec.volumeName): read
    through on each such claim, which is rare (most claims name a StorageClass, not a volume)."""

    def __init__(self, kube: KubeApi):
        self._kube = kube

    def volume(self, name: str) -> VolumeDocument:
        """{name, exists, labels, claimRef: {namespace, name} | None}; raises when the API cannot say."""
        obj = self._kube.get(PERSISTENT_VOLUME, name, timeout=2)
        if obj is None:
            return {"name": name, "exists": False, "labels": {}, "claimRef": None}
        return volume_document(obj)


def volume_document(obj: Object) -> VolumeDocument:
    """What policies see of a PersistentVolume: its labels and the claim it is bound or reserved to."""
    metadata = obj.get("metadata", {})
    ref = (obj.get("spec") or {}).get("claimRef") or None
    return {
        "name": metadata.get("name", ""),
        "exists": True,
        "labels": metadata.get("labels") or {},
        "claimRef": None
        if ref is None
        else {"namespace": ref.get("namespace", ""), "name": ref.get("name", "")},
    }
