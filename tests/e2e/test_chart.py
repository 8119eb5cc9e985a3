"""The Helm chart against the real apiserver: every rendered manifest passes a server-side dry run,
and the chart's RBAC, applied for real, lets the webhook and the reconciler do exactly their jobs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.kubectl import kubectl
from devcluster.processes import free_port, spawn
from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from devcluster.tools import REPO_ROOT, ensure_tools
from labgate.core.tenant import Tenant
from rbac.desired import (
    RESEARCHER_ROLE,
    TENANT_ADMIN_ROLE,
    VIEWER_ROLE,
    desired_objects,
    shared_cluster_roles,
    shared_priority_classes,
)
from rbac.reconciler import FIELD_MANAGER
from tests.unit.cli.test_chart_render import with_cluster

pytestmark = pytest.mark.chart

CHART = REPO_ROOT / "charts" / "labgate"
Manifest = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> str:
    return str(ensure_tools("helm")["helm"].binary())


def render(
    helm: str, release: str, *, values: dict[str, Any] | None = None, crds: bool = False
) -> list[Manifest]:
    """`helm template` of the chart into labgate's namespace (which the stack creates)."""
    result = subprocess.run(
        [
            helm,
            "template",
            release,
            str(CHART),
            "-n",
            LABGATE_NAMESPACE,
            "-f",
            "-",
            *(["--include-crds"] if crds else []),
        ],
        input=yaml.safe_dump(with_cluster(values)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def as_list(manifests: list[Manifest]) -> str:
    # JSON, not YAML: PyYAML writes some strings unquoted that Go's YAML 1.2 reads as numbers.
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests})


def reference(manifest: Manifest) -> str:
    """How `kubectl -o name` names an object: kind.group/name (lowercase kind, no group for core)."""
    group = manifest["apiVersion"].rpartition("/")[0]
    kind = manifest["kind"].lower()
    return (
        f"{kind}.{group}/{manifest['metadata']['name']}"
        if group
        else f"{kind}/{manifest['metadata']['name']}"
    )


def admin_kubectl(stack: LabgateStack, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    """kubectl as the cluster admin with a multi-object stdin, returning the result (never raises)."""
    return kubectl(stack.admin_kubeconfig, *args, stdin=stdin)


def dry_run_apply(stack: LabgateStack, manifests: list[Manifest]) -> subprocess.CompletedProcess[str]:
    """Server-side: the policies ConfigMap (about 250 KB of Rego) is past the 256 KiB annotation a
    client-side apply would write (`kubectl.kubernetes.io/last-applied-configuration`)."""
    return admin_kubectl(
        stack, "apply", "--server-side", "--dry-run=server", "-o", "name", "-f", "-", stdin=as_list(manifests)
    )


def assert_accepted(stack: LabgateStack, manifests: list[Manifest]) -> None:
    result = dry_run_apply(stack, manifests)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted(reference(m) for m in manifests)


def test_every_rendered_manifest_is_accepted_by_the_apiserver(stack: LabgateStack, helm: str) -> None:
    # A release name of its own, so nothing collides with the webhook the test stack registered.
    manifests = render(helm, "chart-e2e", crds=True)
    kinds = {m["kind"] for m in manifests}
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ConfigMap",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "Job",
        "ClusterRole",
        "Role",
    } <= kinds
    assert_accepted(stack, manifests)


def test_cert_manager_mode_is_accepted_by_the_apiserver(stack: LabgateStack, helm: str) -> None:
    manifests = render(helm, "chart-e2e-cm", values={"certificates": {"mode": "cert-manager"}})
    # The test control plane has no cert-manager (its CRDs are not labgate's to install): its Issuers and
    # Certificates are checked by the unit tests; everything else, with the injection annotation, here.
    cert_manager = [m for m in manifests if m["apiVersion"].startswith("cert-manager.io/")]
    assert {m["kind"] for m in cert_manager} == {"Issuer", "Certificate"}
    assert_accepted(stack, [m for m in manifests if m not in cert_manager])


@dataclass
class Installed:
    """The chart's RBAC applied for real under a release name of its own."""

    release: str
    manifests: list[Manifest]

    def service_account(self, component: str) -> str:
        return f"system:serviceaccount:{LABGATE_NAMESPACE}:{self.release}-labgate-{component}"


@pytest.fixture(scope="module")
def installed_rbac(stack: LabgateStack, helm: str) -> Iterator[Installed]:
    release = f"chart-rbac-{uuid.uuid4().hex[:6]}"
    rbac_kinds = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    manifests = [
        m
        for m in render(helm, release)
        if m["kind"] in rbac_kinds and "helm.sh/hook" not in (m["metadata"].get("annotations") or {})
    ]
    stack.admin_kubectl("apply", "-f", "-", stdin=as_list(manifests))
    try:
        yield Installed(release, manifests)
    finally:
        admin_kubectl(
            stack, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=as_list(manifests)
        )


def can_i(stack: LabgateStack, who: str, *args: str) -> bool:
    result = stack.cluster_kubectl("auth", "can-i", f"--as={who}", *args)
    return result.stdout.strip() == "yes"


WEBHOOK_MAY = [
    ("list", "namespaces"),
    ("watch", "namespaces"),
    ("get", "namespaces"),
    ("list", "tenants.labgate.io"),
    ("watch", "tenants.labgate.io"),
    ("get", "tenants.labgate.io"),
    ("list", "secrets", "--all-namespaces"),
    ("watch", "secrets", "--all-namespaces"),
    ("get", "secrets", "-n", "default"),  # a pod's pull secret, for image provenance
    ("get", "serviceaccounts", "-n", "default"),
    ("get", "configmaps", "-n", LABGATE_NAMESPACE),
    ("create", "configmaps", "-n", LABGATE_NAMESPACE),
    ("update", "configmaps", "-n", LABGATE_NAMESPACE),
    ("create", "policyreports.wgpolicyk8s.io", "-n", "default"),  # admitted objects' findings
    ("update", "policyreports.wgpolicyk8s.io", "-n", "default"),
    ("create", "events", "-n", LABGATE_NAMESPACE),  # a refused policy, on the policies ConfigMap
]
WEBHOOK_MAY_NOT = [
    ("delete", "policyreports.wgpolicyk8s.io", "-n", "default"),
    ("create", "events", "-n", "default"),
    ("create", "secrets", "-n", "default"),
    ("create", "configmaps", "-n", "default"),
    ("create", "pods", "-n", "default"),
    ("update", "tenants.labgate.io"),
    ("delete", "validatingwebhookconfigurations"),
]
RECONCILER_MAY = [
    ("watch", "tenants.labgate.io"),
    ("patch", "tenants.labgate.io"),
    ("patch", "tenants.labgate.io", "--subresource=status"),
    ("create", "namespaces"),
    ("delete", "namespaces"),
    ("patch", "rolebindings", "-n", "default"),
    # The shared roles grant more than the reconciler holds: it writes and binds them by name.
    ("escalate", f"clusterroles/{RESEARCHER_ROLE}"),
    ("escalate", f"clusterroles/{TENANT_ADMIN_ROLE}"),
    ("bind", f"clusterroles/{RESEARCHER_ROLE}"),
    ("bind", f"clusterroles/{VIEWER_ROLE}"),
    ("create", "clusterrolebindings"),
    ("patch", "networkpolicies", "-n", "default"),
    ("list", "pods", "--all-namespaces"),
    ("get", "leases", "-n", LABGATE_NAMESPACE),
    ("update", "leases", "-n", LABGATE_NAMESPACE),
    ("create", "events", "-n", "default"),
    ("update", "configmaps", "-n", LABGATE_NAMESPACE),
]
RECONCILER_MAY_NOT = [
    ("get", "secrets", "-n", "default"),
    ("create", "pods", "-n", "default"),
    ("create", "leases", "-n", "default"),
    ("update", "configmaps", "-n", "default"),
    ("delete", "tenants.labgate.io"),
    ("escalate", "clusterroles"),
    ("escalate", "clusterroles/cluster-admin"),
    ("bind", "clusterroles"),
    ("bind", "clusterroles/cluster-admin"),
    ("bind", "clusterroles/admin"),
    ("bind", "clusterroles/edit"),
]


AUDIT_MAY = [
    ("list", "tenants.labgate.io"),
    ("list", "namespaces"),
    ("list", "pods", "--all-namespaces"),
    ("list", "jobs.batch", "--all-namespaces"),
    ("list", "deployments.apps", "--all-namespaces"),
    ("list", "secrets", "--all-namespaces"),  # read as metadata only (the labgate.io/ annotations)
    ("get", "configmaps", "-n", LABGATE_NAMESPACE),  # the GPU ledgers
    ("create", "policyreports.wgpolicyk8s.io", "-n", "default"),
    ("patch", "policyreports.wgpolicyk8s.io", "-n", "default"),
]
AUDIT_MAY_NOT = [
    ("get", "secrets", "-n", "default"),
    ("watch", "pods", "--all-namespaces"),
    ("create", "pods", "-n", "default"),
    ("update", "tenants.labgate.io"),
    ("update", "configmaps", "-n", LABGATE_NAMESPACE),
    ("delete", "policyreports.wgpolicyk8s.io", "-n", "default"),
]


@pytest.mark.parametrize(("component", "allowed", "refused"), [
    ("webhook", WEBHOOK_MAY, WEBHOOK_MAY_NOT),
    ("reconciler", RECONCILER_MAY, RECONCILER_MAY_NOT),
    ("audit", AUDIT_MAY, AUDIT_MAY_NOT),
])  # fmt: skip
def test_service_accounts_get_what_they_need_and_no_more(
    stack: LabgateStack,
    installed_rbac: Installed,
    component: str,
    allowed: list[tuple[str, ...]],
    refused: list[tuple[str, ...]],
) -> None:
    who = installed_rbac.service_account(component)
    assert [a for a in allowed if not can_i(stack, who, *a)] == []
    assert [a for a in refused if can_i(stack, who, *a)] == []


def _tenant(suffix: str, namespaces: list[str]) -> Tenant:
    return Tenant.from_object(
        {
            "metadata": {"name": f"chart-{suffix}", "generation": 1},
            "spec": {
                "members": {
                    "admins": [{"kind": "User", "name": f"admin-{suffix}"}],
                    "researchers": [{"kind": "Group", "name": f"team-{suffix}"}],
                    "viewers": [{"kind": "User", "name": f"viewer-{suffix}"}],
                },
                "namespaces": {"names": namespaces, "prefix": f"chart-{suffix}-"},
                "gpu": {"total": 4},
            },
        }
    )


def apply_as(
    stack: LabgateStack, who: str, objects: list[Manifest], *, dry_run: bool = True
) -> subprocess.CompletedProcess[str]:
    """Server-side apply (a dry run unless told) as `who`, with the reconciler's field manager."""
    return admin_kubectl(
        stack,
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        *(["--dry-run=server"] if dry_run else []),
        f"--as={who}",
        "-o",
        "name",
        "-f",
        "-",
        stdin=as_list(objects),
    )


def test_reconciler_rbac_can_write_everything_a_tenant_needs(
    stack: LabgateStack, installed_rbac: Installed
) -> None:
    """As the reconciler's service account, everything rbac.desired makes for a tenant: the shared
    ClusterRoles grant more than the reconciler holds and need `escalate` on their names, bindings of
    them `bind`. Written into labgate's own namespace, which the webhook never intercepts, so that
    only RBAC decides.

    A tenant's own ClusterRoles grant a part of what the reconciler holds: RBAC lets it bind them
    because it reads them and finds nothing beyond its rights. So they are written for real first, as
    the reconciler does before their bindings (a dry run would leave nothing to read), without their
    labels, or the stack's reconciler would delete them as a gone tenant's."""
    suffix = uuid.uuid4().hex[:6]
    reconciler = installed_rbac.service_account("reconciler")
    tenant_objects = desired_objects(_tenant(suffix, [LABGATE_NAMESPACE]), namespaces=[LABGATE_NAMESPACE])
    objects = [*shared_cluster_roles(), *shared_priority_classes(), *tenant_objects]
    assert {o["kind"] for o in objects} >= {
        "ClusterRole",
        "ClusterRoleBinding",
        "RoleBinding",
        "NetworkPolicy",
    }
    tenant_roles = [
        {**o, "metadata": {"name": o["metadata"]["name"]}}
        for o in tenant_objects
        if o["kind"] == "ClusterRole"
    ]
    assert len(tenant_roles) == 2  # the member and namespace-creator roles
    try:
        written = apply_as(stack, reconciler, tenant_roles, dry_run=False)
        assert written.returncode == 0, written.stderr
        result = apply_as(stack, reconciler, objects)
    finally:
        admin_kubectl(stack, "delete", "--ignore-not-found", "-f", "-", stdin=as_list(tenant_roles))
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted(reference(o) for o in objects)
    # Without the chart's RBAC the same writes are refused: the test above is not vacuous.
    stranger = f"system:serviceaccount:{LABGATE_NAMESPACE}:nobody-{suffix}"
    assert apply_as(stack, stranger, objects[:1]).returncode != 0


def _grant_attempts(suffix: str) -> list[Manifest]:
    """What a stolen reconciler token would try: tenant-shaped names, grants beyond its own rights."""
    rbac = "rbac.authorization.k8s.io"
    name = f"labgate:tenant:chart-{suffix}:member"
    meta = {"name": name, "labels": {"labgate.io/tenant": f"chart-{suffix}"}}
    return [
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": meta,
         "subjects": [{"kind": "User", "name": f"intruder-{suffix}", "apiGroup": rbac}],
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "cluster-admin"}},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
         "metadata": {**meta, "name": "labgate-admins", "namespace": LABGATE_NAMESPACE},
         "subjects": [{"kind": "User", "name": f"intruder-{suffix}", "apiGroup": rbac}],
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "admin"}},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
    ]  # fmt: skip


def test_reconciler_cannot_grant_beyond_what_it_provisions(
    stack: LabgateStack, installed_rbac: Installed
) -> None:
    """The reconciler's token binds only the roles a tenant's bindings name, and writes no ClusterRole
    but the shared ones beyond its own rights: cluster-admin, admin, or a tenant-shaped role that reads
    Secrets, are each refused by RBAC, while everything a tenant needs passes (the test above)."""
    reconciler = installed_rbac.service_account("reconciler")
    for attempt in _grant_attempts(uuid.uuid4().hex[:6]):
        result = apply_as(stack, reconciler, [attempt])
        assert result.returncode != 0, f"{attempt['kind']} admitted: {result.stdout}"
        assert "attempting to grant RBAC permissions not currently held" in result.stderr, result.stderr
    # The same objects as the cluster admin: refused above for the reconciler's rights, not their shape.
    assert dry_run_apply(stack, _grant_attempts(uuid.uuid4().hex[:6])[:1]).returncode == 0


def test_reconciler_writes_pass_admission_as_its_service_account(
    stack: LabgateStack, installed_rbac: Installed
) -> None:
    """In a cluster the reconciler writes as its service account, through labgate's own webhook."""
    suffix = uuid.uuid4().hex[:6]
    name = f"chart-{suffix}"
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"labgate.io/tenant": name, "labgate.io/e2e": "true"}},
    }
    tenant = {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "members": {"admins": [{"kind": "User", "name": f"admin-{suffix}"}]},
            "namespaces": {"names": [name]},
        },
    }
    # The namespace first: the stack's reconciler creates a Tenant's namespaces as soon as it sees it.
    stack.admin_kubectl("apply", "-f", "-", stdin=as_list([namespace, tenant]))
    try:
        stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=30s", f"tenant/{name}")
        live = Tenant.from_object(json.loads(stack.admin_kubectl("get", f"tenant/{name}", "-o", "json")))
        desired = desired_objects(live, namespaces=[name])
        # What the reconciler does on every drift repair: apply the baseline NetworkPolicy.
        repair = next(
            o
            for o in desired
            if o["kind"] == "NetworkPolicy"
            and o["metadata"]["name"] == "labgate-baseline-egress"
            and o["metadata"]["namespace"] == name
        )
        result = apply_as(stack, installed_rbac.service_account("reconciler"), [repair])
        assert result.returncode == 0, result.stderr
    finally:
        for kind, each in (("tenant", name), ("namespace", name)):
            stack.admin_kubectl("delete", kind, each, "--wait=false", "--ignore-not-found")


def service_account_kubeconfig(stack: LabgateStack, service_account: str, path: Path) -> Path:
    """A kubeconfig that authenticates with a token of `service_account` (as a pod's would)."""
    name = service_account.rpartition(":")[2]
    token = stack.admin_kubectl("create", "token", name, "-n", LABGATE_NAMESPACE, "--duration=1h").strip()
    kubeconfig = yaml.safe_load(stack.admin_kubeconfig.read_text())
    for user in kubeconfig["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def test_webhook_becomes_ready_with_the_charts_rbac(
    stack: LabgateStack, installed_rbac: Installed, tmp_path: Path
) -> None:
    """The real `labgate serve`, authenticated as the chart's webhook service account: its watch-fed
    caches (namespaces, tenants, secret metadata, GPU ledgers) sync, so /readyz answers 200."""
    kubeconfig = service_account_kubeconfig(
        stack, installed_rbac.service_account("webhook"), tmp_path / "webhook.kubeconfig"
    )
    pki = stack.workdir / "webhook-pki"
    port, health_port = free_port(), free_port()
    process = spawn(
        tmp_path,
        "chart-webhook",
        [sys.executable, "-m", "cli.main", "serve"],
        env={
            "LABGATE_OPA_URL": stack.opa_url,
            "LABGATE_KUBECONFIG": str(kubeconfig),
            "LABGATE_HOST": stack.webhook_host,
            "LABGATE_PORT": str(port),
            "LABGATE_HEALTH_PORT": str(health_port),
            "LABGATE_TLS_CERT_FILE": str(pki / "tls.crt"),
            "LABGATE_TLS_KEY_FILE": str(pki / "tls.key"),
            "LABGATE_TLS_CLIENT_CA_FILE": str(stack.workdir / "pki" / "webhook-client-ca.crt"),
            "LABGATE_NAMESPACE": LABGATE_NAMESPACE,
            "PYTHONPATH": str(REPO_ROOT),
        },
    )
    last = "no answer"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            process.check_alive()
            try:
                with urllib.request.urlopen(
                    f"http://{stack.webhook_host}:{health_port}/readyz", timeout=2
                ) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as err:
                last = f"{err.code} {err.read().decode(errors='replace')}"
            except OSError as err:
                last = str(err)
            time.sleep(0.5)
        pytest.fail(f"/readyz never answered 200 (last: {last}); log:\n{process.log_tail()}")
    finally:
        process.stop()


def test_the_audit_reads_the_cluster_and_writes_reports_with_the_charts_rbac(
    stack: LabgateStack, installed_rbac: Installed, tmp_path: Path
) -> None:
    """`labgate audit --write-reports` authenticated as the chart's audit service account: it lists
    every kind it audits (a missing grant would fail the run) and writes every tenant namespace's report."""
    suffix = uuid.uuid4().hex[:6]
    name = f"chart-audit-{suffix}"
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"labgate.io/tenant": name, "labgate.io/e2e": "true"}},
    }
    tenant = {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "members": {"admins": [{"kind": "User", "name": f"admin-{suffix}"}]},
            "namespaces": {"names": [name]},
        },
    }
    stack.admin_kubectl("apply", "-f", "-", stdin=as_list([namespace, tenant]))
    kubeconfig = service_account_kubeconfig(
        stack, installed_rbac.service_account("audit"), tmp_path / "audit.kubeconfig"
    )
    try:
        stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=30s", f"tenant/{name}")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli.main",
                "audit",
                f"--kubeconfig={kubeconfig}",
                f"--policies={stack.policy_dir}",
                f"--opa={ensure_tools('opa')['opa'].binary()}",
                "--write-reports",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        assert result.returncode in (0, 1), result.stderr  # 1: another test's object would be refused
        assert "wrote" in result.stderr, result.stderr
        report = json.loads(
            stack.admin_kubectl("get", "policyreport", "labgate-audit", "-n", name, "-o", "json")
        )
        assert report["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "labgate"}
        assert report["results"] == []
    finally:
        for kind, each in (("tenant", name), ("namespace", name)):
            stack.admin_kubectl("delete", kind, each, "--wait=false", "--ignore-not-found")


@pytest.mark.parametrize(
    ("policy", "said", "unsaid"),
    [("Fail", "are refused", "ADMITTED UNCHECKED"), ("Ignore", "ADMITTED UNCHECKED", "are refused")],
)
def test_the_install_notes_say_what_the_failure_policy_does(
    helm: str, stack: LabgateStack, policy: str, said: str, unsaid: str
) -> None:
    """docs/operations.md's "Trying the chart on the local stack", as written there (another release
    and namespace, --dry-run=client against the live apiserver): it installs nothing, and its NOTES
    say what the failure policy does (they said "refused" under Ignore too; issue 22 item 17)."""
    client_ca = stack.admin_kubeconfig.parent.parent / "pki" / "webhook-client-ca.crt"
    result = subprocess.run(
        [
            helm,
            "install",
            "labgate-try",
            str(CHART),
            "-n",
            "labgate-try",
            "--create-namespace",
            "--dry-run=client",
            "--kubeconfig",
            str(stack.admin_kubeconfig),
            "--set",
            f"webhook.clientAuth.caBundle={base64.b64encode(client_ca.read_bytes()).decode()}",
            "--set",
            "webhook.networkPolicy.apiserverCIDRs={127.0.0.1/32}",
            "--set",
            f"webhook.failurePolicy={policy}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert f"failurePolicy {policy}" in notes
    assert said in notes
    assert unsaid not in notes
    assert stack.cluster_kubectl("get", "namespace", "labgate-try").returncode != 0  # nothing installed
