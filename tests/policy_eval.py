"""One expression over the repository's policies, through the pinned `opa eval` (for the property
tests that hold Rego against a reference implementation and the Python)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

POLICIES = Path(__file__).resolve().parents[1] / "policies"


def eval_policies(opa: str, query: str, document: dict[str, Any]) -> Any:
    """The value of `query` with `document` as input, over policies/ without tests, samples or
    test data (as the OPA server loads them)."""
    result = subprocess.run(
        [
            opa,
            "eval",
            "--format=json",
            "--stdin-input",
            "--data",
            str(POLICIES),
            "--ignore=*_test.rego",
            "--ignore=samples",
            "--ignore=testdata",
            query,
        ],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(result.stdout)["result"][0]["expressions"][0]["value"]
