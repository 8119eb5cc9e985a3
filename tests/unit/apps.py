"""The webhook app without a cluster, for unit tests: built by a replica builder of its own
(`create_app(settings, build=...)`) whose inventory is given, with no ledgers and no secrets, no
Events and no PolicyReports; the OPA client, the policy sync and the decision log are the real ones."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from webhook.app import create_app
from webhook.pod_templates import WorkloadKind
from webhook.policy_engine import PolicyEngine
from webhook.replica import (
    AdmissionOptions,
    FactSources,
    Replica,
    admission_server,
    open_decision_log,
    policy_sync,
    reuse_version,
)
from webhook.serving import InventoryState
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
    """create_app(settings), deciding with the real OPA client, its cluster facts replaced by
    `inventory` (an empty cluster when None)."""

    def build(settings: Settings, kinds: tuple[WorkloadKind, ...]) -> Replica:
        engine = PolicyEngine(settings.opa_url, timeout=settings.opa_timeout_seconds)
        policies = policy_sync(settings)
        server = admission_server(
            engine,
            FactSources(inventory=inventory or EmptyCluster()),
            AdmissionOptions(workload_kinds=kinds),
            version=reuse_version(None, policies),
        )
        return Replica(server=server, engine=engine, decisions=open_decision_log(settings), policies=policies)

    return create_app(settings, build=build)
