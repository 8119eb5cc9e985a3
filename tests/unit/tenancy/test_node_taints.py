"""Where a pod without tolerations can land (rbac.node_taints): a node's summary and the cluster's
(issue 28 item 5)."""

from __future__ import annotations

from typing import Any

import pytest

from rbac.node_taints import MAX_TAINT_KEYS, NodeTaints, node_taints, open_nodes


def node(*taints: tuple[str, str], ready: str = "True", cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": "n"},
        "spec": {
            "taints": [{"key": key, "value": "v", "effect": effect} for key, effect in taints],
            **({"unschedulable": True} if cordoned else {}),
        },
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]
        },
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (node(), NodeTaints(takes_pods=True, keys=frozenset())),
        # PreferNoSchedule only discourages: the node still takes a pod without tolerations.
        (node(("labgate.io/spot", "PreferNoSchedule")), NodeTaints(takes_pods=True, keys=frozenset())),
        (
            node(("labgate.io/pool", "NoSchedule"), ("labgate.io/spot", "NoExecute")),
            NodeTaints(takes_pods=True, keys=frozenset({"labgate.io/pool", "labgate.io/spot"})),
        ),
        (node(ready="False"), NodeTaints(takes_pods=False, keys=frozenset())),
        (node(ready="Unknown"), NodeTaints(takes_pods=False, keys=frozenset())),
        (node(cordoned=True), NodeTaints(takes_pods=False, keys=frozenset())),
        ({"metadata": {"name": "bare"}}, NodeTaints(takes_pods=False, keys=frozenset())),  # no conditions yet
    ],
    ids=["untainted", "prefer-no-schedule", "tainted", "not-ready", "unknown", "cordoned", "no-status"],
)
def test_a_nodes_summary(obj: dict[str, Any], expected: NodeTaints) -> None:
    assert node_taints(obj) == expected


def test_every_node_tainted_names_the_keys_that_keep_them() -> None:
    pools = node_taints(node(("labgate.io/pool", "NoSchedule"), ("labgate.io/spot", "NoSchedule")))
    cordoned = node_taints(node(cordoned=True))
    assert open_nodes([pools, pools, node_taints(node(("labgate.io/pool", "NoSchedule"))), cordoned]) == {
        "untainted": 0,
        "tainted": 3,
        "taintKeys": ["labgate.io/pool", "labgate.io/spot"],
    }


def test_an_untainted_node_is_counted() -> None:
    summary = open_nodes([node_taints(node()), node_taints(node(("labgate.io/pool", "NoSchedule")))])
    assert summary == {"untainted": 1, "tainted": 1, "taintKeys": ["labgate.io/pool"]}
    assert open_nodes([node_taints(node())]) == {"untainted": 1, "tainted": 0}  # no keys: none said
    assert open_nodes([]) == {"untainted": 0, "tainted": 0}


def test_the_keys_named_are_bounded_and_the_rest_counted() -> None:
    keys = [f"k{i:02d}" for i in range(MAX_TAINT_KEYS + 3)]
    summary = open_nodes([NodeTaints(takes_pods=True, keys=frozenset({key})) for key in keys])
    assert summary == {
        "untainted": 0,
        "tainted": len(keys),
        "taintKeys": keys[:MAX_TAINT_KEYS],
        "moreTaintKeys": 3,
    }
