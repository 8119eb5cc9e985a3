"""The Helm chart (charts/labgate), rendered by the pinned helm: lint, schema, and the shape of what it
renders against what labgate's Python registers and loads."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from cli.main import build_parser, main
from devcluster.stack import opa_argv
from devcluster.tools import REPO_ROOT, ensure_tools, pinned_versions
from labgate.core.tenant import DEFAULT_PRIORITY_CLASS
from rbac.cert_lifetimes import Lifetimes, lifetimes_from
from rbac.desired import (
    GPU_BACKSTOP_NAME,
    RESEARCHER_ROLE,
    TENANT_ADMIN_ROLE,
    VIEWER_ROLE,
    shared_priority_classes,
)
from webhook.provenance.settings import ProvenanceSettings
from webhook.registration import (
    MUTATING_CLUSTER_WEBHOOK_NAME,
    MUTATING_REFUSING_WEBHOOK_NAME,
    MUTATING_WEBHOOK_NAME,
    VALIDATING_CLUSTER_WEBHOOK_NAME,
    VALIDATING_WEBHOOK_NAME,
    exempt_namespace_selector,
    mutating_rules,
    validating_rules,
    webhook_configurations,
)
from webhook.settings import Settings

CHART = REPO_ROOT / "charts" / "labgate"
# The two namespaced mutating webhooks see disjoint tenant namespaces, by the over-quota label.
OVER_QUOTA_SPLIT: dict[str, Literal["refuse", "other"]] = {
    MUTATING_WEBHOOK_NAME: "other",
    MUTATING_REFUSING_WEBHOOK_NAME: "refuse",
}
POLICIES = REPO_ROOT / "policies"
RELEASE = "labgate"
NAMESPACE = "labgate-system"
CERT_MANAGER = {"certificates": {"mode": "cert-manager"}}
# What every install must say about its cluster: the CA of the apiserver's webhook client certificate
# and the control plane's addresses (the chart refuses to guess them).
CLIENT_CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBlabgate\n-----END CERTIFICATE-----\n"
CLUSTER = {
    "webhook": {
        "clientAuth": {"caBundle": base64.b64encode(CLIENT_CA_PEM).decode()},
        "networkPolicy": {"apiserverCIDRs": ["10.0.0.0/24"]},
    }
}


def with_cluster(values: dict[str, Any] | None) -> dict[str, Any]:
    """`values` over CLUSTER (nested keys merged)."""

    def merge(base: Any, extra: Any) -> Any:
        if isinstance(base, dict) and isinstance(extra, dict):
            return {**base, **{k: merge(base.get(k), v) for k, v in extra.items()}}
        return extra

    return dict(merge(CLUSTER, values or {}))


Manifest = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> str:
    return str(ensure_tools("helm")["helm"].binary())


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=60, check=False)


class Renderer:
    """`helm template` with values given as a dict (written to a file, as an operator would)."""

    def __init__(self, helm: str, workdir: Path):
        self.helm = helm
        self.workdir = workdir
        self.count = 0

    def run(
        self,
        values: dict[str, Any] | None = None,
        *,
        namespace: str = NAMESPACE,
        extra: tuple[str, ...] = (),
        command: str = "template",
    ) -> subprocess.CompletedProcess[str]:
        self.count += 1
        values_file = self.workdir / f"values-{self.count}.yaml"
        values_file.write_text(yaml.safe_dump(with_cluster(values)))
        return run_helm(
            self.helm, command, RELEASE, str(CHART), "-n", namespace, "-f", str(values_file), *extra
        )

    def __call__(self, values: dict[str, Any] | None = None, *, namespace: str = NAMESPACE) -> list[Manifest]:
        result = self.run(values, namespace=namespace)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture
def render(helm: str, tmp_path: Path) -> Renderer:
    return Renderer(helm, tmp_path)


@pytest.fixture(scope="module")
def default_manifests(helm: str, tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    return Renderer(helm, tmp_path_factory.mktemp("render"))()


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def webhooks(manifests: list[Manifest]) -> Iterator[tuple[str, Manifest]]:
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for webhook in one(manifests, kind)["webhooks"]:
            yield kind, webhook


def container(deployment: Manifest, name: str) -> Manifest:
    containers: list[Manifest] = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def normal_rules(rules: list[Manifest]) -> set[tuple[str, str, str, tuple[str, ...], str]]:
    """(group, version, resource, operations, scope) for every resource a rule list names."""
    return {
        (group, version, resource, tuple(sorted(rule["operations"])), rule.get("scope", "*"))
        for rule in rules
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for resource in rule["resources"]
    }


# -- lint, schema, values -----------------------------------------------------------------------


@pytest.mark.parametrize("values", [{}, CERT_MANAGER], ids=["self-signed", "cert-manager"])
def test_lint_strict_is_clean(helm: str, tmp_path: Path, values: dict[str, Any]) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(with_cluster(values)))
    result = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(values_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("values", "unknown"),
    [
        ({"replicaCount": 3}, "replicaCount"),
        ({"webhook": {"failurPolicy": "Ignore"}}, "failurPolicy"),
        ({"certificates": {"certManager": {"issuerRef": {"nmae": "x"}}}}, "nmae"),
    ],
)
def test_schema_refuses_unknown_keys(render: Renderer, values: dict[str, Any], unknown: str) -> None:
    result = render.run(values)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert unknown in result.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"webhook": {"failurePolicy": "Maybe"}}, "failurePolicy"),
        ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
        ({"certificates": {"mode": "vault"}}, "mode"),
        # The schema cannot compare two values; the templates refuse it with the reason.
        ({"webhook": {"timeoutSeconds": 2}}, "must be below webhook.timeoutSeconds"),
        ({"webhook": {"maxAdmissionWaitSeconds": 2.5}}, "must be below webhook.admissionDeadlineSeconds"),
        ({"certificates": {"mode": "cert-manager", "caBundle": "Q0E="}}, "cainjector fills it"),
        ({"webhook": {"clientAuth": {"caBundle": ""}}}, "give the CA of the apiserver's webhook client"),
        ({"webhook": {"networkPolicy": {"apiserverCIDRs": []}}}, "webhook.networkPolicy.apiserverCIDRs"),
        ({"webhook": {"healthPort": 8443}}, "webhook.healthPort must differ"),
        ({"kueue": {"podIntegration": True}}, "kueue.podIntegration needs kueue.enabled"),
    ],
)
def test_invalid_values_are_refused_with_a_reason(
    render: Renderer, values: dict[str, Any], message: str
) -> None:
    result = render.run(values)
    assert result.returncode != 0
    assert message in result.stderr


def _object_schemas(schema: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield path, schema
        for key, value in schema.items():
            yield from _object_schemas(value, f"{path}.{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _object_schemas(value, f"{path}[{index}]")


def test_schema_closes_every_object() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    objects = list(_object_schemas(schema))
    assert len(objects) > 20
    for path, node in objects:
        closed = node.get("additionalProperties")
        # False, or a typed map (labels, annotations, resource quantities): never "anything goes".
        assert closed is False or (isinstance(closed, dict) and closed), f"{path} accepts unknown keys"


_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(\s|$)")


def _commented_keys(text: str) -> tuple[set[str], set[str]]:
    """(every key path in values.yaml, the key paths with a comment line right above them)."""
    keys: set[str] = set()
    commented: set[str] = set()
    stack: list[tuple[int, str]] = []
    previous = ""
    for line in text.splitlines():
        match = _KEY.match(line)
        if match:
            indent = len(match["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = ".".join([*(k for _, k in stack), match["key"]])
            stack.append((indent, match["key"]))
            keys.add(path)
            if previous.strip().startswith("#"):
                commented.add(path)
        if line.strip():
            previous = line
    return keys, commented


def _key_paths(values: Any, prefix: str = "") -> set[str]:
    if not isinstance(values, dict):
        return set()
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths |= {path, *_key_paths(value, f"{path}.")}
    return paths


def test_every_values_key_has_a_comment_above_it() -> None:
    text = (CHART / "values.yaml").read_text()
    keys, commented = _commented_keys(text)
    # The line parser saw exactly the keys YAML sees (no key hides in a flow mapping or a list).
    assert keys == _key_paths(yaml.safe_load(text))
    assert sorted(keys - commented) == []


# -- webhook configurations ---------------------------------------------------------------------


def test_webhook_rules_match_registration(default_manifests: list[Manifest]) -> None:
    expected = {
        "ValidatingWebhookConfiguration": normal_rules(validating_rules()),
        "MutatingWebhookConfiguration": normal_rules(mutating_rules()),
    }
    rendered: dict[str, list[Manifest]] = {}
    for kind, webhook in webhooks(default_manifests):
        rendered.setdefault(kind, []).extend(webhook["rules"])
        resources = {r for rule in webhook["rules"] for r in rule["resources"]}
        assert not resources & {"leases", "events", "nodes", "*"}
    for kind, rules in rendered.items():
        assert normal_rules(rules) == expected[kind], kind


def test_webhook_shape_matches_registration(default_manifests: list[Manifest]) -> None:
    """Every field labgate's own registration sets, the chart sets alike (clientConfig aside: a URL
    there, the Service here)."""
    registered = webhook_configurations(
        name="labgate",
        urls=["https://webhook.invalid"],
        ca_bundle_pem=b"",
        exempt_namespaces=["kube-system", NAMESPACE],
    )
    for configuration in registered:
        rendered = one(default_manifests, configuration["kind"], "labgate")
        assert [w["name"] for w in rendered["webhooks"]] == [w["name"] for w in configuration["webhooks"]]
        for registered_webhook, rendered_webhook in zip(
            configuration["webhooks"], rendered["webhooks"], strict=True
        ):
            expected = {k: v for k, v in registered_webhook.items() if k != "clientConfig"}
            actual = {k: v for k, v in rendered_webhook.items() if k != "clientConfig"}
            assert normal_rules(actual.pop("rules")) == normal_rules(expected.pop("rules"))
            assert actual == expected
    assert {w["name"] for _, w in webhooks(default_manifests)} == {
        VALIDATING_WEBHOOK_NAME,
        VALIDATING_CLUSTER_WEBHOOK_NAME,
        MUTATING_WEBHOOK_NAME,
        MUTATING_REFUSING_WEBHOOK_NAME,
        MUTATING_CLUSTER_WEBHOOK_NAME,
    }


@pytest.mark.parametrize(
    ("namespace", "extra"),
    [(NAMESPACE, []), ("platform-admission", ["monitoring", "kube-system", "cert-manager"])],
)
def test_namespace_selector_always_exempts_kube_system_and_the_release_namespace(
    render: Renderer, namespace: str, extra: list[str]
) -> None:
    manifests = render({"webhook": {"exemptNamespaces": extra}}, namespace=namespace)
    for _, webhook in webhooks(manifests):
        is_cluster = webhook["name"] in (VALIDATING_CLUSTER_WEBHOOK_NAME, MUTATING_CLUSTER_WEBHOOK_NAME)
        over_quota = OVER_QUOTA_SPLIT.get(webhook["name"])
        expected = exempt_namespace_selector(
            ["kube-system", namespace, *extra], tenants_only=not is_cluster, over_quota=over_quota
        )
        assert webhook["namespaceSelector"] == expected
        exempt = webhook["namespaceSelector"]["matchExpressions"][0]["values"]
        assert {"kube-system", namespace} <= set(exempt)
    # The policies know what the registrations leave out: no Tenant may hold one of those namespaces
    # (tenant-namespace-conflict reads the webhook's exempt_namespaces from its inventory).
    labgate = container(one(manifests, "Deployment", "labgate-webhook"), "labgate")
    env = {e["name"]: e.get("value", "") for e in labgate["env"]}
    told = Settings.model_validate({"exempt_namespaces": json.loads(env["LABGATE_EXEMPT_NAMESPACES"])})
    assert set(told.exempt_namespaces) == {"kube-system", namespace, *extra}


@pytest.mark.parametrize(("policy", "timeout"), [("Fail", 3), ("Ignore", 10)])
def test_failure_policy_and_timeout_come_from_values(render: Renderer, policy: str, timeout: int) -> None:
    manifests = render({"webhook": {"failurePolicy": policy, "timeoutSeconds": timeout}})
    for _, webhook in webhooks(manifests):
        assert webhook["failurePolicy"] == policy
        assert webhook["timeoutSeconds"] == timeout


def test_webhooks_call_the_service(default_manifests: list[Manifest]) -> None:
    service = one(default_manifests, "Service")
    https = next(p for p in service["spec"]["ports"] if p["name"] == "https")
    assert https["port"] == 443
    assert https["targetPort"] == "https"
    paths = {"ValidatingWebhookConfiguration": "/validate", "MutatingWebhookConfiguration": "/mutate"}
    for kind, webhook in webhooks(default_manifests):
        assert webhook["clientConfig"]["service"] == {
            "name": service["metadata"]["name"],
            "namespace": NAMESPACE,
            "path": paths[kind],
            "port": 443,
        }
    webhook_pods = one(default_manifests, "Deployment", "labgate-webhook")["spec"]["template"]["metadata"]
    assert service["spec"]["selector"].items() <= webhook_pods["labels"].items()


# -- certificates -------------------------------------------------------------------------------


def test_self_signed_mode_leaves_the_ca_bundle_to_labgate(default_manifests: list[Manifest]) -> None:
    # No caBundle at all (not even ""): `helm upgrade` would otherwise overwrite the injected one.
    for _, webhook in webhooks(default_manifests):
        assert "caBundle" not in webhook["clientConfig"]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        assert "cert-manager.io/inject-ca-from" not in (
            one(default_manifests, kind)["metadata"].get("annotations") or {}
        )
    assert not [m for m in default_manifests if m["apiVersion"].startswith("cert-manager.io/")]
    deployment = one(default_manifests, "Deployment", "labgate-webhook")
    tls = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert {k: v for k, v in tls["secret"].items() if k != "items"} == {
        "secretName": "labgate-webhook-tls",
        "optional": True,
    }
    # The reconciler's leader makes and rotates the certificates: it gets the Secret's name, the
    # Service and the configurations, and may write that one Secret and inject into those two only.
    reconciler = one(default_manifests, "Deployment", "labgate-reconciler")
    args = container(reconciler, "reconciler")["args"]
    assert "--webhook-certificates-secret=labgate-webhook-tls" in args
    assert "--webhook-configuration=labgate" in args
    role = one(default_manifests, "Role", "labgate-reconciler")
    assert {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["labgate-webhook-tls", "labgate-webhook-tls-ca"],
            "verbs": ["get", "update", "patch"]} in role["rules"]  # fmt: skip
    cluster_role = one(default_manifests, "ClusterRole", "labgate-reconciler")
    injection = next(r for r in cluster_role["rules"] if r["apiGroups"] == ["admissionregistration.k8s.io"])
    assert injection["resourceNames"] == ["labgate"]


def test_a_given_ca_bundle_is_rendered(render: Renderer) -> None:
    manifests = render({"certificates": {"caBundle": "Q0EgYnVuZGxl"}})
    for _, webhook in webhooks(manifests):
        assert webhook["clientConfig"]["caBundle"] == "Q0EgYnVuZGxl"


def test_cert_manager_mode_renders_issuer_certificate_and_injection(render: Renderer) -> None:
    manifests = render(CERT_MANAGER)
    issuers = [m for m in manifests if m["kind"] == "Issuer"]
    certificates = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Certificate"}
    assert {i["metadata"]["name"] for i in issuers} == {"labgate-selfsigned", "labgate-ca"}
    assert certificates["labgate-ca"]["spec"]["isCA"] is True
    serving = certificates["labgate-webhook"]
    assert serving["spec"]["issuerRef"]["name"] == "labgate-ca"
    assert serving["spec"]["secretName"] == "labgate-webhook-tls"
    assert set(serving["spec"]["dnsNames"]) == {
        "labgate-webhook.labgate-system.svc",
        "labgate-webhook.labgate-system.svc.cluster.local",
    }
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        annotations = one(manifests, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "labgate-system/labgate-webhook"
    for _, webhook in webhooks(manifests):
        assert "caBundle" not in webhook["clientConfig"]
    deployment = one(manifests, "Deployment", "labgate-webhook")
    tls = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert {k: v for k, v in tls["secret"].items() if k != "items"} == {
        "secretName": "labgate-webhook-tls",
        "optional": False,
    }
    reconciler = one(manifests, "Deployment", "labgate-reconciler")
    assert not [a for a in container(reconciler, "reconciler")["args"] if a.startswith("--webhook-")]
    # Nothing for labgate to write: no Secret rights, no webhook-configuration rights.
    assert all("secrets" not in r["resources"] for r in one(manifests, "Role", "labgate-reconciler")["rules"])
    cluster_role = one(manifests, "ClusterRole", "labgate-reconciler")
    assert all(r["apiGroups"] != ["admissionregistration.k8s.io"] for r in cluster_role["rules"])


def test_cert_manager_mode_with_the_clusters_issuer(render: Renderer) -> None:
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    manifests = render({"certificates": {"mode": "cert-manager", "certManager": {"issuerRef": issuer}}})
    assert not [m for m in manifests if m["kind"] == "Issuer"]
    serving = one(manifests, "Certificate")
    assert serving["spec"]["issuerRef"] == issuer


# -- workloads ----------------------------------------------------------------------------------


def test_webhook_deployment_replicas_spread_and_disruption_budget(default_manifests: list[Manifest]) -> None:
    deployment = one(default_manifests, "Deployment", "labgate-webhook")
    assert deployment["spec"]["replicas"] == 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [(s["topologyKey"], s["labelSelector"]["matchLabels"]) for s in spread] == [
        ("kubernetes.io/hostname", selector)
    ]
    budget = one(default_manifests, "PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"] == selector
    assert budget["spec"]["minAvailable"] == 1


def test_a_terminating_webhook_pod_keeps_answering_and_its_opa_outlives_it(
    default_manifests: list[Manifest],
) -> None:
    """A rollout sends no call to a pod that stopped, nor to one whose OPA is gone
    (tests/e2e/test_node_helm.py measures it on a real node)."""
    deployment = one(default_manifests, "Deployment", "labgate-webhook")
    webhook = one(default_manifests, "ValidatingWebhookConfiguration")["webhooks"][0]
    labgate_delay = container(deployment, "labgate")["lifecycle"]["preStop"]["sleep"]["seconds"]
    opa_delay = container(deployment, "opa")["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert labgate_delay == 5
    assert opa_delay >= labgate_delay + webhook["timeoutSeconds"]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > opa_delay


def test_webhook_registry_settings_reach_the_provenance_settings(render: Renderer) -> None:
    provenance = {"insecureRegistries": ["172.31.254.1:5000"], "registryTimeoutSeconds": 2.0}
    manifests = render({"webhook": {"provenance": provenance}})
    labgate = container(one(manifests, "Deployment", "labgate-webhook"), "labgate")
    env = {e["name"]: e.get("value", "") for e in labgate["env"]}
    settings = ProvenanceSettings.model_validate(
        {
            "insecure_registries": json.loads(env["LABGATE_PROVENANCE_INSECURE_REGISTRIES"]),
            "registry_timeout_seconds": env["LABGATE_PROVENANCE_REGISTRY_TIMEOUT_SECONDS"],
        }
    )
    assert settings.is_insecure("172.31.254.1:5000")
    assert settings.timeout_for("172.31.254.1:5000") == 2.0
    assert "LABGATE_PROVENANCE_CA_BUNDLE" not in env, "the public roots only, unless told"


def test_a_registry_ca_config_map_is_mounted_where_the_provenance_settings_read_it(render: Renderer) -> None:
    manifests = render({"webhook": {"provenance": {"registryCAConfigMap": "lab-registry-ca"}}})
    pod = one(manifests, "Deployment", "labgate-webhook")["spec"]["template"]["spec"]
    labgate = container({"spec": {"template": {"spec": pod}}}, "labgate")
    env = {e["name"]: e.get("value", "") for e in labgate["env"]}
    bundle = Path(env["LABGATE_PROVENANCE_CA_BUNDLE"])
    mount = next(m for m in labgate["volumeMounts"] if Path(m["mountPath"]) == bundle.parent)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"] == {
        "name": "lab-registry-ca",
        "items": [{"key": "ca.crt", "path": bundle.name}],
    }
    assert mount["readOnly"] is True
    assert ProvenanceSettings.model_validate({"ca_bundle": str(bundle)}).ca_bundle == bundle


def test_webhook_container_settings_probes_and_tls(default_manifests: list[Manifest]) -> None:
    deployment = one(default_manifests, "Deployment", "labgate-webhook")
    labgate = container(deployment, "labgate")
    assert labgate["args"] == ["serve"]
    env = {e["name"]: e.get("value") for e in labgate["env"]}
    fields = {f"LABGATE_{name.upper()}" for name in Settings.model_fields}
    provenance = {f"LABGATE_PROVENANCE_{name.upper()}" for name in ProvenanceSettings.model_fields}
    assert set(env) <= fields | provenance
    assert env["LABGATE_OPA_URL"] == "http://127.0.0.1:8181"
    assert env["LABGATE_NAMESPACE"] == NAMESPACE
    # A refused policy is recorded on the ConfigMap the policies really come from.
    assert (
        env["LABGATE_POLICY_CONFIGMAP"]
        == one(default_manifests, "ConfigMap", "labgate-policies")["metadata"]["name"]
    )
    assert float(env["LABGATE_ADMISSION_DEADLINE_SECONDS"]) == 2.5
    assert float(env["LABGATE_OPA_TIMEOUT_SECONDS"]) == 2.0
    assert float(env["LABGATE_MAX_ADMISSION_WAIT_SECONDS"]) == 1.0
    assert (env["LABGATE_MAX_IN_FLIGHT"], env["LABGATE_MAX_WAITING_ADMISSIONS"]) == ("64", "256")
    # The values the chart sets are values Settings accepts.
    # (Lists arrive as JSON, which the environment source reads and model_validate does not.)
    Settings.model_validate(
        {
            k.removeprefix("LABGATE_").lower(): json.loads(v) if v.startswith("[") else v
            for k, v in env.items()
            if k in fields
        }
    )
    assert float(env["LABGATE_PROVENANCE_REGISTRY_TIMEOUT_SECONDS"]) == 1.0
    assert "LABGATE_PROVENANCE_INSECURE_REGISTRIES" not in env, "HTTPS to every registry unless told"
    # Probes use the plain-HTTP port: the admission port asks every caller for a client certificate.
    assert labgate["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert labgate["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    # A pod waiting for its certificate is not killed by the liveness probe before its wait is over.
    startup = labgate["startupProbe"]
    assert startup["httpGet"] == {"path": "/healthz", "port": "health"}
    assert float(env["LABGATE_TLS_WAIT_SECONDS"]) == 300
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300 + 60
    assert labgate["ports"] == [
        {"name": "https", "containerPort": int(env["LABGATE_PORT"]), "protocol": "TCP"},
        {"name": "health", "containerPort": int(env["LABGATE_HEALTH_PORT"]), "protocol": "TCP"},
    ]
    mounts = {m["name"]: m["mountPath"] for m in labgate["volumeMounts"]}
    assert Path(env["LABGATE_TLS_CERT_FILE"]).parent == Path(mounts["tls"])
    assert Path(env["LABGATE_TLS_KEY_FILE"]).parent == Path(mounts["tls"])
    assert Path(env["LABGATE_TLS_CLIENT_CA_FILE"]).parent == Path(mounts["client-ca"])
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    # The webhook never mounts a CA private key, whatever the Secret holds.
    assert [item["key"] for item in volumes["tls"]["secret"]["items"]] == ["tls.crt", "tls.key", "ca.crt"]
    client_ca = one(default_manifests, "ConfigMap", volumes["client-ca"]["configMap"]["name"])
    assert client_ca["data"]["ca.crt"].strip() == CLIENT_CA_PEM.decode().strip()


def test_only_the_control_plane_reaches_the_admission_port(render: Renderer) -> None:
    manifests = render({"webhook": {"networkPolicy": {"metricsFrom": [{"namespaceSelector": {}}]}}})
    policy = one(manifests, "NetworkPolicy", "labgate-webhook")
    pods = one(manifests, "Deployment", "labgate-webhook")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pods.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    admission, metrics = policy["spec"]["ingress"]
    reconcilers = one(manifests, "Deployment", "labgate-reconciler")["spec"]["template"]["metadata"]["labels"]
    # The apiserver, and the reconciler's leader asking each pod which CA its certificate is of
    # (self-signed mode: without it the previous CA is never dropped, and renewals stop behind it).
    assert admission["from"][0] == {"ipBlock": {"cidr": "10.0.0.0/24"}}
    assert admission["from"][1]["podSelector"]["matchLabels"].items() <= reconcilers.items()
    assert not admission["from"][1]["podSelector"]["matchLabels"].items() <= pods.items()
    assert len(admission["from"]) == 2
    assert admission["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert metrics["ports"] == [{"port": "health", "protocol": "TCP"}]
    # cert-manager mode: nobody in the cluster needs to look.
    cert_manager = one(render(CERT_MANAGER), "NetworkPolicy", "labgate-webhook")
    assert cert_manager["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]


@pytest.mark.parametrize("component", ["reconciler", "audit"])
def test_only_the_scrapers_named_reach_the_reconcilers_and_audits_metrics(
    render: Renderer, default_manifests: list[Manifest], component: str
) -> None:
    # Their metrics show every tenant's usage, quota and findings (issue 19, finding 10).
    pods = one(default_manifests, "Deployment", f"labgate-{component}")["spec"]["template"]["metadata"][
        "labels"
    ]
    closed = one(default_manifests, "NetworkPolicy", f"labgate-{component}-metrics")
    assert closed["spec"]["podSelector"]["matchLabels"].items() <= pods.items()
    assert closed["spec"]["policyTypes"] == ["Ingress"]
    assert closed["spec"]["ingress"] == []  # by default no pod may scrape; the kubelet's probes still do
    monitoring = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    prometheus = {"matchLabels": {"app": "prometheus"}}
    opened = render({"metrics": {"allowedNamespaceSelector": monitoring, "allowedPodSelector": prometheus}})
    assert one(opened, "NetworkPolicy", f"labgate-{component}-metrics")["spec"]["ingress"] == [
        {
            "from": [{"namespaceSelector": monitoring, "podSelector": prometheus}],
            "ports": [{"port": "metrics", "protocol": "TCP"}],
        }
    ]
    namespace_only = render({"metrics": {"allowedNamespaceSelector": monitoring}})
    rule = one(namespace_only, "NetworkPolicy", f"labgate-{component}-metrics")["spec"]["ingress"][0]
    assert rule["from"] == [{"namespaceSelector": monitoring}]
    disabled = render({"metrics": {"networkPolicy": {"enabled": False}}})
    assert not [
        m for m in disabled if m["kind"] == "NetworkPolicy" and m["metadata"]["name"].endswith("-metrics")
    ]


@pytest.mark.parametrize("component", ["reconciler", "audit"])
def test_metrics_listen_on_the_pods_own_address_unless_told(
    render: Renderer, default_manifests: list[Manifest], component: str
) -> None:
    served = container(one(default_manifests, "Deployment", f"labgate-{component}"), component)
    assert "--metrics-address=$(POD_IP)" in served["args"]
    env = {e["name"]: e.get("valueFrom") for e in served["env"]}
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    told = render({"metrics": {"listenAddress": "0.0.0.0"}})  # noqa: S104
    assert (
        "--metrics-address=0.0.0.0"
        in container(one(told, "Deployment", f"labgate-{component}"), component)["args"]
    )


def test_without_client_certificates_the_webhook_is_told_so(render: Renderer) -> None:
    manifests = render({"webhook": {"clientAuth": {"required": False, "caBundle": ""}}})
    labgate = container(one(manifests, "Deployment", "labgate-webhook"), "labgate")
    env = {e["name"]: e.get("value") for e in labgate["env"]}
    assert env["LABGATE_ALLOW_UNAUTHENTICATED_CALLERS"] == "true"
    assert "LABGATE_TLS_CLIENT_CA_FILE" not in env


def test_opa_sidecar_is_pinned_and_runs_like_the_local_stack(default_manifests: list[Manifest]) -> None:
    opa = container(one(default_manifests, "Deployment", "labgate-webhook"), "opa")
    version = pinned_versions()["OPA_VERSION"].removeprefix("v")
    assert re.fullmatch(rf"openpolicyagent/opa:{re.escape(version)}(-static)?", opa["image"])
    args = opa["args"]
    assert args[:2] == ["run", "--server"]
    assert "--addr=127.0.0.1:8181" in args
    # As in the local stack: the policies once at start, no --watch (the webhook keeps them loaded).
    assert "--watch" not in args
    assert args[-1] == "/policies"
    local = opa_argv("opa", port=0, policy_dir=Path("/p"))
    assert "--watch" not in local
    assert {a for a in args if a.startswith("--ignore=")} == {
        a for a in local if a.startswith("--ignore=")
    } | {"--ignore=..*"}
    assert {m["mountPath"] for m in opa["volumeMounts"]} == {"/policies"}


def test_the_webhook_loads_the_policies_configmap_into_opa(default_manifests: list[Manifest]) -> None:
    labgate = container(one(default_manifests, "Deployment", "labgate-webhook"), "labgate")
    env = {e["name"]: e.get("value") for e in labgate["env"]}
    mounts = {m["name"]: m["mountPath"] for m in labgate["volumeMounts"]}
    assert env["LABGATE_POLICY_DIR"] == mounts["policies"] == "/policies"


def test_every_container_runs_restricted(default_manifests: list[Manifest]) -> None:
    for manifest in default_manifests:
        if manifest["kind"] not in ("Deployment", "Job"):
            continue
        pod = manifest["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for each in pod["containers"]:
            context = each["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}


def test_self_signed_lifetimes_reach_the_reconciler_as_it_reads_them(render: Renderer) -> None:
    """certificates.selfSigned as the reconciler's flags, parsed by `labgate reconcile`'s own parser
    into the lifetimes its rotation uses (the defaults are the rotation's defaults)."""
    selected = {"duration": "2h", "renewBefore": "1h", "caDuration": "4h", "checkSeconds": 5}
    for values, expected in (
        ({}, Lifetimes()),
        ({"certificates": {"selfSigned": selected}}, lifetimes_from("2h", "1h", "4h")),
    ):
        reconciler = one(render(values), "Deployment", "labgate-reconciler")
        args = build_parser().parse_args(container(reconciler, "reconciler")["args"])
        read = lifetimes_from(
            args.certificate_duration, args.certificate_renew_before, args.certificate_ca_duration
        )
        assert read == expected
        assert args.certificate_check_seconds == (5 if values else 30)


def test_lifetimes_that_would_never_rest_stop_the_reconciler_with_the_value_to_change(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["reconcile", "--certificate-duration=720h", "--certificate-renew-before=720h"])
    assert code == 2
    assert "renewBefore 720h must be shorter than duration 720h" in capsys.readouterr().err


def test_reconciler_deployment_elects_a_leader_in_the_release_namespace(render: Renderer) -> None:
    manifests = render(namespace="research-platform")
    deployment = one(manifests, "Deployment", "labgate-reconciler")
    assert deployment["spec"]["replicas"] == 2
    reconciler = container(deployment, "reconciler")
    args = reconciler["args"]
    assert args[0] == "reconcile"
    assert "--namespace=research-platform" in args
    assert "--identity=$(POD_NAME)" in args
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in reconciler[
        "env"
    ]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "labgate-reconciler"
    role = one(manifests, "Role", "labgate-reconciler")
    assert role["metadata"]["namespace"] == "research-platform"
    assert any(r["resources"] == ["leases"] for r in role["rules"])


# -- RBAC ---------------------------------------------------------------------------------------


def _grants(manifests: list[Manifest], role_kind: str, name: str) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in one(manifests, role_kind, name)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_no_rbac_rule_uses_wildcards(default_manifests: list[Manifest]) -> None:
    for manifest in default_manifests:
        for rule in manifest.get("rules", []) if manifest["kind"] in ("Role", "ClusterRole") else []:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], manifest["metadata"]["name"]


def test_webhook_rbac_reads_what_it_watches_and_writes_only_ledgers(
    render: Renderer,
) -> None:
    manifests = render(CERT_MANAGER)
    cluster = _grants(manifests, "ClusterRole", "labgate-webhook")
    assert cluster == {
        ("", "namespaces", "get"),
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        ("labgate.io", "tenants", "get"),
        ("labgate.io", "tenants", "list"),
        ("labgate.io", "tenants", "watch"),
        ("scheduling.k8s.io", "priorityclasses", "list"),
        ("scheduling.k8s.io", "priorityclasses", "watch"),
        ("", "secrets", "get"),  # pull secrets, read by name for image provenance
        ("", "secrets", "list"),  # a metadata-only watch still needs list/watch
        ("", "secrets", "watch"),
        ("", "serviceaccounts", "get"),  # their imagePullSecrets
        ("", "persistentvolumes", "get"),  # the volume a claim names (volume-claim)
        ("", "nodes", "list"),  # the nodes of a written Tenant's pools (tenant-quota-beyond-pools)
        # the workload a scale up resizes: its pod template (gpu-quota-scale)
        ("apps", "deployments", "get"),
        ("apps", "statefulsets", "get"),
        ("apps", "replicasets", "get"),
        ("resource.k8s.io", "resourceclaims", "get"),  # a pod's claims count against its GPU quota
        ("resource.k8s.io", "resourceclaimtemplates", "get"),
        ("", "pods", "list"),  # the pods that name a claim being created or deleted (dra-claim-in-use)
        # the warn and dry-run findings of admitted objects (labgate-admission reports)
        ("wgpolicyk8s.io", "policyreports", "get"),
        ("wgpolicyk8s.io", "policyreports", "create"),
        ("wgpolicyk8s.io", "policyreports", "update"),
    }
    role = one(manifests, "Role", "labgate-webhook")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _grants(manifests, "Role", "labgate-webhook") == {
        *(("", "configmaps", verb) for verb in ("get", "list", "watch", "create", "update")),
        ("", "events", "create"),  # a refused policy, on the policies ConfigMap
    }
    binding = one(manifests, "ClusterRoleBinding", "labgate-webhook")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "labgate-webhook", "namespace": NAMESPACE}
    ]


def test_reconciler_rbac_covers_what_it_manages(default_manifests: list[Manifest]) -> None:
    cluster = _grants(default_manifests, "ClusterRole", "labgate-reconciler")
    writes = {"get", "list", "watch", "create", "update", "patch", "delete"}
    managed = [
        ("", "namespaces"),
        ("", "serviceaccounts"),
        ("", "resourcequotas"),
        ("", "limitranges"),
        ("networking.k8s.io", "networkpolicies"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
    ]
    for group, resource in managed:
        assert {(group, resource, v) for v in writes} <= cluster, resource
    # escalate and bind only on the roles that grant more than the reconciler holds, by name
    role_rules = [r for r in one(default_manifests, "ClusterRole", "labgate-reconciler")["rules"]
                  if r["resources"] == ["clusterroles"]]  # fmt: skip
    named = {v: r["resourceNames"] for r in role_rules for v in r["verbs"] if "resourceNames" in r}
    assert named == {
        "escalate": [RESEARCHER_ROLE, TENANT_ADMIN_ROLE],
        "bind": [RESEARCHER_ROLE, TENANT_ADMIN_ROLE, VIEWER_ROLE],
    }
    assert not {v for r in role_rules if "resourceNames" not in r for v in r["verbs"]} & {"escalate", "bind"}
    assert {("labgate.io", "tenants", v) for v in ("get", "list", "watch", "patch")} <= cluster
    assert {("labgate.io", "tenants/status", v) for v in ("get", "patch")} <= cluster
    assert {("", "pods", v) for v in ("get", "list", "watch")} <= cluster
    # what the scheduler allocated to claims settles a pod's DRA GPUs
    assert {("resource.k8s.io", "resourceclaims", v) for v in ("list", "watch")} <= cluster
    # what the nodes of each tenant's pools hold (status.gpu.pools, QuotaFitsPools): read only
    assert {g for g in cluster if g[1] == "nodes"} == {("", "nodes", "list"), ("", "nodes", "watch")}
    assert not {g for g in cluster if g[1] in ("secrets", "pods") and g[2] not in ("get", "list", "watch")}
    assert not {g for g in cluster if g[1] == "secrets"}, "no Secret anywhere but its own one (a Role)"
    own = _grants(default_manifests, "Role", "labgate-reconciler")
    assert {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")} <= own
    assert ("", "configmaps", "update") in own
    priority = [r for r in one(default_manifests, "ClusterRole", "labgate-reconciler")["rules"]
                if r["resources"] == ["priorityclasses"]]  # fmt: skip
    assert {"create"} == {v for r in priority if "resourceNames" not in r for v in r["verbs"]}
    names = [c["metadata"]["name"] for c in shared_priority_classes()]
    assert [r["resourceNames"] for r in priority if "resourceNames" in r] == [names]
    assert DEFAULT_PRIORITY_CLASS in names
    # the GPU backstop's count given back (rbac/backstop_recount.py): its status only, by its name
    statuses = [r for r in one(default_manifests, "ClusterRole", "labgate-reconciler")["rules"]
                if r["resources"] == ["resourcequotas/status"]]  # fmt: skip
    assert statuses == [
        {
            "apiGroups": [""],
            "resources": ["resourcequotas/status"],
            "resourceNames": [GPU_BACKSTOP_NAME],
            "verbs": ["update"],
        }
    ]
    events = one(default_manifests, "Role", "labgate-reconciler-events")
    assert events["metadata"]["namespace"] == "default"  # where rbac/reconciler.py records Tenant events


# -- uninstall ----------------------------------------------------------------------------------


def test_pre_delete_hook_removes_both_webhook_configurations(default_manifests: list[Manifest]) -> None:
    job = one(default_manifests, "Job", "labgate-pre-delete")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-delete"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    hook = job["spec"]["template"]["spec"]["containers"][0]
    assert hook["command"] == ["kubectl"]
    assert hook["args"][0] == "delete"
    assert {"validatingwebhookconfiguration/labgate", "mutatingwebhookconfiguration/labgate"} <= set(
        hook["args"]
    )
    assert "--ignore-not-found" in hook["args"]
    # Its identity exists before the Job runs (lower hook weight) and may delete only those two.
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        support = one(default_manifests, kind, "labgate-pre-delete")["metadata"]["annotations"]
        assert support["helm.sh/hook"] == "pre-delete"
        assert int(support["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
    rules = one(default_manifests, "ClusterRole", "labgate-pre-delete")["rules"]
    assert rules == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
            "resourceNames": ["labgate"],
            "verbs": ["get", "delete"],
        }
    ]
    kubernetes = pinned_versions()["KUBERNETES_VERSION"]
    assert hook["image"] == f"registry.k8s.io/kubectl:{kubernetes}"


# -- policies -----------------------------------------------------------------------------------


def _loaded_policy_files() -> dict[str, str]:
    """What `opa run --ignore=*_test.rego --ignore=samples --ignore=testdata policies/` loads."""
    files = {}
    for path in sorted(POLICIES.rglob("*")):
        relative = path.relative_to(POLICIES)
        if not path.is_file() or path.suffix not in (".rego", ".json", ".yaml", ".yml"):
            continue
        if path.name.endswith("_test.rego") or {"samples", "testdata"} & set(relative.parts[:-1]):
            continue
        files[relative.as_posix()] = path.read_text()
    return files


def test_policies_config_map_holds_every_policy_and_no_tests(default_manifests: list[Manifest]) -> None:
    expected = _loaded_policy_files()
    rego = [p for p in expected if p.endswith(".rego")]
    assert rego, "no policies found"
    assert "labgate/config/data.json" in expected
    config_map = one(default_manifests, "ConfigMap", "labgate-policies")
    data: dict[str, str] = config_map["data"]
    assert not [key for key in data if key.endswith("_test.rego")]
    deployment = one(default_manifests, "Deployment", "labgate-webhook")
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "policies")
    assert volume["configMap"]["name"] == "labgate-policies"
    # Mounted back as the policies/ tree: each key at its path under policies/.
    items = {item["path"]: item["key"] for item in volume["configMap"]["items"]}
    assert set(items) == set(expected)
    for path, content in expected.items():
        assert data[items[path]] == content, path
    assert set(data) == set(items.values())


def test_helm_package_ships_the_policies(helm: str, tmp_path: Path) -> None:
    """The chart's policies/ is a symlink to the repository's; `helm package` must store the files."""
    assert (CHART / "policies").is_symlink()
    assert (CHART / "policies").resolve() == POLICIES.resolve()
    result = run_helm(helm, "package", str(CHART), "-d", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (archive,) = tmp_path.glob("labgate-*.tgz")
    with tarfile.open(archive) as tar:
        names = {n.removeprefix("labgate/") for n in tar.getnames()}
    shipped = {n.removeprefix("policies/") for n in names if n.startswith("policies/")}
    assert set(_loaded_policy_files()) <= shipped
    assert not [n for n in shipped if n.endswith("_test.rego")]
    assert "crds/tenants.labgate.io.yaml" in names
    # The packaged chart renders the same policies ConfigMap as the directory.
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(with_cluster({})))
    packaged = run_helm(helm, "template", RELEASE, str(archive), "-n", NAMESPACE, "-f", str(values))
    assert packaged.returncode == 0, packaged.stderr
    config_maps = [
        d
        for d in yaml.safe_load_all(packaged.stdout)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "labgate-policies"
    ]
    assert set(config_maps[0]["data"]) == {p.replace("/", ".") for p in _loaded_policy_files()}


# -- labels -------------------------------------------------------------------------------------


def test_every_object_carries_the_standard_labels(render: Renderer) -> None:
    for manifest in render(CERT_MANAGER):
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "labgate"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/part-of"] == "labgate"
        assert labels["app.kubernetes.io/component"]
        assert labels["helm.sh/chart"].startswith("labgate-")


def test_image_runs_labgate_as_a_numeric_non_root_user(default_manifests: list[Manifest]) -> None:
    """runAsNonRoot can only verify a numeric USER; the chart's args are labgate subcommands."""
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.M)
    user = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert user
    assert re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", user[-1])
    assert re.search(r'^ENTRYPOINT \["labgate"\]', dockerfile, re.M)
    assert "pip install ." in dockerfile
    webhook = container(one(default_manifests, "Deployment", "labgate-webhook"), "labgate")
    reconciler = container(one(default_manifests, "Deployment", "labgate-reconciler"), "reconciler")
    assert (webhook["args"][0], reconciler["args"][0]) == ("serve", "reconcile")


# -- the scheduled audit --------------------------------------------------------------------------


def test_audit_runs_once_with_its_own_opa_and_the_webhooks_policies(render: Renderer) -> None:
    manifests = render({"audit": {"intervalSeconds": 120}}, namespace="research-platform")
    deployment = one(manifests, "Deployment", "labgate-audit")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # never two audits writing at once
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "labgate-audit"
    audit = container(deployment, "audit")
    assert audit["args"] == [
        "audit",
        "--every=120",
        "--opa-url=http://127.0.0.1:8181",
        "--policies=/policies",
        "--write-reports",
        "--metrics-port=8080",
        "--metrics-address=$(POD_IP)",
        "--platform-namespace=research-platform",
    ]
    opa = container(deployment, "opa")
    assert "--addr=127.0.0.1:8181" in opa["args"]  # its own OPA: the audit replaces data.inventory
    # The same policies as the webhook, at the same path in both containers.
    webhook_volumes = one(manifests, "Deployment", "labgate-webhook")["spec"]["template"]["spec"]["volumes"]
    policies = next(v for v in pod["volumes"] if v["name"] == "policies")
    assert policies == next(v for v in webhook_volumes if v["name"] == "policies")
    for each in (audit, opa):
        assert {"name": "policies", "mountPath": "/policies", "readOnly": True} in each["volumeMounts"]


def test_audit_rbac_lists_what_it_audits_and_writes_only_policy_reports(render: Renderer) -> None:
    manifests = render()
    cluster = _grants(manifests, "ClusterRole", "labgate-audit")
    writes = {g for g in cluster if g[2] not in ("get", "list", "watch")}
    assert writes == {
        ("wgpolicyk8s.io", "policyreports", "create"),
        ("wgpolicyk8s.io", "policyreports", "patch"),
    }
    from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS

    for kind in BUILTIN_WORKLOAD_KINDS:
        assert (kind.group, kind.resource, "list") in cluster, kind.kind
    for core in ("namespaces", "secrets", "pods"):
        assert ("", core, "list") in cluster
    assert ("", "secrets", "get") not in cluster  # metadata through list only, never a Secret read by name
    assert _grants(manifests, "Role", "labgate-audit") == {("", "configmaps", "get")}
    binding = one(manifests, "ClusterRoleBinding", "labgate-audit")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "labgate-audit", "namespace": NAMESPACE}
    ]


def test_audit_can_be_turned_off(render: Renderer) -> None:
    manifests = render({"audit": {"enabled": False}})
    assert not [m for m in manifests if m["metadata"]["name"] == "labgate-audit"]


def test_kueue_is_opt_in_and_gives_the_reconciler_its_queues(
    default_manifests: list[Manifest], render: Renderer
) -> None:
    def reconciler_view(manifests: list[Manifest]) -> tuple[bool, list[Manifest]]:
        args = container(one(manifests, "Deployment", "labgate-reconciler"), "reconciler")["args"]
        rules = one(manifests, "ClusterRole", "labgate-reconciler")["rules"]
        return "--kueue" in args, [r for r in rules if "kueue.x-k8s.io" in r["apiGroups"]]

    # Without Kueue, reading ClusterQueues only: each tenant's member role grants that read, which
    # the reconciler must hold to write the role without `escalate`.
    assert reconciler_view(default_manifests) == (
        False,
        [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["clusterqueues"],
                "verbs": ["get", "list", "watch"],
            }
        ],
    )
    told, rules = reconciler_view(render({"kueue": {"enabled": True}}))
    assert told
    assert {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors", "clusterqueues", "localqueues"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]} in rules  # fmt: skip
    assert {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads"],
        "verbs": ["get", "list", "watch"],
    } in rules


def test_with_kueue_the_webhook_watches_workload_priority_classes(
    default_manifests: list[Manifest], render: Renderer
) -> None:
    """Issue 20: queue-priority judges a WorkloadPriorityClass's value, which the webhook watches
    (LABGATE_KUEUE) only where Kueue's CRDs exist."""

    def webhook_view(manifests: list[Manifest]) -> tuple[bool, list[Manifest]]:
        env = container(one(manifests, "Deployment", "labgate-webhook"), "labgate").get("env") or []
        rules = one(manifests, "ClusterRole", "labgate-webhook")["rules"]
        told = {"name": "LABGATE_KUEUE", "value": "true"} in env
        return told, [r for r in rules if "kueue.x-k8s.io" in r["apiGroups"]]

    assert webhook_view(default_manifests) == (False, [])
    assert webhook_view(render({"kueue": {"enabled": True}})) == (
        True,
        [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["workloadpriorityclasses"],
                "verbs": ["list", "watch"],
            }
        ],
    )


def test_with_kueue_the_shipped_policies_let_kueue_admit_and_judge_every_tenant_as_queued(
    default_manifests: list[Manifest], render: Renderer
) -> None:
    """kueue.enabled alone makes a working install (issue 20): the policies' queue config says every
    tenant is Kueue's and names Kueue's controller, and Kueue's service accounts are the platform's
    (without it labgate refused Kueue's unsuspend of a Job it had admitted, [tenant-membership])."""

    def config(manifests: list[Manifest]) -> tuple[dict[str, Any], dict[str, Any]]:
        data = one(manifests, "ConfigMap", "labgate-policies")["data"]
        return json.loads(data["labgate.config.queue.data.json"]), json.loads(
            data["labgate.config.data.json"]
        )

    queue, general = config(default_manifests)
    assert queue["managed_by_kueue"] is False
    assert "system:serviceaccounts:kueue-system" not in general["trusted_groups"]
    queue, general = config(render({"kueue": {"enabled": True, "namespace": "queues"}}))
    assert queue["managed_by_kueue"] is True
    assert queue["kueue_users"] == ["system:serviceaccount:queues:kueue-controller-manager"]
    assert "system:serviceaccounts:queues" in general["trusted_groups"]
    assert "system:masters" in general["trusted_groups"]  # the rest of the config is as shipped
    assert (
        general["gpu_resources"]
        == json.loads((REPO_ROOT / "policies/labgate/config/data.json").read_text())["gpu_resources"]
    )


def test_kueues_pod_integration_reaches_the_policies_and_the_reconciler_reads_the_same_config(
    default_manifests: list[Manifest], render: Renderer
) -> None:
    """kueue.podIntegration sets the policies' queue.pod_integration (GPU pods queue behind Kueue's
    gate), and the reconciler mounts that same file (--queue-config), so it leaves out the tenants'
    labgate-gpu ResourceQuota exactly where the policies gate their GPU pods."""

    def view(manifests: list[Manifest]) -> tuple[bool, list[str]]:
        data = one(manifests, "ConfigMap", "labgate-policies")["data"]
        deployment = one(manifests, "Deployment", "labgate-reconciler")
        args = container(deployment, "reconciler")["args"]
        mounted = next(
            v["configMap"]["items"] for v in deployment["spec"]["template"]["spec"]["volumes"]
            if v["name"] == "policy-config"
        )  # fmt: skip
        assert {"key": "labgate.config.queue.data.json", "path": "queue.json"} in mounted
        assert "--queue-config=/var/run/labgate/policy-config/queue.json" in args
        return json.loads(data["labgate.config.queue.data.json"])["pod_integration"], args

    assert view(default_manifests)[0] is False
    assert view(render({"kueue": {"enabled": True}}))[0] is False
    assert view(render({"kueue": {"enabled": True, "podIntegration": True}}))[0] is True
