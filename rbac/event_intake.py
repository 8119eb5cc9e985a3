"""What the reconciler does with what its watches see: the cache takes each list and change, and the
routing table (rbac/event_routes.py) says which tenant's queues hear of it.

The reconciler (rbac/reconciler.py) builds the controllers, their queues and this intake, and hands
every reflector of Tenants, Namespaces, managed objects and Kueue's objects to it; pods, ledgers
and settled-pods shards go to the settlement's own indexes instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from labgate.core.api_resources import Kind, Object
from labgate.core.kube import KubeApi, Reflector
from rbac.event_routes import Queue, Route, former_route, route_of
from rbac.queue_routes import QueueRoutes
from rbac.runtime import ObjectCache, WorkQueue


class EventIntake:
    """The cache and the queues a watch event reaches (`queues`: provisioning, settlement, status;
    `kueue_routes`: where a Workload's or a ResourceFlavor's change goes)."""

    def __init__(self, cache: ObjectCache, queues: Mapping[Queue, WorkQueue], kueue_routes: QueueRoutes):
        self.cache = cache
        self._queues = dict(queues)
        self._kueue_routes = kueue_routes

    def route(self, kind: Kind, obj: Object, *, old: Object | None = None, is_event: bool = False) -> None:
        """Queue what a change to `obj` (a Tenant, Namespace, managed object or Workload) asks for,
        of the tenant it names and of the one it named before the change."""
        target = route_of(kind, obj, old=old, is_event=is_event)
        if Queue.KUEUE in target.queues:
            self._kueue_routes.on_kueue_object(kind, obj)
        self._enqueue(target)
        self._enqueue(former_route(kind, obj, old=old))

    def _enqueue(self, target: Route) -> None:
        if target.tenant is not None:
            for queue in target.queues - {Queue.KUEUE}:
                self._queues[queue].add(target.tenant)

    def observe_list(self, kind: Kind, objects: list[Object]) -> None:
        """A reflector's list of `kind`: the cache takes it whole, and every tenant named is queued."""
        self.cache.replace_kind(kind, objects)
        for obj in objects:
            self.route(kind, obj)

    def observe(self, kind: Kind, event: str, obj: Object) -> None:
        """A reflector's watch event about `obj`."""
        if event == "DELETED":
            self.cache.remove(kind, obj)
            self.route(kind, obj)
        else:
            self.route(kind, obj, old=self.cache.upsert(kind, obj), is_event=True)

    def reflector(self, kube: KubeApi, kind: Kind, label_selector: str | None) -> Reflector:
        """A reflector of `kind` (only objects matching `label_selector`, when given) feeding this intake."""
        return Reflector(
            kind.plural,
            kube.api,
            kube.lister(kind, label_selector=label_selector),
            on_list=lambda objects: self.observe_list(kind, objects),
            on_event=lambda event, obj: self.observe(kind, event, obj),
        )

    def enqueue_all(self) -> None:
        """Every tenant's provisioning and settlement (on election and at each resync); and the
        provisioning of every tenant gone whose name labels an object still, which cleans up what a
        missed watch event left of it."""
        live = {key[3] for key, _ in self.cache.select(lambda k, _: k[1] == "Tenant")}
        for name in sorted(live):
            self._queues[Queue.PROVISIONING].add(name)
            self._queues[Queue.SETTLEMENT].add(name)
        for name in sorted(self.cache.tenants_named() - live):
            self._queues[Queue.PROVISIONING].add(name)
