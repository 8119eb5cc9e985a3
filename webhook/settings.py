"""Runtime configuration of the webhook, from LABGATE_* environment variables (or CLI flags)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from webhook.references import DEFAULT_MAX_REFERENCES


class Settings(BaseSettings):
    """How the webhook finds OPA and the Kubernetes API, and how it serves TLS."""

    model_config = SettingsConfigDict(env_prefix="LABGATE_", extra="forbid")

    opa_url: str = Field(default="http://127.0.0.1:8181", description="Base URL of the OPA server (sidecar).")
    opa_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        le=2.5,
        description="Deadline for one policy query; under the whole decision's deadline (2.5 s), itself under the "
        "apiserver's 3 s webhook timeout. A burst of pod creations on a busy node can need more than 1 s.",
    )
    admission_deadline_seconds: float = Field(
        default=2.5,
        gt=0,
        le=2.9,
        description="Deadline for a whole admission decision, from the request's arrival (the wait for "
        "a slot included); past it the request is refused, not admitted.",
    )
    max_request_bytes: int = Field(
        default=3 * 1024 * 1024,
        gt=0,
        description="AdmissionReviews larger than this are refused at once with [request-too-large] "
        "(the default is the apiserver's own request limit).",
    )
    complex_request_bytes: int = Field(
        default=256 * 1024,
        gt=0,
        description="A request at least this large that is not decided within the deadline is refused "
        "with [request-too-large] (too complex to decide in time), not [policy-engine-unavailable].",
    )
    kubeconfig: Path | None = Field(
        default=None, description="Kubeconfig to reach the API; unset means in-cluster service account."
    )
    host: str = Field(default="0.0.0.0", description="Address the HTTPS server binds to.")  # noqa: S104
    port: int = Field(default=8443, description="HTTPS port.")
    tls_cert_file: Path | None = Field(default=None, description="PEM serving certificate (chain).")
    tls_key_file: Path | None = Field(default=None, description="PEM private key of the serving certificate.")
    tls_wait_seconds: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="At start, wait this long for the certificate and key files to appear (a Secret "
        "volume the reconciler or cert-manager has not filled yet) before giving up; 0: do not wait.",
    )
    tls_client_ca_file: Path | None = Field(
        default=None,
        description="PEM CA bundle of the client certificate the apiserver presents (its AdmissionConfiguration "
        "kubeConfigFile): /validate and /mutate accept TLS connections only from clients it signed.",
    )
    allow_unauthenticated_callers: bool = Field(
        default=False,
        description="Serve without asking callers for a client certificate (an apiserver that cannot present "
        "one); then only the network (the chart's NetworkPolicy) keeps others from the admission port.",
    )
    health_port: int = Field(
        default=8081,
        description="Plain-HTTP port for /healthz, /readyz and /metrics only (the kubelet's probes carry no "
        "client certificate); 0 turns it off.",
    )
    reservation_seconds: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="How long a GPU reservation waits for its pod to appear before it is released.",
    )
    kueue: bool = Field(
        default=False,
        description="Kueue runs beside labgate (its CRDs are installed): watch its WorkloadPriorityClasses, "
        "whose values queue-priority judges against a tenant's priority ceiling.",
    )
    facts_max_age_seconds: float = Field(
        default=20.0,
        gt=0,
        description="Oldest the watch-fed facts (tenants, namespaces, ledgers, secrets) may be: past it the "
        "replica refuses decisions with [facts-stale] and reports not ready.",
    )
    watch_timeout_seconds: int = Field(
        default=10,
        gt=0,
        description="Server timeout of every watch; each watch is re-established this often, which proves "
        "the connection to the API alive (the client read timeout is a few seconds longer).",
    )
    max_body_bytes: int = Field(
        default=3 * 1024 * 1024 + 64 * 1024,
        gt=0,
        description="Largest admission request body accepted (the apiserver sends at most about 3 MB); "
        "larger ones get 413.",
    )
    max_in_flight: int = Field(
        default=64,
        gt=0,
        description="Admission requests decided at once by one replica (its slots); more wait for a "
        "slot, fairly between tenants. 64 is about twice what one replica has in flight at the "
        "rate it sustains (docs/operations.md, 'Overload and one tenant's flood').",
    )
    max_in_flight_per_tenant: int = Field(
        default=56,
        gt=0,
        description="Slots one tenant's requests (the tenant label of the request's namespace) may hold "
        "at once; more of that tenant's wait, so that the rest of max_in_flight stays free for other "
        "tenants even while one tenant's decisions are slow. Requests outside any tenant's namespace "
        "share one such share.",
    )
    max_admission_wait_seconds: float = Field(
        default=1.0,
        gt=0,
        description="Longest a request waits for a slot before it is refused with "
        "[admission-overloaded]; the wait counts against admission_deadline_seconds, so it must be "
        "below it (what is left is the decision's).",
    )
    max_waiting_admissions: int = Field(
        default=256,
        ge=0,
        description="Requests one replica lets wait for a slot (each holds its request body); past it "
        "a newcomer is refused at once with [admission-overloaded], or, when its tenant has fewer "
        "waiting than the tenant with the most, that tenant's newest waiter is.",
    )
    max_references_per_request: int = Field(
        default=DEFAULT_MAX_REFERENCES,
        gt=0,
        description="Most objects one request's pod templates may name that labgate reads to decide it "
        "(DRA claims, PersistentVolumes of claim templates, and for tenants with image rules their "
        "images and pull credentials); more are refused with [too-many-references], before any is read.",
    )
    decision_reuse_seconds: float = Field(
        default=2.0,
        ge=0,
        description="A Pod CREATE identical to one admitted moments before but for the pod's name and "
        "uid (a Job's copies) gets that decision without a policy evaluation, for at most this long and "
        "while the tenants and policies OPA holds stay the same; 0 evaluates every pod.",
    )
    memory_return_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How often the replica looks whether a burst of admissions is over (a window of at "
        "most a tenth of the busiest one's requests); once it is, the memory the burst left free is "
        "given back to the system (glibc's malloc_trim). 0 never gives it back.",
    )
    workload_kinds_file: Path | None = Field(
        default=None,
        description="YAML list of extra workload kinds (group, version, kind, resource, template paths).",
    )
    decision_log_file: Path | None = Field(
        default=None,
        description="Append hash-chained JSON decision records here (verify: labgate decisions verify).",
    )
    decision_log_stdout: bool = Field(default=False, description="Also write decision records to stdout.")
    namespace: str = Field(
        default="labgate-system", description="labgate's own namespace (never intercepted)."
    )
    exempt_namespaces: list[str] = Field(
        default_factory=list,
        description="The namespaces the webhook registrations leave out besides `namespace` and kube-* "
        "(the chart's webhook.exemptNamespaces, as JSON): no Tenant may hold one (tenant-namespace-conflict).",
    )
    policy_dir: Path | None = Field(
        default=None,
        description="Load the policies from this directory into OPA and keep them loaded (new files and "
        "folders within policy_poll_seconds; errors in /readyz and metrics). Unset: OPA loads its own.",
    )
    policy_poll_seconds: float = Field(
        default=1.0, gt=0, description="How often policy_dir is read for changes."
    )
    policy_configmap: str = Field(
        default="labgate-policies",
        description="The ConfigMap (in `namespace`) the policies come from: a policy OPA refuses, and its "
        "fix, are recorded as Events on it (PolicyReloadFailed, PolicyReloaded).",
    )
    policy_reports: bool = Field(
        default=True,
        description="Write the warn and dry-run findings of admitted objects into the PolicyReport "
        "labgate-admission of their namespace (off the request path; webhook/policy_reports.py).",
    )
    policy_report_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often the pending findings are written (per namespace, coalesced).",
    )
    policy_report_max_pending: int = Field(
        default=10_000,
        ge=1,
        description="Most admitted objects whose findings wait to be written; beyond it findings are "
        "dropped and counted (labgate_policy_report_findings_dropped_total).",
    )

    @model_validator(mode="after")
    def _wait_within_deadline(self) -> Self:
        # The wait for a slot is part of the admission deadline: a wait as long leaves no time to decide.
        if self.max_admission_wait_seconds >= self.admission_deadline_seconds:
            raise ValueError(
                f"max_admission_wait_seconds ({self.max_admission_wait_seconds}) must be below "
                f"admission_deadline_seconds ({self.admission_deadline_seconds})"
            )
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
