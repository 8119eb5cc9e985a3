"""data.labgate.rule_ids, what a Tenant's spec.enforcement may name, is the rules' METADATA."""

from __future__ import annotations

from pathlib import Path

from cli.policy_samples import RULE_IDS_FILE, rule_ids_document, rule_ids_in

REPO = Path(__file__).resolve().parents[3]


def test_generated_rule_ids_match_the_policies() -> None:
    # Regression: a misspelt rule id in spec.enforcement was accepted silently; the policies now
    # refuse ids not in this file, so it must list every rule (`labgate policy rule-ids --write`).
    policies = REPO / "policies"
    assert (policies / RULE_IDS_FILE).read_text(encoding="utf-8") == rule_ids_document(policies)


def test_rule_ids_come_from_metadata_of_policies_not_tests_or_samples(tmp_path: Path) -> None:
    rule = tmp_path / "labgate" / "rules" / "x"
    (rule / "samples").mkdir(parents=True)
    (rule / "x.rego").write_text("# METADATA\n# custom:\n#   rule_id: x-one\npackage labgate.rules.x\n")
    (rule / "x_test.rego").write_text(
        "# METADATA\n# custom:\n#   rule_id: x-test\npackage labgate.rules.x_test\n"
    )
    (rule / "samples" / "s.rego").write_text("#   rule_id: x-sample\n")
    assert rule_ids_in(tmp_path) == {"x-one"}
    assert '"known": [\n    "x-one"\n  ]' in rule_ids_document(tmp_path)
