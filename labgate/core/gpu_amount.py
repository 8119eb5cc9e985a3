"""An amount of GPUs (pure): a total and a count per model, the one form GPU numbers take in
labgate, from OPA's answer (a pod's demand, its headroom) through the usage the webhook computes to
the quota ledger (reservations, the settled sum).

`GpuAmount` is immutable and hashable (usages are dictionary keys: decisions known per usage), adds
and subtracts (`+`, `-`, `sum_of`), compares (`fits_within`), and reads and writes the JSON form
that policies and ledgers share: `{"total": 12, "by_model": {"h100": 4}}` (`to_document`,
`from_document`; as a pydantic field it validates and serialises that form too).

Arithmetic drops models whose count comes to zero, and equality ignores them (no h100 and zero
h100 are the same amount). A *bound* is different: a headroom that names a model with zero room
forbids that model, so `fits_within` reads the bound's counts as given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypedDict

from pydantic import GetCoreSchemaHandler, TypeAdapter
from pydantic_core import core_schema

# The total of a bound without a total limit (a tenant with per-model quotas only): no usage
# reaches it.
NO_TOTAL_LIMIT = 2**63 - 1


class GpuDocument(TypedDict):
    """The JSON form of an amount."""

    total: int
    by_model: dict[str, int]


class GpuAmount:
    """GPUs in total and per model; immutable and hashable."""

    __slots__ = ("_by_model", "_key", "_total")

    def __init__(self, total: int = 0, by_model: Mapping[str, int] | None = None) -> None:
        self._total = int(total)
        # A view of a copy: read-only, and made in C (ledgers parse thousands of amounts at once).
        self._by_model = MappingProxyType({model: int(count) for model, count in (by_model or {}).items()})
        self._key: tuple[int, frozenset[tuple[str, int]]] | None = None  # made when first compared

    def _identity(self) -> tuple[int, frozenset[tuple[str, int]]]:
        if self._key is None:
            self._key = (self._total, frozenset((m, c) for m, c in self._by_model.items() if c))
        return self._key

    @property
    def total(self) -> int:
        return self._total

    @property
    def by_model(self) -> Mapping[str, int]:
        """Count per model (read-only)."""
        return self._by_model

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GpuAmount) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        return f"GpuAmount(total={self._total}, by_model={dict(self._by_model)!r})"

    def __copy__(self) -> GpuAmount:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> GpuAmount:
        return self

    def _combined(self, other: GpuAmount, sign: int) -> GpuAmount:
        by_model = dict(self._by_model)
        for model, count in other._by_model.items():
            by_model[model] = by_model.get(model, 0) + sign * count
        return GpuAmount(self._total + sign * other._total, {m: c for m, c in by_model.items() if c})

    def __add__(self, other: GpuAmount) -> GpuAmount:
        return self._combined(other, 1)

    def __sub__(self, other: GpuAmount) -> GpuAmount:
        return self._combined(other, -1)

    def __bool__(self) -> bool:
        """Whether there are any GPUs at all."""
        return self._total != 0 or any(self._by_model.values())

    def count(self, model: str) -> int:
        """GPUs of `model` (0 when none)."""
        return self._by_model.get(model, 0)

    def fits_within(self, bound: GpuAmount) -> bool:
        """Whether this amount stays within `bound`: its total, and each model the bound names (a
        model the bound does not name is not limited)."""
        return self._total <= bound._total and all(
            self.count(model) <= room for model, room in bound._by_model.items()
        )

    def to_document(self) -> GpuDocument:
        """The JSON form policies read (input.gpu_usage) and ledgers store."""
        return {"total": self._total, "by_model": dict(self._by_model)}

    @classmethod
    def from_document(cls, document: Mapping[str, Any] | None) -> GpuAmount:
        """From the JSON form (OPA's answer, a ledger, a sample); missing fields are zero. Raises
        pydantic's ValidationError when it is not that form."""
        if isinstance(document, GpuAmount):
            return document
        return _ADAPTER.validate_python(document or {})

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        fields = core_schema.typed_dict_schema(
            {
                "total": core_schema.typed_dict_field(core_schema.int_schema(), required=False),
                "by_model": core_schema.typed_dict_field(
                    core_schema.dict_schema(core_schema.str_schema(), core_schema.int_schema()),
                    required=False,
                ),
            }
        )
        from_fields = core_schema.no_info_after_validator_function(_from_fields, fields)
        return core_schema.json_or_python_schema(
            json_schema=from_fields,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_fields]),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda a: a.to_document()),
        )


# Amounts parsed so far, by their fields: a ledger or settled-pods shard of thousands of pods holds a
# handful of distinct amounts, and one shared (immutable) object each is hashed and compared once.
_PARSED: dict[tuple[int, tuple[tuple[str, int], ...]], GpuAmount] = {}
_PARSED_MAX = 4096


def _from_fields(fields: dict[str, Any]) -> GpuAmount:
    # Validated already: ints, a dict of its own (no copy needed).
    by_model = fields.get("by_model") or {}
    key = (fields.get("total", 0), tuple(by_model.items()))
    if (known := _PARSED.get(key)) is not None:
        return known
    amount = GpuAmount.__new__(GpuAmount)
    amount._total = key[0]
    amount._by_model = MappingProxyType(by_model)
    amount._key = None
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[key] = amount
    return amount


def sum_of(amounts: Iterable[GpuAmount]) -> GpuAmount:
    """The sum of `amounts` (none: no GPUs)."""
    total = 0
    by_model: dict[str, int] = {}
    for amount in amounts:
        total += amount.total
        for model, count in amount.by_model.items():
            by_model[model] = by_model.get(model, 0) + count
    return GpuAmount(total, {m: c for m, c in by_model.items() if c})


NO_GPUS = GpuAmount()

_ADAPTER: TypeAdapter[GpuAmount] = TypeAdapter(GpuAmount)
