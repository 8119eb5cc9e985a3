"""The admission path's JSON encoder gives the same document for every JSON value, orjson or not."""

from __future__ import annotations

import json

from labgate.core.json_bytes import dumps


def test_an_integer_beyond_64_bits_is_encoded_not_refused() -> None:
    document = {"spec": {"replicas": 2**70, "name": "big"}}
    assert json.loads(dumps(document)) == document


def test_ordinary_documents_round_trip() -> None:
    document = {"a": [1, 2.5, None, True, "ü"], "b": {"c": -(2**63)}}
    assert json.loads(dumps(document)) == document
