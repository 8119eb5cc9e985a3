"""What a policy evaluation answers, as plain data (pure): the findings, the admission decision (with
the GPUs it asks, as `labgate.core.gpu_amount.GpuAmount`), the mutation and its JSON Patch
operations. The OPA door (`webhook.policy_engine`) parses OPA's answers into these; the response
builder, the decision log and the offline check only read them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from labgate.core.gpu_amount import NO_TOTAL_LIMIT, GpuAmount


class Finding(BaseModel):
    """One rule's verdict on the request: its id, the message for people, and how it is enforced."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    rule: str
    message: str
    mode: str = "enforce"
    field: str | None = None


class Decision(BaseModel):
    """data.labgate.admission.decision, as OPA returns it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    allowed: bool
    denials: list[Finding] = Field(default_factory=list)
    warnings: list[Finding] = Field(default_factory=list)
    dry_run: list[Finding] = Field(default_factory=list)
    tenant: str | None = None
    # GPUs the request's Pod asks for, in total and per model, as the gpu_quota policy counts them.
    gpu_demand: GpuAmount = Field(default_factory=GpuAmount)
    # The most GPUs the tenant may use, in total and per model, with the request's Pod still within
    # its quota (the gpu_quota policy's `headroom`; a bound: `GpuAmount.fits_within`). None: the
    # Pod asks no GPUs (or the policy pre-dates it).
    gpu_headroom: GpuAmount | None = None
    inventory_revision: int | None = None  # None: OPA holds no inventory (lost on a policy reload)

    @field_validator("gpu_headroom", mode="before")
    @classmethod
    def _no_total_limit(cls, value: Any) -> Any:
        # OPA says `total: null` for a tenant without a total limit: a total no usage reaches.
        if isinstance(value, dict) and value.get("total", 0) is None:
            return {**value, "total": NO_TOTAL_LIMIT}
        return value


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
    # What the mutating webhook says itself; the rest travel on the object (annotation
    # labgate.io/mutation-warnings) and are said by the validating webhook only when it admits.
    # None (policies before issue 22): all of `warnings`, at once.
    warnings_now: list[str] | None = None
    inventory_revision: int | None = None
    # Whether the patch depends on input.gpu_usage (a tenant whose pods beyond quota run preemptible):
    # such a mutation is reused for an identical pod only at the same usage. True when OPA does not say.
    reads_gpu_usage: bool = True
