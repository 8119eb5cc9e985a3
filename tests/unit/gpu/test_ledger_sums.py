"""What a tenant's ledger sums to, as the webhook's facts and GPU batches read it
(webhook.ledger_sums.LedgerSums). What a user would notice: a GPU pod decided against the sum of
another version of the ledger (admitted past the quota, or refused under it), and a replica that
keeps every tenant's last burst of reservations in memory after the ledger let go of them."""

from __future__ import annotations

import gc
import weakref

import pytest

import webhook.ledger_sums
from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.ledger import Ledger, stored_size, usage, with_reservation
from webhook.ledger_sums import LedgerSums

ONE = GpuAmount(total=1, by_model={"a100": 1})


class CachedLedgers:
    """The replica's ledger cache as the sums see it: the tenant's current version."""

    def __init__(self) -> None:
        self.current: dict[str, Ledger] = {}

    @property
    def is_synced(self) -> bool:
        return True

    def cached(self, tenant: str) -> Ledger:
        return self.current.get(tenant, Ledger(tenant=tenant))

    async def fresh_async(self, tenant: str) -> Ledger:
        return self.cached(tenant)

    async def write_async(self, ledger: Ledger) -> Ledger:
        self.current[ledger.tenant] = ledger
        return ledger


def reserved(pods: int, *, version: str) -> Ledger:
    ledger = Ledger(
        tenant="team-a", resource_version=version, settled=GpuAmount(total=3, by_model={"a100": 3})
    )
    for index in range(pods):
        ledger = with_reservation(ledger, f"uid-{index}", ONE, now=1_000.0, pod=f"team-a/p-{index}")
    return ledger


def test_a_version_the_cache_let_go_of_is_not_kept_alive_by_its_sums() -> None:
    ledgers = CachedLedgers()
    sums = LedgerSums(ledgers)
    burst = reserved(2_000, version="10")
    ledgers.current["team-a"] = burst
    assert sums.usage_of("team-a").total == 2_003
    assert sums.size(burst) == stored_size(burst)
    released = burst.model_copy(update={"resource_version": "11", "reservations": {}})
    ledgers.current["team-a"] = released
    gone = weakref.ref(burst)
    del burst
    gc.collect()
    assert gone() is None, "the sums still hold the ledger of 2,000 released reservations"
    assert sums.usage_of("team-a").total == 3


def test_each_ledger_is_summed_once_and_a_written_one_not_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    summed: list[str | None] = []

    def counting_usage(ledger: Ledger, *, excluding: str | None = None) -> GpuAmount:
        summed.append(ledger.resource_version)
        return usage(ledger, excluding=excluding)

    monkeypatch.setattr(webhook.ledger_sums, "usage", counting_usage)
    ledgers = CachedLedgers()
    sums = LedgerSums(ledgers)
    ledgers.current["team-a"] = reserved(3, version="10")
    assert [sums.usage_of("team-a").total for _ in range(5)] == [6] * 5
    assert summed == ["10"]
    written = reserved(4, version="12")
    ledgers.current["team-a"] = written
    sums.written(written, at=usage(written), size=stored_size(written))
    assert sums.usage_of("team-a").total == 7
    assert summed == ["10"], "a ledger this replica wrote was summed again"


def test_a_candidate_of_the_same_version_is_summed_afresh() -> None:
    """A batch's candidate ledger carries the version it extends; the sum of that version must not
    stand for the candidate's (it holds one reservation more)."""
    ledgers = CachedLedgers()
    sums = LedgerSums(ledgers)
    stored = reserved(3, version="10")
    ledgers.current["team-a"] = stored
    assert sums.usage(stored).total == 6
    candidate = with_reservation(stored, "uid-new", ONE, now=1_000.0, pod="team-a/new")
    assert candidate.resource_version == stored.resource_version
    assert sums.usage(candidate).total == 7
    assert sums.usage(candidate, excluding="uid-new").total == 6
    assert sums.size(candidate) == stored_size(candidate) > sums.size(stored)
