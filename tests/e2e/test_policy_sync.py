"""The webhook's policy loader against a real OPA server (no cluster needed): a new rule folder goes
live within seconds, a broken policy keeps the previous one serving and is reported with OPA's parse
error, and the tenants pushed into OPA survive every reload."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.processes import ManagedProcess, free_port, wait_until
from devcluster.stack import POLICY_DIR, opa_argv
from devcluster.tools import binary, ensure_tools
from webhook.opa_management import PolicyStore
from webhook.policy_sync import PolicySync, policy_files, revision

pytestmark = pytest.mark.chart

NEW_RULE = """# METADATA
# title: added at run time
package labgate.rules.sync_probe

import data.labgate.lib.tenancy

# METADATA
# custom:
#   rule_id: sync-probe
violation contains {"rule": rule_id, "message": msg} if {
\tinput.request.object.metadata.labels["sync-probe"] == "deny"
\ttenancy.namespace_tenant
\trule_id := rego.metadata.rule().custom.rule_id
\tmsg := sprintf("[%s] refused by a rule folder added at run time. Fix: drop the label", [rule_id])
}
"""


@pytest.fixture
def opa(tmp_path: Path, policies: Path) -> Iterator[str]:
    # As the stack and the chart run it: the policies loaded once at start, no --watch.
    ensure_tools("opa")
    port = free_port()
    process = ManagedProcess(
        "opa", opa_argv(binary("opa"), port=port, policy_dir=policies), tmp_path / "opa.log"
    )
    process.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(url, "/health") == {}, what="OPA /health", timeout=30, watch=[process])
        yield url
    finally:
        process.stop()


def _get(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{url}{path}", timeout=5) as response:  # noqa: S310
        return json.loads(response.read() or b"null")


def _decide(url: str, labels: dict[str, str]) -> dict[str, Any]:
    policy_input = {
        "input": {
            "request": {
                "uid": "u",
                "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "namespace": "team-a",
                "name": "c",
                "userInfo": {"username": "alice", "groups": ["team-a"]},
                "object": {"metadata": {"name": "c", "labels": labels}},
            },
            "pod_templates": [],
        }
    }
    request = urllib.request.Request(  # noqa: S310
        f"{url}/v1/data/labgate/admission/decision",
        data=json.dumps(policy_input).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
        result: dict[str, Any] = json.loads(response.read())["result"]
        return result


def _push_inventory(url: str) -> None:
    inventory = {
        "revision": 1,
        "tenants": {
            "team-a": {
                "metadata": {"name": "team-a"},
                "spec": {"members": {"researchers": [{"kind": "Group", "name": "team-a"}]}},
            }
        },
        "namespaces": {"team-a": {"labels": {"labgate.io/tenant": "team-a"}}},
    }
    request = urllib.request.Request(  # noqa: S310
        f"{url}/v1/data/inventory", data=json.dumps(inventory).encode(), method="PUT"
    )
    with urllib.request.urlopen(request, timeout=5):  # noqa: S310
        pass


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, directory)
    return directory


def _until(check: Any, what: str, timeout: float = 30) -> float:
    started = time.monotonic()
    wait_until(check, what=what, timeout=timeout, interval=0.1)
    return time.monotonic() - started


def test_a_new_rule_folder_goes_live_within_seconds_and_tenants_stay(opa: str, policies: Path) -> None:
    sync = PolicySync(policies, PolicyStore(opa), interval=0.2)
    sync.start()
    try:
        _until(lambda: sync.status.revision == revision(policy_files(policies)), "first load")
        _push_inventory(opa)
        assert _decide(opa, {"sync-probe": "deny"})["allowed"] is True
        # Regression: OPA's --watch never loaded a folder created after it started.
        folder = policies / "labgate" / "rules" / "sync_probe"
        folder.mkdir()
        (folder / "sync_probe.rego").write_text(NEW_RULE)
        took = _until(lambda: not _decide(opa, {"sync-probe": "deny"})["allowed"], "the new folder's rule")
        assert took < 5
        decision = _decide(opa, {"sync-probe": "deny"})
        assert [d["rule"] for d in decision["denials"]] == ["sync-probe"]
        assert decision["inventory_revision"] == 1, "loading a policy dropped the tenants"
        # An edit inside the new folder goes live too.
        (folder / "sync_probe.rego").write_text(NEW_RULE.replace("at run time", "and edited"))
        _until(lambda: "and edited" in _decide(opa, {"sync-probe": "deny"})["denials"][0]["message"], "edit")
    finally:
        sync.stop()


def test_a_broken_policy_keeps_the_previous_one_and_says_why(opa: str, policies: Path) -> None:
    sync = PolicySync(policies, PolicyStore(opa), interval=0.2)
    sync.start()
    try:
        _until(lambda: sync.status.revision is not None, "first load")
        good = sync.status.revision
        _push_inventory(opa)
        rule = policies / "labgate" / "rules" / "tenant_membership" / "tenant_membership.rego"
        rule.write_text(rule.read_text() + "\nviolation contains {{{\n")
        # Regression: a refused policy was invisible (OPA logs it at info only; /health says {}).
        _until(lambda: sync.status.error is not None, "the error reported")
        status = sync.status
        assert status.revision == good, "the loaded revision must stay the last good one"
        assert status.attempted != good
        assert "labgate/rules/tenant_membership/tenant_membership.rego" in (status.error or "")
        assert "rego_parse_error" in (status.error or "")
        # The previous policy keeps answering.
        assert _decide(opa, {})["allowed"] is True
    finally:
        sync.stop()


V0_RULE = """package labgate.rules.sync_probe

violation[finding] {
	input.request.object.metadata.labels["sync-probe"] == "deny"
	finding := {"rule": "sync-probe", "message": "[sync-probe] v0 syntax"}
}
"""


def test_a_module_in_old_rego_syntax_is_refused_as_written_never_loaded_rewritten(
    opa: str, policies: Path
) -> None:
    """OPA 1.x refuses v0 syntax; opa-python-client can rewrite a refused module to v1 and load that.
    labgate must not: what is loaded is what the infra team wrote, or nothing."""
    sync = PolicySync(policies, PolicyStore(opa), interval=0.2)
    assert sync.sync_once().error is None
    folder = policies / "labgate" / "rules" / "sync_probe"
    folder.mkdir()
    (folder / "sync_probe.rego").write_text(V0_RULE)
    status = sync.sync_once()
    assert "labgate/rules/sync_probe/sync_probe.rego" in (status.error or "")
    assert "rego_parse_error" in (status.error or "")
    loaded = [m["id"] for m in _get(opa, "/v1/policies")["result"]]
    assert not [m for m in loaded if "sync_probe" in m], loaded
    _push_inventory(opa)
    assert _decide(opa, {"sync-probe": "deny"})["allowed"] is True
    # The legitimate fix: the same rule in today's syntax loads and refuses.
    (folder / "sync_probe.rego").write_text(NEW_RULE)
    assert sync.sync_once().error is None
    assert _decide(opa, {"sync-probe": "deny"})["allowed"] is False


def test_opa_restarted_empty_gets_everything_again(tmp_path: Path, policies: Path) -> None:
    ensure_tools("opa")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sync = PolicySync(policies, PolicyStore(url), interval=0.2)
    for attempt in range(2):  # the same port: OPA restarted (its own copy only), the webhook running
        argv = opa_argv(binary("opa"), port=port, policy_dir=policies)
        process = ManagedProcess("opa", argv, tmp_path / f"opa-{attempt}.log")
        process.start()
        try:
            wait_until(lambda: _get(url, "/health") == {}, what="OPA /health", timeout=30, watch=[process])
            status = sync.sync_once()
            assert status.error is None
            assert status.revision == revision(policy_files(policies))
            _push_inventory(url)
            # The rule folder added after the first start is served by the restarted OPA too.
            assert _decide(url, {"sync-probe": "deny"})["allowed"] is (attempt == 0)
            if attempt == 0:
                folder = policies / "labgate" / "rules" / "sync_probe"
                folder.mkdir()
                (folder / "sync_probe.rego").write_text(NEW_RULE)
                assert sync.sync_once().error is None
                assert _decide(url, {"sync-probe": "deny"})["allowed"] is False
        finally:
            process.stop()
