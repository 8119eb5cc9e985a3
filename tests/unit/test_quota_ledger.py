"""The GPU quota ledger's pure rules: what counts as used, and how reservations live and die."""

from __future__ import annotations

from webhook.quota_ledger import (
    LEDGER_MAX_BYTES,
    RESERVATION_TTL_SECONDS,
    GpuAmount,
    Ledger,
    Reservation,
    config_map_from_ledger,
    encode_reservations,
    encoded_size,
    ledger_from_config_map,
    maintain,
    stored_size,
    usage,
    with_reservation,
)

H100x4 = GpuAmount(total=4, by_model={"h100": 4})
A100x2 = GpuAmount(total=2, by_model={"a100": 2})


def ledger(**reservations: Reservation) -> Ledger:
    return Ledger(
        tenant="vision",
        resource_version="7",
        reservations={k.replace("_", "/"): v for k, v in reservations.items()},
    )


def test_usage_sums_every_reservation_and_can_leave_one_out() -> None:
    book = ledger(
        a_p1=Reservation(gpus=H100x4, state="confirmed"),
        b_p2=Reservation(gpus=A100x2, state="reserved", expires=10),
        b_p3=Reservation(gpus=H100x4, state="reserved", expires=10),
    )
    assert usage(book) == GpuAmount(total=10, by_model={"h100": 8, "a100": 2})
    assert usage(book, excluding="b/p3") == GpuAmount(total=6, by_model={"h100": 4, "a100": 2})


def test_a_new_reservation_expires_after_the_ttl() -> None:
    book = with_reservation(ledger(), "a/p1", H100x4, now=1000.0)
    assert book.reservations["a/p1"] == Reservation(
        gpus=H100x4, state="reserved", expires=1000.0 + RESERVATION_TTL_SECONDS
    )
    assert book.resource_version == "7", "the compare-and-swap must be against the version that was read"


def test_maintenance_confirms_releases_and_expires() -> None:
    book = ledger(
        a_confirmed=Reservation(gpus=H100x4, state="reserved", expires=50),
        a_running=Reservation(gpus=H100x4, state="confirmed"),
        a_done=Reservation(gpus=H100x4, state="confirmed"),
        a_failed=Reservation(gpus=H100x4, state="confirmed"),
        a_deleted=Reservation(gpus=H100x4, state="confirmed"),
        a_coming=Reservation(gpus=A100x2, state="reserved", expires=200),
        a_never=Reservation(gpus=A100x2, state="reserved", expires=90),
    )
    phases = {"a/confirmed": "Pending", "a/running": "Running", "a/done": "Succeeded", "a/failed": "Failed"}
    kept = maintain(book, pod_phases=phases, now=100.0).reservations
    assert sorted(kept) == ["a/coming", "a/confirmed", "a/running"]
    assert kept["a/confirmed"].state == "confirmed"
    assert kept["a/coming"].state == "reserved"


def test_maintaining_a_settled_ledger_changes_nothing() -> None:
    book = ledger(a_p1=Reservation(gpus=H100x4, state="confirmed"))
    assert maintain(book, pod_phases={"a/p1": "Running"}, now=0) == book


def test_config_map_round_trip() -> None:
    book = ledger(a_p1=Reservation(gpus=H100x4, state="confirmed"))
    config_map = config_map_from_ledger(book, namespace="labgate-system")
    assert config_map["metadata"]["name"] == "labgate-gpu-ledger.vision"
    assert config_map["metadata"]["resourceVersion"] == "7"
    assert ledger_from_config_map("vision", config_map) == book
    assert ledger_from_config_map("vision", None) == Ledger(tenant="vision")


def test_an_unconfirmed_reservation_whose_pod_was_seen_deleted_is_released_before_it_expires() -> None:
    book = ledger(
        a_gone=Reservation(gpus=H100x4, state="reserved", expires=200, pod_uid="uid-gone"),
        a_reborn=Reservation(gpus=H100x4, state="reserved", expires=200, pod_uid="uid-new"),
        a_legacy=Reservation(gpus=H100x4, state="reserved", expires=200),
    )
    # a_reborn's older namesake (uid-old) was deleted; its new pod is still on its way.
    kept = maintain(book, pod_phases={}, now=100.0, gone_pod_uids={"uid-gone", "uid-old", ""})
    assert sorted(kept.reservations) == ["a/legacy", "a/reborn"]


def test_a_reservation_records_its_pods_uid() -> None:
    book = with_reservation(ledger(), "a/p1", H100x4, now=0.0, pod_uid="0b6c")
    assert book.reservations["a/p1"].pod_uid == "0b6c"
    round_trip = ledger_from_config_map("vision", config_map_from_ledger(book, namespace="labgate-system"))
    assert round_trip.reservations["a/p1"].pod_uid == "0b6c"


def test_confirmation_drops_what_only_an_unconfirmed_reservation_needs() -> None:
    book = ledger(a_p1=Reservation(gpus=H100x4, state="reserved", expires=200, pod_uid="0b6c"))
    confirmed = maintain(book, pod_phases={"a/p1": "Running"}, now=100.0).reservations["a/p1"]
    assert confirmed == Reservation(gpus=H100x4, state="confirmed")


def test_the_stored_form_is_compact_and_its_size_is_what_one_more_reservation_adds() -> None:
    one = Reservation(gpus=H100x4, state="confirmed")
    assert (
        encode_reservations({"a/p1": one})
        == '{"a/p1":{"gpus":{"total":4,"by_model":{"h100":4}},"state":"confirmed"}}'
    )
    book = ledger(a_p1=one)
    two = with_reservation(book, "a/p2", A100x2, now=5.0, pod_uid="u2")
    added = encoded_size("a/p2", two.reservations["a/p2"])
    # one more entry costs its own encoding, less the braces it would have alone, plus a comma
    assert len(encode_reservations(two.reservations)) == stored_size(book) + added - 1
    assert stored_size(book) == len(encode_reservations(book.reservations))
    # Ten thousand confirmed one-model pods fit in one ConfigMap.
    many = {
        f"research-{i % 3}/sweep-{i:05d}": Reservation(gpus=A100x2, state="confirmed") for i in range(10_000)
    }
    assert len(encode_reservations(many)) < LEDGER_MAX_BYTES
