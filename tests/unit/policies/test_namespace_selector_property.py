"""The NetworkPolicy rule judges a namespaceSelector by what it can ever select: the Rego judgement
(labgate.rules.network_policy.selects_outside) must equal a brute-force evaluation over every kind of
namespace that could exist, now or later.

The namespaces are generated exhaustively per selector: for each label key that matters (the tenant
label, the name label, and every key the selector names), every value the selector mentions, the
allowed tenants, the platform namespaces, a value no one mentions, and absence. A Kubernetes namespace
always carries kubernetes.io/metadata.name (its name); platform namespaces carry no tenant label.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster.tools import binary, ensure_tools

POLICIES = Path(__file__).resolve().parents[3] / "policies"
TENANT = "labgate.io/tenant"
NAME = "kubernetes.io/metadata.name"
PLATFORM = {"kube-system"}  # data.labgate.config.network_peer_platform_namespaces
ALLOWED = {"own", "ally"}
IGNORED = ["--ignore=*_test.rego", "--ignore=samples", "--ignore=testdata"]  # as the OPA server loads them
FRESH = "\x00fresh"  # a value no selector mentions
OTHER_TENANT, NO_TENANT = "namespaces of other tenants", "namespaces of no tenant"

Labels = dict[str, str]
Selector = dict[str, Any]


def matches(selector: Selector, labels: Labels) -> bool:
    """Kubernetes label-selector semantics (metav1.LabelSelectorAsSelector)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def namespaces_for(selector: Selector) -> list[Labels]:
    """Every kind of namespace that matters to `selector`."""
    mentioned: dict[str, set[str]] = {TENANT: set(ALLOWED) | {"other"}, NAME: set(PLATFORM) | {"team-x"}}
    for key, value in selector.get("matchLabels", {}).items():
        mentioned.setdefault(key, set()).add(value)
    for e in selector.get("matchExpressions", []):
        mentioned.setdefault(e["key"], set()).update(e.get("values", []))
    keys = sorted(mentioned)
    choices = [
        [*sorted(mentioned[k]), FRESH, *([None] if k != NAME else [])]  # None: the key is absent
        for k in keys
    ]
    found = []
    for combination in itertools.product(*choices):
        labels = {k: v for k, v in zip(keys, combination, strict=True) if v is not None}
        if labels[NAME] in PLATFORM and TENANT in labels:
            continue  # platform namespaces belong to no tenant
        found.append(labels)
    return found


def brute_force(selector: Selector) -> set[str]:
    outside = set()
    for labels in namespaces_for(selector):
        if not matches(selector, labels):
            continue
        if TENANT in labels and labels[TENANT] not in ALLOWED:
            outside.add(OTHER_TENANT)
        if TENANT not in labels and labels[NAME] not in PLATFORM:
            outside.add(NO_TENANT)
    return outside


KEYS = st.sampled_from([TENANT, NAME, "purpose", "team"])
VALUES = st.sampled_from(["own", "ally", "other", "kube-system", "team-x", "data"])


@st.composite
def expressions(draw: st.DrawFn) -> dict[str, Any]:
    operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    expression: dict[str, Any] = {"key": draw(KEYS), "operator": operator}
    if operator in ("In", "NotIn"):  # the apiserver requires values for these, and none for the others
        expression["values"] = sorted(draw(st.sets(VALUES, min_size=1, max_size=3)))
    return expression


SELECTORS = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(KEYS, VALUES, max_size=2),
        "matchExpressions": st.lists(expressions(), max_size=3),
    },
)


def rego_judgements(selectors: list[Selector]) -> list[set[str]]:
    """selects_outside for each selector, in one `opa eval` on the real policies."""
    query = (
        "[data.labgate.rules.network_policy.selects_outside(s, "
        + json.dumps(sorted(ALLOWED)).replace("[", "{").replace("]", "}")
        + ") | some s in input]"
    )
    result = subprocess.run(
        [binary("opa"), "eval", "--format=json", "--stdin-input", *IGNORED, "-d", str(POLICIES), query],
        input=json.dumps(selectors),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    value = json.loads(result.stdout)["result"][0]["expressions"][0]["value"]
    return [set(v) for v in value]


@pytest.fixture(scope="module", autouse=True)
def _opa() -> None:
    ensure_tools("opa")


def test_known_selectors() -> None:
    cases: list[tuple[Selector, set[str]]] = [
        ({"matchLabels": {TENANT: "own"}}, set()),
        ({}, {OTHER_TENANT, NO_TENANT}),
        ({"matchLabels": {"purpose": "data"}}, {OTHER_TENANT, NO_TENANT}),
        ({"matchLabels": {NAME: "kube-system"}}, set()),
        (
            {"matchExpressions": [{"key": TENANT, "operator": "NotIn", "values": ["other"]}]},
            {OTHER_TENANT, NO_TENANT},
        ),
    ]
    assert [brute_force(s) for s, _ in cases] == [e for _, e in cases]
    assert rego_judgements([s for s, _ in cases]) == [e for _, e in cases]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SELECTORS, min_size=1, max_size=50))
def test_rego_judgement_equals_brute_force(selectors: list[Selector]) -> None:
    judged = rego_judgements(selectors)
    for selector, rego in zip(selectors, judged, strict=True):
        assert rego == brute_force(selector), json.dumps(selector)
