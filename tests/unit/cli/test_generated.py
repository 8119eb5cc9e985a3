"""The files generated from labgate's Python (cli/generated.py) are what the Python says: a
workload kind, the tenant label or a PriorityClass name edited in one place only fails here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli.generated import (
    CHART_HELPERS,
    CONFIG_DATA,
    SCHEDULING_DATA,
    WORKLOADS_DATA,
    generated_files,
    replica_field,
    stale_files,
    write_generated_files,
)
from cli.main import main
from devcluster.tools import REPO_ROOT
from labgate.core.tenant import PREEMPTIBLE_PRIORITY_CLASS, TENANT_LABEL
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, TemplateLocation, WorkloadKind


def test_the_generated_files_in_the_repository_are_current() -> None:
    stale = stale_files(REPO_ROOT)
    assert stale == [], f"stale generated files {stale}: run `labgate generate` and commit them"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the generated files (and what makes the root a checkout)."""
    for path in generated_files(REPO_ROOT):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / path, tmp_path / path)
    return tmp_path


def test_a_workload_kind_removed_from_the_chart_only_is_found_and_put_back(checkout: Path) -> None:
    chart = checkout / CHART_HELPERS
    text = chart.read_text()
    edited = text.replace('  (list "ray.io" "v1" "rayjobs")\n', "")
    assert edited != text
    chart.write_text(edited)

    assert stale_files(checkout) == [CHART_HELPERS]
    assert main(["generate", "--root", str(checkout), "--check"]) == 1
    assert chart.read_text() == edited  # --check writes nothing

    assert main(["generate", "--root", str(checkout)]) == 0
    assert chart.read_text() == text
    assert stale_files(checkout) == []


def test_a_config_value_edited_in_the_policies_only_is_found_and_the_other_keys_kept(checkout: Path) -> None:
    config = checkout / CONFIG_DATA
    document = json.loads(config.read_text())
    document["tenant_label"] = "example.com/team"
    document["max_namespaces_per_tenant"] = 7  # the infra team's key: never generated
    config.write_text(json.dumps(document, indent=2) + "\n")
    scheduling = checkout / SCHEDULING_DATA
    scheduling_document = json.loads(scheduling.read_text())
    scheduling_document["research_priority_classes"] = ["research-default"]
    scheduling.write_text(json.dumps(scheduling_document, indent=2) + "\n")

    assert set(stale_files(checkout)) == {CONFIG_DATA, SCHEDULING_DATA}
    write_generated_files(checkout)

    written = json.loads(config.read_text())
    assert written["tenant_label"] == TENANT_LABEL
    assert written["max_namespaces_per_tenant"] == 7
    assert list(written) == list(document)  # keys stay where the infra team put them
    assert PREEMPTIBLE_PRIORITY_CLASS in json.loads(scheduling.read_text())["research_priority_classes"]


def test_the_policies_learn_each_kind_and_where_it_says_how_many_pods_it_runs() -> None:
    document = json.loads((REPO_ROOT / WORKLOADS_DATA).read_text())
    by_kind = {(k["group"], k["kind"]): k for k in document["kinds"]}
    assert set(by_kind) == {(k.group, k.kind) for k in BUILTIN_WORKLOAD_KINDS}
    assert by_kind["batch", "Job"]["replica_field"] == "spec.parallelism"
    assert by_kind["batch", "CronJob"]["replica_field"] == "spec.jobTemplate.spec.parallelism"
    assert by_kind["apps", "Deployment"]["replica_field"] == "spec.replicas"
    # One count per map entry (Master, Worker): no single field to name.
    assert "replica_field" not in by_kind["kubeflow.org", "PyTorchJob"]
    # A head without a count beside counted workers: no single field either.
    assert "replica_field" not in by_kind["ray.io", "RayCluster"]


def test_a_kind_whose_templates_differ_in_their_count_names_no_field() -> None:
    def kind(*replicas: str | None) -> WorkloadKind:
        return WorkloadKind(
            group="example.com",
            version="v1",
            kind="Trainer",
            resource="trainers",
            templates=tuple(
                TemplateLocation(template=f"spec.t{i}", replicas=r) for i, r in enumerate(replicas)
            ),
        )

    assert replica_field(kind("spec.size")) == "spec.size"
    assert replica_field(kind("spec.size", "spec.size")) == "spec.size"
    assert replica_field(kind("spec.size", "spec.workers")) is None
    assert replica_field(kind("spec.size", None)) is None
    assert replica_field(kind("spec.roles.*.size")) is None


def test_a_policy_directory_with_another_tenant_label_fails_the_policy_test_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The infra team's copy of the policies is checked against the labgate that will run them."""
    from cli.main import _generated_step

    policies = tmp_path / "policies"
    shutil.copytree(REPO_ROOT / "policies" / "labgate" / "config", policies / "labgate" / "config")
    shutil.copytree(REPO_ROOT / "policies" / "labgate" / "workloads", policies / "labgate" / "workloads")
    assert _generated_step(policies) == []

    config = policies / "labgate" / "config" / "data.json"
    config.write_text(config.read_text().replace(f'"{TENANT_LABEL}"', '"example.com/team"'))
    assert _generated_step(policies) == ["generated labgate/config/data.json"]
    assert "run `labgate generate`" in capsys.readouterr().out


def test_the_infra_teams_own_keys_may_be_formatted_as_they_like(checkout: Path) -> None:
    config = checkout / CONFIG_DATA
    document = json.loads(config.read_text())
    document["rule_modes"] = {"noisy-new-rule": "dry-run", **document["rule_modes"]}
    config.write_text(json.dumps(document))  # one line, not the generator's layout
    assert stale_files(checkout) == []
    assert write_generated_files(checkout) == []
    assert config.read_text() == json.dumps(document)  # nothing rewritten
