"""What a policy evaluation answers, as plain data (pure): the findings, the admission decision, the
mutation and its JSON Patch operations. The OPA door (`webhook.policy_engine`) parses OPA's answers
into these; the response builder, the decision log and the offline check only read them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Finding(BaseModel):
    """One rule's verdict on the request: its id, the message for people, and how it is enforced."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    rule: str
    message: str
    mode: str = "enforce"
    field: str | None = None


class GpuDemand(BaseModel):
    """GPUs a Pod asks for, in total and per model, as the gpu_quota policy counts them."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    total: int = 0
    by_model: dict[str, int] = Field(default_factory=dict)


class GpuHeadroom(BaseModel):
    """The most GPUs the tenant may use, in total (None: no total limit) and per model, with the
    request's Pod still within its quota (the gpu_quota policy's `headroom`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    total: int | None = None
    by_model: dict[str, int] = Field(default_factory=dict)


class Decision(BaseModel):
    """data.labgate.admission.decision, as OPA returns it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    allowed: bool
    denials: list[Finding] = Field(default_factory=list)
    warnings: list[Finding] = Field(default_factory=list)
    dry_run: list[Finding] = Field(default_factory=list)
    tenant: str | None = None
    gpu_demand: GpuDemand = Field(default_factory=GpuDemand)
    gpu_headroom: GpuHeadroom | None = None  # None: the request's Pod asks no GPUs (or pre-dates it)
    inventory_revision: int | None = None  # None: OPA holds no inventory (lost on a policy reload)


class PatchOperation(BaseModel):
    """One JSON Patch operation the mutation policy asks for (labgate only adds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: Literal["add"]
    path: str = Field(pattern=r"^(/[^/]*)+$")
    value: Any


class Mutation(BaseModel):
    """data.labgate.mutation: the patch to apply and what to tell the researcher about it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    patch: list[PatchOperation] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    inventory_revision: int | None = None
    # Whether the patch depends on input.gpu_usage (a tenant whose pods beyond quota run preemptible):
    # such a mutation is reused for an identical pod only at the same usage. True when OPA does not say.
    reads_gpu_usage: bool = True
