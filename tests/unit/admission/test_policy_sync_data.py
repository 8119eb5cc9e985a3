"""A data file edited live keeps the data of the folders below it: a PUT at labgate/config replaces
all OPA holds there, labgate/config/scheduling too (found on a real node: after an edit of
labgate/config/data.json every pod was refused with [placement-scheduler] until the pods rolled)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.admission.test_policy_events import FakeOpa
from webhook.policy_sync import PolicySync, data_tree


class FakeOpaData(FakeOpa):
    """FakeOpa with OPA's data: a PUT at a path replaces the whole document there; every PUT kept."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, Any] = {}
        self.puts: list[str] = []

    def put_data(self, path: str, document: Any) -> None:
        super().put_data(path, document)
        self.puts.append(path)
        *parents, last = path.split("/")
        node = self.data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = json.loads(json.dumps(document))


def write(root: Path, path: str, document: dict[str, Any]) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(json.dumps(document))


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    write(tmp_path, "labgate/config/data.json", {"allowed_registries": []})
    write(tmp_path, "labgate/config/scheduling/data.json", {"schedulers": ["default-scheduler"]})
    write(tmp_path, "labgate/config/queue/data.json", {"managed_by_kueue": False})
    return tmp_path


def test_an_edit_of_a_parent_data_file_keeps_the_data_of_the_folders_below(policies: Path) -> None:
    opa = FakeOpaData()
    sync = PolicySync(policies, opa, interval=3600)
    assert sync.sync_once().error is None
    write(policies, "labgate/config/data.json", {"allowed_registries": ["registry.lab.example"]})
    assert sync.sync_once().error is None
    assert opa.data["labgate"]["config"] == {
        "allowed_registries": ["registry.lab.example"],
        "scheduling": {"schedulers": ["default-scheduler"]},
        "queue": {"managed_by_kueue": False},
    }


def test_each_edit_is_one_put_and_a_child_edit_puts_only_the_child(policies: Path) -> None:
    opa = FakeOpaData()
    sync = PolicySync(policies, opa, interval=3600)
    sync.sync_once()
    opa.puts.clear()
    write(policies, "labgate/config/data.json", {"allowed_registries": ["a.example"]})
    write(policies, "labgate/config/scheduling/data.json", {"schedulers": ["default-scheduler", "volcano"]})
    sync.sync_once()
    # One PUT of the whole tree: no decision sees labgate/config without its scheduling.
    assert opa.puts == ["labgate/config", "labgate_policy_sync"]
    assert opa.data["labgate"]["config"]["scheduling"]["schedulers"] == ["default-scheduler", "volcano"]
    opa.puts.clear()
    write(policies, "labgate/config/queue/data.json", {"managed_by_kueue": True})
    sync.sync_once()
    assert opa.puts == ["labgate/config/queue", "labgate_policy_sync"]
    assert opa.data["labgate"]["config"]["allowed_registries"] == ["a.example"]


def test_a_broken_data_file_below_is_named_and_the_previous_data_kept(policies: Path) -> None:
    opa = FakeOpaData()
    sync = PolicySync(policies, opa, interval=3600)
    sync.sync_once()
    before = json.loads(json.dumps(opa.data))
    write(policies, "labgate/config/data.json", {"allowed_registries": ["a.example"]})
    (policies / "labgate/config/queue/data.json").write_text("{not json")
    status = sync.sync_once()
    assert status.error is not None
    assert "labgate/config/queue/data.json" in status.error
    assert opa.data == before


def test_data_tree_nests_each_folder_at_its_path() -> None:
    files = {
        "labgate/config/data.json": b'{"a": 1}',
        "labgate/config/x/y/data.json": b'{"b": 2}',
        "labgate/config/x/data.json": b'{"c": 3}',
    }
    assert data_tree(files, "labgate/config") == {"a": 1, "x": {"c": 3, "y": {"b": 2}}}
    with pytest.raises(ValueError, match="clashes"):
        data_tree({**files, "labgate/config/data.json": b'{"x": 1}'}, "labgate/config")
