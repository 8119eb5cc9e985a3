"""`labgate`: the one command line of the project.

labgate serve                 run the admission webhook (settings from LABGATE_* variables)
labgate reconcile             run the tenant reconciler
labgate check -f FILE --as U  what a researcher applying FILE would see, evaluated offline
labgate policy test           opa fmt/check/test and every policy sample
labgate decisions verify FILE check the hash chain of a decision log
labgate generate              write the chart and policy files generated from the Python (a checkout)

The local control plane for trying labgate out is not part of the shipped command: it is
`python -m devcluster up|down` in a checkout (what `make run` and `make stop` call).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labgate.core.errors import LabgateError

if TYPE_CHECKING:  # imported where used, so that `labgate serve` starts without the offline check
    from cli.offline_admission import CheckResult, OfflineOpa
    from labgate.gpu_accounting.ledger import GpuAmount
    from rbac.reconciler import PolicyConfig
    from webhook.pod_templates import WorkloadKind
    from webhook.settings import Settings


class _ServeRefusedError(LabgateError):
    """`labgate serve` cannot start: the exit code and what to do about it."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _serving_files(settings: Settings) -> tuple[Path, Path]:
    """The certificate and key files to serve, once they exist (waiting the bounded
    LABGATE_TLS_WAIT_SECONDS); _ServeRefusedError when the settings or the files do not allow serving."""
    from webhook.tls_reload import wait_for_files

    cert_file, key_file = settings.tls_cert_file, settings.tls_key_file
    if cert_file is None or key_file is None:
        raise _ServeRefusedError(2, "LABGATE_TLS_CERT_FILE and LABGATE_TLS_KEY_FILE are required")
    if settings.tls_client_ca_file is None and not settings.allow_unauthenticated_callers:
        raise _ServeRefusedError(
            2,
            "LABGATE_TLS_CLIENT_CA_FILE is required: the CA of the client certificate the "
            "apiserver presents to webhooks (see docs/operations.md, 'Authenticating the apiserver'); set "
            "LABGATE_ALLOW_UNAUTHENTICATED_CALLERS=true only where the apiserver cannot present one",
        )
    missing = wait_for_files((cert_file, key_file), timeout=settings.tls_wait_seconds)
    if missing:
        raise _ServeRefusedError(
            1,
            f"no certificate in {', '.join(map(str, missing))} after {settings.tls_wait_seconds:.0f}s "
            "(LABGATE_TLS_WAIT_SECONDS). In the chart's self-signed mode the reconciler's leader writes it: "
            "see its log (kubectl logs -l app.kubernetes.io/component=reconciler); with cert-manager, "
            "`kubectl describe certificate`",
        )
    return cert_file, key_file


def _serve(_: argparse.Namespace) -> int:
    import uvicorn

    from webhook.app import create_app, probes_only
    from webhook.http_guard import admission_server_config
    from webhook.servers import EVENT_LOOP, run_servers
    from webhook.settings import get_settings
    from webhook.tls_reload import CertificateReloader

    settings = get_settings()
    try:
        cert_file, key_file = _serving_files(settings)
    except _ServeRefusedError as refused:
        print(f"labgate serve: {refused}", file=sys.stderr)
        return refused.code
    app = create_app(settings)
    config = admission_server_config(app, settings)
    config.load()  # builds the SSLContext that the reloader refreshes when the files are renewed
    if config.ssl is None:
        print("labgate serve: TLS did not load", file=sys.stderr)
        return 2
    reloader = CertificateReloader(config.ssl, cert_file, key_file)
    reloader.start()
    servers = [uvicorn.Server(config)]
    if settings.health_port:
        probes = uvicorn.Config(
            probes_only(app),
            host=settings.host,
            port=settings.health_port,
            lifespan="off",  # the admission server's lifespan owns the clients both answer from
            loop=EVENT_LOOP,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=5,
        )
        servers.append(uvicorn.Server(probes))

    try:
        run_servers(servers)
    finally:
        reloader.stop()
    return 0


def _reconciler_policy_config(args: argparse.Namespace) -> PolicyConfig:
    """What the reconciler follows of the policies' configuration (`--gpu-config`, `--queue-config`;
    the reconciler's defaults for what is not given)."""
    import json
    from dataclasses import replace

    from labgate.core.queue_config import QueueConfig
    from labgate.core.tenant import TenantLimits
    from labgate.gpu_accounting.demand import GpuCounting
    from rbac.desired import METADATA_ADDRESSES, ipv4_exceptions
    from rbac.reconciler import PolicyConfig

    policy = PolicyConfig()
    if args.gpu_config:
        config = json.loads(Path(args.gpu_config).read_text(encoding="utf-8"))
        # The infra team's default tenant limits: the per-namespace ResourceQuota follows them.
        limits = TenantLimits.model_validate(config.get("tenant_limits") or {})
        # The cloud metadata addresses: every tenant's baseline egress excepts them.
        addresses = tuple(config.get("metadata_addresses", METADATA_ADDRESSES))
        try:
            ipv4_exceptions(addresses)
        except ValueError as error:
            raise SystemExit(f"labgate reconcile: {args.gpu_config}: metadata_addresses: {error}") from None
        policy = PolicyConfig(
            gpu_counting=GpuCounting.model_validate(config),
            limit_defaults=limits,
            metadata_addresses=addresses,
        )
    if args.queue_config:
        # Which tenants' GPU pods Kueue gates: their namespaces get no labgate-gpu ResourceQuota.
        queue = QueueConfig.model_validate_json(Path(args.queue_config).read_text(encoding="utf-8"))
        policy = replace(policy, queue_config=queue)
    return policy


def _reconcile(args: argparse.Namespace) -> int:
    import signal
    import socket
    import threading
    from pathlib import Path as _Path

    from prometheus_client import start_http_server

    from labgate.core.kube import api_client
    from rbac.cert_lifetimes import lifetimes_from
    from rbac.reconciler import Reconciler

    try:
        lifetimes = lifetimes_from(
            args.certificate_duration, args.certificate_renew_before, args.certificate_ca_duration
        )
    except ValueError as error:
        print(f"labgate reconcile: certificates.selfSigned: {error}", file=sys.stderr)
        return 2
    kubeconfig = _Path(args.kubeconfig) if args.kubeconfig else None
    api = api_client(kubeconfig)
    certificates = None
    if args.webhook_certificates_secret:
        from labgate.core.kube import KubeApi
        from rbac.cert_rotation import CertificateManager, SecretStore, endpoint_replicas

        kube = KubeApi(api, field_manager="labgate-certificates")
        service, port = args.webhook_service, args.webhook_port
        certificates = CertificateManager(
            SecretStore(kube, namespace=args.namespace, name=args.webhook_certificates_secret),
            kube,
            configuration_name=args.webhook_configuration,
            dns_names=(f"{service}.{args.namespace}.svc", f"{service}.{args.namespace}.svc.cluster.local"),
            lifetimes=lifetimes,
            replicas=lambda: endpoint_replicas(kube, namespace=args.namespace, service=service, port=port),
        )
    reconciler = Reconciler(
        api,
        namespace=args.namespace,
        identity=args.identity or socket.gethostname(),
        lease_seconds=args.lease_seconds,
        resync_seconds=args.resync_seconds,
        certificates=certificates,
        certificate_check_seconds=args.certificate_check_seconds,
        policy=_reconciler_policy_config(args),
        kueue=args.kueue,
    )
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_address)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    reconciler.start()
    stop.wait()
    reconciler.stop()
    return 0


def _default_policies() -> Path:
    """./policies, where a checkout (or the infra team's policy repository) keeps them."""
    return Path("policies")


def _policy_directory(command: str, given: str | None, *, option: str = "--policies") -> Path | None:
    """The policy directory a command reads (`given`, else ./policies), or None after saying, in the
    same words for every command, that there is none: the labgate package ships no policies."""
    policies = Path(given) if given else _default_policies()
    if policies.is_dir():
        return policies
    print(
        f"labgate {command}: no policy directory {policies} (labgate ships no policies: run it where"
        f" policies/ is, or pass {option} DIR, e.g. the policies/ of a labgate checkout or of your"
        " policy repository)",
        file=sys.stderr,
    )
    return None


_OPA_HELP = "the opa binary (default: $LABGATE_OPA, else opa on PATH, else a checkout's pinned build)"


def _opa_binary(explicit: str | None = None) -> str:
    from cli.offline_admission import OfflineCheckError
    from cli.opa_binary import OpaNotFoundError, find_opa

    try:
        return find_opa(explicit)
    except OpaNotFoundError as err:
        raise OfflineCheckError(str(err)) from err


def _groups(values: list[str] | None) -> list[str]:
    return [g.strip() for value in values or [] for g in value.split(",") if g.strip()]


def _image_facts(path: Path) -> dict[str, Any]:
    """input.images from a YAML or JSON mapping: image as written -> facts."""
    import yaml

    from cli.offline_admission import OfflineCheckError

    try:
        facts = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise OfflineCheckError(f"--image-facts: {err}") from err
    if not isinstance(facts, dict):
        raise OfflineCheckError("--image-facts: expected a mapping of image -> facts")
    return facts


def _check(args: argparse.Namespace) -> int:
    from cli.offline_admission import (
        OfflineCheckError,
        OfflineOpa,
        check_json,
        facts_from_manifests,
        load_manifests,
        parse_gpu_usage,
    )
    from webhook.pod_templates import load_workload_kinds

    source = Path(args.file)
    try:
        usage = parse_gpu_usage(args.gpu_usage) if args.gpu_usage else None
    except ValueError as err:
        print(f"labgate check: --gpu-usage: {err}", file=sys.stderr)
        return 2
    policies = _policy_directory("check", args.policies)
    if policies is None:
        return 2
    try:
        images = _image_facts(Path(args.image_facts)) if args.image_facts else None
        manifests = load_manifests([source])
        facts = facts_from_manifests(
            load_manifests(Path(t) for t in args.tenants or []), platform_namespace=args.platform_namespace
        )
        kinds = load_workload_kinds(Path(args.workload_kinds) if args.workload_kinds else None)
        if not manifests:
            print(f"labgate check: {source} holds no objects", file=sys.stderr)
            return 2
        with OfflineOpa(_opa_binary(args.opa), policies, facts) as opa:
            results = [
                _check_one(args, opa, source, manifest, number, usage=usage, images=images, kinds=kinds)
                for number, manifest in enumerate(manifests, start=1)
            ]
    except OfflineCheckError as err:
        print(f"labgate check: {err}", file=sys.stderr)
        return 2
    if args.output_format == "json":
        import json

        print(json.dumps([check_json(result) for result in results], indent=2))
    return 0 if all(result.is_allowed for result in results) else 1


def _check_one(
    args: argparse.Namespace,
    opa: OfflineOpa,
    source: Path,
    manifest: dict[str, Any],
    number: int,
    *,
    usage: GpuAmount | None,
    images: dict[str, Any] | None,
    kinds: tuple[WorkloadKind, ...],
) -> CheckResult:
    """Evaluate one manifest of `labgate check` as the researcher of `args`; in text mode, print what
    kubectl would show them (and dry-run findings on standard error)."""
    from cli.offline_admission import (
        admission_request,
        dry_run_lines,
        researcher_view,
        with_namespace,
    )

    request = admission_request(
        obj=manifest,
        username=args.as_user,
        groups=_groups(args.groups),
        namespace=args.namespace,
        uid=f"labgate-check-{number}",
        kinds=kinds,
    )
    namespace = request.namespace
    if namespace and with_namespace(opa.facts, namespace).tenant_of(namespace) is None:
        print(
            f"note: namespace {namespace!r} belongs to no tenant in the definitions given (--tenants)",
            file=sys.stderr,
        )
    result = opa.check(request, gpu_usage=usage, images=images, kinds=kinds)
    if args.output_format != "json":
        for line in researcher_view(result, source=str(source)):
            print(line)
        for line in dry_run_lines(result):
            print(line, file=sys.stderr)
    return result


def _opa_steps(opa: str, policies: Path) -> list[str]:
    """opa fmt, check --strict and test on `policies`, reported; the titles of those that failed."""
    from cli.offline_admission import run_opa

    failed: list[str] = []
    # Samples are YAML data to OPA: leave them out of compiling and testing (as the server does).
    steps = [
        ("opa fmt --list --fail", ["fmt", "--list", "--fail", str(policies)]),
        ("opa check --strict", ["check", "--strict", "--ignore=samples", str(policies)]),
        ("opa test", ["test", "--ignore=samples", str(policies)]),
    ]
    for title, argv in steps:
        completed = run_opa(opa, *argv)
        output = (completed.stdout + completed.stderr).strip()
        if completed.returncode == 0:
            summary = output.splitlines()[-1] if title == "opa test" and output else ""
            print(f"ok    {title}" + (f" ({summary})" if summary else ""))
            continue
        failed.append(title)
        print(f"FAIL  {title}")
        if title.startswith("opa fmt") and output:
            output = _fmt_failure(output)
        for line in output.splitlines():
            print(f"      {line}")
    return failed


def _fmt_failure(output: str) -> str:
    """What `opa fmt --list --fail` found: files that do not parse (with the parse error, which opa
    prints for them), or files that only need formatting."""
    if "rego_parse_error" in output or "parse error" in output:
        return "does not parse (fix the error; `opa check` below shows it with its position):\n" + output
    return "not formatted (run `opa fmt -w` on them):\n" + output


def _rule_ids_step(policies: Path, *, write: bool = False) -> list[str]:
    """data.labgate.rule_ids (what a Tenant's spec.enforcement may name) matches the rules' METADATA."""
    from cli.policy_samples import RULE_IDS_FILE, rule_ids_document

    target = policies / RULE_IDS_FILE
    wanted = rule_ids_document(policies)
    current = target.read_text(encoding="utf-8") if target.is_file() else None
    if current == wanted:
        print(f"ok    rule ids ({target.relative_to(policies)})")
        return []
    if write:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(wanted, encoding="utf-8")
        print(f"wrote rule ids to {target}")
        return []
    print(f"FAIL  rule ids: {target} does not list the rule ids of the policies' METADATA")
    print("      run `labgate policy rule-ids --write` and commit the file")
    return ["rule ids"]


def _generated_step(policies: Path) -> list[str]:
    """The policy files generated from labgate's Python (workload kinds, tenant label, PriorityClass
    names) say what this labgate says: a copy edited by hand, or from another labgate version, fails."""
    from cli.generated import stale_policy_files

    stale = stale_policy_files(policies)
    if not stale:
        print("ok    generated policy data (workload kinds, tenant label, PriorityClass names)")
        return []
    for path in stale:
        print(f"FAIL  generated policy data: {policies / path} is not what this labgate generates")
    print(
        "      run `labgate generate` in the labgate checkout (see docs/architecture.md, 'Generated files')"
    )
    return [f"generated {path}" for path in stale]


def _sample_runs(opa: str, policies: Path, platform_namespace: str) -> list[str]:
    """Every policy sample, reported; the names of those that failed."""
    from cli.offline_admission import (
        OfflineCheckError,
        OfflineOpa,
        facts_from_manifests,
        load_manifests,
    )
    from cli.policy_samples import find_samples, inventory_path, run_sample

    samples = find_samples(policies)
    if not samples:
        print(f"note  no samples under {policies}/**/samples/")
        return []
    inventory = inventory_path(policies)
    try:
        facts = facts_from_manifests(
            load_manifests([inventory] if inventory.is_file() else []), platform_namespace=platform_namespace
        )
    except OfflineCheckError as err:
        print(f"FAIL  sample inventory {inventory}: {err}")
        return [f"sample inventory {inventory}"]
    failed: list[str] = []
    with OfflineOpa(opa, policies, facts) as offline:
        for path in samples:
            outcome = run_sample(offline, path)
            shown = path.relative_to(policies) if path.is_relative_to(policies) else path
            if outcome.is_passed:
                print(f"ok    sample {shown}")
                continue
            failed.append(f"sample {shown}")
            print(f"FAIL  sample {shown}" + (f" ({outcome.description})" if outcome.description else ""))
            for failure in outcome.failures:
                for line in failure.splitlines():
                    print(f"      {line}")
    print(f"samples: {len(samples) - len(failed)} of {len(samples)} passed")
    return failed


def _policy_test(args: argparse.Namespace) -> int:
    policies = _policy_directory("policy test", args.policies)
    if policies is None:
        return 2
    from cli.offline_admission import OfflineCheckError

    try:
        opa = _opa_binary(args.opa)
    except OfflineCheckError as err:
        print(f"labgate policy test: {err}", file=sys.stderr)
        return 2
    if args.output_format == "json":
        import contextlib
        import io
        import json

        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            failed = (
                _opa_steps(opa, policies)
                + _rule_ids_step(policies)
                + _generated_step(policies)
                + _sample_runs(opa, policies, args.platform_namespace)
            )
        report = {"passed": not failed, "failed": failed, "report": buffer.getvalue().splitlines()}
        print(json.dumps(report, indent=2))
        return 1 if failed else 0
    failed = (
        _opa_steps(opa, policies)
        + _rule_ids_step(policies)
        + _generated_step(policies)
        + _sample_runs(opa, policies, args.platform_namespace)
    )
    if failed:
        print(f"policy test FAILED: {', '.join(failed)}")
        return 1
    print("policy test passed")
    return 0


def _policy_rule_ids(args: argparse.Namespace) -> int:
    policies = _policy_directory("policy rule-ids", args.policies)
    if policies is None:
        return 2
    if not args.write:
        from cli.policy_samples import rule_ids_document

        print(rule_ids_document(policies), end="")
        return 0
    return 1 if _rule_ids_step(policies, write=True) else 0


def _generate(args: argparse.Namespace) -> int:
    from cli.generated import generated_files, stale_files, write_generated_files

    root = Path(args.root)
    if not (root / "charts" / "labgate").is_dir() or not (root / "policies").is_dir():
        print(
            f"labgate generate: {root} is not a labgate checkout (no charts/labgate, policies/)",
            file=sys.stderr,
        )
        return 2
    if args.check:
        stale = stale_files(root)
        for path in stale:
            print(f"STALE {path}")
        if stale:
            print("run `labgate generate` in the repository and commit the files it writes")
            return 1
        print(f"ok    {len(generated_files(root))} generated files")
        return 0
    for path in write_generated_files(root):
        print(f"wrote {path}")
    return 0


def _snapshot_from(args: argparse.Namespace) -> Any:
    """The objects to evaluate: --snapshot FILE, else the live cluster (--kubeconfig; read-only)."""
    from cli.policy_impact import export_snapshot, load_snapshot

    if args.snapshot:
        return load_snapshot(Path(args.snapshot))
    from labgate.core.kube import KubeApi, api_client

    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
    return export_snapshot(KubeApi(api_client(kubeconfig), field_manager="labgate-readonly"))


def _snapshot_export(args: argparse.Namespace) -> int:
    from cli.policy_impact import dump_snapshot

    text = dump_snapshot(_snapshot_from(argparse.Namespace(snapshot=None, kubeconfig=args.kubeconfig)))
    if args.output in (None, "-"):
        print(text, end="")
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"labgate: snapshot written to {args.output}", file=sys.stderr)
    return 0


def _impact_opa(args: argparse.Namespace, policies: Path, snapshot: Any) -> Any:
    from cli.offline_admission import OfflineOpa, facts_from_manifests

    facts = facts_from_manifests(snapshot.definitions, platform_namespace=args.platform_namespace)
    return OfflineOpa(_opa_binary(args.opa), policies, facts)


REPORT_HINT = "kubectl get policyreport labgate-audit -n <namespace> -o yaml"


def _audit(args: argparse.Namespace) -> int:
    import json

    from cli.offline_admission import OfflineCheckError
    from cli.policy_impact import audit_rows, cluster_items, evaluate, grouped_text
    from webhook.pod_templates import load_workload_kinds

    policies = _policy_directory("audit", args.policies)
    if policies is None:
        return 2
    kinds = load_workload_kinds(Path(args.workload_kinds) if args.workload_kinds else None)
    if args.every is not None:
        return _audit_every(args, policies, kinds)
    try:
        snapshot = _snapshot_from(args)
        items = cluster_items(snapshot)
        with _impact_opa(args, policies, snapshot) as opa:
            rows = audit_rows(list(evaluate(opa, items, kinds)))
    except OfflineCheckError as err:
        print(f"labgate audit: {err}", file=sys.stderr)
        return 2
    if args.write_reports:
        import time

        from cli.audit_service import ReportWriteError, write_policy_reports
        from cli.policy_impact import policy_reports, tenant_namespaces
        from labgate.core.kube import KubeApi, api_client

        kube = KubeApi(
            api_client(Path(args.kubeconfig) if args.kubeconfig else None), field_manager="labgate-audit"
        )
        reports = policy_reports(rows, tenant_namespaces(snapshot), now=time.time())
        try:
            written = write_policy_reports(kube, reports)
        except ReportWriteError as err:
            print(f"labgate audit: {err}", file=sys.stderr)
            return 2
        print(f"labgate audit: wrote {written} PolicyReports ({REPORT_HINT})", file=sys.stderr)
    if args.output_format == "json":
        print(json.dumps({"evaluated": len(items), "findings": rows}, indent=2))
    else:
        print(f"labgate audit: {len(items)} objects evaluated against {policies}; {len(rows)} findings")
        for line in grouped_text(rows, key="mode"):
            print(line)
    return 1 if any(r["mode"] == "enforce" for r in rows) else 0


def _audit_every(args: argparse.Namespace, policies: Path, kinds: Any) -> int:
    """The scheduled audit (cli/audit_service.py): until SIGTERM, every --every seconds."""
    import signal
    import threading

    from prometheus_client import start_http_server

    from cli.audit_service import AuditLoop, ServerOpa
    from cli.offline_admission import Facts, OfflineOpa
    from labgate.core.kube import KubeApi, api_client
    from webhook.opa_management import PolicyStore
    from webhook.policy_sync import PolicySync

    if args.snapshot:
        print("labgate audit: --every audits the live cluster, not a --snapshot", file=sys.stderr)
        return 2
    kube = KubeApi(
        api_client(Path(args.kubeconfig) if args.kubeconfig else None), field_manager="labgate-audit"
    )
    if args.opa_url:
        url = args.opa_url

        def opa_for(facts: Facts) -> OfflineOpa:
            return ServerOpa(url, facts)

        loader = PolicySync(policies, PolicyStore(url))
    else:
        binary = _opa_binary(args.opa)

        def opa_for(facts: Facts) -> OfflineOpa:
            return OfflineOpa(binary, policies, facts)

        loader = None
    loop = AuditLoop(
        kube,
        opa_for,
        kinds,
        policies=loader,
        interval=args.every,
        platform_namespace=args.platform_namespace,
        write_reports=args.write_reports,
    )
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_address)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    loop.run(stop)
    return 0


def _policy_diff(args: argparse.Namespace) -> int:
    import json

    from cli.offline_admission import OfflineCheckError
    from cli.policy_impact import (
        cluster_items,
        decision_log_items,
        diff_rows,
        evaluate,
        grouped_text,
        read_decision_log,
    )
    from webhook.pod_templates import load_workload_kinds

    candidate = _policy_directory("policy diff", args.policies)
    if candidate is None:
        return 2
    current = _policy_directory("policy diff", args.current, option="--current")
    if current is None:
        return 2
    kinds = load_workload_kinds(Path(args.workload_kinds) if args.workload_kinds else None)
    try:
        snapshot = _snapshot_from(args)
        items = cluster_items(snapshot)
        records = read_decision_log([Path(p) for p in args.decision_log or []], last=args.last)
        replayed, missing = decision_log_items(snapshot, records)
        everything = [*items, *replayed]
        with _impact_opa(args, current, snapshot) as opa:
            before = list(evaluate(opa, everything, kinds))
        with _impact_opa(args, candidate, snapshot) as opa:
            after = list(evaluate(opa, everything, kinds))
    except (OfflineCheckError, OSError, ValueError) as err:
        print(f"labgate policy diff: {err}", file=sys.stderr)
        return 2
    rows = diff_rows(before, after)
    summary = {
        "current": str(current),
        "candidate": str(candidate),
        "cluster_objects": len(items),
        "decision_log_requests": len(replayed),
        "decision_log_not_replayable": missing,
    }
    if args.output_format == "json":
        print(json.dumps({**summary, "changes": rows}, indent=2))
        return 0
    print(
        f"policy diff: {current} -> {candidate}: {len(items)} objects from the cluster, {len(replayed)} "
        f"requests from the decision log ({missing} not replayable: object gone or never created)"
    )
    if not rows:
        print("no change: every object and request gets the same verdict, findings and mutation")
    for line in grouped_text(rows, key="change"):
        print(line)
    return 0


def _decisions_verify(args: argparse.Namespace) -> int:
    from webhook.decision_log import GENESIS, verify

    prev = args.prev or GENESIS
    try:
        if args.file == "-":
            result = verify(sys.stdin, prev=prev)
        else:
            with Path(args.file).open(encoding="utf-8") as lines:
                result = verify(lines, prev=prev)
    except (OSError, UnicodeDecodeError) as err:
        print(f"labgate decisions verify: {err}", file=sys.stderr)
        return 2
    if result.ok:
        print(f"ok: {result.records} records, chain intact")
        return 0
    print(f"TAMPERED: line {result.first_bad_line}: {result.reason}")
    return 1


def _add_policy_commands(commands: Any) -> None:
    policy = commands.add_parser("policy", help="work on the Rego policies")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    policy_test = policy_commands.add_parser(
        "test",
        help="opa fmt, opa check --strict, opa test and every policy sample",
        description="Run opa fmt --list --fail, opa check --strict and opa test on the policies, then "
        "every policies/**/samples/*.yaml against policies/samples/inventory.yaml. Exit 1 if anything fails.",
    )
    policy_test.add_argument("--policies", help="policy directory (default: ./policies)")
    policy_test.add_argument("--platform-namespace", default="labgate-system", help=argparse.SUPPRESS)
    policy_test.add_argument("--opa", help=_OPA_HELP)
    policy_test.add_argument("-o", "--output", dest="output_format", choices=["text", "json"], default="text")
    policy_test.set_defaults(handler=_policy_test)
    rule_ids = policy_commands.add_parser(
        "rule-ids",
        help="the rule ids of the policies (what Tenant spec.enforcement may name)",
        description="Print data.labgate.rule_ids (from every rule's METADATA custom.rule_id); with --write, "
        "update policies/labgate/rule_ids/data.json, which the policies load to refuse unknown ids.",
    )
    rule_ids.add_argument("--policies", help="policy directory (default: ./policies)")
    rule_ids.add_argument("--write", action="store_true", help="write policies/labgate/rule_ids/data.json")
    rule_ids.set_defaults(handler=_policy_rule_ids)
    diff = policy_commands.add_parser(
        "diff",
        help="impact preview: candidate policies vs current, on the cluster and the decision log",
        description="Evaluate the cluster's objects (live with --kubeconfig, read-only, or --snapshot) and "
        "the decision log's recent requests under the current and the candidate policies; print who "
        "would newly be refused, newly admitted, or get another mutation, grouped by rule and tenant.",
    )
    diff.add_argument("--policies", required=True, help="the candidate policy directory")
    diff.add_argument("--current", help="the current policies (default: ./policies)")
    diff.add_argument("--decision-log", action="append", help="decision log file(s) to replay (JSON lines)")
    diff.add_argument(
        "--last", type=int, default=1000, help="replay the last N records (default: %(default)s)"
    )
    _add_cluster_source(diff)
    diff.set_defaults(handler=_policy_diff)


def _add_cluster_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--snapshot", help="a file `labgate snapshot export` wrote (offline)")
    parser.add_argument("--kubeconfig", help="read the live cluster (list only) with this kubeconfig")
    parser.add_argument("--opa", help=_OPA_HELP)
    parser.add_argument("--workload-kinds", help="extra workload kinds (as LABGATE_WORKLOAD_KINDS_FILE)")
    parser.add_argument("--platform-namespace", default="labgate-system", help=argparse.SUPPRESS)
    parser.add_argument("-o", "--output", dest="output_format", choices=["text", "json"], default="text")


def _add_impact_commands(commands: Any) -> None:
    audit = commands.add_parser(
        "audit",
        help="evaluate the cluster's workloads and Tenants against the current policies",
        description="Evaluate every workload in tenant namespaces and every Tenant, as a member of its "
        "tenant would apply it now, and list what would be refused (enforce), warned or recorded (dry-run). "
        "Exit 1 when anything would be refused.",
    )
    audit.add_argument("--policies", help="policy directory (default: ./policies)")
    audit.add_argument(
        "--write-reports",
        action="store_true",
        help="write a PolicyReport (wgpolicyk8s.io/v1alpha2) labgate-audit into every tenant namespace",
    )
    audit.add_argument(
        "--every",
        type=float,
        metavar="SECONDS",
        help="audit the live cluster again every SECONDS until stopped (the scheduled audit; metrics "
        "labgate_audit_* with --metrics-port)",
    )
    audit.add_argument(
        "--opa-url",
        help="with --every: evaluate with this OPA server instead of the opa binary; labgate keeps "
        "--policies loaded in it and replaces its data.inventory, so never the webhook's OPA",
    )
    audit.add_argument("--metrics-port", type=int, default=0, help="with --every: Prometheus /metrics port")
    audit.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        help="address for /metrics (default: loopback only; the chart passes the pod IP, which its NetworkPolicy guards)",
    )
    _add_cluster_source(audit)
    audit.set_defaults(handler=_audit)

    snapshot = commands.add_parser("snapshot", help="the cluster's objects, for offline audits and diffs")
    snapshot_commands = snapshot.add_subparsers(dest="snapshot_command", required=True)
    export = snapshot_commands.add_parser(
        "export", help="write Tenants, tenant namespaces, restricted Secrets (metadata), workloads, GPU usage"
    )
    export.add_argument("--kubeconfig", help="kubeconfig (read-only access is enough)")
    export.add_argument("-f", "--file", dest="output", help="write here (default: standard output)")
    export.set_defaults(handler=_snapshot_export)


def _add_check_command(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="evaluate a manifest offline and print what a researcher would see",
        description="Evaluate a manifest offline against the policies and Tenant definitions, and print "
        "what kubectl would show the researcher. Exit 0 when admitted, 1 when refused, 2 on errors.",
    )
    check.add_argument(
        "-f", "--filename", dest="file", required=True, help="manifest (YAML, may hold several)"
    )
    check.add_argument("--as", dest="as_user", required=True, help="the researcher's user name")
    check.add_argument(
        "--groups", action="append", help="the researcher's groups (comma-separated, repeatable)"
    )
    check.add_argument("-n", "--namespace", help="namespace (default: the manifest's, else default)")
    check.add_argument(
        "--tenants",
        nargs="+",
        action="extend",
        help="YAML files of Tenants (their namespaces.names exist, labelled), Namespaces and Secrets",
    )
    check.add_argument("--policies", help="policy directory (default: ./policies)")
    check.add_argument("--gpu-usage", help="GPUs the tenant already uses, for a Pod: total=N[,<model>=N...]")
    check.add_argument(
        "--image-facts",
        help="YAML/JSON mapping image -> facts for input.images (no registry is asked; without it, "
        "tenants that restrict images see no facts)",
    )
    check.add_argument("--workload-kinds", help="extra workload kinds (as LABGATE_WORKLOAD_KINDS_FILE)")
    check.add_argument("--opa", help=_OPA_HELP)
    check.add_argument(
        "-o",
        "--output",
        dest="output_format",
        choices=["text", "json"],
        default="text",
        help="json: one object per manifest (allowed, warnings, refusal message, rules, patch)",
    )
    check.add_argument(
        "--platform-namespace",
        default="labgate-system",
        help="labgate's own namespace (default: %(default)s)",
    )
    check.set_defaults(handler=_check)


def _add_repository_commands(commands: Any) -> None:
    """`labgate generate` (a checkout's generated files) and `labgate decisions` (the decision log)."""
    generate = commands.add_parser(
        "generate",
        help="write the chart and policy files generated from labgate's Python (workload kinds, names)",
        description="Write charts/labgate/templates/_generated.tpl, policies/labgate/workloads/data.json and "
        "the generated keys of policies/labgate/config/ from labgate's Python (cli/generated.py). "
        "With --check, write nothing and exit 1 when any of them is stale.",
    )
    generate.add_argument("--root", default=".", help="the repository checkout (default: .)")
    generate.add_argument("--check", action="store_true", help="only report stale files (exit 1)")
    generate.set_defaults(handler=_generate)

    decisions = commands.add_parser("decisions", help="the decision log")
    decisions_commands = decisions.add_subparsers(dest="decisions_command", required=True)
    decisions_verify = decisions_commands.add_parser(
        "verify", help="check a decision log's hash chain (exit 1 when it was tampered with)"
    )
    decisions_verify.add_argument("file", help="decision log (JSON lines); - for standard input")
    decisions_verify.add_argument(
        "--prev", help="hash the first record links to (the last hash of the file before a rotation)"
    )
    decisions_verify.set_defaults(handler=_decisions_verify)


def _add_reconcile_command(commands: Any) -> None:
    """`labgate reconcile` and its flags (the chart's reconciler Deployment passes them)."""
    reconcile = commands.add_parser(
        "reconcile", help="run the tenant reconciler (RBAC, namespaces, quotas, ...)"
    )
    reconcile.add_argument("--kubeconfig", help="kubeconfig; in-cluster service account when omitted")
    reconcile.add_argument(
        "--namespace", default="labgate-system", help="namespace of the leader-election Lease"
    )
    reconcile.add_argument("--identity", help="this replica's name in the Lease (default: host name)")
    reconcile.add_argument("--lease-seconds", type=float, default=15.0, help="leader lease duration")
    reconcile.add_argument("--resync-seconds", type=float, default=300.0, help="full resync period")
    reconcile.add_argument("--metrics-port", type=int, default=0, help="Prometheus /metrics port (0: off)")
    reconcile.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        help="address for /metrics (default: loopback only; the chart passes the pod IP, which its NetworkPolicy guards)",
    )
    reconcile.add_argument(
        "--gpu-config",
        help="the policies' configuration (policies/labgate/config/data.json): which resources are GPUs, "
        "for counting live pods that have no GPU record (default: nvidia.com/gpu and its MIG profiles)",
    )
    reconcile.add_argument(
        "--kueue",
        action="store_true",
        help="Kueue is installed: provision each tenant's queues (ResourceFlavors for its node pools, a "
        "ClusterQueue, a LocalQueue named default in each namespace)",
    )
    reconcile.add_argument(
        "--queue-config",
        help="the policies' queue configuration (policies/labgate/config/queue/data.json): where Kueue's pod "
        "integration gates a managed tenant's GPU pods, its namespaces get no labgate-gpu ResourceQuota "
        "(default: none gated)",
    )
    _add_certificate_flags(reconcile)
    reconcile.set_defaults(handler=_reconcile)


def _add_certificate_flags(reconcile: Any) -> None:
    """The self-signed mode's flags: the Secret the leader keeps the webhook's CA and serving
    certificate in, their lifetimes, and where the webhook is served (its caBundle's readers)."""
    reconcile.add_argument(
        "--webhook-certificates-secret",
        help="make, keep and rotate the webhook's CA and serving certificate in this Secret (self-signed mode)",
    )
    reconcile.add_argument(
        "--certificate-duration", default="720h", help="the serving certificate's lifetime (Go duration)"
    )
    reconcile.add_argument(
        "--certificate-renew-before", default="168h", help="renew a certificate this long before it expires"
    )
    reconcile.add_argument(
        "--certificate-ca-duration", default="8760h", help="the CA's lifetime (Go duration)"
    )
    reconcile.add_argument(
        "--certificate-check-seconds",
        type=float,
        default=30.0,
        help="how often the leader checks the certificates and takes the rotation's next step",
    )
    reconcile.add_argument("--webhook-service", default="labgate-webhook", help="the webhook's Service")
    reconcile.add_argument("--webhook-port", type=int, default=8443, help="the webhook pods' HTTPS port")
    reconcile.add_argument(
        "--webhook-configuration", default="labgate", help="name of both webhook configurations (caBundle)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labgate", description="labgate admission control for research clusters"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the admission webhook")
    serve.set_defaults(handler=_serve)

    _add_reconcile_command(commands)

    _add_check_command(commands)
    _add_policy_commands(commands)
    _add_impact_commands(commands)
    _add_repository_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from labgate.core import logs

    args = build_parser().parse_args(argv)
    # The services log JSON lines (the scheduled audit is one); the commands people run, plain text.
    is_service = args.handler in (_serve, _reconcile) or (
        args.handler is _audit and getattr(args, "every", None) is not None
    )
    logs.configure(json_lines=None if is_service else False)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
