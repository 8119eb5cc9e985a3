"""The webhook's copy of the cluster's tenants and namespaces, fed by watches and written into OPA
as data.inventory (webhook.inventory_push); the restricted Secrets and the PersistentVolumes the
policies read beside it.

Rego needs to know which tenant owns a namespace, who its members are and how other namespaces
are labelled (network policy peers). The webhook keeps that in OPA as data, so each admission
query carries only the request itself and nothing on the admission path waits for the API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

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
from webhook.inventory_push import InventoryPush
from webhook.inventory_snapshot import Document, InventorySnapshot
from webhook.policy_input import SecretDocument, VolumeDocument

log = logging.getLogger(__name__)


def _no_listener(tenant: Object) -> None:
    return None


class InventorySync:
    """The webhook's copy of the cluster's Namespaces, Tenants and PriorityClasses (with Kueue its
    WorkloadPriorityClasses), fed by reflectors and, on a miss, read through; every snapshot it
    publishes goes to `push` (webhook.inventory_push.InventoryPush), which writes it into OPA. A
    Tenant's status is never pushed: each Tenant seen is handed to `tenant_seen`
    (webhook.tenant_status_facts.TenantStatusFacts keeps what the refusals quote)."""

    def __init__(
        self,
        kube: KubeApi,
        push: InventoryPush,
        *,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        kueue: bool = False,
        tenant_seen: Callable[[Object], None] = _no_listener,
    ):
        """`kube`: the door its watches and read-throughs use (reads only). `push`: made with this
        copy's first snapshot (`empty_snapshot`). `kueue`: Kueue runs beside labgate (its CRDs are
        installed), so its WorkloadPriorityClasses are watched too. `tenant_seen`: told of every
        Tenant listed, changed or read through (not of a deleted one)."""
        self._push = push
        self._tenant_seen = tenant_seen
        self._watch_timeout = watch_timeout_seconds
        # Orders the writers of snapshots (the watches, a read-through); not taken by the event loop,
        # never held across network I/O.
        self._lock = threading.Lock()
        # Replaced whole under `_lock`, read without it (one attribute read is atomic).
        self._snapshot = push.latest
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

    def _publish(self, snapshot: InventorySnapshot, changed: tuple[str, str] | None = None) -> None:
        """Make `snapshot` the copy (holding `_lock`), and hand it to the push."""
        self._snapshot = snapshot
        self._push.follow(snapshot, changed)

    def _reflector(self, collection: str, api: ApiClient, list_fn: Any, to_doc: Any) -> Reflector:
        def on_list(objects: list[Object]) -> None:
            documents = {o["metadata"]["name"]: to_doc(o) for o in objects}
            with self._lock:
                self._publish(self._snapshot.with_collection(collection, documents))
            try:
                self._push.push_all()
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
                self._publish(self._snapshot.with_document(collection, name, document), (collection, name))

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
        """A document read through: kept, and written into OPA at once (the request that read it
        waits for it)."""
        with self._lock:
            self._publish(self._snapshot.with_document(collection, name, document))
        self._push.put(collection, name, document)

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

    def push_all(self) -> None:
        """Write the whole inventory into OPA again (a decision found OPA without it)."""
        self._push.push_all()

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
        for reflector in self._reflectors:
            reflector.stop()


def empty_snapshot(
    *, platform_namespace: str, kueue: bool = False, exempt_namespaces: tuple[str, ...] = ()
) -> InventorySnapshot:
    """The inventory before any list: every collection the copy fills, empty."""
    collections: dict[str, Mapping[str, Document]] = {
        "namespaces": {},
        "tenants": {},
        "priority_classes": {},
        **({"workload_priority_classes": {}} if kueue else {}),
    }
    return InventorySnapshot(
        collections=collections, platform_namespace=platform_namespace, exempt_namespaces=exempt_namespaces
    )


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
