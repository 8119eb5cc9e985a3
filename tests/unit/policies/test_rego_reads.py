"""Two reads that make a refusal vanish for an ordinary object, kept out of the rules.

- `input.request.name`: a CREATE with generateName comes without it (the mutating webhook and
  `labgate check` see no name; only the validating webhook gets the generated one), and a message
  that reads an undefined field is undefined, so the refusal is lost and the object admitted. Rules
  name the object through `tenancy.object_name` / `tenancy.object_ref`. The reads listed below stay,
  each with the reason it cannot meet a nameless request.
- `units.parse`: OPA reads no `n` or `u` suffix, which the apiserver keeps for a request that is not a
  whole number of milli-units, and a quantity it cannot read was counted as 0. Quantities go through
  `labgate.lib.quantity.number`.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
LABGATE = REPO / "policies" / "labgate"

_REQUEST_NAME = re.compile(r"input\.request\.name\b")

# file -> why its reads of input.request.name meet only requests that carry a name.
NAME_READS_ALLOWED: dict[str, str] = {
    "lib/tenancy/tenancy.rego": "object_name itself, and a Namespace's own name for request_namespace (tested)",
    "rules/dra_claim_in_use/dra_claim_in_use.rego": "guarded: the request's name, else the object's, else \"\" (always defined)",
    "rules/namespace/namespace.rego": "guarded: the request's name, else the object's, else \"\" (always defined)",
    "rules/tenant_identity/tenant_identity.rego": "guarded: the request's name, else the object's, else \"\" (always defined)",
    "rules/queue/unmanaged.rego": "a scale call: the subresource of a named workload",
    "rules/gpu_quota/scale.rego": "a scale call: the subresource of a named workload",
    "rules/secret_scoping/secret_scoping.rego": "UPDATE and DELETE of a Secret, which always name it",
}


def _rules() -> list[Path]:
    return [
        p
        for p in sorted(LABGATE.rglob("*.rego"))
        if not p.name.endswith("_test.rego") and "testdata" not in p.parts
    ]


def _code(path: Path) -> str:
    """The file without its comments."""
    return "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())


def test_rules_name_the_object_through_tenancy_not_the_request() -> None:
    readers = {str(p.relative_to(LABGATE)) for p in _rules() if _REQUEST_NAME.search(_code(p))}
    assert readers <= set(NAME_READS_ALLOWED), sorted(readers - set(NAME_READS_ALLOWED))
    assert set(NAME_READS_ALLOWED) <= readers, (
        f"no longer read there: {sorted(set(NAME_READS_ALLOWED) - readers)}"
    )


def test_quantities_are_read_by_the_quantity_library_only() -> None:
    readers = {str(p.relative_to(LABGATE)) for p in _rules() if "units.parse(" in _code(p)}
    assert readers == {"lib/quantity/quantity.rego"}
