"""Kubernetes' own Pod Security fixtures for the baseline level, through pod-hardening.

The Kubernetes labgate pins (toolchain/versions.env) ships its Pod Security admission as the module
k8s.io/pod-security-admission@KUBERNETES_STAGING_VERSION, which toolchain/build.sh downloads into
Go's module cache with the kubernetes tool. Its test/testdata/baseline/v1.<minor>/ holds one Pod per
case, named for the upstream check it exercises (hostnamespaces0, sysctls1, ...): `fail/` the
baseline refuses, `pass/` it admits. Every one of the pinned minor goes through the admission input
the webhook builds, as a researcher of examples/tenants.yaml's team-a (no exceptions), and the real
pod-hardening rule (one `opa eval` for all): every `fail` Pod is refused by pod-hardening at the
field of its control, every `pass` Pod gets no pod-hardening finding. A Kubernetes upgrade that adds
a baseline control, or widens an allowed list, fails here until pod-hardening follows it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.offline_admission import admission_request, facts_from_manifests, load_manifests
from devcluster.tools import REPO_ROOT, binary, ensure_tools, go_module_dir, pinned_versions
from tests.policy_eval import eval_policies
from webhook.admission import build_policy_input

pytestmark = pytest.mark.tools

MODULE = "k8s.io/pod-security-admission"
RULE = "pod-hardening"
# A researcher of team-a: examples/tenants.yaml makes the group team-a its researchers.
USERNAME = "alice"
GROUPS = ("team-a",)
NAMESPACE = "team-a"

_CONTAINER = r"spec\.(?:containers|initContainers|ephemeralContainers)\[\d+\]"
_CONTEXT = rf"(?:spec|{_CONTAINER})\.securityContext"
_HANDLER = r"(?:livenessProbe|readinessProbe|startupProbe|lifecycle\.postStart|lifecycle\.preStop)"

# Upstream check (the fixture's name without its number, policy/check_*.go) -> the fields of
# pod-hardening's findings that name its control.
CONTROL_FIELDS: dict[str, str] = {
    "apparmorprofile": rf"{_CONTEXT}\.appArmorProfile\.type"
    r"|metadata\.annotations\[container\.apparmor\.security\.beta\.kubernetes\.io/[^]]+\]",
    "capabilities_baseline": rf"{_CONTEXT}\.capabilities\.add\[\d+\]",
    "hostnamespaces": r"spec\.host(?:Network|PID|IPC)",
    "hostpathvolumes": r"spec\.volumes\[\d+\]\.hostPath",
    "hostports": rf"{_CONTAINER}\.ports\[\d+\]\.hostPort",
    "hostprobesandhostlifecycle": rf"{_CONTAINER}\.{_HANDLER}\.(?:httpGet|tcpSocket)\.host",
    "privileged": rf"{_CONTEXT}\.privileged",
    "procmount": rf"{_CONTEXT}\.procMount",
    "seccompprofile_baseline": rf"{_CONTEXT}\.seccompProfile\.type",
    "selinuxoptions": rf"{_CONTEXT}\.seLinuxOptions\.(?:type|user|role)",
    "sysctls": r"spec\.securityContext\.sysctls\[\d+\]",
    "windowshostprocess": rf"{_CONTEXT}\.windowsOptions\.hostProcess",
}

# Every input of the batch decided in one evaluation, with the inventory of examples/tenants.yaml.
_QUERY = (
    "{name: found | inventory := input.inventory; some name, item in input.batch; "
    "found := data.labgate.rules.pod_hardening.violation with input as item with data.inventory as inventory}"
)


@dataclass(frozen=True)
class Fixture:
    """One upstream case: `fail` or `pass`, the check it exercises and its Pod."""

    outcome: str
    check: str
    path: Path
    pod: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.outcome}/{self.path.name}"


def baseline_fixtures_dir() -> Path:
    """test/testdata/baseline/v1.<minor> of the pinned module, for the pinned Kubernetes minor."""
    versions = pinned_versions()
    minor = ".".join(versions["KUBERNETES_VERSION"].split(".")[:2])  # v1.34.4 -> v1.34
    module = go_module_dir(MODULE, versions["KUBERNETES_STAGING_VERSION"])
    return module / "test" / "testdata" / "baseline" / minor


def load_fixtures(directory: Path) -> list[Fixture]:
    fixtures = []
    for outcome in ("fail", "pass"):
        for path in sorted((directory / outcome).glob("*.yaml")):
            pod = yaml.safe_load(path.read_text())
            fixtures.append(Fixture(outcome, re.sub(r"\d+$", "", path.stem), path, pod))
    return fixtures


@pytest.fixture(scope="module")
def fixtures() -> list[Fixture]:
    directory = baseline_fixtures_dir()
    if not directory.is_dir():
        version = pinned_versions()["KUBERNETES_STAGING_VERSION"]
        reason = (
            f"no Pod Security fixtures at {directory}: run `go mod download {MODULE}@{version}` "
            "(toolchain/build.sh does when it builds kubernetes)"
        )
        # In CI a missing module is a broken toolchain, not a reason to pass quietly.
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    found = load_fixtures(directory)
    for outcome in ("fail", "pass"):
        assert any(f.outcome == outcome for f in found), f"no {outcome}/ fixtures in {directory}"
    return found


@pytest.fixture(scope="module")
def findings(fixtures: list[Fixture]) -> dict[str, list[dict[str, Any]]]:
    """pod-hardening's findings on each fixture, by fixture name."""
    ensure_tools("opa")
    facts = facts_from_manifests(
        load_manifests([REPO_ROOT / "examples" / "tenants.yaml"]), platform_namespace="labgate-system"
    )
    batch = {}
    for fixture in fixtures:
        request = admission_request(
            obj=fixture.pod,
            username=USERNAME,
            groups=GROUPS,
            namespace=NAMESPACE,
            uid=f"fixture-{fixture.name}",
        )
        batch[fixture.name] = build_policy_input(request=request)
    value: dict[str, list[dict[str, Any]]] = eval_policies(
        binary("opa"), _QUERY, {"inventory": facts.inventory, "batch": batch}
    )
    return value


def test_every_fail_fixture_is_refused_at_its_control(
    fixtures: list[Fixture], findings: dict[str, list[dict[str, Any]]]
) -> None:
    wrong = []
    for fixture in (f for f in fixtures if f.outcome == "fail"):
        pattern = CONTROL_FIELDS.get(fixture.check)
        if pattern is None:
            wrong.append(f"{fixture.name}: upstream check {fixture.check!r} has no control in pod-hardening")
            continue
        found = findings[fixture.name]
        if not found:
            wrong.append(f"{fixture.name}: admitted ({fixture.check})")
        elif not any(f["rule"] == RULE and re.fullmatch(pattern, f["field"]) for f in found):
            wrong.append(f"{fixture.name}: refused, but not at {fixture.check}'s fields: {found}")
    assert wrong == [], "\n".join(wrong)


def test_every_pass_fixture_is_admitted(
    fixtures: list[Fixture], findings: dict[str, list[dict[str, Any]]]
) -> None:
    wrong = [
        f"{fixture.name}: refused: {' / '.join(f['message'] for f in findings[fixture.name])}"
        for fixture in fixtures
        if fixture.outcome == "pass" and findings[fixture.name]
    ]
    assert wrong == [], "\n".join(wrong)


def test_messages_name_the_rule_and_a_fix(findings: dict[str, list[dict[str, Any]]]) -> None:
    for name, found in findings.items():
        for finding in found:
            assert finding["rule"] == RULE, name
            assert finding["message"].startswith(f"[{RULE}] Pod "), (name, finding)
            assert " Fix: " in finding["message"], (name, finding)
