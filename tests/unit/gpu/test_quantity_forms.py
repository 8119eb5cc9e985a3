"""Every form the apiserver writes a CPU or memory quantity in is counted alike by the Rego rule
(tenant-quota's asks, through labgate.lib.quantity) and the Python (the ledger's workloads usage), and
as counted here by hand. Two counts that disagree let a pod past the tenant's limits: OPA's
units.parse reads no n (nano) or u (micro) suffix, which the apiserver keeps for a value that is not a
whole number of milli-units, and the Rego counted such a request as 0; and the Python read the exa
suffixes E and Ei as a decimal exponent and raised, which stopped the reconciler's pod index (every
pod's facts are read from every event)."""

from __future__ import annotations

from typing import Any

import pytest

from devcluster.tools import binary, ensure_tools
from labgate.gpu_accounting.pod_requests import effective_request
from tests.policy_eval import eval_policies

# (resource, quantity text, the count by hand: millicores rounded up, bytes rounded up)
FORMS: list[tuple[str, str, int]] = [
    ("cpu", "1n", 1),
    ("cpu", "1000000n", 1),
    ("cpu", "1000001n", 2),
    ("cpu", "100000000001n", 100_001),  # 100 CPUs and a billionth
    ("cpu", "1u", 1),
    ("cpu", "1500u", 2),
    ("cpu", "250m", 250),
    ("cpu", "2", 2_000),
    ("cpu", "0.5", 500),
    ("cpu", "1k", 1_000_000),
    ("cpu", "1e3", 1_000_000),
    ("cpu", "2e-3", 2),
    ("memory", "1500n", 1),
    ("memory", "17179869184000001u", 17_179_869_185),  # 16Gi and a millionth of a byte
    ("memory", "129e6", 129_000_000),
    ("memory", "1M", 1_000_000),
    ("memory", "1G", 1_000_000_000),
    ("memory", "1Ki", 1_024),
    ("memory", "64Mi", 67_108_864),
    ("memory", "1.5Gi", 1_610_612_736),
    ("memory", "2Ti", 2_199_023_255_552),
    ("memory", "500m", 1),
    # E (exa) and Ei (exbi) begin like a decimal exponent and are suffixes: the Python raised on them.
    ("memory", "1E", 10**18),
    ("memory", "2E", 2 * 10**18),
    ("memory", "1Ei", 2**60),
    ("cpu", "1E", 10**21),
    ("memory", "1E3", 1_000),
]


def _spec(resource: str, text: str) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "x", "resources": {"requests": {resource: text}}}]}


@pytest.fixture(scope="module")
def opa() -> str:
    ensure_tools("opa")
    return binary("opa")


@pytest.fixture(scope="module")
def rego_counts(opa: str) -> list[int]:
    counts: list[int] = eval_policies(
        opa,
        "[data.labgate.rules.tenant_quota.asks(f.spec, f.resource) | some f in input.forms]",
        {"forms": [{"spec": _spec(resource, text), "resource": resource} for resource, text, _ in FORMS]},
    )
    return counts


@pytest.mark.parametrize(("index", "form"), list(enumerate(FORMS)), ids=[f"{r}={t}" for r, t, _ in FORMS])
def test_rego_and_python_count_each_quantity_form_as_by_hand(
    rego_counts: list[int], index: int, form: tuple[str, str, int]
) -> None:
    resource, text, by_hand = form
    assert rego_counts[index] == by_hand, f"the Rego counts {text} of {resource} as {rego_counts[index]}"
    assert effective_request(_spec(resource, text), resource) == by_hand
