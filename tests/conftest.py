"""Options shared by every test layer."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster",
        choices=["local", "kind"],
        default=None,
        help="e2e cluster: 'local' (etcd + kube-apiserver processes, the default) or 'kind' (needs Docker); "
        "the LABGATE_E2E_CLUSTER variable sets the same",
    )
