"""The "pure" import contract (pyproject.toml) lists exactly the modules that say they are pure.

A module says so in the first paragraph of its docstring ("(pure)", "(pure: ...)", "Pure: ..."); the
contract then keeps it from importing any client library or door. A hand list that nothing checks
drifts (it once missed webhook/decision_reuse.py): this test fails on a pure module left out of the
contract, and on a listed module that no longer says it is pure."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SAYS_PURE = re.compile(r"\(pure\b|\bPure\b")


def pure_contract_modules() -> set[str]:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    pure = [c for c in contracts if c["name"].startswith("pure decision modules")]
    assert len(pure) == 1, [c["name"] for c in contracts]
    return set(pure[0]["source_modules"])


def modules_that_say_they_are_pure() -> set[str]:
    said = set()
    for package in ("cli", "labgate", "webhook", "rbac"):
        for path in (REPO / package).rglob("*.py"):
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            if SAYS_PURE.search(docstring.split("\n\n")[0]):
                said.add(".".join(path.relative_to(REPO).with_suffix("").parts))
    return said


def test_the_pure_contract_lists_every_module_that_says_it_is_pure_and_no_other() -> None:
    listed, said = pure_contract_modules(), modules_that_say_they_are_pure()
    assert said - listed == set(), "say they are pure but the contract does not keep them so"
    assert listed - said == set(), "in the pure contract but their docstrings do not say pure"
    assert "webhook.decision_reuse" in listed
