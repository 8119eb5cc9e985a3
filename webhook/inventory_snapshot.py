"""The webhook's copy of the cluster's tenants, namespaces and priority classes at one moment (pure:
what policies see of each, as data.inventory): built by webhook.inventory.InventorySync, written into OPA
by webhook.inventory_push.InventoryPush, read by the fact gatherer without a lock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, NotRequired, TypedDict

from labgate.core.tenant import TENANT_LABEL

Document = dict[str, Any]


class PatchOperation(TypedDict):
    """One operation of the JSON Patch (RFC 6902) that writes changes into data.inventory."""

    op: Literal["add", "remove"]
    path: str  # /collection/name, JSON Pointer escaped
    value: NotRequired[Document]


@dataclass(frozen=True, slots=True)
class InventorySnapshot:
    """The inventory at one moment: never changed once published, so readers use it without a lock
    or a copy, and a change publishes a new one (copying only the collection it changes; the
    documents in it are shared, never changed either)."""

    # "namespaces", "tenants", "priority_classes": name -> what policies see of it
    collections: Mapping[str, Mapping[str, Document]]
    # labgate's own namespace, whose service accounts (the reconciler) the policies trust as the
    # platform, whatever namespace the chart was installed in.
    platform_namespace: str
    # The other namespaces the webhook registrations leave out (the chart's webhook.exemptNamespaces):
    # what happens there is never judged, so the policies keep them from every tenant.
    exempt_namespaces: tuple[str, ...] = ()

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

    def document(self, revision: int) -> dict[str, Any]:
        """data.inventory as OPA holds it, written whole under `revision` (the collections shared,
        not copied)."""
        return {
            **self.collections,
            "revision": revision,
            "platform": {
                "namespace": self.platform_namespace,
                "exempt_namespaces": sorted(self.exempt_namespaces),
            },
        }
