"""The decision log: records say who was admitted or refused and why, and any edit to the file shows."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main
from labgate.core.decisions import Decision, Finding
from webhook.decision_log import (
    GENESIS,
    DecisionLog,
    DecisionLogError,
    build_record,
    canonical_json,
    chain,
    verify,
)
from webhook.review import AdmissionRequest, parse_request

AT = datetime(2025, 3, 1, 12, 30, 0, 123456, tzinfo=UTC)


def _request(name: str = "train-1", user: str = "alice") -> AdmissionRequest:
    return parse_request(
        {
            "uid": f"uid-{name}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team-a",
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": ["team-a", "system:authenticated"]},
            "object": {"metadata": {"name": name}},
        }
    )


REFUSAL = Decision(
    allowed=False,
    denials=[
        Finding(rule="tenant-membership", message="[tenant-membership] no"),
        Finding(rule="pod-hardening", message="[pod-hardening] a"),
        Finding(rule="pod-hardening", message="[pod-hardening] b"),
    ],
    warnings=[Finding(rule="gpu-quota", message="[gpu-quota] w", mode="warn")],
    dry_run=[Finding(rule="secret-scope", message="[secret-scope] d", mode="dry-run")],
    tenant="team-a",
)


def _write(log: DecisionLog, count: int, *, start: int = 0) -> list[dict[str, Any]]:
    return [
        log.record(
            request=_request(f"train-{i}"),
            decision=Decision(allowed=True, tenant="team-a"),
            tenant="team-a",
            verdict="allowed",
            patch_applied=i % 2 == 0,
            latency_ms=1.5 + i,
        )
        for i in range(start, start + count)
    ]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_a_record_names_the_request_the_rules_per_outcome_and_the_verdict() -> None:
    record = build_record(
        request=_request(),
        decision=REFUSAL,
        tenant="team-a",
        verdict="refused",
        patch_applied=False,
        latency_ms=12.34567,
        at=AT,
    )
    assert record == {
        "time": "2025-03-01T12:30:00.123456Z",
        "uid": "uid-train-1",
        "operation": "CREATE",
        "user": "alice",
        "groups": ["team-a", "system:authenticated"],
        "tenant": "team-a",
        "object": {"group": "", "kind": "Pod", "namespace": "team-a", "name": "train-1"},
        "rules": {
            "denials": ["pod-hardening", "tenant-membership"],
            "warnings": ["gpu-quota"],
            "dry_run": ["secret-scope"],
        },
        "verdict": "refused",
        "reason": None,
        "patch_applied": False,
        "latency_ms": 12.346,
    }


def test_a_write_to_a_subresource_says_which() -> None:
    """A Namespace's status write is not a Namespace write: the record says `status`; a write to
    the object itself names no subresource."""
    status_write = parse_request(
        {
            "uid": "uid-ns",
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "subResource": "status",
            "name": "team-a",
            "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": []},
            "object": {"metadata": {"name": "team-a"}},
            "oldObject": {"metadata": {"name": "team-a"}},
        }
    )
    objects = [
        build_record(
            request=request,
            decision=REFUSAL,
            tenant="team-a",
            verdict="refused",
            patch_applied=False,
            latency_ms=1.0,
            at=AT,
        )["object"]
        for request in (status_write, _request())
    ]
    assert objects == [
        {"group": "", "kind": "Namespace", "namespace": None, "name": "team-a", "subresource": "status"},
        {"group": "", "kind": "Pod", "namespace": "team-a", "name": "train-1"},
    ]


def test_a_verdict_without_a_decision_records_its_reason_and_no_rules() -> None:
    record = build_record(
        request=_request(),
        decision=None,
        tenant=None,
        verdict="refused",
        patch_applied=False,
        latency_ms=2500.0,
        at=AT,
        reason="policy-engine-unavailable",
    )
    assert record["rules"] == {"denials": [], "warnings": [], "dry_run": []}
    assert record["reason"] == "policy-engine-unavailable"


def test_chain_hashes_the_canonical_json_without_the_hash() -> None:
    body = build_record(
        request=_request(user="zoë"),
        decision=None,
        tenant="team-a",
        verdict="allowed",
        patch_applied=True,
        latency_ms=1.0,
        at=AT,
    )
    first = chain(body, GENESIS)
    assert first["prev"] == GENESIS
    without_hash = {k: v for k, v in first.items() if k != "hash"}
    canonical = json.dumps(without_hash, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(without_hash) == canonical.encode("utf-8")
    assert "zoë" in canonical  # UTF-8, not \\u escapes
    assert first["hash"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    second = chain(body, first["hash"])
    assert second["prev"] == first["hash"]
    assert second["hash"] != first["hash"]


def test_records_written_by_the_log_verify(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    log = DecisionLog(path, clock=lambda: AT)
    written = _write(log, 5)
    log.close()
    assert [json.loads(line) for line in _lines(path)] == written
    result = verify(_lines(path))
    assert (result.ok, result.records, result.first_bad_line) == (True, 5, None)
    assert result.last_hash == written[-1]["hash"]


def test_an_empty_log_verifies() -> None:
    assert verify([]).ok
    assert verify(["\n"]).records == 0


@pytest.fixture
def five_records(tmp_path: Path) -> list[str]:
    path = tmp_path / "decisions.log"
    log = DecisionLog(path, clock=lambda: AT)
    _write(log, 5)
    log.close()
    return _lines(path)


def test_an_edited_record_is_detected_at_its_line(five_records: list[str]) -> None:
    record = json.loads(five_records[2])
    record["verdict"] = "refused"
    five_records[2] = json.dumps(record) + "\n"
    result = verify(five_records)
    assert (result.ok, result.first_bad_line, result.records) == (False, 3, 2)
    assert "hash mismatch" in result.reason


def test_an_edited_record_with_a_recomputed_hash_breaks_the_next_link(five_records: list[str]) -> None:
    record = json.loads(five_records[2])
    record["user"] = "mallory"
    five_records[2] = json.dumps(chain(record, record["prev"])) + "\n"
    result = verify(five_records)
    assert (result.ok, result.first_bad_line) == (False, 4)
    assert "does not link" in result.reason


@pytest.mark.parametrize("index", [0, 2])
def test_a_deleted_line_is_detected(five_records: list[str], index: int) -> None:
    del five_records[index]
    result = verify(five_records)
    assert (result.ok, result.first_bad_line) == (False, index + 1)
    assert "removed, inserted or reordered" in result.reason


def test_reordered_lines_are_detected(five_records: list[str]) -> None:
    five_records[1], five_records[3] = five_records[3], five_records[1]
    result = verify(five_records)
    assert (result.ok, result.first_bad_line) == (False, 2)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json\n", "not a JSON record"),
        ("[1, 2]\n", "not a JSON object"),
        ('{"verdict": "allowed"}\n', "no `hash` or `prev`"),
    ],
)
def test_a_line_that_is_not_a_record_is_detected(five_records: list[str], line: str, reason: str) -> None:
    five_records.insert(1, line)
    result = verify(five_records)
    assert (result.ok, result.first_bad_line) == (False, 2)
    assert reason in result.reason


def test_a_duplicated_key_is_refused(five_records: list[str]) -> None:
    # Readers disagree on which of two equal keys counts: a record may not say two things.
    five_records[1] = five_records[1].replace(
        '"verdict":"allowed"', '"verdict":"refused","verdict":"allowed"'
    )
    result = verify(five_records)
    assert (result.ok, result.first_bad_line) == (False, 2)
    assert "duplicate key 'verdict'" in result.reason


def test_the_log_continues_the_chain_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    first = DecisionLog(path, clock=lambda: AT)
    before = _write(first, 3)
    first.close()
    second = DecisionLog(path, clock=lambda: AT)
    assert second.last_hash == before[-1]["hash"]
    after = _write(second, 2, start=3)
    second.close()
    assert after[0]["prev"] == before[-1]["hash"]
    result = verify(_lines(path))
    assert (result.ok, result.records) == (True, 5)


def test_a_long_last_record_is_found_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    log = DecisionLog(path, clock=lambda: AT)
    _write(log, 2)
    long_name = "x" * 20_000  # longer than one read from the end
    last = log.record(
        request=_request(long_name),
        decision=None,
        tenant=None,
        verdict="allowed",
        patch_applied=False,
        latency_ms=0.1,
    )
    log.close()
    with DecisionLog(path) as reopened:
        assert reopened.last_hash == last["hash"]


def test_a_log_whose_last_write_was_cut_short_is_not_continued(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    log = DecisionLog(path, clock=lambda: AT)
    _write(log, 2)
    log.close()
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"time": "2025-')
    with pytest.raises(DecisionLogError, match="cut short"):
        DecisionLog(path)


def test_a_log_that_ends_in_something_else_is_not_continued(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    path.write_text("hello\n")
    with pytest.raises(DecisionLogError, match="not a decision record"):
        DecisionLog(path)


def test_concurrent_records_form_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    log = DecisionLog(path)
    threads = [threading.Thread(target=_write, args=(log, 50), kwargs={"start": 100 * t}) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.close()
    result = verify(_lines(path))
    assert (result.ok, result.records) == (True, 400)


def test_records_go_to_a_stream_as_well(tmp_path: Path) -> None:
    stream = io.StringIO()
    path = tmp_path / "decisions.log"
    log = DecisionLog(path, stream=stream, clock=lambda: AT)
    _write(log, 3)
    log.close()
    assert stream.getvalue() == path.read_text(encoding="utf-8")


def test_a_stream_only_log_starts_a_chain_of_its_own() -> None:
    stream = io.StringIO()
    log = DecisionLog(stream=stream)
    _write(log, 2)
    result = verify(stream.getvalue().splitlines())
    assert (result.ok, result.records) == (True, 2)


def test_decisions_verify_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "decisions.log"
    log = DecisionLog(path, clock=lambda: AT)
    records = _write(log, 4)
    log.close()
    assert main(["decisions", "verify", str(path)]) == 0
    assert capsys.readouterr().out == "ok: 4 records, chain intact\n"

    lines = _lines(path)
    path.write_text(lines[0] + lines[1] + lines[3], encoding="utf-8")
    assert main(["decisions", "verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: line 3: prev ")
    assert "removed, inserted or reordered" in out

    # A rotated file: its first record links to the last one of the file before it.
    rotated = tmp_path / "decisions.log.2"
    rotated.write_text("".join(lines[2:]), encoding="utf-8")
    assert main(["decisions", "verify", str(rotated)]) == 1
    capsys.readouterr()
    assert main(["decisions", "verify", "--prev", records[1]["hash"], str(rotated)]) == 0
    assert capsys.readouterr().out == "ok: 2 records, chain intact\n"


def test_a_rotated_file_is_followed_by_a_new_one_in_the_same_chain(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    rotated = tmp_path / "decisions.log.1"
    with DecisionLog(path, clock=lambda: AT) as log:
        before = _write(log, 3)
        path.rename(rotated)  # logrotate's default: move away, the writer makes a new file
        after = _write(log, 2, start=3)
    assert [json.loads(line) for line in _lines(path)] == after
    assert verify(_lines(rotated)).ok
    assert not verify(_lines(path)).ok  # on its own, the new file starts mid-chain
    assert verify(_lines(path), prev=before[-1]["hash"]).ok
    assert verify(_lines(rotated) + _lines(path)).records == 5


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda x: round(x, 3))
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(record=st.dictionaries(st.text(), _json_values, max_size=8))
def test_canonical_bytes_are_those_of_sorted_compact_json(record: dict[str, Any]) -> None:
    # Records written before the fast encoder must still verify: the same bytes as the standard library's.
    expected = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert canonical_json(record) == expected


def test_submitted_records_are_written_in_order_by_one_thread_and_close_waits_for_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.log"
    log = DecisionLog(path)
    writers: set[str] = set()
    write = log._write

    def write_noting_the_thread(body: dict[str, Any]) -> dict[str, Any]:
        writers.add(threading.current_thread().name)
        return write(body)

    log._write = write_noting_the_thread  # type: ignore[method-assign]
    for i in range(30):
        log.submit(
            request=_request(f"train-{i}"),
            decision=None,
            tenant="team-a",
            verdict="refused",
            patch_applied=False,
            latency_ms=1.0,
            reason="policy-engine-unavailable",
        )
    log.close()

    lines = _lines(path)
    assert verify(lines).ok
    assert [json.loads(line)["uid"] for line in lines] == [f"uid-train-{i}" for i in range(30)]
    assert len(writers) == 1
    assert writers.pop().startswith("decision-log")


class _HeldStream(io.StringIO):
    """A stdout that takes nothing until released (a blocked pipe): the writer waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()

    def write(self, text: str) -> int:
        self.released.wait(timeout=30)
        return super().write(text)


def test_records_waiting_for_a_held_writer_are_bounded_then_dropped_and_counted(tmp_path: Path) -> None:
    """Under overload a writer held up (a blocked stdout, a slow disk) must not make the webhook hold
    every request it decided (issue 21's memory target): at most `max_pending` records wait, the
    rest are dropped and counted, and what was kept is written in order, its chain intact."""
    from labgate.core.metrics import DECISION_RECORDS_DROPPED

    stream = _HeldStream()
    path = tmp_path / "decisions.log"
    log = DecisionLog(path, stream=stream, clock=lambda: AT, max_pending=5)
    dropped_before = DECISION_RECORDS_DROPPED._value.get()
    for i in range(8):
        log.submit(
            request=_request(f"train-{i}"),
            decision=Decision(allowed=True),
            tenant="team-a",
            verdict="allowed",
            patch_applied=False,
            latency_ms=1.0,
        )
    assert (log.pending, log.dropped) == (5, 3)
    assert DECISION_RECORDS_DROPPED._value.get() - dropped_before == 3
    stream.released.set()
    log.close()
    assert log.pending == 0
    written = [json.loads(line) for line in _lines(path)]
    assert [r["object"]["name"] for r in written] == [f"train-{i}" for i in range(5)]
    assert verify(_lines(path)).ok


def test_a_record_waiting_for_the_writer_does_not_hold_its_request(tmp_path: Path) -> None:
    import gc
    import weakref

    stream = _HeldStream()
    log = DecisionLog(tmp_path / "decisions.log", stream=stream, clock=lambda: AT)
    request = _request("train-big")
    held = weakref.ref(request)  # with its object: the pod, up to megabytes
    log.submit(
        request=request,
        decision=Decision(allowed=True),
        tenant="team-a",
        verdict="allowed",
        patch_applied=False,
        latency_ms=1.0,
    )
    del request
    gc.collect()
    try:
        assert held() is None, "the pending record keeps the request alive"
    finally:
        stream.released.set()
        log.close()
