"""`labgate check` and `labgate policy test`: the real command, the pinned OPA, the repository's policies."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli.offline_admission import apply_patch, parse_gpu_usage
from devcluster.tools import REPO_ROOT, ensure_tools
from labgate.core.decisions import PatchOperation
from labgate.gpu_accounting.ledger import GpuAmount

POLICIES = REPO_ROOT / "policies"

TENANTS = """\
apiVersion: labgate.io/v1alpha1
kind: Tenant
metadata: {name: vision}
spec:
  members:
    admins: [{kind: User, name: ann}]
    researchers: [{kind: Group, name: vision}]
  namespaces: {names: [vision], prefix: vision-}
  gpu: {total: 16, models: {h100: 16}}
---
apiVersion: labgate.io/v1alpha1
kind: Tenant
metadata: {name: nlp}
spec:
  members:
    researchers: [{kind: Group, name: nlp}]
  namespaces: {names: [nlp]}
  enforcement: {pod-hardening: warn}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: train-1}
spec:
  containers:
    - name: main
      image: registry.lab.example/vision/trainer:v1
"""

GPU_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: train-7, namespace: vision}
spec:
  nodeSelector: {nvidia.com/gpu.product: h100}
  containers:
    - name: main
      image: registry.lab.example/vision/trainer:v1
      resources: {limits: {nvidia.com/gpu: 8}}
"""

SWEEP = """\
apiVersion: batch/v1
kind: Job
metadata: {name: sweep}
spec:
  parallelism: 64
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {nvidia.com/gpu.product: h100}
      containers:
        - name: train
          image: registry.lab.example/vision/trainer:v1
          resources: {limits: {nvidia.com/gpu: 8}}
"""

PRIVILEGED_JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: profiler}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: registry.lab.example/nlp/profiler:v1
          securityContext: {privileged: true}
"""


@pytest.fixture(scope="module", autouse=True)
def _opa() -> None:
    ensure_tools("opa")


# A whole `labgate policy test` run (every package and sample): its own subprocess timeout, and the
# pytest timeout around it, leave room for a machine shared with control planes.
POLICY_TEST_TIMEOUT = pytest.mark.timeout(450)


def labgate(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        # `policy test` formats, compiles and tests every package and replays every sample: about 45 s
        # on a quiet 2-core machine, over 100 s when it shares the cores with control planes.
        timeout=400,
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    written = {}
    for name, text in {
        "tenants": TENANTS,
        "pod": POD,
        "gpu-pod": GPU_POD,
        "sweep": SWEEP,
        "privileged": PRIVILEGED_JOB,
    }.items():
        written[name] = tmp_path / f"{name}.yaml"
        written[name].write_text(text)
    return written


def check(files: dict[str, Path], manifest: str, *args: str) -> subprocess.CompletedProcess[str]:
    return labgate(
        "check", "-f", files[manifest], "--tenants", files["tenants"], "--policies", POLICIES, *args
    )


def test_a_member_pod_is_admitted_with_what_labgate_changed(files: dict[str, Path]) -> None:
    result = check(files, "pod", "--as", "alice", "--groups", "vision", "--namespace", "vision")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        'Warning: labgate turned off token automount (service account "default") for pod',
        "Pod/train-1 admitted",
        "labgate changed it (JSON Patch):",
        "  add /spec/automountServiceAccountToken = false",
        # Written without a pull policy: `labgate check` sets what the API would not leave unset.
        '  add /spec/containers/0/imagePullPolicy = "Always"',
        # Every change is recorded on the object, with the mutation that made it, and its warning is
        # carried for the validating webhook to say when it admits.
        '  add /metadata/annotations = {"labgate.io/mutation-warnings":"[\\"labgate turned off token '
        'automount (service account \\\\\\"default\\\\\\") for pod\\"]",'
        '"labgate.io/mutations":"[{\\"op\\":\\"add\\",\\"path\\":'
        '\\"/spec/automountServiceAccountToken\\",\\"rule\\":\\"token-automount\\"},'
        '{\\"op\\":\\"add\\",\\"path\\":\\"/spec/containers/0/imagePullPolicy\\",'
        '\\"rule\\":\\"image-pull-always\\"}]"}',
    ]


def test_an_outsider_pod_is_refused_with_the_webhooks_message(files: dict[str, Path]) -> None:
    result = check(files, "pod", "--as", "bob", "--groups", "nlp", "--namespace", "vision")
    assert result.returncode == 1, result.stdout + result.stderr
    message = (
        '[tenant-membership] user "bob" (groups: nlp) may not create Pod "train-1" in namespace "vision": '
        'it belongs to tenant "vision" and only its members may. Fix: apply it in a namespace of your own '
        'tenant (nlp), or ask an admin of "vision" (ann) to add you'
    )
    assert result.stdout.splitlines()[-1] == (
        f'Error from server (Forbidden): error when creating "{files["pod"]}": admission webhook '
        f'"validate.labgate.io" denied the request: {message}'
    )


OPEN_POLICY = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {generateName: open-}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress: [{from: [{namespaceSelector: {}}]}]
"""


def test_a_manifest_named_by_generate_name_is_judged_like_a_named_one(files: dict[str, Path]) -> None:
    """A generateName manifest reaches the rules without a name (the apiserver names the object after
    the request): refused all the same, and the message names it by its prefix."""
    files["open"] = files["pod"].with_name("open.yaml")
    files["open"].write_text(OPEN_POLICY)
    result = check(files, "open", "--as", "alice", "--groups", "vision", "--namespace", "vision")
    assert result.returncode == 1, result.stdout + result.stderr
    refusal = '[network-policy-peer] NetworkPolicy "open-" spec.ingress[0].from[0]'
    assert refusal in result.stdout, result.stdout


def test_a_job_that_can_never_fit_the_gpu_quota_is_refused(files: dict[str, Path]) -> None:
    result = check(files, "sweep", "--as", "alice", "--groups", "vision", "-n", "vision")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].endswith(
        'denied the request: [gpu-quota-unfit] Job "sweep" runs 64 pods × 8 h100 GPUs = 512; tenant "vision" '  # noqa: RUF001
        "has 16 h100 GPUs. Fix: run at most 2 pods at once (spec.parallelism) or ask fewer GPUs per pod, or "
        'ask the infra team to raise spec.gpu.models[h100] of Tenant "vision"'
    )
    # Issue 22 item 5: what the mutation would have changed is not said of a refused object (it was:
    # "labgate turned off token automount ...", before the refusal).
    assert [line for line in result.stdout.splitlines() if line.startswith("Warning:")] == []


def test_gpu_usage_counts_for_a_pod(files: dict[str, Path]) -> None:
    admitted = check(files, "gpu-pod", "--as", "alice", "--groups", "vision")
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    refused = check(
        files, "gpu-pod", "--as", "alice", "--groups", "vision", "--gpu-usage", "total=12,h100=12"
    )
    assert refused.returncode == 1
    assert (
        '[gpu-quota] Pod "train-7" asks 8 nvidia.com/gpu (h100); tenant "vision" uses 12 of 16 GPUs '
        "(h100: 12 of 16)" in refused.stdout
    )


def test_warn_mode_admits_with_the_warning(files: dict[str, Path]) -> None:
    result = check(files, "privileged", "--as", "bob", "--groups", "nlp", "-n", "nlp")
    assert result.returncode == 0, result.stdout + result.stderr
    assert any(
        line.startswith('Warning: [pod-hardening] Job "profiler" spec.template.spec.containers[0] ("main")')
        for line in result.stdout.splitlines()
    )
    assert "Job/profiler admitted" in result.stdout


def test_a_namespace_under_no_tenant_is_noted(files: dict[str, Path]) -> None:
    result = check(files, "pod", "--as", "alice", "--groups", "vision", "-n", "scratch")
    assert result.returncode == 0
    assert "namespace 'scratch' belongs to no tenant" in result.stderr


def test_bad_arguments_exit_2(files: dict[str, Path]) -> None:
    result = check(files, "gpu-pod", "--as", "alice", "--gpu-usage", "lots")
    assert result.returncode == 2
    assert "--gpu-usage" in result.stderr
    mismatch = check(files, "gpu-pod", "--as", "alice", "-n", "nlp")
    assert mismatch.returncode == 2
    assert "does not match" in mismatch.stderr


@POLICY_TEST_TIMEOUT
def test_policy_test_passes_on_the_repositorys_policies() -> None:
    result = labgate("policy", "test", "--policies", POLICIES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok    opa test (PASS: " in result.stdout
    assert "ok    sample labgate/rules/tenant_membership/samples/outsider-pod-refused.yaml" in result.stdout
    assert result.stdout.splitlines()[-1] == "policy test passed"


@POLICY_TEST_TIMEOUT
def test_policy_test_fails_and_names_a_sample_whose_expectation_is_wrong(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    sample = policies / "labgate/rules/tenant_membership/samples/outsider-pod-refused.yaml"
    sample.write_text(sample.read_text().replace("allowed: false", "allowed: true"))
    result = labgate("policy", "test", "--policies", policies)
    assert result.returncode == 1, result.stdout
    name = "sample labgate/rules/tenant_membership/samples/outsider-pod-refused.yaml"
    assert f"FAIL  {name}" in result.stdout
    assert "expected admitted, got refused: [tenant-membership]" in result.stdout
    assert result.stdout.splitlines()[-1] == f"policy test FAILED: {name}"


@POLICY_TEST_TIMEOUT
def test_policy_test_fails_on_a_rego_test_failure(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    (policies / "labgate/rules/tenant_membership/broken_test.rego").write_text(
        textwrap.dedent("""\
            package labgate.rules.tenant_membership_test

            test_always_fails if {
            \t1 == 2
            }
        """)
    )
    result = labgate("policy", "test", "--policies", policies)
    assert result.returncode == 1
    assert "FAIL  opa test" in result.stdout
    assert "test_always_fails" in result.stdout


def test_apply_patch_adds_at_escaped_pointers_and_array_ends() -> None:
    document = {"metadata": {}, "spec": {"tolerations": [{"key": "a"}]}}
    patch = [
        PatchOperation(op="add", path="/metadata/labels", value={}),
        PatchOperation(op="add", path="/metadata/labels/labgate.io~1tenant", value="vision"),
        PatchOperation(op="add", path="/spec/tolerations/-", value={"key": "b"}),
        PatchOperation(op="add", path="/spec/tolerations/0", value={"key": "z"}),
    ]
    assert apply_patch(document, patch) == {
        "metadata": {"labels": {"labgate.io/tenant": "vision"}},
        "spec": {"tolerations": [{"key": "z"}, {"key": "a"}, {"key": "b"}]},
    }
    assert document == {"metadata": {}, "spec": {"tolerations": [{"key": "a"}]}}


def test_parse_gpu_usage() -> None:
    assert parse_gpu_usage("total=12, h100=4") == GpuAmount(total=12, by_model={"h100": 4})
    with pytest.raises(ValueError, match="name=count"):
        parse_gpu_usage("total")


@POLICY_TEST_TIMEOUT
def test_policy_test_prints_the_parse_error_not_a_formatting_complaint(tmp_path: Path) -> None:
    # Regression: a file that does not parse was reported as "not formatted".
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    rule = policies / "labgate/rules/tenant_membership/tenant_membership.rego"
    rule.write_text(rule.read_text() + "\nviolation contains {{{\n")
    result = labgate("policy", "test", "--policies", policies)
    assert result.returncode == 1
    assert "not formatted" not in result.stdout
    assert "does not parse" in result.stdout
    assert "tenant_membership.rego:" in result.stdout
    assert "rego_parse_error" in result.stdout


@POLICY_TEST_TIMEOUT
def test_a_sample_asserts_only_the_rules_it_is_about(tmp_path: Path) -> None:
    # Regression: a new rule elsewhere that found something in an unrelated sample broke it.
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    noisy = policies / "labgate/rules/noisy"
    noisy.mkdir()
    (noisy / "noisy.rego").write_text(
        textwrap.dedent("""\
            # METADATA
            # title: a new rule, introduced in dry-run
            package labgate.rules.noisy

            # METADATA
            # custom:
            #   rule_id: noisy-new-rule
            violation contains {"rule": rule_id, "message": "[noisy-new-rule] x. Fix: y"} if {
            \tinput.request.kind.kind == "Pod"
            \tinput.request.uid == "sample-member-pod-admitted"
            \trule_id := rego.metadata.rule().custom.rule_id
            }
        """)
    )
    config = policies / "labgate/config/data.json"
    config.write_text(
        config.read_text().replace('"rule_modes": {', '"rule_modes": {"noisy-new-rule": "dry-run", ')
    )
    assert labgate("policy", "rule-ids", "--write", "--policies", policies).returncode == 0
    result = labgate("policy", "test", "--policies", policies)
    assert result.returncode == 0, result.stdout
    assert "ok    sample labgate/rules/tenant_membership/samples/member-pod-admitted.yaml" in result.stdout


@POLICY_TEST_TIMEOUT
def test_rule_ids_out_of_date_fail_policy_test(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    ids = policies / "labgate/rule_ids/data.json"
    ids.write_text(ids.read_text().replace('    "gpu-quota",\n', ""))
    result = labgate("policy", "test", "--policies", policies)
    assert result.returncode == 1
    assert "FAIL  rule ids" in result.stdout
    assert "labgate policy rule-ids --write" in result.stdout


@POLICY_TEST_TIMEOUT
def test_check_and_policy_test_speak_json(files: dict[str, Path], tmp_path: Path) -> None:
    import json

    result = check(files, "sweep", "--as", "alice", "--groups", "vision", "-n", "vision", "-o", "json")
    assert result.returncode == 1
    [verdict] = json.loads(result.stdout)
    assert verdict["object"] == "Job/sweep"
    assert verdict["allowed"] is False
    assert verdict["rules"]["enforce"] == ["gpu-quota-unfit"]
    assert verdict["message"].startswith('[gpu-quota-unfit] Job "sweep"')
    # policy test -o json, on a copy that does not parse (fast: opa stops at the parse error).
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    rule = policies / "labgate/rules/tenant_membership/tenant_membership.rego"
    rule.write_text(rule.read_text() + "\nviolation contains {{{\n")
    report = json.loads(labgate("policy", "test", "--policies", policies, "-o", "json").stdout)
    assert report["passed"] is False
    assert "opa fmt --list --fail" in report["failed"]
    assert any("does not parse" in line for line in report["report"])


def test_opa_is_found_from_the_flag_or_the_environment(files: dict[str, Path], tmp_path: Path) -> None:
    # An installed package has no toolchain/: --opa and LABGATE_OPA name the binary.
    from devcluster.tools import binary

    opa = binary("opa")
    assert (
        check(files, "pod", "--as", "alice", "--groups", "vision", "-n", "vision", "--opa", opa).returncode
        == 0
    )
    missing = check(
        files, "pod", "--as", "alice", "--groups", "vision", "-n", "vision", "--opa", str(tmp_path / "no")
    )
    assert missing.returncode != 0


def test_cluster_allowed_registries_are_decided_offline_from_the_reference(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # Regression: with the cluster-wide allowed_registries set, every pod of a tenant without
    # spec.images was refused "[image-unverifiable] ... labgate has no facts about it", here too.
    import json

    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    config = policies / "labgate/config/data.json"
    settings = json.loads(config.read_text())
    settings["allowed_registries"] = ["registry.lab.example"]
    config.write_text(json.dumps(settings))
    args = ("--as", "alice", "--groups", "vision", "-n", "vision", "--policies", policies)
    allowed = labgate("check", "-f", files["pod"], "--tenants", files["tenants"], *args)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(POD.replace("registry.lab.example/vision/trainer:v1", "docker.io/someone/miner:v1"))
    refused = labgate("check", "-f", elsewhere, "--tenants", files["tenants"], *args)
    assert refused.returncode == 1
    assert (
        '[image-registry] Pod "train-1" spec.containers[0] ("main") runs image "docker.io/someone/miner:v1"'
        in refused.stdout
    )
    assert "image-unverifiable" not in refused.stdout
