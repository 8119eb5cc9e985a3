"""Which images a pod spec runs (webhook.provenance.reference.spec_images): the one list that both the
registry check (input.image_references) and the registry facts (input.images) are built from."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.provenance.admission import template_images
from webhook.provenance.reference import spec_images


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {
                "initContainers": [{"name": "i", "image": "init:v1"}],
                "containers": [{"name": "c", "image": "train:v1"}, {"name": "d", "image": "train:v1"}],
                "ephemeralContainers": [{"name": "e", "image": "debug:v1"}],
                "volumes": [
                    {"name": "weights", "image": {"reference": "weights:v3", "pullPolicy": "IfNotPresent"}},
                    {"name": "scratch", "emptyDir": {}},
                ],
            },
            ["train:v1", "init:v1", "debug:v1", "weights:v3"],
        ),
        ({"volumes": [{"name": "w", "image": {"reference": "weights:v3"}}]}, ["weights:v3"]),
        # Shapes the apiserver would refuse are decided, never an error.
        ({"containers": "x", "volumes": {"w": 1}}, []),
        ({"volumes": [{"name": "w", "image": "weights:v3"}, None, {"image": {"reference": 7}}]}, []),
        (None, []),
    ],
)
def test_every_image_a_pod_spec_runs_is_found_once(spec: Any, expected: list[str]) -> None:
    assert spec_images(spec) == expected


def test_the_image_facts_cover_image_volumes_of_every_template() -> None:
    templates: list[dict[str, Any]] = [
        {"path": "spec.template.spec", "spec": {"containers": [{"name": "c", "image": "train:v1"}]}},
        {"path": "spec.x.spec", "spec": {"volumes": [{"name": "w", "image": {"reference": "weights:v3"}}]}},
    ]
    assert template_images(templates) == ["train:v1", "weights:v3"]
