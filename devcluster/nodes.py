"""Simulated GPU nodes: node pools as KWOK nodes, which the real kube-scheduler binds pods to.

    pools = load_pools(POOLS_DIR / "lab.yaml")
    with KwokNodes(workdir, admin_kubeconfig) as kwok:
        kwok.add_pools(pools)          # Nodes appear Ready, with GPUs in status.allocatable

KWOK (`kwok`, out of cluster, with the admin kubeconfig) manages only the nodes labelled
kwok.x-k8s.io/node=fake: it keeps them Ready with a Lease, marks pods bound to them Running, finishes
pods annotated sim.labgate.io/run-for=<duration> after that long, and removes deleted pods. Its
configuration and Stages are devcluster/kwok/kwok.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from devcluster.kubectl import kubectl
from devcluster.processes import Lifecycle, ManagedProcess, free_port, spawn, wait_until
from devcluster.tools import REPO_ROOT, ensure_tools

DEVCLUSTER_DATA = REPO_ROOT / "devcluster"
KWOK_CONFIG = DEVCLUSTER_DATA / "kwok" / "kwok.yaml"
POOLS_DIR = DEVCLUSTER_DATA / "pools"

KWOK_NODE_LABEL = "kwok.x-k8s.io/node"
POOL_LABEL = "labgate.io/node-pool"
MODEL_LABEL = "nvidia.com/gpu.product"
CAPACITY_TYPE_LABEL = "labgate.io/capacity-type"
POOL_TAINT = "labgate.io/pool"
SPOT_TAINT = "labgate.io/spot"
RUN_FOR_ANNOTATION = "sim.labgate.io/run-for"
GPU_RESOURCE = "nvidia.com/gpu"


class NodePool(BaseModel):
    """One pool of identical simulated nodes."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    tenant: str | None = Field(
        default=None, description="The tenant the pool is kept for (taint); none: shared"
    )
    spot: bool = False
    nodes: int = Field(default=1, ge=0)
    gpu_product: str | None = Field(
        default=None, alias="gpuProduct", description="The GPU model label; none: a pool without GPUs"
    )
    gpus: int = Field(default=8, ge=0, description="nvidia.com/gpu per node")
    mig: dict[str, int] = Field(default_factory=dict, description="MIG resources per node")
    cpu: str = "96"
    memory: str = "1Ti"
    pods: int = 110

    @model_validator(mode="after")
    def _gpus_have_a_model(self) -> NodePool:
        # A GPU node without a model label is one labgate cannot count for a tenant's pools.
        if self.gpu_product is None and (self.gpus or self.mig):
            raise ValueError(f"pool {self.name!r} has GPUs but no gpuProduct (write gpus: 0 for CPU nodes)")
        return self

    @property
    def has_gpus(self) -> bool:
        return self.gpu_product is not None

    def taints(self) -> list[dict[str, str]]:
        taints = []
        if self.tenant:
            taints.append({"key": POOL_TAINT, "value": self.tenant, "effect": "NoSchedule"})
        if self.spot:
            taints.append({"key": SPOT_TAINT, "value": "true", "effect": "NoSchedule"})
        return taints

    def tenant_pool(self) -> dict[str, Any]:
        """This pool as an entry of a Tenant's spec.placement.nodePools: select it (and its GPU model, so
        that a pod labgate places there names its model too), tolerate its taints."""
        model = {MODEL_LABEL: self.gpu_product} if self.gpu_product is not None else {}
        return {
            "name": self.name,
            "nodeSelector": {POOL_LABEL: self.name, **model},
            "tolerations": [{**t, "operator": "Equal"} for t in self.taints()],
            "spot": self.spot,
        }

    def node_manifests(self) -> list[dict[str, Any]]:
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            **({GPU_RESOURCE: str(self.gpus)} if self.has_gpus else {}),
            **{r: str(n) for r, n in self.mig.items()},
        }
        model = {MODEL_LABEL: self.gpu_product} if self.gpu_product is not None else {}
        return [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"{self.name}-{i}",
                    "labels": {
                        "kubernetes.io/hostname": f"{self.name}-{i}",
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                        KWOK_NODE_LABEL: "fake",
                        POOL_LABEL: self.name,
                        **model,
                        CAPACITY_TYPE_LABEL: "spot" if self.spot else "on-demand",
                    },
                    "annotations": {KWOK_NODE_LABEL: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {"taints": self.taints()},
                "status": {"capacity": resources, "allocatable": resources},
            }
            for i in range(self.nodes)
        ]


class PoolFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pools: list[NodePool]


def load_pools(path: Path) -> list[NodePool]:
    """The pools of a pool description file (see devcluster/pools/lab.yaml)."""
    return PoolFile.model_validate(yaml.safe_load(path.read_text())).pools


def tenant_placement(pools: list[NodePool], tenant: str, *, allow_on_demand: bool = False) -> dict[str, Any]:
    """A Tenant's spec.placement for the pools kept for `tenant` (spot pools first: the default)."""
    own = sorted((p for p in pools if p.tenant == tenant), key=lambda p: not p.spot)
    return {"nodePools": [p.tenant_pool() for p in own], "allowOnDemand": allow_on_demand}


def kwok_configuration(*, lease_seconds: int | None = None) -> str:
    """devcluster/kwok/kwok.yaml, with the node Lease duration changed when asked (large clusters)."""
    documents = list(yaml.safe_load_all(KWOK_CONFIG.read_text()))
    if lease_seconds is not None:
        for document in documents:
            if document.get("kind") == "KwokConfiguration":
                document["options"]["nodeLeaseDurationSeconds"] = lease_seconds
    return yaml.safe_dump_all(documents, sort_keys=False)


class KwokError(RuntimeError):
    """Simulated nodes could not be created or did not become Ready."""


class KwokNodes(Lifecycle):
    """A `kwok` process managing the fake nodes of one cluster, and the nodes it was given."""

    def __init__(
        self,
        workdir: Path,
        admin_kubeconfig: Path,
        *,
        detached: bool = False,
        lease_seconds: int | None = None,
    ):
        self.workdir = workdir
        self.admin_kubeconfig = admin_kubeconfig
        self.detached = detached
        self.lease_seconds = lease_seconds
        self.process: ManagedProcess | None = None
        self.node_names: list[str] = []

    def start(self) -> None:
        kwok = ensure_tools("kwok")["kwok"].binary()
        config = self.workdir / "kwok.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(kwok_configuration(lease_seconds=self.lease_seconds))
        self.process = spawn(
            self.workdir,
            "kwok",
            [
                str(kwok),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-label-selector={KWOK_NODE_LABEL}=fake",
                "--manage-nodes-with-annotation-selector=",
                f"--server-address=127.0.0.1:{free_port()}",
                "--node-ip=10.250.0.1",
                "--cidr=10.240.0.0/12",
            ],
            detached=self.detached,
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def add_pools(self, pools: list[NodePool], *, timeout: float = 120.0, chunk: int = 200) -> None:
        """Create the pools' nodes and return once every one of them is Ready."""
        manifests = [node for pool in pools for node in pool.node_manifests()]
        for start in range(0, len(manifests), chunk):
            batch = {"apiVersion": "v1", "kind": "List", "items": manifests[start : start + chunk]}
            result = kubectl(self.admin_kubeconfig, "create", "-f", "-", stdin=yaml.safe_dump(batch))
            if result.returncode != 0:
                raise KwokError(f"creating nodes failed: {result.stderr.strip()}")
        names = {n["metadata"]["name"] for n in manifests}
        self.node_names += sorted(names)

        def all_ready() -> bool:
            result = kubectl(
                self.admin_kubeconfig,
                "get",
                "nodes",
                "-l",
                f"{KWOK_NODE_LABEL}=fake",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
            )
            ready = {line.partition("=")[0] for line in result.stdout.splitlines() if line.endswith("=True")}
            return names <= ready

        wait_until(
            all_ready,
            what=f"{len(names)} KWOK nodes Ready",
            timeout=timeout,
            interval=0.5,
            watch=[] if self.process is None else [self.process],
        )
