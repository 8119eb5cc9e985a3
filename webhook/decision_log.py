"""Decision records (pure: no API, no door): one JSON line per admission decision, hash-chained so that edits show.

Each record says who asked what (request uid, operation, user, groups, tenant, object), what the
policies found (rule ids per outcome: denials, warnings, dry_run), the verdict, whether a patch was
applied, and how long deciding took. It is chained to the one before it:

    prev = the previous record's `hash` (GENESIS for the first record of a chain)
    hash = sha256 over the canonical JSON of the record without `hash`
           (canonical: sorted keys, no spaces, UTF-8)

Changing, removing, inserting or reordering any record breaks the chain at that line, which
`verify` (and `labgate decisions verify FILE`) reports. Removing records from the end cannot be seen
from the file alone: ship the records off the node too (`stdout=True` puts them in the container log)
if the newest hash must be anchored elsewhere.

Rotation is not built in, but moving the file away is safe (logrotate's default "create" mode): like
logging.handlers.WatchedFileHandler, the writer notices that its path no longer names the file it has
open and starts a new file there, continuing the chain. The new file's first record carries
`prev` = the last hash of the old file: verify it with `labgate decisions verify --prev <that hash>
FILE` (or the files concatenated in order). Not copytruncate: records written between its copy and
its truncation are lost (and the chain shows the gap). A writer started with no file at its path
begins a new chain (GENESIS).

Building and verifying records are pure functions; `DecisionLog` is the thin writer around them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO

import orjson

from labgate.core.decisions import Decision, Finding
from labgate.core.errors import LabgateError
from labgate.core.metrics import DECISION_RECORDS_DROPPED
from webhook.review import AdmissionRequest

log = logging.getLogger(__name__)

Verdict = Literal["allowed", "refused"]

# The `prev` of the first record of a chain.
GENESIS = "0" * 64

# Records waiting for the writer thread, at most (about 1 KB each). The writer keeps up with a
# replica's rate by far (a record costs it tens of microseconds); this bounds the memory a writer
# held up (a slow disk, a blocked stdout) can make the webhook hold.
MAX_PENDING_RECORDS = 10_000

_HASH_CHARS = frozenset("0123456789abcdef")


class DecisionLogError(LabgateError, RuntimeError):
    """The decision log cannot be continued (its last line is not a decision record)."""


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8: the bytes a record's hash is taken over.

    orjson gives the same bytes as `json.dumps(value, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)` for what records hold (strings, booleans, null, integers, short decimals),
    in a tenth of the time; the decision log hashes and writes every admission."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def record_hash(record: dict[str, Any]) -> str:
    """sha256 (hex) over the canonical JSON of `record` without its `hash`."""
    body = {key: value for key, value in record.items() if key != "hash"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _rule_ids(findings: Iterable[Finding]) -> list[str]:
    return sorted({f.rule for f in findings})


def _object_name(request: AdmissionRequest) -> str | None:
    if request.name:
        return request.name
    for document in (request.object, request.old_object):
        metadata = (document or {}).get("metadata") or {}
        if metadata.get("name"):
            return str(metadata["name"])
        if metadata.get("generateName"):
            return str(metadata["generateName"])
    return None


def format_time(at: datetime) -> str:
    """UTC, ISO 8601 with microseconds and a Z: "2025-01-31T12:00:00.000000Z"."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build_record(
    *,
    request: AdmissionRequest,
    decision: Decision | None,
    tenant: str | None,
    verdict: Verdict,
    patch_applied: bool,
    latency_ms: float,
    at: datetime,
    reason: str | None = None,
) -> dict[str, Any]:
    """One decision record, not yet chained (no `prev`, no `hash`).

    `decision` is None when no policy decision was had (the mutating webhook, or a refusal such as
    policy-engine-unavailable); `reason` then says why, e.g. the rule id of that refusal.
    """
    findings = decision or Decision(allowed=verdict == "allowed")
    return {
        "time": format_time(at),
        "uid": request.uid,
        "operation": request.operation,
        "user": request.user_info.username,
        "groups": list(request.user_info.groups),
        "tenant": tenant,
        "object": {
            "group": request.kind.group,
            "kind": request.kind.kind,
            "namespace": request.namespace,
            "name": _object_name(request),
            # Only for a subresource (status, finalize, scale, ephemeralcontainers): a write to one
            # is not a write to the object, and the auditor can tell them apart.
            **({"subresource": request.sub_resource} if request.sub_resource else {}),
        },
        "rules": {
            "denials": _rule_ids(findings.denials),
            "warnings": _rule_ids(findings.warnings),
            "dry_run": _rule_ids(findings.dry_run),
        },
        "verdict": verdict,
        "reason": reason,
        "patch_applied": patch_applied,
        "latency_ms": round(latency_ms, 3),
    }


def chain(record: dict[str, Any], prev_hash: str) -> dict[str, Any]:
    """`record` linked after the record whose hash is `prev_hash`: with `prev` and its own `hash`."""
    linked = {key: value for key, value in record.items() if key not in ("prev", "hash")}
    linked["prev"] = prev_hash
    linked["hash"] = record_hash(linked)
    return linked


@dataclass(frozen=True)
class VerifyResult:
    """What `verify` found: ok, how many records, and the first line (1-based) that breaks the chain."""

    ok: bool
    records: int
    first_bad_line: int | None
    reason: str
    last_hash: str = GENESIS


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Readers disagree on which of two equal keys wins; a record with both could say two things.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HASH_CHARS


def parse_record(line: str) -> dict[str, Any]:
    """A decision record from one line; ValueError when the line is not one."""
    try:
        record = json.loads(line, object_pairs_hook=_no_duplicate_keys)
    except ValueError as err:
        raise ValueError(f"not a JSON record ({err})") from err
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if not _is_hash(record.get("hash")) or not _is_hash(record.get("prev")):
        raise ValueError("no `hash` or `prev` (64 hex characters)")
    return record


def verify(lines: Iterable[str], *, prev: str = GENESIS) -> VerifyResult:
    """Check a chain of records, one per line, the first linked after `prev`.

    Empty lines at the very end are allowed (a trailing newline); anywhere else a line that is not a
    record, a record whose hash does not match its content, or one that does not link to the record
    before it breaks the chain.
    """
    expected_prev = prev
    count = 0
    blank_line: int | None = None
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            blank_line = blank_line or number
            continue
        if blank_line is not None:
            return VerifyResult(False, count, blank_line, "an empty line inside the log", expected_prev)
        try:
            record = parse_record(line)
        except ValueError as err:
            return VerifyResult(False, count, number, str(err), expected_prev)
        if record_hash(record) != record["hash"]:
            return VerifyResult(
                False,
                count,
                number,
                "hash mismatch: the record was changed after it was written",
                expected_prev,
            )
        if record["prev"] != expected_prev:
            return VerifyResult(
                False,
                count,
                number,
                f"prev {record['prev'][:12]}… does not link to the record before it ({expected_prev[:12]}…): "
                "records were removed, inserted or reordered",
                expected_prev,
            )
        expected_prev = record["hash"]
        count += 1
    return VerifyResult(True, count, None, "chain intact", expected_prev)


def last_line(path: Path, *, chunk: int = 8192) -> str | None:
    """The last non-empty line of a file (read from the end), or None for an empty or missing file.

    Raises DecisionLogError when the file does not end with a newline: a write was cut short.
    """
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return None
    with handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return None
        handle.seek(size - 1)
        if handle.read(1) != b"\n":
            raise DecisionLogError(f"{path} does not end with a newline: its last record was cut short")
        data = b""
        position = size
        while position > 0:
            step = min(chunk, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
            stripped = data.rstrip(b"\n")
            if b"\n" in stripped or position == 0:
                if not stripped:
                    return None
                return stripped.rsplit(b"\n", 1)[-1].decode("utf-8")
    return None


class DecisionLog:
    """Appends chained decision records to a file (JSON lines), to stdout, or both. Thread-safe.

    On start it reads the last record of an existing file and continues its chain; when the file is
    moved away (rotated), the next record starts a new file at the path, still in the chain. Each
    record is written with one write call and flushed; `fsync=True` also syncs it to disk. `submit`
    hands a record to the log's one writer thread (in order, off the caller's thread: the event
    loop's); `close` waits for what was submitted.
    """

    def __init__(
        self,
        path: Path | None = None,
        *,
        stdout: bool = False,
        fsync: bool = False,
        stream: TextIO | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_pending: int = MAX_PENDING_RECORDS,
    ):
        self._lock = threading.Lock()
        self._clock = clock
        self._fsync = fsync
        self._stream = stream if stream is not None else (sys.stdout if stdout else None)
        self._file: TextIO | None = None
        self._path = path
        self._identity: tuple[int, int] | None = None
        # Started on the first `submit`; one thread, so records keep the order they were submitted in.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decision-log")
        self.max_pending = max_pending
        self.pending = 0  # records submitted and not yet written
        self.dropped = 0  # records dropped because `max_pending` were waiting
        self._pending_lock = threading.Lock()
        self.last_hash = GENESIS
        if path is not None:
            previous = last_line(path)
            if previous is not None:
                try:
                    self.last_hash = parse_record(previous)["hash"]
                except ValueError as err:
                    raise DecisionLogError(
                        f"the last line of {path} is not a decision record ({err}); move the file aside"
                    ) from err
            self._open()

    def _open(self) -> None:
        assert self._path is not None
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self._path.open("a", encoding="utf-8")
        status = os.fstat(self._file.fileno())
        self._identity = (status.st_dev, status.st_ino)

    def _reopen_if_moved(self) -> None:
        """Start a new file at the path when the open one was moved away (rotated) or deleted."""
        if self._file is None or self._path is None:
            return
        try:
            status = os.stat(self._path)
            identity: tuple[int, int] | None = (status.st_dev, status.st_ino)
        except FileNotFoundError:
            identity = None
        if identity != self._identity:
            self._file.close()
            self._open()

    def record(
        self,
        *,
        request: AdmissionRequest,
        decision: Decision | None,
        tenant: str | None,
        verdict: Verdict,
        patch_applied: bool,
        latency_ms: float,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Write one decision record and return it (chained)."""
        body = build_record(
            request=request,
            decision=decision,
            tenant=tenant,
            verdict=verdict,
            patch_applied=patch_applied,
            latency_ms=latency_ms,
            at=self._clock(),
            reason=reason,
        )
        return self._write(body)

    def _write(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            record = chain(body, self.last_hash)
            line = canonical_json(record).decode("utf-8") + "\n"
            self._reopen_if_moved()
            if self._file is not None:
                self._file.write(line)
                self._file.flush()
                if self._fsync:
                    os.fsync(self._file.fileno())
            # The file holds the chain: once the record is there, the next one links to it.
            self.last_hash = record["hash"]
            if self._stream is not None:
                self._stream.write(line)
                self._stream.flush()
        return record

    def submit(
        self,
        *,
        request: AdmissionRequest,
        decision: Decision | None,
        tenant: str | None,
        verdict: Verdict,
        patch_applied: bool,
        latency_ms: float,
        reason: str | None = None,
    ) -> None:
        """`record` in the log's writer thread (hashing, formatting, the file's stat and write); never
        raises, never waits. The record's few fields are taken here, so a record waiting for the
        writer holds them, not the request (its object can be megabytes); past `max_pending` records
        waiting, the record is dropped and counted (labgate_decision_records_dropped_total)."""
        body = build_record(
            request=request,
            decision=decision,
            tenant=tenant,
            verdict=verdict,
            patch_applied=patch_applied,
            latency_ms=latency_ms,
            at=self._clock(),
            reason=reason,
        )
        with self._pending_lock:
            if self.pending >= self.max_pending:
                self.dropped += 1
                dropped = self.dropped
            else:
                self.pending += 1
                dropped = 0
        if dropped:
            DECISION_RECORDS_DROPPED.inc()
            if dropped == 1 or dropped % 1000 == 0:
                log.error(
                    "decision log %d records behind its writer: record %s dropped (%d so far)",
                    self.max_pending,
                    request.uid,
                    dropped,
                )
            return
        self._writer.submit(self._write_or_log, body)

    def _write_or_log(self, body: dict[str, Any]) -> None:
        try:
            self._write(body)
        except Exception:  # nobody waits for a submitted record: say it was lost
            log.exception("decision record for %s not written", body["uid"])
        finally:
            with self._pending_lock:
                self.pending -= 1

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Write what was submitted, then close the file (the stream, if any, is the caller's)."""
        self._writer.shutdown(wait=True)
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
