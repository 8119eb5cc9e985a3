"""The PersistentVolumes that claim templates name, for the volume-claim-template rule.

A generic ephemeral volume (`spec.volumes[].ephemeral.volumeClaimTemplate`, in any pod template) and
a StatefulSet's `spec.volumeClaimTemplates` become claims that kube-controller-manager creates; the
rule judges the volume a template names (`spec.volumeName`) before any claim exists. Finding the
names is pure; reading the volumes goes through the reader the volume-claim rule already uses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from webhook.policy_input import VolumeDocument
from webhook.read_shares import Read, unshared

log = logging.getLogger(__name__)

# The most volumes one request's templates may have read; beyond, the rule refuses the rest as unread.
MAX_TEMPLATE_VOLUMES = 16


class VolumeReader(Protocol):
    def volume(self, name: str) -> VolumeDocument: ...


def _field(document: Any, name: str) -> Any:
    """`document[name]` when `document` is a mapping, else None (any object shape is decided, never
    an internal error: the policy judges what is malformed)."""
    return document.get(name) if isinstance(document, Mapping) else None


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _claim_template_specs(obj: Mapping[str, Any] | None, pod_templates: list[dict[str, Any]]) -> list[Any]:
    specs: list[Any] = []
    for template in pod_templates:
        for volume in _items(_field(_field(template, "spec"), "volumes")):
            specs.append(_field(_field(_field(volume, "ephemeral"), "volumeClaimTemplate"), "spec"))
    if obj is not None and obj.get("kind") == "StatefulSet":
        for claim in _items(_field(_field(obj, "spec"), "volumeClaimTemplates")):
            specs.append(_field(claim, "spec"))
    return specs


def template_volume_names(obj: Mapping[str, Any] | None, pod_templates: list[dict[str, Any]]) -> list[str]:
    """The volumes the request's claim templates name (spec.volumeName), each once, in order."""
    names: dict[str, None] = {}
    for spec in _claim_template_specs(obj, pod_templates):
        name = spec.get("volumeName") if isinstance(spec, dict) else None
        if isinstance(name, str) and name:
            names[name] = None
    return list(names)


async def template_volumes(
    names: list[str], reader: VolumeReader, *, read: Read = unshared
) -> dict[str, VolumeDocument]:
    """name -> {name, exists, labels, claimRef} for the first MAX_TEMPLATE_VOLUMES names; a volume
    whose read failed is left out (the rule refuses what it could not see). `read` runs each read
    (in the request's tenant's share of the pool: webhook/read_shares.py)."""
    chosen = names[:MAX_TEMPLATE_VOLUMES]
    results = await asyncio.gather(*(read(reader.volume, name) for name in chosen), return_exceptions=True)
    found: dict[str, VolumeDocument] = {}
    for name, result in zip(chosen, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("could not read PersistentVolume %s: %s", name, result)
        else:
            found[name] = result
    return found
