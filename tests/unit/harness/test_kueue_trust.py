"""LabgateStack(kueue=True) serves policies that trust Kueue without a call of its caller's: the copy
devcluster.kueue.trusting_kueue makes (what the chart's kueue.enabled renders)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devcluster.kueue import KUEUE_NAMESPACE, KUEUE_USER, trusting_kueue
from devcluster.stack import POLICY_DIR


def _config(policy_dir: Path, *parts: str) -> dict[str, Any]:
    return dict(json.loads((policy_dir.joinpath("labgate", "config", *parts, "data.json")).read_text()))


def test_the_copy_trusts_kueue_and_leaves_the_shipped_policies_alone(tmp_path: Path) -> None:
    shipped = _config(POLICY_DIR)
    copy = trusting_kueue(POLICY_DIR, tmp_path / "policies")
    assert f"system:serviceaccounts:{KUEUE_NAMESPACE}" in _config(copy)["trusted_groups"]
    queue = _config(copy, "queue")
    assert queue["managed_by_kueue"] is True
    assert queue["kueue_users"] == [KUEUE_USER]
    assert _config(POLICY_DIR) == shipped


def test_every_tenant_false_leaves_each_tenant_to_opt_in(tmp_path: Path) -> None:
    copy = trusting_kueue(POLICY_DIR, tmp_path / "policies", every_tenant=False)
    assert _config(copy, "queue")["managed_by_kueue"] is False


def test_a_restarted_stack_trusts_its_own_copy_again_unchanged(tmp_path: Path) -> None:
    copy = trusting_kueue(POLICY_DIR, tmp_path / "policies")
    before = _config(copy)
    assert trusting_kueue(copy, copy) == copy
    assert _config(copy) == before
