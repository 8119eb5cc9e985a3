"""Options shared by every test layer, and the three tiers of tests.

1. unit (`make unit`): tests/unit without the `tools` marker. No pinned binary, no server; each test
   has UNIT_TIMEOUT_SECONDS. While one runs, the pinned tools cannot be found (`devcluster.tools`
   refuses, and the `labgate` command finds no opa), so a test that needs one fails with a message
   naming the marker instead of quietly becoming slow.
2. tools (`make tools-tests`): tests/unit with the `tools` marker: they run the pinned opa or helm.
   A test is marked when it asks for one of TOOL_FIXTURES, or explicitly with `@pytest.mark.tools`.
3. e2e (`make e2e`): tests/e2e (marker `e2e`, set in tests/e2e/conftest.py).

`make test` runs all three.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, settings

import devcluster.tools

# Property tests judge what is generated, not how fast: on 2 cores shared with a control plane (CI,
# or several engineers' runs) generating an input can take over a second, which Hypothesis' too_slow
# health check and per-example deadline would report as a failure of the test. Both are off for every
# property test; each test's own max_examples still bounds its time, and UNIT_TIMEOUT_SECONDS holds.
settings.register_profile("labgate", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("labgate")

# The fixtures through which unit tests get a pinned tool (opa started or found; helm).
TOOL_FIXTURES = frozenset({"opa", "opa_url", "_opa", "helm"})
# Half the e2e default, with room for a machine shared with other work: the slowest tier-1 test (a
# property test) took 28 s on 2 cores under a load of 18, and a few seconds on an idle machine.
UNIT_TIMEOUT_SECONDS = 60
# Where the tier-1 tests (and the `labgate` commands they run) look for the tools: nowhere.
_NO_TOOLS = "/nonexistent/labgate-unit-tier-has-no-tools"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster",
        choices=["local", "kind"],
        default=None,
        help="e2e cluster: 'local' (etcd + kube-apiserver processes, the default) or 'kind' (needs Docker); "
        "the LABGATE_E2E_CLUSTER variable sets the same",
    )


def _is_unit(item: pytest.Item) -> bool:
    return "unit" in item.path.parts and "e2e" not in item.path.parts


def _is_fast_unit(item: pytest.Item) -> bool:
    return _is_unit(item) and item.get_closest_marker("tools") is None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not _is_unit(item):
            continue
        if TOOL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.tools)
        if item.get_closest_marker("tools") is None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_SECONDS))


def _no_tool(name: str) -> devcluster.tools.Tool:
    raise devcluster.tools.ToolMissingError(
        f"a unit test asked for the pinned tool {name!r}: mark it @pytest.mark.tools (or use one of "
        f"{sorted(TOOL_FIXTURES)}) so it runs in the tools tier"
    )


@contextmanager
def _without_tools() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(devcluster.tools, "tool", _no_tool)
        patch.setenv("LABGATE_TOOLS_CACHE", _NO_TOOLS)
        patch.delenv("LABGATE_OPA", raising=False)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    if not _is_fast_unit(item):
        return (yield)
    with _without_tools():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    if not _is_fast_unit(item):
        return (yield)
    with _without_tools():
        return (yield)
