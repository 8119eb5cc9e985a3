"""Pure: what `kubectl get tenant` shows a researcher, as status fields the reconciler writes.

The CRD's printer columns can only show fields, not compute them, so the reconciler writes
preformatted text (`status.gpu.summary`: "a100 0/8, h100 2/8, total 2/16") beside the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def gpu_summary(
    *, total: int | None, models: Mapping[str, int], used_total: int, used_by_model: Mapping[str, int]
) -> str:
    """ "h100 2/8, a100 0/8, total 2/16": used of the limit per model (in the Tenant's order), then the
    total; a model in use without a limit shows "-" as its limit; "2 (no limit)" without any limit."""
    parts = [f"{model} {used_by_model.get(model, 0)}/{limit}" for model, limit in sorted(models.items())]
    parts += [f"{model} {n}/-" for model, n in sorted(used_by_model.items()) if model not in models and n]
    if total is not None:
        parts.append(f"total {used_total}/{total}")
    elif not parts:
        parts.append(f"{used_total} (no limit)")
    return ", ".join(parts)


def held_text(gpus: int, pods: Sequence[str], *, shown: int = 3) -> str:
    """ "8 held by 1 pod not yet scheduled: gpu-experiment-dzjhx": quota that admitted pods hold while
    they wait for a node (the first `shown` names, then "..."); "" when none."""
    if not pods:
        return ""
    names = ", ".join([*pods[:shown], *(["..."] if len(pods) > shown else [])])
    noun = "pod" if len(pods) == 1 else "pods"
    return f"{gpus} held by {len(pods)} {noun} not yet scheduled: {names}"


def pending_pods(phases: Iterable[str], reservations_without_pod: int) -> int:
    """Pods admitted that do not run yet: those Pending, plus reservations whose pod is not seen yet."""
    return sum(1 for phase in phases if phase in ("", "Pending")) + reservations_without_pod
