"""docs/architecture.md's trust table names every policy rule: who is judged by it is written down."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.policies.test_researcher_docs import policy_rule_ids

REPO = Path(__file__).resolve().parents[3]


def test_every_rule_id_has_a_row_in_the_trust_table() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text.split("## Security: who is judged (the trust table)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    named = {rule for row in rows for rule in re.findall(r"`([a-z-]+)`", row.split(" | ", 1)[0])}
    assert sorted(policy_rule_ids() - named) == [], "rules the trust table does not name"
    assert sorted(named - policy_rule_ids()) == [], "rows for rules that no longer exist"
    assert all(row.count(" | ") == 7 for row in rows), "each row: rules, six requesters, why"
