"""The values the real node's chart install is given (devcluster.node_chart): every image by digest."""

from __future__ import annotations

import base64

import pytest

from devcluster.node_chart import ChartImages, chart_values, split_reference

IMAGES = ChartImages(
    labgate="172.31.254.1:5000/labgate/labgate@sha256:" + "a" * 64,
    opa="172.31.254.1:5000/labgate/opa@sha256:" + "b" * 64,
    kubectl="172.31.254.1:5000/labgate/kubectl@sha256:" + "c" * 64,
)


def test_every_image_the_chart_runs_is_pinned_by_its_digest() -> None:
    values = chart_values(IMAGES, apiserver_address="172.31.254.1", client_ca_pem=b"PEM")
    blocks = (values["image"], values["opa"]["image"], values["preDeleteHook"]["image"])
    pinned = {f"{block['repository']}@{block['digest']}" for block in blocks}
    assert pinned == {IMAGES.labgate, IMAGES.opa, IMAGES.kubectl}


def test_two_webhook_replicas_the_charts_certificates_and_the_apiservers_client_ca() -> None:
    webhook = chart_values(IMAGES, apiserver_address="172.31.254.1", client_ca_pem=b"PEM")["webhook"]
    assert webhook["replicas"] == 2
    assert webhook["clientAuth"] == {"required": True, "caBundle": base64.b64encode(b"PEM").decode()}
    assert webhook["networkPolicy"]["apiserverCIDRs"] == ["172.31.254.1/32"]


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("host:5000/a/b@sha256:" + "d" * 64, {"repository": "host:5000/a/b", "digest": "sha256:" + "d" * 64}),
    ],
)
def test_a_reference_by_digest_splits_into_the_charts_image_block(
    reference: str, expected: dict[str, str]
) -> None:
    assert split_reference(reference) == expected


@pytest.mark.parametrize("reference", ["host:5000/a/b:latest", "host:5000/a/b"])
def test_a_reference_by_tag_is_refused(reference: str) -> None:
    with pytest.raises(ValueError, match="not a reference by digest"):
        split_reference(reference)
