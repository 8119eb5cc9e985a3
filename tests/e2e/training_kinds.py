"""The training kinds' CRDs (tests/e2e/fixtures/training-crds.yaml), installed once per cluster."""

from __future__ import annotations

from pathlib import Path

import yaml

from devcluster.stack import LabgateStack

TRAINING_CRDS = Path(__file__).parent / "fixtures" / "training-crds.yaml"


def install_training_crds(stack: LabgateStack) -> None:
    """Apply the CRDs (idempotent) and wait until the apiserver serves each of them."""
    stack.admin_kubectl("apply", "-f", str(TRAINING_CRDS))
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(TRAINING_CRDS.read_text()) if d]
    stack.admin_kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
