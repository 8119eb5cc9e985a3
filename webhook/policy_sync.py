"""Keeps OPA's policies and data as the policy directory holds them, through OPA's REST API.

The policy directory, kept loaded in OPA: new files and folders live within seconds, a broken
policy visible.

OPA's own `--watch` follows only the directories that existed when it started and reports a policy
it refused nowhere but its info log. So OPA loads the directory once at start (no --watch) and the
webhook keeps it loaded through OPA's REST API:
every `interval` seconds it reads the directory (`policies/` in a checkout, the mounted ConfigMap in
the chart; names starting with "." are skipped, so the kubelet's `..data` copies are read once,
through their links), and when anything changed it puts every changed module (`PUT
/v1/policies/<path>`) and data file (`PUT /v1/data/<dir>`, with the data files of the folders below
it, which that PUT replaces), and deletes removed modules. A module OPA
refuses (parse or compile error) keeps its previous version; the error is kept with the revision it
came from. Modules are put in path order, again until no more succeed, so a new rule and the new
helper package it imports can arrive together.

What is loaded is visible: `status` (revision of the last complete load, the revision tried, the
error), the metrics `labgate_policy_revision_info`, `labgate_policy_reload_error` and
`labgate_policy_reloads_total`, and the webhook's /readyz. Pushing modules does not touch data.inventory
(a `--watch` reload dropped it). If OPA restarts and forgets everything, the next poll notices (the
revision marker it keeps in OPA is gone) and loads everything again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from labgate.core.metrics import POLICY_RELOAD_ERROR, POLICY_RELOADS, POLICY_REVISION
from webhook.opa_management import PolicyLoadError

log = logging.getLogger(__name__)

DATA_FILE = "data.json"
SKIPPED_DIRECTORIES = frozenset({"samples", "testdata"})
# Outside data.labgate (writes under a policy root are checked against the policies).
MARKER_PATH = "labgate_policy_sync"


class PolicyWriter(Protocol):
    def modules(self) -> dict[str, str]: ...

    def put_module(self, module_id: str, text: str) -> None: ...

    def delete_module(self, module_id: str) -> None: ...

    def put_data(self, path: str, document: Any) -> None: ...

    def get_marker(self) -> str | None: ...


def policy_files(directory: Path) -> dict[str, bytes]:
    """relative path -> content of every policy module (`*.rego` but tests) and data file, as OPA
    would load them; samples, test data and hidden names (`..data`) left out."""
    files: dict[str, bytes] = {}
    for root, dirs, names in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRECTORIES)
        for name in names:
            is_module = name.endswith(".rego") and not name.endswith("_test.rego")
            if name.startswith(".") or not (is_module or name == DATA_FILE):
                continue
            path = Path(root) / name
            files[path.relative_to(directory).as_posix()] = path.read_bytes()
    return files


def policy_stamp(directory: Path) -> tuple[tuple[str, int, int, int], ...]:
    """What `policy_files` would read, told apart without reading it: each file's path, size,
    modification time and inode (following links, so the kubelet's swap of a ConfigMap's `..data`
    link changes them). Polling reads the files only when this changed."""
    stamp = []
    for root, dirs, names in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRECTORIES)
        for name in sorted(names):
            is_module = name.endswith(".rego") and not name.endswith("_test.rego")
            if name.startswith(".") or not (is_module or name == DATA_FILE):
                continue
            path = Path(root) / name
            found = path.stat()
            stamp.append(
                (path.relative_to(directory).as_posix(), found.st_size, found.st_mtime_ns, found.st_ino)
            )
    return tuple(stamp)


def load_order(path: str) -> tuple[int, str]:
    """Shared helpers (lib/) before the rules that import them, rules before the entry points that
    collect them; OPA compiles every module as it is put, so this order costs no failed attempts."""
    parts = path.split("/")
    rank = 0 if "lib" in parts else 1 if "rules" in parts else 2
    return rank, path


def data_folder(path: str) -> str:
    """The folder of a data file: the path of its document in OPA's data."""
    return Path(path).parent.as_posix()


def is_below(folder: str, ancestor: str) -> bool:
    """Whether `folder` is inside `ancestor` (not `ancestor` itself)."""
    return folder.startswith(f"{ancestor}/")


def data_tree(data: dict[str, bytes], folder: str) -> dict[str, Any]:
    """The document OPA holds at `folder` when it loads the directory: the folder's data.json with
    the data.json of each folder below it at its relative path (parents first, so children nest
    into them). A file that is not a JSON object, or a key that clashes with a folder, is a
    ValueError naming the file."""
    tree: dict[str, Any] = {}
    for path in sorted(data, key=lambda p: (p.count("/"), p)):
        try:
            document = json.loads(data[path])
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err
        if not isinstance(document, dict):
            raise ValueError(f"{path}: not a JSON object")
        relative = data_folder(path).removeprefix(folder).strip("/")
        node = tree
        for key in relative.split("/") if relative else []:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{path}: its folder {key!r} clashes with a key of the data above it")
        node.update(document)
    return tree


def revision(files: dict[str, bytes]) -> str:
    """A short digest of the whole policy set (paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class PolicyStatus:
    """What OPA serves: the revision of the last complete load, and the last attempt's error."""

    revision: str | None = None
    loaded_at: float | None = None
    attempted: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "loaded_at": self.loaded_at,
            "attempted_revision": self.attempted,
            "error": self.error,
        }


class PolicySync:
    """Keeps OPA's policies equal to `directory`, polling every `interval` seconds."""

    def __init__(
        self,
        directory: Path,
        writer: PolicyWriter,
        *,
        interval: float = 1.0,
        on_change: Callable[[PolicyStatus, PolicyStatus], None] | None = None,
    ):
        """`on_change(old, new)` is called (on the loader's thread) when the loaded revision or the
        error changes, e.g. to record an Event (webhook/policy_events.py)."""
        self.directory = directory
        self.on_change = on_change
        self.writer = writer
        self.interval = interval
        self._pushed: dict[str, bytes] = {}
        # The directory as last read: its stamp, files and revision (read again when the stamp changes).
        self._read: tuple[tuple[tuple[str, int, int, int], ...], dict[str, bytes], str] | None = None
        # Module ids are the files' paths as `opa run <directory>` names them (without the leading
        # "/"), so modules OPA loaded itself at start are the same modules, replaced in place.
        self._id_prefix = directory.absolute().as_posix().lstrip("/") + "/"
        self._status = PolicyStatus()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="policy-sync", daemon=True)

    @property
    def status(self) -> PolicyStatus:
        return self._status

    def sync_once(self) -> PolicyStatus:
        """Load what changed since the last pass; the resulting status."""
        try:
            files, current = self._files()
        except OSError as err:
            return self._record(self._status.attempted, f"cannot read {self.directory}: {err}")
        try:
            if self._pushed and self.writer.get_marker() != self._status.revision:
                log.warning("OPA lost the policies (restarted?); loading them all again")
                self._pushed = {}
            if current == self._status.attempted and self._pushed:
                return self._status
            if not self._pushed:
                self._adopt(files)
            errors = self._push(files)
            if not errors:
                self.writer.put_data(MARKER_PATH, {"revision": current})
        except (OSError, ValueError) as err:  # OPA unreachable: try again at the next pass
            return self._record(None, f"cannot reach OPA: {err}")
        error = "; ".join(f"{path}: {message}" for path, message in sorted(errors.items())) or None
        return self._record(current, error)

    def _files(self) -> tuple[dict[str, bytes], str]:
        """The policy files and their revision; read and digested again only when their stamp
        changed (a pass a second otherwise read and hashed every module)."""
        stamp = policy_stamp(self.directory)
        if self._read is None or self._read[0] != stamp:
            files = policy_files(self.directory)
            self._read = (stamp, files, revision(files))
        return self._read[1], self._read[2]

    def _adopt(self, files: dict[str, bytes]) -> None:
        """On the first pass (or after OPA restarted): what OPA already holds of this directory, as
        `opa run <directory>` loaded it at start, need not be put again (each put compiles every
        module: loading ~30 modules one by one takes seconds, OPA's own start one compile); modules
        it holds for files that are gone are deleted by the next push."""
        for module_id, raw in self.writer.modules().items():
            if not module_id.startswith(self._id_prefix):
                continue
            path = module_id.removeprefix(self._id_prefix)
            if files.get(path) == raw.encode("utf-8"):
                self._pushed[path] = files[path]
            elif path not in files:
                self._pushed[path] = b""  # held but deleted on disk: removed below

    def _push(self, files: dict[str, bytes]) -> dict[str, str]:
        errors = self._push_data({p: c for p, c in files.items() if p.endswith(DATA_FILE)})
        pending = sorted(
            (p for p, c in files.items() if p.endswith(".rego") and self._pushed.get(p) != c), key=load_order
        )
        while pending:
            failed = []
            for path in pending:
                try:
                    self.writer.put_module(
                        self._id_prefix + path, files[path].decode("utf-8", errors="replace")
                    )
                    self._pushed[path] = files[path]
                    errors.pop(path, None)
                except PolicyLoadError as err:
                    errors[path] = str(err)
                    failed.append(path)
            if len(failed) == len(pending):
                break
            pending = failed
        for path in sorted(set(self._pushed) - set(files), key=load_order, reverse=True):
            if path.endswith(".rego"):
                try:
                    self.writer.delete_module(self._id_prefix + path)
                except PolicyLoadError as err:
                    errors[path] = f"not deleted: {err}"
                    continue
            del self._pushed[path]
        return errors

    def _push_data(self, data: dict[str, bytes]) -> dict[str, str]:
        """Put each changed data file's folder. A PUT at a folder replaces all OPA holds there, the
        data of the folders below it too (labgate/config holds labgate/config/scheduling): so the
        document put is the folder's tree, as `opa run` loaded it, in one PUT that no decision sees
        half done. A changed folder below another changed one goes with it."""
        errors: dict[str, str] = {}
        changed = sorted({data_folder(p) for p, c in data.items() if self._pushed.get(p) != c})
        for folder in changed:
            if any(is_below(folder, other) for other in changed):
                continue
            path = f"{folder}/{DATA_FILE}"
            if folder in ("", "."):  # it would replace all of OPA's data, the inventory too
                errors[DATA_FILE] = (
                    "not loaded: a data.json at the top of the policy directory is not supported"
                )
                continue
            members = {p: c for p, c in data.items() if p == path or is_below(data_folder(p), folder)}
            try:
                self.writer.put_data(folder, data_tree(members, folder))
                self._pushed.update(members)
            except (ValueError, PolicyLoadError) as err:
                errors[path] = f"not loaded: {err}"
        return errors

    def _record(self, attempted: str | None, error: str | None) -> PolicyStatus:
        old = self._status
        self._update(attempted, error)
        new = self._status
        if self.on_change is not None and (old.revision, old.error) != (new.revision, new.error):
            try:
                self.on_change(old, new)
            except Exception:  # telling about the policies never stops loading them
                log.exception("policy status callback failed")
        return new

    def _update(self, attempted: str | None, error: str | None) -> None:
        if error is None and attempted is not None:
            if attempted != self._status.revision:
                log.info("policies loaded: revision %s", attempted)
                POLICY_RELOADS.labels("loaded").inc()
                POLICY_REVISION.clear()
                POLICY_REVISION.labels(attempted).set(1)
            self._status = PolicyStatus(revision=attempted, loaded_at=time.time(), attempted=attempted)
        else:
            if error != self._status.error:
                log.error("policy revision %s not loaded: %s", attempted, error)
                POLICY_RELOADS.labels("failed").inc()
            self._status = replace(self._status, attempted=attempted, error=error)
        POLICY_RELOAD_ERROR.set(0 if self._status.error is None else 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception:  # never let the loader die: the next pass tries again
                log.exception("policy sync failed")
            self._stop.wait(self.interval)

    def start(self) -> None:
        """Load in the background (the first pass at once); readiness waits for `status.revision`."""
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
