"""Runtime configuration of the webhook, from LABGATE_* environment variables (or CLI flags)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """How the webhook finds OPA and the Kubernetes API, and how it serves TLS."""

    model_config = SettingsConfigDict(env_prefix="LABGATE_", extra="forbid")

    opa_url: str = Field(default="http://127.0.0.1:8181", description="Base URL of the OPA server (sidecar).")
    opa_timeout_seconds: float = Field(
        default=1.0,
        gt=0,
        le=2.5,
        description="Deadline for one policy query; stays well under the apiserver's 3 s webhook timeout.",
    )
    admission_deadline_seconds: float = Field(
        default=2.5,
        gt=0,
        le=2.9,
        description="Deadline for a whole admission decision; past it the request is refused, not admitted.",
    )
    max_concurrent_admissions: int = Field(
        default=128,
        gt=0,
        description=(
            "Admission requests one replica decides at once (GPU pods waiting for their batch included); "
            "beyond it a request is refused at once with [admission-overloaded] instead of queued."
        ),
    )
    kubeconfig: Path | None = Field(
        default=None, description="Kubeconfig to reach the API; unset means in-cluster service account."
    )
    host: str = Field(default="0.0.0.0", description="Address the HTTPS server binds to.")  # noqa: S104
    port: int = Field(default=8443, description="HTTPS port.")
    tls_cert_file: Path | None = Field(default=None, description="PEM serving certificate (chain).")
    tls_key_file: Path | None = Field(default=None, description="PEM private key of the serving certificate.")
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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
