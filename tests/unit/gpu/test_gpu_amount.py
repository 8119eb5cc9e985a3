"""The one GPU amount (labgate.core.gpu_amount.GpuAmount): OPA's demand and headroom, the usage the
webhook computes, the ledger's reservations and sum are the same value, with the same arithmetic."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from labgate.core.decisions import Decision
from labgate.core.gpu_amount import NO_TOTAL_LIMIT, GpuAmount, sum_of

H100x4 = GpuAmount(total=4, by_model={"h100": 4})
A100x2 = GpuAmount(total=2, by_model={"a100": 2})


def test_amounts_add_subtract_and_sum_dropping_models_that_come_to_zero() -> None:
    assert H100x4 + A100x2 == GpuAmount(total=6, by_model={"h100": 4, "a100": 2})
    assert (H100x4 + A100x2 - H100x4).by_model == {"a100": 2}
    assert sum_of([H100x4, A100x2, H100x4]) == GpuAmount(total=10, by_model={"h100": 8, "a100": 2})
    assert sum_of([]) == GpuAmount()
    assert not GpuAmount()
    assert H100x4.count("h100") == 4
    assert H100x4.count("a100") == 0


def test_an_amount_is_a_hashable_value_whose_zero_counts_do_not_matter() -> None:
    assert GpuAmount(total=2, by_model={"a100": 2, "h100": 0}) == A100x2
    assert hash(GpuAmount(total=2, by_model={"a100": 2, "h100": 0})) == hash(A100x2)
    assert GpuAmount(total=2, by_model={"a100": 2}) != GpuAmount(total=2, by_model={"h100": 2})
    known = {A100x2: "decided"}
    assert known[GpuAmount(total=2, by_model={"a100": 2})] == "decided"


def test_an_amount_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        A100x2.by_model["a100"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError):
        A100x2.total = 3  # type: ignore[misc]
    source = {"a100": 2}
    amount = GpuAmount(total=2, by_model=source)
    source["a100"] = 5
    assert amount.by_model == {"a100": 2}
    assert copy.deepcopy(amount) is amount


def test_a_bound_limits_its_total_and_each_model_it_names_even_at_zero() -> None:
    headroom = GpuAmount(total=8, by_model={"h100": 4, "a100": 0})
    assert H100x4.fits_within(headroom)
    assert not A100x2.fits_within(headroom), "zero room for a100 forbids a100"
    assert GpuAmount(total=8, by_model={"l4": 8}).fits_within(headroom), "l4 is not limited"
    assert not GpuAmount(total=9, by_model={"l4": 9}).fits_within(headroom)


def test_the_json_form_policies_and_ledgers_share_reads_and_writes_both_ways() -> None:
    assert H100x4.to_document() == {"total": 4, "by_model": {"h100": 4}}
    assert GpuAmount.from_document({"total": 4, "by_model": {"h100": 4}}) == H100x4
    assert GpuAmount.from_document(None) == GpuAmount()
    assert GpuAmount.from_document({"total": 3}) == GpuAmount(total=3)
    # A field of an earlier or later writer is ignored; a wrong type is refused.
    assert GpuAmount.from_document({"total": 4, "by_model": {"h100": 4}, "note": "x"}) == H100x4
    with pytest.raises(ValidationError):
        GpuAmount.from_document({"total": "many"})


def test_opas_demand_and_headroom_parse_into_amounts_and_no_total_limit_into_one_no_usage_reaches() -> None:
    decision = Decision.model_validate(
        {
            "allowed": True,
            "gpu_demand": {"total": 4, "by_model": {"h100": 4}},
            "gpu_headroom": {"total": None, "by_model": {"h100": 12}},
        }
    )
    assert decision.gpu_demand == H100x4
    assert decision.gpu_headroom == GpuAmount(total=NO_TOTAL_LIMIT, by_model={"h100": 12})
    assert GpuAmount(total=10**6, by_model={"h100": 12}).fits_within(decision.gpu_headroom)
    assert Decision(allowed=True).gpu_demand == GpuAmount()
    assert decision.model_dump()["gpu_demand"] == {"total": 4, "by_model": {"h100": 4}}
