"""The placement rule judges a pod's required node selection by what it can ever select: the Rego
judgement (labgate.lib.node_selection.can_select) must equal a brute-force search over every kind of
node a pool could hold, now or later.

The nodes are generated exhaustively per case: the pool's selector fixes its keys; every other key the
requirements name takes every value they mention, every small number (and one written with a leading
zero, which Gt and Lt read as the same number), a value no one mentions, or no value at all.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster.tools import binary, ensure_tools

POLICIES = Path(__file__).resolve().parents[3] / "policies"
IGNORED = ["--ignore=*_test.rego", "--ignore=samples", "--ignore=testdata"]  # as the OPA server loads them
FRESH = "fresh-value"  # a value no requirement mentions
POOL = "labgate.io/node-pool"

Requirement = dict[str, Any]
Labels = dict[str, str]


def _integer(value: str) -> int | None:
    return int(value) if re.fullmatch(r"[0-9]+", value) else None


def holds(requirement: Requirement, labels: Labels) -> bool:
    """Kubernetes node-selector requirement semantics (nodeaffinity.NodeSelectorRequirementsAsSelector)."""
    key, op, values = requirement["key"], requirement["operator"], requirement.get("values", [])
    value = labels.get(key)
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    number = None if value is None else _integer(value)
    if number is None:
        return False
    return number > int(values[0]) if op == "Gt" else number < int(values[0])


def nodes_for(requirements: list[Requirement], selector: Labels) -> list[Labels]:
    """Every kind of node of the pool that matters to `requirements`."""
    keys = sorted({r["key"] for r in requirements} - set(selector))
    numbers = [str(n) for n in range(8)] + ["0" + str(n) for n in range(8)]
    choices = []
    for key in keys:
        mentioned = {v for r in requirements if r["key"] == key for v in r.get("values", [])}
        choices.append([*sorted(mentioned | set(numbers)), FRESH, None])
    return [
        {**selector, **{k: v for k, v in zip(keys, combination, strict=True) if v is not None}}
        for combination in itertools.product(*choices)
    ]


def brute_force(requirements: list[Requirement], selector: Labels) -> bool:
    return any(all(holds(r, node) for r in requirements) for node in nodes_for(requirements, selector))


KEYS = st.sampled_from([POOL, "nvidia.com/gpu.product", "disktype"])
VALUES = st.sampled_from(["b-spot", "a-spot", "h100", "ssd", "2", "3"])


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    requirement: Requirement = {"key": draw(KEYS), "operator": operator}
    if operator in ("In", "NotIn"):  # the apiserver requires values for these, one integer for Gt and Lt
        requirement["values"] = sorted(draw(st.sets(VALUES, min_size=1, max_size=3)))
    if operator in ("Gt", "Lt"):
        requirement["values"] = [str(draw(st.integers(min_value=0, max_value=6)))]
    return requirement


CASES = st.tuples(
    st.lists(requirements(), max_size=4),
    st.dictionaries(KEYS, VALUES, min_size=1, max_size=2),
)


def rego_judgements(cases: list[tuple[list[Requirement], Labels]]) -> list[bool]:
    """can_select for each (requirements, pool selector), in one `opa eval` on the real policies."""
    query = (
        "[i | some i, c in input; "
        'data.labgate.lib.node_selection.can_select(c[0], {"name": "p", "nodeSelector": c[1]})]'
    )
    result = subprocess.run(
        [binary("opa"), "eval", "--format=json", "--stdin-input", *IGNORED, "-d", str(POLICIES), query],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    selecting = set(json.loads(result.stdout)["result"][0]["expressions"][0]["value"])
    return [i in selecting for i in range(len(cases))]


@pytest.fixture(scope="module", autouse=True)
def _opa() -> None:
    ensure_tools("opa")


def test_known_selections() -> None:
    b_pool = {POOL: "b-spot"}
    cases: list[tuple[list[Requirement], Labels, bool]] = [
        ([{"key": POOL, "operator": "In", "values": ["b-spot"]}], b_pool, True),
        ([{"key": POOL, "operator": "In", "values": ["a-spot"]}], b_pool, False),
        ([{"key": POOL, "operator": "NotIn", "values": ["b-spot"]}], b_pool, False),
        ([{"key": POOL, "operator": "DoesNotExist"}], b_pool, False),
        ([{"key": "disktype", "operator": "In", "values": ["ssd"]}], b_pool, True),
        ([], b_pool, True),
        ([{"key": "disktype", "operator": "Gt", "values": ["2"]}, {"key": "disktype", "operator": "Lt", "values": ["4"]},
          {"key": "disktype", "operator": "NotIn", "values": ["3"]}], b_pool, True),  # "03"
        ([{"key": "disktype", "operator": "Gt", "values": ["2"]}, {"key": "disktype", "operator": "Lt", "values": ["3"]}],
         b_pool, False),
    ]  # fmt: skip
    assert [brute_force(r, s) for r, s, _ in cases] == [e for _, _, e in cases]
    assert rego_judgements([(r, s) for r, s, _ in cases]) == [e for _, _, e in cases]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CASES, min_size=1, max_size=40))
def test_rego_judgement_equals_brute_force(cases: list[tuple[list[Requirement], Labels]]) -> None:
    judged = rego_judgements(cases)
    for (reqs, selector), rego in zip(cases, judged, strict=True):
        assert rego == brute_force(reqs, selector), json.dumps([reqs, selector])
