"""A rule id starts with the last segment of its package's name (`gpu-quota-scale` in
`labgate.rules.gpu_quota`), so the folder a denial's `[rule-id]` comes from is found by its name.

Ids are public (researchers read them in denials, docs/researchers.md lists them, Tenants name them in
spec.enforcement): a rule whose id does not match moves to the package its id names; the few that stay
where they are listed below, each with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

_PACKAGE = re.compile(r"^package\s+([\w.]+)\s*$", re.MULTILINE)
# As cli.policy_samples reads them for `labgate policy rule-ids`.
_RULE_ID = re.compile(r"^#\s+rule_id:\s*([a-z0-9][a-z0-9-]*)\s*$", re.MULTILINE)

# rule id -> why it stays in a package whose name it does not start with.
ALLOWED_ELSEWHERE: dict[str, str] = {
    "gpu-cronjob-overlap": "rules.gpu_quota: the runs' overlap is judged with gpu_quota's demand and limits",
    "gpu-dra-unsupported": "rules.gpu_countable: what labgate cannot count as GPUs is one concern, named per cause",
    "gpu-resource-reserved": "rules.gpu_countable: a labgate.io/ resource is one of the asks labgate cannot count",
    "gpu-resource-unknown": "rules.gpu_countable: an unknown vendor resource is one of the asks labgate cannot count",
    "namespace-release": "rules.tenant_identity: who may take the tenant label off is the tenant identity's concern",
    "privileged-service-account": "rules.secret_scoping: who a pod runs as is judged with the tokens it can reach",
    "restricted-service-account": "rules.secret_scoping: who a pod runs as is judged with the tokens it can reach",
    "secret-restriction": "rules.secret_scoping: a Secret's restriction is judged with the accounts that read it",
    "secret-scope": "rules.secret_scoping: which Secrets a pod mounts is judged with the accounts that read them",
    "service-account-identity": "rules.secret_scoping: a pod's account is judged with the Secrets it can reach",
    "service-account-token": "rules.secret_scoping: a token Secret is judged with the account it names",
    "tenant-label-protected": "rules.tenant_identity: who may change the tenant label is the tenant identity's concern",
    "tenant-unknown": "rules.tenant_membership: a namespace of no known tenant is where membership cannot be judged",
}


def _ids_by_package(policies: Path) -> dict[str, str]:
    """Every rule id of the policies' METADATA, with the last segment of the package that holds it."""
    found: dict[str, str] = {}
    for path in sorted((policies / "labgate").rglob("*.rego")):
        text = path.read_text(encoding="utf-8")
        match = _PACKAGE.search(text)
        if match is None or path.name.endswith("_test.rego") or "samples" in path.parts:
            continue
        for rule_id in _RULE_ID.findall(text):
            found[rule_id] = match.group(1).rsplit(".", 1)[-1]
    return found


def _is_named_for(rule_id: str, package: str) -> bool:
    prefix = package.replace("_", "-")
    return rule_id == prefix or rule_id.startswith(f"{prefix}-")


def test_every_rule_id_starts_with_its_package_or_is_allowed_with_a_reason() -> None:
    ids = _ids_by_package(REPO / "policies")
    assert ids, "no rule ids found"
    stray = {i: p for i, p in ids.items() if not _is_named_for(i, p) and i not in ALLOWED_ELSEWHERE}
    assert stray == {}, (
        "move these rules to the package their id names (policies/labgate/rules/<name>), "
        "or list them in ALLOWED_ELSEWHERE with the reason"
    )


def test_the_allowlist_is_of_ids_that_need_it() -> None:
    ids = _ids_by_package(REPO / "policies")
    stale = {i for i in ALLOWED_ELSEWHERE if i not in ids or _is_named_for(i, ids[i])}
    assert stale == set(), (
        "these ids are gone or now named for their package: drop them from ALLOWED_ELSEWHERE"
    )
    assert all(reason.strip() for reason in ALLOWED_ELSEWHERE.values())


def test_a_rule_named_for_another_package_is_found(tmp_path: Path) -> None:
    rule = tmp_path / "labgate" / "rules" / "scheduling"
    rule.mkdir(parents=True)
    (rule / "scheduling.rego").write_text(
        "# METADATA\n# custom:\n#   rule_id: placement-node-name\npackage labgate.rules.scheduling\n"
    )
    ids = _ids_by_package(tmp_path)
    assert ids == {"placement-node-name": "scheduling"}
    assert not _is_named_for("placement-node-name", "scheduling")
    assert _is_named_for("gpu-quota-scale", "gpu_quota")
    assert _is_named_for("gpu-quota", "gpu_quota")
    assert not _is_named_for("gpu-quotas", "gpu_quota")
