"""A steady stream of admission requests through the apiserver, every answer recorded: what a
`helm upgrade` (a rollout, a policy change) does to the calls made while it runs.

    with AdmissionStream(kubeconfig, "team-a", {"allowed": pod, "refused-later": other}, workdir) as stream:
        ...                                    # helm upgrade, rollout
    stream.calls                               # every Call: which object, when, HTTP status, message, took

Each call is a server-side dry run (`POST .../pods?dryRun=All`): it goes through both of labgate's
webhooks (sideEffects NoneOnDryRun) and stores nothing, so the stream costs the node no pod. The
objects are sent in turn, one call at a time, about `rate` calls a second.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

# How labgate's own refusals read in the apiserver's answer; anything else that is not a success
# is the machinery failing (the webhook unreachable, a timeout, a 500), never the policy's verdict.
VERDICT_PREFIX = 'admission webhook "validate.labgate.io" denied the request: ['
# A refusal by either of labgate's webhooks, with its rule id: a verdict (a 403) or labgate saying it
# could not decide ([policy-engine-unavailable], a 503; [admission-overloaded], a 429).
_LABGATE_REFUSAL = re.compile(r'admission webhook "[a-z.-]+labgate\.io" denied the request: \[([a-z0-9-]+)\]')
# What the apiserver says when it could not get an answer from a webhook, and the cause's short name.
_CALL_FAILURES = (
    ("connection refused", "webhook connection refused"),
    ("no endpoints available", "webhook has no endpoints"),
    ("context deadline exceeded", "webhook timeout"),
    ("Client.Timeout", "webhook timeout"),
    ("connection reset", "webhook connection reset"),
    ("EOF", "webhook connection closed (EOF)"),
)


@dataclass(frozen=True)
class Call:
    """One admission request: which object, seconds since the stream began, and the answer."""

    object: str
    at: float
    status: int  # the HTTP status; 0 when no answer came (connection refused, a timeout)
    message: str
    took: float = 0.0  # seconds from sending the request to its answer (or to the error)

    @property
    def is_admitted(self) -> bool:
        return self.status in (200, 201)

    @property
    def is_policy_verdict(self) -> bool:
        """Refused by labgate's policy (a 403 carrying a rule id), not failed."""
        return self.status == 403 and self.message.startswith(VERDICT_PREFIX)

    @property
    def is_failed(self) -> bool:
        return not self.is_admitted and not self.is_policy_verdict

    @property
    def reason(self) -> str:
        """Why it was not admitted, in a few words: a labgate refusal's rule id in brackets
        (`[gpu-quota]`, `[policy-engine-unavailable]`), or what failed on the way to the webhook
        (`webhook connection refused`, `webhook timeout`, `client ReadTimeout`); "admitted" when it was,
        and "unexplained <status>: <message>" for anything else."""
        if self.is_admitted:
            return "admitted"
        if self.status == 0:
            return f"client {self.message.partition(':')[0]}"
        refusal = _LABGATE_REFUSAL.search(self.message)
        if refusal is not None:
            return f"[{refusal.group(1)}]"
        if "failed calling webhook" in self.message:
            return next(
                (short for cue, short in _CALL_FAILURES if cue in self.message), "webhook call failed"
            )
        return f"unexplained {self.status}: {self.message[:160]}"


class AdmissionStream:
    """A background thread sending `objects` (name -> Pod manifest) to the apiserver as the
    kubeconfig's user, in turn, until the context exits."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        objects: Mapping[str, dict[str, Any]],
        workdir: Path,
        *,
        rate: float = 4.0,
    ):
        self.namespace = namespace
        self.objects = dict(objects)
        self.interval = 1.0 / rate
        self.calls: list[Call] = []
        self._server, self._ssl = api_credentials(kubeconfig, workdir)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="admission-stream", daemon=True)
        self._began = 0.0

    def __enter__(self) -> AdmissionStream:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def seconds(self) -> float:
        """Seconds since the stream began (the `at` of the calls)."""
        return round(time.monotonic() - self._began, 2)

    def _run(self) -> None:
        url = f"{self._server}/api/v1/namespaces/{self.namespace}/pods"
        # A new connection per call would hide nothing and cost the loaded machine; one client, as kubectl keeps.
        with httpx.Client(verify=self._ssl, timeout=15.0) as client:
            while not self._stop.is_set():
                for name, manifest in self.objects.items():
                    began = time.monotonic()
                    self.calls.append(self._call(client, url, name, manifest))
                    self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
                    if self._stop.is_set():
                        return

    def _call(self, client: httpx.Client, url: str, name: str, manifest: dict[str, Any]) -> Call:
        at = self.seconds()
        began = time.monotonic()
        try:
            answer = client.post(url, params={"dryRun": "All"}, json=manifest)
        except httpx.HTTPError as error:
            return Call(name, at, 0, f"{type(error).__name__}: {error}", time.monotonic() - began)
        took = time.monotonic() - began
        message = ""
        if answer.status_code not in (200, 201):
            try:
                message = str(answer.json().get("message", answer.text))
            except json.JSONDecodeError:
                message = answer.text
        return Call(name, at, answer.status_code, message, took)


def api_credentials(kubeconfig: Path, workdir: Path) -> tuple[str, ssl.SSLContext]:
    """The server and a TLS context with the kubeconfig's CA and client certificate (embedded data,
    as devcluster writes them); the certificate and key are written to `workdir` (one per user)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    workdir.mkdir(parents=True, exist_ok=True)
    name = user_name(config)
    certificate, key = workdir / f"{name}-client.crt", workdir / f"{name}-client.key"
    certificate.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    key.chmod(0o600)
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    context.load_cert_chain(certificate, key)
    return str(cluster["server"]), context


def user_name(config: dict[str, Any]) -> str:
    """The kubeconfig's user name (its first user), safe as a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(config["users"][0]["name"]))
