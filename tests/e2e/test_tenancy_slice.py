"""The first vertical slice: a researcher's kubectl apply, refused or accepted by labgate's webhook
running against a real apiserver and a real OPA."""

from __future__ import annotations

import re

import pytest
import yaml

from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory, pod_manifest

pytestmark = pytest.mark.tenancy


def test_researcher_is_refused_in_another_tenants_namespace(tenants: TenantFactory) -> None:
    mine, theirs = tenants.create(), tenants.create()
    tenants.open_rbac(theirs.namespace, *mine.researcher.groups)
    result = mine.researcher.apply(pod_manifest("sneaky"), theirs.namespace)
    assert result.returncode == 1
    who = mine.researcher
    assert (
        f'admission webhook "validate.labgate.io" denied the request: [tenant-membership] '
        f'user "{who.name}" (groups: {who.groups[0]}) may not create Pod "sneaky" in namespace '
        f'"{theirs.namespace}": it belongs to tenant "{theirs.name}" and only its members may. '
        f"Fix: apply it in a namespace of your own tenant ({mine.name}), or ask an admin of "
        f'"{theirs.name}" ({theirs.admin.name}) to add you'
    ) in result.stderr
    assert theirs.admin.kubectl("get", "pod", "sneaky", "-n", theirs.namespace).returncode == 1


def test_researcher_is_admitted_in_own_namespace(tenants: TenantFactory) -> None:
    mine = tenants.create()
    tenants.open_rbac(mine.namespace, *mine.researcher.groups)
    result = mine.researcher.apply(pod_manifest("train-1"), mine.namespace)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "pod/train-1 created"
    listed = mine.researcher.kubectl("get", "pods", "-n", mine.namespace, "-o", "name")
    assert listed.stdout.split() == ["pod/train-1"]


def test_job_is_refused_at_apply_time_not_later(tenants: TenantFactory) -> None:
    mine, theirs = tenants.create(), tenants.create()
    tenants.open_rbac(theirs.namespace, *mine.researcher.groups)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep"},
        "spec": {"template": {"spec": {**pod_manifest("x")["spec"], "restartPolicy": "Never"}}},
    }
    result = mine.researcher.apply(job, theirs.namespace)
    assert result.returncode == 1
    assert '[tenant-membership] user "' in result.stderr
    assert 'may not create Job "sweep"' in result.stderr


def test_namespace_naming_a_missing_tenant_is_refused(stack: LabgateStack, tenants: TenantFactory) -> None:
    mine = tenants.create()
    stack.admin_kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": f"{mine.name}-ghost",
                    "labels": {"labgate.io/tenant": f"{mine.name}-gone"},
                },
            }
        ),
    )
    tenants.created.append(("namespace", f"{mine.name}-ghost"))
    tenants.open_rbac(f"{mine.name}-ghost", *mine.researcher.groups)
    result = mine.researcher.apply(pod_manifest("p"), f"{mine.name}-ghost")
    assert result.returncode == 1
    assert re.search(
        r'\[tenant-unknown\] namespace "t-\w+-ghost" is labelled labgate.io/tenant="t-\w+-gone"',
        result.stderr,
    )
