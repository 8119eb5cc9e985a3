"""What one policy evaluation costs: `opa bench` of the repository's policies over every policy sample.

    .venv/bin/python -m benchmarks.opa_bench [--policies policies] [--baseline DIR] [--packages] [--sample NAME]
                                             [--json out.json]

Each sample (policies/**/samples/*.yaml) is turned into the decision input the webhook would send
(the same path as `labgate policy test`: request, mutation applied, tenant's GPU usage), and
`opa bench` evaluates data.labgate.admission.decision on it with the policies as the OPA server loads
them. With --packages, each rule package's `violation` set is benched alone as well, on each of the
same inputs (the sum over them: 25 packages times the samples, a second or two each; use --sample).
With --baseline (another policy directory, e.g. an earlier commit's
`git archive HEAD~3 policies | tar -x -C /tmp/before`), each sample is benched under both, one after
the other, so that a busy machine slows both alike. With --sample, only the samples whose name
(`<package>/<file stem>`) contains NAME: with --packages, what each package costs one request, those
that do not judge its kind too. Prints Markdown tables; --json writes the figures. Needs only the
pinned `opa` (found as `labgate policy test` finds it), no cluster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cli.offline_admission import (
    DECISION_QUERY,
    OPA_IGNORES,
    Facts,
    OfflineOpa,
    admission_request,
    facts_from_manifests,
    load_manifests,
)
from cli.opa_binary import find_opa
from cli.policy_samples import find_samples, inventory_path, load_sample
from webhook.policy_input import PolicyInput

PLATFORM_NAMESPACE = "labgate-system"


@dataclass(frozen=True)
class DecisionInput:
    """One sample as OPA sees it: the decision's input and the inventory beside it."""

    name: str
    policy_input: PolicyInput
    inventory: dict[str, Any]


@dataclass(frozen=True)
class BenchResult:
    """One `opa bench` run: the wall time per evaluation and the median of OPA's own eval timer."""

    name: str
    ns_per_op: float
    median_eval_ns: float
    allocs_per_op: float


class _RecordingOpa(OfflineOpa):
    """The offline evaluation, keeping the last decision input it was asked (and its facts)."""

    recorded: tuple[PolicyInput, Facts] | None = None

    def eval(self, query: str, policy_input: PolicyInput, *, facts: Facts | None = None) -> Any:
        if query == DECISION_QUERY:
            self.recorded = (policy_input, facts or self.facts)
        return super().eval(query, policy_input, facts=facts)


def decision_inputs(opa: str, policies: Path, only: str | None = None) -> list[DecisionInput]:
    """Every sample's decision input (or of those whose name contains `only`), in path order."""
    inventory = inventory_path(policies)
    facts = facts_from_manifests(load_manifests([inventory]), platform_namespace=PLATFORM_NAMESPACE)
    inputs: list[DecisionInput] = []
    offline = _RecordingOpa(opa, policies, facts)
    with offline:
        for path in find_samples(policies):
            name = f"{path.parent.parent.name}/{path.stem}"
            if only is not None and only not in name:
                continue
            sample = load_sample(path)
            request = admission_request(
                obj=sample.object,
                username=sample.user.username,
                groups=sample.user.groups,
                namespace=sample.namespace,
                operation=sample.operation,
                old_object=sample.old_object,
                uid=f"bench-{path.stem}",
            )
            offline.check(request, gpu_usage=sample.gpu_usage, images=sample.images)
            assert offline.recorded is not None
            policy_input, sample_facts = offline.recorded
            inputs.append(
                DecisionInput(name=name, policy_input=policy_input, inventory=sample_facts.inventory)
            )
    return inputs


def bench(
    opa: str, policies: Path, query: str, *, policy_input: Any, inventory: dict[str, Any], name: str
) -> BenchResult:
    """`opa bench` of `query` on `policy_input`, with the policies and `inventory` (data.inventory)."""
    with tempfile.TemporaryDirectory(prefix="labgate-bench-") as tmp:
        input_file = Path(tmp) / "input.json"
        input_file.write_text(json.dumps(policy_input))
        inventory_file = Path(tmp) / "inventory.json"
        inventory_file.write_text(json.dumps({"inventory": inventory}))
        argv = [
            opa,
            "bench",
            "--format=json",
            *[f"--ignore={pattern}" for pattern in OPA_IGNORES],
            "--data",
            str(policies),
            "--data",
            str(inventory_file),
            "--input",
            str(input_file),
            query,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"opa bench {query} ({name}) failed:\n{done.stderr or done.stdout}")
    out = json.loads(done.stdout)
    runs = max(int(out["N"]), 1)
    return BenchResult(
        name=name,
        ns_per_op=int(out["T"]) / runs,
        median_eval_ns=float(out["Extra"].get("histogram_timer_rego_query_eval_ns_median", 0.0)),
        allocs_per_op=int(out["MemAllocs"]) / runs,
    )


def paired_table(before: list[BenchResult], after: list[BenchResult]) -> str:
    """Before and after side by side, per sample, with the medians."""
    lines = [
        "| sample | before µs/op | after µs/op | after / before | allocs/op before | after |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {b.name} | {b.ns_per_op / 1000:.0f} | {a.ns_per_op / 1000:.0f} | {a.ns_per_op / b.ns_per_op:.2f} "
        f"| {b.allocs_per_op:.0f} | {a.allocs_per_op:.0f} |"
        for b, a in zip(before, after, strict=True)
    ]
    median_before = statistics.median(r.ns_per_op for r in before) / 1000
    median_after = statistics.median(r.ns_per_op for r in after) / 1000
    ratio = statistics.median(a.ns_per_op / b.ns_per_op for b, a in zip(before, after, strict=True))
    lines.append(f"| **median** | **{median_before:.0f}** | **{median_after:.0f}** | **{ratio:.2f}** | | |")
    return "\n".join(lines) + "\n"


def rule_packages(policies: Path) -> list[str]:
    """The packages under data.labgate.rules: one per folder of policies/labgate/rules."""
    rules = policies / "labgate" / "rules"
    return sorted(p.name for p in rules.iterdir() if p.is_dir() and any(p.glob("*.rego")))


def package_bench(opa: str, policies: Path, package: str, inputs: list[DecisionInput]) -> BenchResult:
    """One package's `violation`, benched on each input as the decision query sees it (the input and
    its inventory loaded, no `with`), summed over the inputs. Asking every input in one evaluation
    with `with input as ...` under-counted: pod_hardening's 253 µs on a GPU pod read as 39."""
    results = [
        bench(
            opa,
            policies,
            f"data.labgate.rules.{package}.violation",
            policy_input=i.policy_input,
            inventory=i.inventory,
            name=package,
        )
        for i in inputs
    ]
    return BenchResult(
        name=package,
        ns_per_op=sum(r.ns_per_op for r in results),
        median_eval_ns=sum(r.median_eval_ns for r in results),
        allocs_per_op=sum(r.allocs_per_op for r in results),
    )


def table(results: list[BenchResult], *, label: str) -> str:
    """A Markdown table of `results`, with their median below."""
    lines = [
        f"| {label} | µs/op (opa bench) | median eval µs | allocs/op |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.name} | {r.ns_per_op / 1000:.0f} | {r.median_eval_ns / 1000:.0f} | {r.allocs_per_op:.0f} |"
        for r in results
    ]
    median = statistics.median(r.ns_per_op for r in results) / 1000
    total = sum(r.ns_per_op for r in results) / 1000
    lines.append(f"| **median / sum** | **{median:.0f}** / {total:.0f} | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="policies", help="the policy directory (default: policies)")
    parser.add_argument(
        "--opa", default=None, help="the opa binary (default: as `labgate policy test` finds it)"
    )
    parser.add_argument(
        "--packages", action="store_true", help="also bench each rule package's violation alone"
    )
    parser.add_argument(
        "--baseline", default=None, help="another policy directory to bench beside --policies"
    )
    parser.add_argument(
        "--sample", default=None, help="only the samples whose <package>/<file stem> contains this"
    )
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    policies = Path(args.policies)
    opa = find_opa(args.opa)
    inputs = decision_inputs(opa, policies, only=args.sample)
    if not inputs:
        parser.error(f"no policy sample's name contains {args.sample!r}")
    by_sample: list[BenchResult] = []
    baseline: list[BenchResult] = []
    for i in inputs:
        if args.baseline:
            baseline.append(
                bench(
                    opa,
                    Path(args.baseline),
                    DECISION_QUERY,
                    policy_input=i.policy_input,
                    inventory=i.inventory,
                    name=i.name,
                )
            )
        by_sample.append(
            bench(
                opa, policies, DECISION_QUERY, policy_input=i.policy_input, inventory=i.inventory, name=i.name
            )
        )
    print(f"data.labgate.admission.decision, one `opa bench` per sample ({len(inputs)} samples):\n")
    print(paired_table(baseline, by_sample) if baseline else table(by_sample, label="sample"))
    by_package: list[BenchResult] = []
    if args.packages:
        by_package = [package_bench(opa, policies, p, inputs) for p in rule_packages(policies)]
        print(f"data.labgate.rules.<package>.violation, summed over {len(inputs)} samples:\n")
        print(table(by_package, label="package"))
    if args.json:
        figures = {
            "samples": [asdict(r) for r in by_sample],
            "baseline": [asdict(r) for r in baseline],
            "packages": [asdict(r) for r in by_package],
        }
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
