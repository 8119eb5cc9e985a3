"""The webhook's HTTP surface without a cluster: bad requests are 400s, a policy engine that cannot
be reached refuses (here a real closed port, not a mock), and no object shape makes a server error
(decided by a real OPA server loaded with policies/)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import _logs, metrics, trace

from cli.offline_admission import Facts, facts_from_manifests, load_manifests
from devcluster.processes import ManagedProcess, free_port, wait_until
from devcluster.stack import POLICY_DIR, opa_argv
from devcluster.tools import binary, ensure_tools
from labgate.core.logs import FIELDS_ATTRIBUTE, JsonFormatter
from tests.unit.apps import EmptyCluster, app_without_cluster
from webhook.decision_log import verify
from webhook.opa_management import InventoryStore
from webhook.settings import Settings

REVIEW: dict[str, Any] = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "vision",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["vision"]},
        "object": {"metadata": {"name": "p"}, "spec": {"containers": []}},
    },
}


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = Settings(opa_url=f"http://127.0.0.1:{free_port()}", opa_timeout_seconds=0.5)
    with TestClient(app_without_cluster(settings)) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "Invalid JSON"),
        (json.dumps({**REVIEW, "apiVersion": "v1"}).encode(), "apiVersion"),
        (json.dumps({**REVIEW, "request": {**REVIEW["request"], "uid": ""}}).encode(), "request.uid"),
        (json.dumps({k: v for k, v in REVIEW.items() if k != "request"}).encode(), "request: Field required"),
        (
            json.dumps({**REVIEW, "request": {**REVIEW["request"], "operation": "PATCH"}}).encode(),
            "operation",
        ),
    ],
)
def test_malformed_reviews_are_bad_requests_with_a_reason(
    client: TestClient, body: bytes, reason: str
) -> None:
    response = client.post("/validate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "malformed AdmissionReview"
    assert reason in response.json()["reason"]


def test_unreachable_policy_engine_refuses(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="webhook.app"):
        response = client.post("/validate", json=REVIEW)
    assert response.status_code == 200
    body = response.json()["response"]
    assert body["uid"] == "u-1"
    assert body["allowed"] is False
    assert "[policy-engine-unavailable]" in body["status"]["message"]
    # One structured line per refusal (issue 22 item 13), its reason the rule id of labgate's own.
    line = json.loads(JsonFormatter().format(refusal_record(caplog, "u-1")))
    assert line["rules"] == ["policy-engine-unavailable"]
    assert (line["uid"], line["namespace"], line["kind"], line["user"]) == ("u-1", "vision", "Pod", "alice")
    assert line["decision_ms"] > 0


def refusal_record(caplog: pytest.LogCaptureFixture, uid: str) -> logging.LogRecord:
    """The one refusal line the webhook logged for `uid`."""
    found = [r for r in caplog.records if r.name == "webhook.app" and r.getMessage().startswith("refused ")]
    found = [r for r in found if getattr(r, FIELDS_ATTRIBUTE, {}).get("uid") == uid]
    assert len(found) == 1, [r.getMessage() for r in caplog.records]
    return found[0]


def test_no_request_asks_for_an_opentelemetry_provider(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """labgate exports no OpenTelemetry. FastAPI's native telemetry, on by default, looks up the
    global tracer, meter and logger providers on every request; the webhook's app has it off, so an
    admission request asks for none of them, where FastAPI's default app asks on every request."""
    asked: list[str] = []
    for module, name in (
        (trace, "get_tracer_provider"),
        (metrics, "get_meter_provider"),
        (_logs, "get_logger_provider"),
    ):
        original = getattr(module, name)

        def counted(original: Any = original, name: str = name) -> Any:
            asked.append(name)
            return original()

        monkeypatch.setattr(module, name, counted)
    response = client.post("/validate", content=json.dumps(REVIEW))
    assert response.status_code == 200
    assert response.json()["response"]["allowed"] is False  # no OPA here: refused
    assert asked == []
    default = FastAPI()
    default.get("/ping")(lambda: {"ok": True})
    with TestClient(default) as plain:
        assert plain.get("/ping").json() == {"ok": True}
    assert "get_tracer_provider" in asked


def test_not_ready_without_policy_engine(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "opa": False,
        "inventory": True,
        "ledgers": True,
        "secrets": True,
        "facts_fresh": True,
    }
    assert client.get("/healthz").json() == {"status": "ok"}


def test_a_body_larger_than_any_admission_review_is_refused_with_413(client: TestClient) -> None:
    huge = json.dumps({**REVIEW, "padding": "x" * (4 * 1024 * 1024)}).encode()
    response = client.post("/validate", content=huge, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"] == "request body too large"
    # Without a declared length (chunked), the limit holds as the body streams in.
    chunked = client.post(
        "/validate", content=iter([huge[i : i + 65536] for i in range(0, len(huge), 65536)])
    )
    assert chunked.status_code == 413


def test_overload_past_the_line_is_refused_with_the_rate_and_what_to_do() -> None:
    from webhook.admission_gate import AdmissionGate
    from webhook.review import parse_request

    gate = AdmissionGate(2, max_waiting=1)
    assert [gate.arrive().verdict for _ in range(4)] == ["enter", "enter", "wait", "refuse"]
    request = parse_request(REVIEW["request"])
    refused = gate.arrive()
    refusal = gate.refusal(refused.ticket, "line-full").response(request)
    assert refusal.allowed is False
    assert refusal.status is not None
    assert refusal.status.code == 429
    message = refusal.status.message
    assert message.startswith("[admission-overloaded] this labgate webhook replica is deciding 2 requests")
    assert "arriving per second" in message
    assert "Fix: retry" in message
    assert gate.leave() is not None, "the freed slot goes to the waiting request"
    gate.leave()
    assert gate.arrive().verdict == "enter", "room again once requests are answered"


def test_the_probe_port_serves_probes_and_metrics_only() -> None:
    from webhook.app import probes_only

    settings = Settings(opa_url=f"http://127.0.0.1:{free_port()}", opa_timeout_seconds=0.5)
    app = app_without_cluster(settings)
    with TestClient(app) as _, TestClient(probes_only(app)) as probes:
        assert probes.get("/healthz").status_code == 200
        assert probes.get("/metrics").status_code == 200
        assert probes.post("/validate", json=REVIEW).status_code == 404
        assert probes.post("/mutate", json=REVIEW).status_code == 404


def test_stale_facts_refuse_every_decision_and_report_not_ready() -> None:
    import asyncio

    from webhook.replica import AdmissionOptions, FactSources, admission_server
    from webhook.review import parse_request

    server = admission_server(
        None,  # type: ignore[arg-type]  # never reached: stale facts refuse first
        FactSources(inventory=EmptyCluster(), age=lambda: 31.0),
        AdmissionOptions(facts_max_age=20.0),
    )
    request = parse_request(REVIEW["request"])
    for served in (asyncio.run(server.validate(request)), asyncio.run(server.mutate(request))):
        answer = served.response
        assert answer.allowed is False
        assert answer.status is not None
        assert answer.status.code == 503
        assert answer.status.message.startswith(
            "[facts-stale] this labgate webhook replica has not heard from the Kubernetes API for 31s "
            "(its bound is 20s)"
        )
    assert server.caches_synced["facts_fresh"] is False


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
pod_like = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.dictionaries(
            st.sampled_from(["name", "labels", "annotations", "namespace"]), json_values
        ),
        "spec": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "containers": json_values
                | st.lists(
                    st.dictionaries(
                        st.sampled_from(["name", "image", "resources", "env", "volumeMounts"]), json_values
                    ),
                    max_size=2,
                ),
                "volumes": json_values,
                "template": json_values,
                "nodeSelector": json_values,
                "tolerations": json_values,
            },
        ),
    },
)


class SampleCluster:
    """The inventory of the policy samples' tenants (policies/samples/inventory.yaml), written into
    OPA whole, as the webhook's InventorySync writes a listed cluster."""

    is_synced = True

    def __init__(self, url: str) -> None:
        self.facts: Facts = facts_from_manifests(
            load_manifests([POLICY_DIR / "samples" / "inventory.yaml"]), platform_namespace="labgate-system"
        )
        self.url = url

    def ensure_namespace(self, name: str) -> None:
        """Every namespace of the samples is listed already."""

    def is_known(self, name: str) -> bool:
        return True

    def tenant_of(self, namespace: str) -> str | None:
        return self.facts.tenant_of(namespace)

    def push_all(self) -> None:
        store = InventoryStore(self.url)
        try:
            store.replace_all(self.facts.inventory)
        finally:
            store.close()

    def tenant_spec(self, name: str) -> dict[str, Any] | None:
        tenant = self.facts.inventory["tenants"].get(name)
        return None if tenant is None else dict(tenant["spec"])


@pytest.fixture(scope="module")
def opa_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real OPA server with policies/ loaded as the chart loads them; stopped by pid after the module."""
    ensure_tools("opa")
    port = free_port()
    workdir = tmp_path_factory.mktemp("opa")
    process = ManagedProcess(
        "opa", opa_argv(binary("opa"), port=port, policy_dir=POLICY_DIR), workdir / "opa.log"
    )
    process.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _is_healthy(url), what="OPA /health", timeout=30, watch=[process])
        yield url
    finally:
        process.stop()


def _is_healthy(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
        return bool(response.status == 200)


@pytest.fixture(scope="module")
def decided(opa_url: str) -> Iterator[TestClient]:
    """The webhook app asking the real OPA server."""
    settings = Settings(opa_url=opa_url, opa_timeout_seconds=2.0, admission_deadline_seconds=2.5)
    cluster = SampleCluster(opa_url)
    cluster.push_all()
    with TestClient(app_without_cluster(settings, cluster)) as test_client:
        yield test_client


MEMBER = {"username": "alice", "groups": ["team-a", "system:authenticated"]}


def _member_review(kind: str, obj: Any) -> dict[str, Any]:
    resource = {"Pod": "pods", "Job": "jobs", "Deployment": "deployments"}.get(kind, kind.lower() + "s")
    group = {"Job": "batch", "Deployment": "apps", "NetworkPolicy": "networking.k8s.io"}.get(kind, "")
    request = {
        **REVIEW["request"],
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "namespace": "team-a",
        "userInfo": MEMBER,
        "object": obj,
    }
    return {**REVIEW, "request": request}


def test_the_real_decision_source_admits_a_members_pod_and_refuses_a_host_network_one(
    decided: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The fuzzing below reaches the policies: the same app admits and refuses as the rules say."""
    spec = {"containers": [{"name": "main", "image": "registry.lab.example/research/trainer:v1"}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}
    admitted = decided.post("/validate", json=_member_review("Pod", pod)).json()["response"]
    assert admitted["allowed"] is True, admitted
    hostile = {**pod, "spec": {**spec, "hostNetwork": True}}
    with caplog.at_level(logging.INFO, logger="webhook.app"):
        refused = decided.post("/validate", json=_member_review("Pod", hostile)).json()["response"]
    assert refused["allowed"] is False
    assert refused["status"]["message"].startswith("[pod-hardening]"), refused["status"]["message"]
    line = json.loads(JsonFormatter().format(refusal_record(caplog, "u-1")))
    assert line["rules"] == ["pod-hardening"]
    assert line["tenant"] == "team-a"


def test_an_integer_beyond_64_bits_is_decided_not_an_internal_error(decided: TestClient) -> None:
    """JSON allows it and OPA reads it; the request body to OPA must still be written (found by the
    fuzzing below once it had a real OPA to ask)."""
    obj = {"metadata": {"name": "p"}, "spec": {"containers": [], "priority": -(2**63) - 1}}
    for path in ("/validate", "/mutate"):
        answer = decided.post(path, json=_member_review("Pod", obj)).json()["response"]
        assert "[policy-engine-unavailable]" not in (answer.get("status") or {}).get("message", "")


@pytest.mark.parametrize("containers", [1, "main", {"name": "main"}, [1, None]])
def test_containers_that_are_not_a_list_of_objects_are_decided(decided: TestClient, containers: Any) -> None:
    """Found by the fuzzing below once it reached the input builder: image references read every
    container list as a list."""
    for kind, obj in (
        ("Pod", {"metadata": {"name": "p"}, "spec": {"containers": containers}}),
        ("Job", {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"initContainers": containers}}}}),
    ):
        for path in ("/validate", "/mutate"):
            response = decided.post(path, json=_member_review(kind, obj))
            assert response.status_code == 200, response.text
            message = (response.json()["response"].get("status") or {}).get("message", "")
            assert "[policy-engine-unavailable]" not in message, (kind, path, message)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    obj=pod_like, kind=st.sampled_from(["Pod", "Job", "Deployment", "NetworkPolicy", "Secret", "Namespace"])
)
def test_no_object_shape_makes_a_server_error(decided: TestClient, obj: dict[str, Any], kind: str) -> None:
    """Whatever an object looks like, the webhook answers with a verdict of the policies (admitted or
    refused, never "the policy engine is unavailable"), or a 400 for a review that is not one; never a
    500 that kubectl would show as 'failed calling webhook'."""
    for path in ("/validate", "/mutate"):
        response = decided.post(path, json=_member_review(kind, obj))
        assert response.status_code in (200, 400), response.text
        if response.status_code == 200:
            answer = response.json()["response"]
            assert answer["uid"] == REVIEW["request"]["uid"]
            message = (answer.get("status") or {}).get("message", "")
            assert "[policy-engine-unavailable]" not in message, message
            assert "[request-too-large]" not in message, message


@pytest.fixture
def silent_engine_port() -> Iterator[int]:
    """A real TCP port that accepts connections and never answers: an OPA that hangs."""
    import socket

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()


def _review_with_env(entries: int) -> dict[str, Any]:
    env = [{"name": f"V{i}", "value": "x" * 40} for i in range(entries)]
    spec = {"containers": [{"name": "main", "image": "registry.lab.example/a:1", "env": env}]}
    return {**REVIEW, "request": {**REVIEW["request"], "object": {"metadata": {"name": "p"}, "spec": spec}}}


def test_a_large_request_not_decided_in_time_is_too_large_not_a_retry(silent_engine_port: int) -> None:
    settings = Settings(
        opa_url=f"http://127.0.0.1:{silent_engine_port}",
        opa_timeout_seconds=2.0,
        admission_deadline_seconds=0.3,
        max_admission_wait_seconds=0.1,
        complex_request_bytes=64 * 1024,
    )
    with TestClient(app_without_cluster(settings)) as client:
        large = client.post("/validate", json=_review_with_env(2000)).json()["response"]
        small = client.post("/validate", json=_review_with_env(1)).json()["response"]
    assert large["allowed"] is False
    assert large["status"]["code"] == 413
    message = large["status"]["message"]
    assert message.startswith('[request-too-large] Pod "p" is ')
    assert "KiB as an admission request and could not be decided within 0.3s" in message
    assert "requests above 64 KiB may be too complex to decide in time. Fix: split it" in message
    assert "retry" not in message
    assert small["allowed"] is False
    assert small["status"]["message"].startswith("[policy-engine-unavailable]")


def test_a_request_above_the_size_limit_is_refused_at_once(silent_engine_port: int) -> None:
    settings = Settings(
        opa_url=f"http://127.0.0.1:{silent_engine_port}",
        admission_deadline_seconds=2.0,
        max_request_bytes=32 * 1024,
    )
    with TestClient(app_without_cluster(settings)) as client:
        body = json.dumps(_review_with_env(1000)).encode()
        response = client.post("/validate", content=body, headers={"content-type": "application/json"})
    refusal = response.json()["response"]
    assert refusal["allowed"] is False
    assert refusal["status"]["message"].startswith(
        f'[request-too-large] Pod "p" is {len(body) / 1024:.0f} KiB as an admission request; labgate '
        "decides requests up to 32 KiB. Fix: split it"
    )


def _open_files() -> set[str]:
    fds = Path("/proc/self/fd")
    return {os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink()}


def test_each_run_of_the_app_owns_its_decision_log_and_closes_it_when_stopped(tmp_path: Path) -> None:
    """The decision log and its writer thread belong to the app's lifespan: what a run decided is
    in the file when it stops (the chain continued by the next run) and the file is closed, so a
    rotated log is not held open by a stopped app."""
    log_file = tmp_path / "decisions.jsonl"
    settings = Settings(
        opa_url=f"http://127.0.0.1:{free_port()}", opa_timeout_seconds=0.5, decision_log_file=log_file
    )
    app = app_without_cluster(settings)
    for uid in ("u-1", "u-2"):
        with TestClient(app) as client:
            review = {**REVIEW, "request": {**REVIEW["request"], "uid": uid}}
            assert client.post("/validate", json=review).json()["response"]["allowed"] is False
        assert str(log_file) not in _open_files()
        assert not [t for t in threading.enumerate() if t.name.startswith("decision-log")]

    lines = log_file.read_text().splitlines()
    assert [json.loads(line)["uid"] for line in lines] == ["u-1", "u-2"]
    assert [json.loads(line)["reason"] for line in lines] == ["policy-engine-unavailable"] * 2
    assert verify(lines).ok
