"""docs/researchers.md explains every rule a researcher can meet: meaning, example message, fix."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# Refusals the webhook itself gives, outside the Rego rules.
WEBHOOK_RULE_IDS = {
    "admission-overloaded",
    "facts-stale",
    "gpu-ledger-busy",
    "gpu-ledger-full",
    "policy-engine-unavailable",
    "request-too-large",
    "too-many-references",
}


def policy_rule_ids() -> set[str]:
    ids = set()
    for path in (REPO / "policies").rglob("*.rego"):
        if not path.name.endswith("_test.rego"):
            ids.update(re.findall(r"^#\s+rule_id:\s+([a-z-]+)\s*$", path.read_text(), flags=re.MULTILINE))
    return ids


def test_every_rule_id_has_a_row_and_an_example_message() -> None:
    text = (REPO / "docs" / "researchers.md").read_text()
    ids = policy_rule_ids() | WEBHOOK_RULE_IDS
    assert len(ids) > 20, "the policies' rule ids were found"
    rows = set(re.findall(r"^\| `([a-z-]+)` \| .+ \| .+ \|$", text, flags=re.MULTILINE))
    examples = set(re.findall(r"^  \[([a-z-]+)\] .+Fix: .+$", text, flags=re.MULTILINE))
    assert sorted(ids - rows) == [], "rules without a row (meaning and fix)"
    assert sorted(ids - examples) == [], "rules without an example message (with its Fix:)"
    assert sorted(rows - ids) == [], "rows for rules that no longer exist"
