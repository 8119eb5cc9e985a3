"""The test tiers of tests/conftest.py: a unit test finds no pinned tool and has a short timeout,
unless it is in the tools tier."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import devcluster.tools
from tests.conftest import UNIT_TIMEOUT_SECONDS


def test_a_unit_test_has_the_short_timeout(request: pytest.FixtureRequest) -> None:
    timeout = request.node.get_closest_marker("timeout")
    assert request.node.get_closest_marker("tools") is None
    assert timeout is not None
    assert timeout.args == (UNIT_TIMEOUT_SECONDS,)


def test_a_unit_test_cannot_get_a_pinned_tool() -> None:
    with pytest.raises(devcluster.tools.ToolMissingError, match=r"mark it @pytest.mark.tools"):
        devcluster.tools.ensure_tools("opa")
    with pytest.raises(devcluster.tools.ToolMissingError, match=r"mark it @pytest.mark.tools"):
        devcluster.tools.binary("opa")


def test_a_command_a_unit_test_runs_finds_no_opa() -> None:
    assert "LABGATE_OPA" not in os.environ
    result = subprocess.run(
        [sys.executable, "-c", "from cli.opa_binary import find_opa; find_opa()"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "no opa binary" in result.stderr


@pytest.mark.tools
def test_a_tools_test_gets_the_pinned_opa_and_the_default_timeout(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("timeout") is None
    opa = devcluster.tools.ensure_tools("opa")["opa"]
    assert opa.is_built
    assert opa.binary().is_file()
