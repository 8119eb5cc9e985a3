"""A refused policy becomes an Event on the policies ConfigMap; loading again says so; the loader
never waits for or fails on the Event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.opa_management import PolicyLoadError
from webhook.policy_events import policy_event
from webhook.policy_sync import PolicyStatus, PolicySync

GOOD = PolicyStatus(revision="aaa", attempted="aaa")
BROKEN = PolicyStatus(revision="aaa", attempted="bbb", error="x.rego:3: rego_parse_error: unexpected eof")


def _event(old: PolicyStatus, new: PolicyStatus) -> dict[str, Any] | None:
    return policy_event(
        old, new, namespace="labgate-system", configmap="labgate-policies", uid="u-1", replica="web-0", now=0
    )


def test_a_refused_revision_is_a_warning_with_the_error_and_what_still_serves() -> None:
    event = _event(GOOD, BROKEN)
    assert event is not None
    assert (event["type"], event["reason"]) == ("Warning", "PolicyReloadFailed")
    assert event["message"] == (
        "replica web-0: policy revision bbb not loaded, still serving revision aaa: "
        "x.rego:3: rego_parse_error: unexpected eof. Fix: correct the file "
        "(labgate policy test --policies DIR shows the error) and roll it out again"
    )
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "labgate-policies",
        "namespace": "labgate-system",
        "uid": "u-1",
    }
    assert event["metadata"]["namespace"] == "labgate-system"


def test_the_same_error_again_is_not_told_twice_and_the_fix_is_told() -> None:
    assert _event(BROKEN, BROKEN) is None
    fixed = _event(BROKEN, PolicyStatus(revision="ccc", attempted="ccc"))
    assert fixed is not None
    assert (fixed["type"], fixed["reason"]) == ("Normal", "PolicyReloaded")
    assert "revision ccc loaded, after a failed revision (bbb)" in fixed["message"]


def test_the_first_load_is_quiet_a_new_revision_is_told() -> None:
    assert _event(PolicyStatus(), GOOD) is None
    assert _event(GOOD, GOOD) is None
    changed = _event(GOOD, PolicyStatus(revision="ddd", attempted="ddd"))
    assert changed is not None
    assert "replacing aaa" in changed["message"]


def test_a_long_error_is_cut_to_what_describe_shows() -> None:
    event = _event(GOOD, PolicyStatus(revision="aaa", attempted="b", error="e" * 5000))
    assert event is not None
    assert len(event["message"]) <= 1024


class FakeOpa:
    """Accepts every module but those that contain BROKEN (as OPA refuses what does not parse)."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}
        self.marker: str | None = None

    def modules(self) -> dict[str, str]:
        return dict(self.held)

    def put_module(self, module_id: str, text: str) -> None:
        if "BROKEN" in text:
            raise PolicyLoadError(f"{module_id}:1: rego_parse_error: BROKEN")
        self.held[module_id] = text

    def delete_module(self, module_id: str) -> None:
        self.held.pop(module_id, None)

    def put_data(self, path: str, document: Any) -> None:
        if path == "labgate_policy_sync":
            self.marker = document["revision"]

    def get_marker(self) -> str | None:
        return self.marker


def test_the_loader_calls_on_change_for_a_failure_and_survives_a_failing_callback(tmp_path: Path) -> None:
    rule = tmp_path / "labgate" / "rules" / "r.rego"
    rule.parent.mkdir(parents=True)
    rule.write_text("package labgate.rules.r\n")
    seen: list[tuple[PolicyStatus, PolicyStatus]] = []

    def on_change(old: PolicyStatus, new: PolicyStatus) -> None:
        seen.append((old, new))
        raise RuntimeError("the apiserver is down")  # must not stop the loader

    sync = PolicySync(tmp_path, FakeOpa(), interval=3600, on_change=on_change)
    first = sync.sync_once()
    assert first.revision is not None
    assert first.error is None
    rule.write_text("package labgate.rules.r\nBROKEN\n")
    broken = sync.sync_once()
    assert broken.error is not None
    assert broken.revision == first.revision
    assert sync.sync_once() == broken  # nothing new: no second call
    rule.write_text("package labgate.rules.r\n# fixed\n")
    assert sync.sync_once().error is None
    assert [(_event(o, n) or {}).get("reason") for o, n in seen] == [
        None,
        "PolicyReloadFailed",
        "PolicyReloaded",
    ]
