"""The webhook app without a cluster, for unit tests: its `cluster_server` dependency overridden
(app.dependency_overrides) by a server whose inventory is given, with no ledgers and no secrets, and
its `policy_reporting` by none (no Events, no PolicyReports)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from webhook.app import Watched, cluster_server, create_app, policy_reporting
from webhook.pod_templates import WorkloadKind
from webhook.policy_engine import PolicyEngine
from webhook.serving import AdmissionServer, InventoryState
from webhook.settings import Settings


class EmptyCluster:
    """The inventory of a cluster with no namespaces or tenants that need reading through."""

    is_synced = True

    def ensure_namespace(self, name: str) -> None:
        """Nothing to read through to."""

    def is_known(self, name: str) -> bool:
        return True

    def tenant_of(self, namespace: str) -> str | None:
        return None

    def push_all(self) -> None:
        """Nothing to push."""

    def tenant_spec(self, name: str) -> dict[str, Any] | None:
        return None


def app_without_cluster(settings: Settings, inventory: InventoryState | None = None) -> FastAPI:
    """create_app(settings), deciding with the real OPA client of its lifespan, its cluster facts
    replaced by `inventory` (an empty cluster when None)."""
    app = create_app(settings)

    def server(
        settings: Settings,
        engine: PolicyEngine,
        registry: Any,
        provenance: Any,
        kinds: tuple[WorkloadKind, ...],
    ) -> tuple[AdmissionServer, list[Watched]]:
        return (
            AdmissionServer(
                engine=engine,
                inventory=inventory or EmptyCluster(),
                ledgers=None,
                secrets=None,
                workload_kinds=kinds,
            ),
            [],
        )

    app.dependency_overrides[cluster_server] = server
    app.dependency_overrides[policy_reporting] = lambda settings: (None, None)  # no Events, no reports
    return app
