"""Policy samples: admission requests with the verdict the policies must give them.

A sample is one YAML file in a directory named `samples` beside a policy
(policies/labgate/rules/<rule>/samples/<case>.yaml; the OPA server ignores such directories):

    description: a researcher outside the tenant is refused
    user: {username: bob, groups: [team-b]}
    namespace: team-a              # omitted: the object's metadata.namespace, else "default"
    operation: CREATE              # CREATE (default), UPDATE or DELETE
    object: {apiVersion: v1, kind: Pod, ...}
    old_object: {...}              # UPDATE and DELETE only
    gpu_usage: {total: 12, by_model: {h100: 4}}   # optional: the tenant's GPUs in use
    tenant_usage: {cpu: 6000, memory: 0, pods: 3} # optional: what its live pods ask (millicores, bytes)
    images: {<image as written>: {registry: ..., digest: ..., signed_by: [...], error: null, ...}}
                                   # optional: image facts (input.images); no registry is asked
    claim_users: {pods: [{name, field, phase, is_deleting}]}
                                   # optional: the pods naming a claim being created or deleted
    tenant_pool_gpus: {h100: {gpus: 16, nodes: 2, largestNode: 8}}
                                   # optional: what the nodes of a written Tenant's pools hold
    scaled_workload: {apiVersion: apps/v1, kind: Deployment, ...}
                                   # a scale call (`kubectl scale`): object and old_object are the
                                   # Scale (autoscaling/v1, operation UPDATE) of this workload, as
                                   # the webhook reads it
    gpu_pools: {h100: {gpus: 16, nodes: 2, largestNode: 8}}
                                   # optional: what the namespace's Tenant's status says the nodes
                                   # of its pools hold (status.gpu.pools), for its workloads
    open_nodes: {untainted: 0, tainted: 3, taintKeys: [labgate.io/pool]}
                                   # optional: what the namespace's Tenant's status says of the
                                   # cluster's nodes as a pod without tolerations sees them
                                   # (status.nodes), for pods and workloads created
    offline_only: <why>            # optional: a case a live cluster cannot replay as one kubectl
                                   # create (Kubernetes' own validation refuses it first, a feature
                                   # gate drops the field, facts only the offline check has)
    expect:
      allowed: false
      rules: [tenant-membership]   # every rule id that finds something (any mode), exactly
      message_contains: ['[tenant-membership] user "bob"']   # optional: in the warnings or refusal

All samples share one set of tenants: policies/samples/inventory.yaml, Tenant, Namespace and Secret
manifests as an infra team applies them (cli.offline_admission.facts_from_manifests), so the
same file serves `labgate check --tenants` and a cluster for end-to-end runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cli.offline_admission import OfflineCheckError, OfflineOpa, admission_request, scale_request
from labgate.gpu_accounting.ledger import GpuAmount
from webhook.admission import status_pool_gpus
from webhook.policy_input import ClaimUsersDocument
from webhook.review import Operation

SAMPLES_DIR = "samples"
INVENTORY_FILE = "inventory.yaml"


class _Config(BaseModel):
    # Our own configuration: a misspelt key is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class SampleUser(_Config):
    username: str
    groups: list[str] = Field(default_factory=list)


class Expectation(_Config):
    allowed: bool
    rules: list[str] = Field(
        default_factory=list,
        description="The rule ids the sample is about that find something: those of the sample's own "
        "rule folder, plus any listed here. Findings of other rules are not compared (only `allowed`).",
    )
    message_contains: list[str] = Field(default_factory=list)


class Sample(_Config):
    description: str
    user: SampleUser
    namespace: str | None = None
    operation: Operation = "CREATE"
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    gpu_usage: GpuAmount | None = None
    tenant_usage: dict[str, int] | None = None
    images: dict[str, dict[str, Any]] | None = None
    claim_users: dict[str, Any] | None = None
    tenant_pool_gpus: dict[str, dict[str, int]] | None = None
    scaled_workload: dict[str, Any] | None = None
    gpu_pools: dict[str, dict[str, int]] | None = None
    open_nodes: dict[str, Any] | None = None
    # Why the end-to-end replay against a live webhook skips this case (None: it replays it).
    offline_only: str | None = None
    expect: Expectation


@dataclass(frozen=True)
class SampleOutcome:
    """One sample's run: the failures (empty when it passed) and what the policies said."""

    path: Path
    description: str
    failures: list[str] = field(default_factory=list)

    @property
    def is_passed(self) -> bool:
        return not self.failures


_RULE_ID = re.compile(r"^#\s+rule_id:\s*([a-z0-9][a-z0-9-]*)\s*$", re.MULTILINE)
RULE_IDS_FILE = Path("labgate") / "rule_ids" / "data.json"


def rule_ids_in(directory: Path) -> set[str]:
    """The rule ids (`# METADATA ... custom.rule_id`) of the policy files in `directory` and below,
    tests and samples left out."""
    return {
        match.group(1)
        for path in directory.rglob("*.rego")
        if not path.name.endswith("_test.rego") and SAMPLES_DIR not in path.parts
        for match in _RULE_ID.finditer(path.read_text(encoding="utf-8"))
    }


def rule_ids_document(policies: Path) -> str:
    """`policies/labgate/rule_ids/data.json` as it should be: data.labgate.rule_ids.known, the rule ids
    a Tenant's spec.enforcement may name."""
    known = sorted(rule_ids_in(policies / "labgate"))
    return json.dumps({"known": known}, indent=2) + "\n"


def _sample_rule_ids(path: Path) -> set[str]:
    """The rule ids of the rule folder a sample belongs to (policies/labgate/rules/<rule>/samples/x)."""
    folder = path.parent.parent if path.parent.name == SAMPLES_DIR else path.parent
    return rule_ids_in(folder) if folder.name != "policies" else set()


def inventory_path(policies: Path) -> Path:
    """The tenants every sample runs against."""
    return policies / SAMPLES_DIR / INVENTORY_FILE


def find_samples(policies: Path) -> list[Path]:
    """Every policies/**/samples/*.yaml but the shared inventory, in path order."""
    shared = inventory_path(policies)
    found = {*policies.glob(f"**/{SAMPLES_DIR}/*.yaml"), *policies.glob(f"**/{SAMPLES_DIR}/*.yml")}
    return sorted(p for p in found if p != shared)


def load_sample(path: Path) -> Sample:
    """The sample in `path`; ValueError with the reason when it is not one."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Sample.model_validate(raw)
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"cannot read: {err}") from err
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()
        )
        raise ValueError(f"not a sample: {problems}") from err


def run_sample(opa: OfflineOpa, path: Path) -> SampleOutcome:
    """Evaluate one sample as the webhook would and compare with its expectation."""
    try:
        sample = load_sample(path)
    except ValueError as err:
        return SampleOutcome(path=path, description="", failures=[str(err)])
    try:
        request = admission_request(
            obj=sample.object,
            username=sample.user.username,
            groups=sample.user.groups,
            namespace=sample.namespace,
            operation=sample.operation,
            old_object=sample.old_object,
            uid=f"sample-{path.stem}",
        )
        if sample.scaled_workload is not None:
            request = scale_request(request, sample.scaled_workload)
        result = opa.check(
            request,
            gpu_usage=sample.gpu_usage,
            images=sample.images,
            tenant_usage=sample.tenant_usage,
            # as the sample writes it: the policies, not this model, judge its shape
            claim_users=cast(ClaimUsersDocument | None, sample.claim_users),
            # the sample writes what the nodes hold as the status does; checked as the webhook reads it
            tenant_pool_gpus=status_pool_gpus(sample.tenant_pool_gpus or {}),
            scaled_workload=sample.scaled_workload,
            gpu_pools=sample.gpu_pools,
            open_nodes=sample.open_nodes,
        )
    except OfflineCheckError as err:
        return SampleOutcome(path=path, description=sample.description, failures=[str(err)])
    failures: list[str] = []
    expect = sample.expect
    verdict = "admitted" if result.is_allowed else "refused"
    if result.is_allowed != expect.allowed:
        said = result.response.status.message if result.response.status else "(no message)"
        failures.append(f"expected {'admitted' if expect.allowed else 'refused'}, got {verdict}: {said}")
    # Only the rules the sample is about: a new rule elsewhere does not break unrelated samples.
    about = _sample_rule_ids(path) | set(expect.rules)
    found = sorted(set(result.rule_ids) & about)
    if found != sorted(set(expect.rules)):
        failures.append(
            f"expected rules {sorted(set(expect.rules))} (of those it is about: {sorted(about)}), got {found}"
        )
    # A long warning is split over several kubectl lines; a sample's text may span them.
    joined = re.sub(r"\n\[[a-z0-9-]+\] \.\.\. ", " ", result.visible_text)
    failures.extend(
        f"the researcher's text lacks {wanted!r}; it is:\n{result.visible_text}"
        for wanted in expect.message_contains
        if wanted not in result.visible_text and wanted not in joined
    )
    return SampleOutcome(path=path, description=sample.description, failures=failures)
