"""Prometheus metrics of the webhook (served at /metrics) and of the reconciler (--metrics-port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ADMISSION_REQUESTS = Counter(
    "labgate_admission_requests_total",
    "Admission requests answered, by webhook (validate, mutate), verdict (admitted, refused) and tenant",
    ["webhook", "verdict", "tenant"],
)
RULE_FINDINGS = Counter(
    "labgate_admission_rule_findings_total",
    "Rule findings, by rule id, enforcement mode (enforce, warn, dry-run) and tenant",
    ["rule", "mode", "tenant"],
)
ADMISSION_SECONDS = Histogram(
    "labgate_admission_duration_seconds",
    "Time to answer one admission request, by webhook",
    ["webhook"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
POLICY_ENGINE_ERRORS = Counter(
    "labgate_policy_engine_errors_total",
    "Requests refused because no policy decision could be had, by reason (timeout, error, internal)",
    ["reason"],
)
ADMISSION_OVERLOADED = Counter(
    "labgate_admission_overloaded_total",
    "Admission requests refused with [admission-overloaded], by cause: line-full (the line of waiting "
    "requests was full when it came), waited (no slot within the wait bound), pushed-out (it gave its "
    "place in a full line up to another tenant's request)",
    ["cause"],
)
ADMISSION_WAIT_SECONDS = Histogram(
    "labgate_admission_wait_seconds",
    "Time a request that found every slot taken waited for one (given one, refused or gone)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
ADMISSION_CONNECTIONS = Counter(
    "labgate_admission_connections_total",
    "Connections to the admission port whose TLS handshake completed (each a full handshake: the "
    "apiserver never resumes a session, and opens a connection for each call beyond its 25 idle ones)",
)
MEMORY_RETURNS = Counter(
    "labgate_memory_returns_total",
    "Times the replica gave the allocator's free memory back to the system after a burst of admissions",
)
ADMISSION_IN_FLIGHT = Gauge(
    "labgate_admission_in_flight",
    "Admission requests the replica is deciding now (at most LABGATE_MAX_IN_FLIGHT)",
)
ADMISSION_WAITING = Gauge(
    "labgate_admission_waiting",
    "Admission requests waiting for a slot now (at most LABGATE_MAX_WAITING_ADMISSIONS)",
)
DECISION_RECORDS_DROPPED = Counter(
    "labgate_decision_records_dropped_total",
    "Decision records not written because the bound of records waiting for the decision log's "
    "writer was reached (a writer held up by a slow disk or a blocked stdout)",
)
DECISIONS_REUSED = Counter(
    "labgate_admission_decisions_reused_total",
    "Pod creations answered with the decision made for an identical pod moments before (no policy "
    "evaluation), by webhook (validate, mutate)",
    ["webhook"],
)
FACTS_AGE = Gauge(
    "labgate_facts_age_seconds",
    "Seconds since the Kubernetes API last proved the replica's stalest watch-fed cache current",
)
LEDGER_CONFLICTS = Counter(
    "labgate_gpu_ledger_conflicts_total",
    "Compare-and-swap races lost on a tenant's GPU ledger (each re-reads and decides again)",
    ["tenant"],
)
LEDGER_FULL = Counter(
    "labgate_gpu_ledger_full_total",
    "GPU pods refused because the tenant's GPU ledger could not hold one more reservation",
    ["tenant"],
)
GPU_USED = Gauge(
    "labgate_gpu_used",
    "GPUs in use or reserved, per tenant and model (model 'all' is the total)",
    ["tenant", "model"],
)
GPU_LIMIT = Gauge(
    "labgate_gpu_limit", "GPU quota, per tenant and model (model 'all' is the total)", ["tenant", "model"]
)
POLICY_REVISION = Gauge(
    "labgate_policy_revision_info",
    "1 for the revision (digest of the policy directory) OPA serves, loaded completely by the webhook",
    ["revision"],
)
POLICY_RELOAD_ERROR = Gauge(
    "labgate_policy_reload_error",
    "1 while the policy directory holds a change OPA refused (parse or compile error); see /readyz",
)
POLICY_RELOADS = Counter(
    "labgate_policy_reloads_total", "Policy loads by result (loaded, failed)", ["result"]
)
POLICY_REPORT_WRITES = Counter(
    "labgate_policy_report_writes_total",
    "Writes of the labgate-admission PolicyReports, per namespace and pass, by result (written, unchanged, failed, namespace-gone)",
    ["result"],
)
POLICY_REPORT_PENDING = Gauge(
    "labgate_policy_report_pending", "Admitted objects whose findings wait for the next PolicyReport write"
)
POLICY_REPORT_DROPPED = Counter(
    "labgate_policy_report_findings_dropped_total",
    "Admitted objects' findings not reported because the pending bound was reached (the API was slow or down)",
)
AUDIT_VIOLATIONS = Gauge(
    "labgate_audit_violations",
    "Findings of the last scheduled audit of existing workloads and Tenants, by rule id, mode and tenant "
    "(mode enforce: what the current policies would refuse now)",
    ["rule", "mode", "tenant"],
)
AUDIT_OBJECTS = Gauge("labgate_audit_objects", "Workloads and Tenants the last audit evaluated")
AUDIT_DURATION = Gauge("labgate_audit_duration_seconds", "How long the last audit run took")
AUDIT_LAST_RUN = Gauge(
    "labgate_audit_last_run_timestamp_seconds", "When the last audit run finished (Unix time)"
)
AUDIT_RUNS = Counter("labgate_audit_runs_total", "Audit runs, by result (ok, failed)", ["result"])
