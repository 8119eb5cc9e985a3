"""The GPU quota ledger's pure rules: what counts as used, and how reservations live, settle and die."""

from __future__ import annotations

import json

import pytest

from labgate.gpu_accounting.ledger import (
    LEDGER_MAX_BYTES,
    RESERVATION_TTL_SECONDS,
    GpuAmount,
    Ledger,
    LedgerCorruptError,
    Reservation,
    config_map_from_ledger,
    encode_reservations,
    encoded_size,
    ledger_from_config_map,
    settle,
    stored_size,
    usage,
    with_reservation,
)
from labgate.gpu_accounting.settled_pods import SETTLED_SHARDS, shard_of, split_into_shards

H100x4 = GpuAmount(total=4, by_model={"h100": 4})
A100x2 = GpuAmount(total=2, by_model={"a100": 2})


def ledger(settled: GpuAmount | None = None, **reservations: Reservation) -> Ledger:
    return Ledger(
        tenant="vision",
        resource_version="7",
        reservations={k.replace("_", "/"): v for k, v in reservations.items()},
        settled=settled or GpuAmount(),
    )


def test_usage_is_the_settled_sum_plus_every_reservation_and_can_leave_one_out() -> None:
    book = ledger(
        settled=H100x4,
        b_p2=Reservation(gpus=A100x2, expires=10),
        b_p3=Reservation(gpus=H100x4, expires=10),
    )
    assert usage(book) == GpuAmount(total=10, by_model={"h100": 8, "a100": 2})
    assert usage(book, excluding="b/p3") == GpuAmount(total=6, by_model={"h100": 4, "a100": 2})


def test_a_new_reservation_is_keyed_by_pod_uid_and_expires_within_seconds() -> None:
    book = with_reservation(ledger(), "0b6c", H100x4, now=1000.0, pod="a/p1")
    assert book.reservations["0b6c"] == Reservation(
        gpus=H100x4, expires=1000.0 + RESERVATION_TTL_SECONDS, pod="a/p1"
    )
    assert RESERVATION_TTL_SECONDS <= 15, "a request that creates no pod holds GPUs for seconds only"
    assert with_reservation(ledger(), "u", H100x4, now=0.0, ttl=3.0).reservations["u"].expires == 3.0
    assert book.resource_version == "7", "the compare-and-swap must be against the version that was read"


def test_a_duplicate_name_never_lowers_the_live_pods_count() -> None:
    """A second CREATE of "big-1" (the apiserver validates it before finding the name taken) reserves
    under its own uid: the live pod's 7 GPUs stay counted, and the duplicate's 1 GPU only counts
    until it expires, since no pod ever has its uid."""
    seven, one = GpuAmount(total=7, by_model={"h100": 7}), GpuAmount(total=1, by_model={"h100": 1})
    book = with_reservation(ledger(), "uid-big-1", seven, now=100.0, pod="a/big-1")
    book = with_reservation(book, "uid-dup", one, now=101.0, pod="a/big-1")
    assert usage(book, excluding="uid-dup").total == 7, "the duplicate never sees the live pod left out"
    phases = {"uid-big-1": "Pending"}
    settled_book, settled = settle(book, {}, pod_phases=phases, now=102.0)
    assert settled == {"uid-big-1": seven}
    assert usage(settled_book).total == 8, "the duplicate counts while it may still become a pod"
    expired, settled = settle(settled_book, settled, pod_phases=phases, now=112.0)
    assert (settled, expired.reservations, usage(expired).total) == ({"uid-big-1": seven}, {}, 7)
    # Settled first and duplicated after: the same.
    again = with_reservation(expired, "uid-dup-2", one, now=113.0, pod="a/big-1")
    later, settled = settle(again, settled, pod_phases=phases, now=114.0)
    assert settled == {"uid-big-1": seven}
    assert usage(later).total == 8


def test_live_pods_without_a_record_or_reservation_are_recorded_again() -> None:
    """The settled-pods store deleted: the sum is rebuilt from the live pods, not dropped to zero."""
    book = ledger(settled=GpuAmount(total=8, by_model={"h100": 8}))
    live = {"u1": "Running", "u2": "Pending", "u3": "Succeeded"}
    unrecorded = {"u1": H100x4, "u2": H100x4, "u3": H100x4, "u-not-live": H100x4}
    updated, settled = settle(book, {}, pod_phases=live, now=0, unrecorded=unrecorded)
    assert settled == {"u1": H100x4, "u2": H100x4}
    assert updated.settled == GpuAmount(total=8, by_model={"h100": 8})
    # A record wins over a count from the spec (the policy decided it at admission).
    _, settled = settle(book, {"u1": A100x2}, pod_phases=live, now=0, unrecorded={"u1": H100x4})
    assert settled == {"u1": A100x2}


def test_settling_moves_pods_that_exist_and_drops_finished_deleted_and_expired_ones() -> None:
    book = ledger(
        settled=GpuAmount(total=8, by_model={"h100": 8}),
        a_started=Reservation(gpus=H100x4, expires=50),
        a_done=Reservation(gpus=H100x4, expires=500),
        a_coming=Reservation(gpus=A100x2, expires=200),
        a_never=Reservation(gpus=A100x2, expires=90),
    )
    settled_before = {"a/running": H100x4, "a/deleted": H100x4, "a/failed": A100x2}
    phases = {"a/started": "Pending", "a/done": "Succeeded", "a/running": "Running", "a/failed": "Failed"}
    updated, settled = settle(book, settled_before, pod_phases=phases, now=100.0)
    assert settled == {"a/running": H100x4, "a/started": H100x4}
    assert sorted(updated.reservations) == ["a/coming"]
    assert updated.settled == GpuAmount(total=8, by_model={"h100": 8})
    assert usage(updated) == GpuAmount(total=10, by_model={"h100": 8, "a100": 2})


def test_settling_a_settled_ledger_changes_nothing() -> None:
    book = ledger(settled=H100x4)
    assert settle(book, {"a/p1": H100x4}, pod_phases={"a/p1": "Running"}, now=0) == (book, {"a/p1": H100x4})


def test_reservations_of_ledgers_written_before_settling_are_settled_or_dropped() -> None:
    # That format's "confirmed" state (no expiry) is read as an expired reservation.
    gpus = '{"total": 4, "by_model": {"h100": 4}}'
    old = (
        f'{{"a/running": {{"gpus": {gpus}, "state": "confirmed"}}, '
        f'"a/gone": {{"gpus": {gpus}, "state": "confirmed"}}}}'
    )
    book = ledger_from_config_map("vision", {"data": {"reservations": old}})
    updated, settled = settle(book, {}, pod_phases={"a/running": "Running"}, now=0)
    assert (updated.reservations, settled, updated.settled) == ({}, {"a/running": H100x4}, H100x4)


def test_an_unsettled_reservation_whose_pod_was_seen_deleted_is_released_before_it_expires() -> None:
    book = Ledger(
        tenant="vision",
        reservations={
            "uid-gone": Reservation(gpus=H100x4, expires=200, pod="a/gone"),
            "uid-new": Reservation(gpus=H100x4, expires=200, pod="a/reborn"),
            "a/legacy": Reservation(gpus=H100x4, expires=200),
        },
    )
    # a/reborn's older namesake (uid-old) was deleted; its new pod is still on its way.
    updated, _ = settle(book, {}, pod_phases={}, now=100.0, gone_pod_uids={"uid-gone", "uid-old", ""})
    assert sorted(updated.reservations) == ["a/legacy", "uid-new"]


def test_the_pod_uid_of_ledgers_keyed_by_pod_name_is_ignored_and_such_reservations_expire() -> None:
    """Ledgers from before reservations were keyed by uid carried the uid in `pod_uid`; nothing
    writes it now. Such a reservation still reads, is never settled onto a pod by its name, and
    goes when it expires (long ago, for any such ledger)."""
    old = '{"a/p1": {"gpus": {"total": 4, "by_model": {"h100": 4}}, "expires": 200, "pod_uid": "uid-1"}}'
    book = ledger_from_config_map("vision", {"data": {"reservations": old}})
    assert book.reservations == {"a/p1": Reservation(gpus=H100x4, expires=200)}
    assert "pod_uid" not in encode_reservations(book.reservations)
    kept, _ = settle(book, {}, pod_phases={"a/p1": "Running"}, now=100.0)
    assert kept.settled == H100x4, "keyed by the name, as such ledgers were, it settles on that key"
    expired, _ = settle(book, {}, pod_phases={}, now=300.0)
    assert expired.reservations == {}


def test_config_map_round_trip() -> None:
    book = ledger(settled=A100x2, a_p1=Reservation(gpus=H100x4, expires=3.5, pod="a/p1"))
    book = book.model_copy(update={"settled_versions": {"0": "41", "5": "44"}})
    config_map = config_map_from_ledger(book, namespace="labgate-system")
    assert config_map["metadata"]["name"] == "labgate-gpu-ledger.vision"
    assert config_map["metadata"]["resourceVersion"] == "7"
    assert ledger_from_config_map("vision", config_map) == book
    assert ledger_from_config_map("vision", None) == Ledger(tenant="vision")


def test_a_ledger_written_before_settling_still_reads() -> None:
    old = {
        "metadata": {"resourceVersion": "3"},
        "data": {
            "reservations": '{"a/p1": {"gpus": {"total": 4, "by_model": {"h100": 4}}, "state": "confirmed", "expires": 0.0}}'
        },
    }
    book = ledger_from_config_map("vision", old)
    assert book.reservations["a/p1"] == Reservation(gpus=H100x4)
    assert book.settled == GpuAmount()


def test_the_stored_form_is_compact_and_its_size_is_what_one_more_reservation_adds() -> None:
    one = Reservation(gpus=H100x4, expires=5.0)
    assert (
        encode_reservations({"a/p1": one})
        == '{"a/p1":{"gpus":{"total":4,"by_model":{"h100":4}},"expires":5.0}}'
    )
    book = ledger(a_p1=one)
    two = with_reservation(book, "a/p2", A100x2, now=5.0, pod="ns/p2")
    added = encoded_size("a/p2", two.reservations["a/p2"])
    # one more entry costs its own encoding, less the braces it would have alone, plus a comma
    assert len(encode_reservations(two.reservations)) == stored_size(book) + added - 1
    assert stored_size(book) == len(encode_reservations(book.reservations))
    # Thousands of pods admitted in the same instant (before the reconciler settles them) fit.
    many = {
        "x" * 36 + f"{i:05d}": Reservation(gpus=A100x2, expires=1.8e9, pod=f"research/sweep-{i:05d}")
        for i in range(6000)
    }
    assert len(encode_reservations(many)) < LEDGER_MAX_BYTES


def test_settled_pods_spread_over_the_shards_by_key() -> None:
    pods = {f"ns/p-{i}": H100x4 for i in range(400)}
    shards = split_into_shards(pods)
    assert sorted(shards) == list(range(SETTLED_SHARDS))
    assert all(shard_of(key) == shard for shard, part in shards.items() for key in part)
    assert sum(len(part) for part in shards.values()) == 400
    assert min(len(part) for part in shards.values()) > 20, "no shard left empty or starved"


def test_a_ledger_that_does_not_parse_says_which_and_why() -> None:
    broken = {"metadata": {"resourceVersion": "9"}, "data": {"reservations": '{"a/p1": {"gpus": "four"}}'}}
    with pytest.raises(LedgerCorruptError) as raised:
        ledger_from_config_map("vision", broken)
    message = str(raised.value)
    assert "GPU ledger of tenant 'vision' (ConfigMap labgate-gpu-ledger.vision) is unreadable" in message
    assert "a/p1.gpus" in message
    with pytest.raises(LedgerCorruptError):
        ledger_from_config_map("vision", {"data": {"reservations": "not json"}})


def test_the_live_pods_requests_are_stored_in_the_ledger_and_read_back() -> None:
    """Ledger.workloads (tenant-quota's usage) round-trips through the ConfigMap; a ledger without
    it stores no key (GPU-only ledgers are as before)."""
    book = Ledger(tenant="vision", workloads={"cpu": 2500, "pods": 2})
    config_map = config_map_from_ledger(book, namespace="labgate-system")
    assert json.loads(config_map["data"]["workloads"]) == {"cpu": 2500, "pods": 2}
    assert ledger_from_config_map("vision", config_map).workloads == {"cpu": 2500, "pods": 2}
    assert "workloads" not in config_map_from_ledger(Ledger(tenant="vision"), namespace="x")["data"]
