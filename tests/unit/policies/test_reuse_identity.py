"""The shipped rules never decide on a pod's identity: what makes reusing one pod's decision for its
copies sound (webhook/decision_reuse.py).

Every pod spec of the policy samples (bare Pods, and the pod templates of their Jobs, Deployments and
training jobs, made into Pods) is mutated and decided by the real policies (`opa eval`) twice: as
two copies differing only in the fields reuse leaves out (name, generated name, uid, creation time,
resource version, managed fields, and an Indexed Job's completion index: label, annotation, hostname). Both copies must get the same verdict, the same rule findings, the same
patch, and the same text but for the pod's name."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from cli.offline_admission import OfflineOpa, admission_request, facts_from_manifests, load_manifests
from cli.policy_samples import Sample, find_samples, inventory_path, load_sample
from devcluster.stack import POLICY_DIR
from devcluster.tools import binary, ensure_tools
from webhook.decision_reuse import COMPLETION_INDEX, IDENTITY_FIELDS
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, find_pod_templates


def _pods_of(sample: Sample) -> list[dict[str, Any]]:
    """The sample's object when it is a Pod being created, else a Pod for each of its pod templates."""
    obj = sample.object
    if obj is None or sample.operation != "CREATE":
        return []
    if obj.get("kind") == "Pod":
        return [obj]
    group = obj.get("apiVersion", "").rpartition("/")[0]
    templates = find_pod_templates(obj, group=group, kind=str(obj.get("kind")), kinds=BUILTIN_WORKLOAD_KINDS)
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**(t["metadata"] or {}), "name": "from-template"},
            "spec": t["spec"],
        }
        for t in templates
        if not t["synthesized"] and isinstance(t["spec"], dict)
    ]


def _cases() -> list[tuple[str, Sample, dict[str, Any]]]:
    cases = []
    for path in find_samples(POLICY_DIR):
        sample = load_sample(path)
        for index, pod in enumerate(_pods_of(sample)):
            cases.append((f"{path.parent.parent.name}/{path.stem}/{index}", sample, pod))
    return cases


_IMAGE = "registry.lab.example/team-a/trainer:v1"
_ALICE = {"username": "alice", "groups": ["team-a"]}


def _gpu(n: int, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {"name": "main", "image": _IMAGE, "resources": {"limits": {resource: str(n)}}}


# Pod specs beyond the samples, one per kind of finding a pod can get (and the admitted shapes
# beside them): (name, spec, labels, gpu usage).
_EXTRA: list[tuple[str, dict[str, Any], dict[str, str], dict[str, Any] | None]] = [
    ("plain", {"containers": [{"name": "main", "image": _IMAGE}]}, {}, None),
    (
        "gpu-within",
        {"containers": [_gpu(2)], "nodeSelector": {"nvidia.com/gpu.product": "h100"}},
        {},
        {"total": 2, "by_model": {"h100": 2}},
    ),
    (
        "gpu-over",
        {"containers": [_gpu(4)], "nodeSelector": {"nvidia.com/gpu.product": "h100"}},
        {},
        {"total": 6, "by_model": {"h100": 6}},
    ),
    ("gpu-no-model", {"containers": [_gpu(1)]}, {}, {"total": 0, "by_model": {}}),
    (
        "gpu-init",
        {
            "initContainers": [{**_gpu(8), "name": "warm"}],
            "containers": [_gpu(1)],
            "nodeSelector": {"nvidia.com/gpu.product": "a100"},
        },
        {},
        {"total": 0, "by_model": {}},
    ),
    ("gpu-unknown", {"containers": [_gpu(1, "amd.com/gpu")]}, {}, {"total": 0, "by_model": {}}),
    (
        "preemptible-label",
        {"containers": [_gpu(1)], "nodeSelector": {"nvidia.com/gpu.product": "h100"}},
        {"labgate.io/preemptible": "true"},
        {"total": 0, "by_model": {}},
    ),
    ("host-network", {"hostNetwork": True, "containers": [{"name": "main", "image": _IMAGE}]}, {}, None),
    (
        "host-path",
        {
            "containers": [{"name": "main", "image": _IMAGE}],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        },
        {},
        None,
    ),
    (
        "privileged",
        {"containers": [{"name": "main", "image": _IMAGE, "securityContext": {"privileged": True}}]},
        {},
        None,
    ),
    (
        "foreign-image",
        {"containers": [{"name": "main", "image": "docker.io/library/busybox:latest"}]},
        {},
        None,
    ),
    ("node-name", {"nodeName": "gpu-node-1", "containers": [{"name": "main", "image": _IMAGE}]}, {}, None),
    (
        "system-priority",
        {"priorityClassName": "system-node-critical", "containers": [{"name": "main", "image": _IMAGE}]},
        {},
        None,
    ),
    (
        "other-secret",
        {
            "containers": [
                {"name": "main", "image": _IMAGE, "envFrom": [{"secretRef": {"name": "team-b-token"}}]}
            ]
        },
        {},
        None,
    ),
    (
        "platform-sa",
        {"serviceAccountName": "labgate-reconciler", "containers": [{"name": "main", "image": _IMAGE}]},
        {},
        None,
    ),
    (
        "runtime-class",
        {"runtimeClassName": "kata", "containers": [{"name": "main", "image": _IMAGE}]},
        {},
        None,
    ),
]


def _extra_cases() -> list[tuple[str, Sample, dict[str, Any]]]:
    cases = []
    for name, spec, labels, usage in _EXTRA:
        sample = Sample.model_validate(
            {
                "description": name,
                "user": _ALICE,
                "namespace": "team-a",
                "gpu_usage": usage,
                "expect": {"allowed": True},
            }
        )
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}
        cases.append((f"extra/{name}", sample, pod))
    return cases


CASES = _cases() + _extra_cases()


def _copy(pod: dict[str, Any], n: int) -> dict[str, Any]:
    made = copy.deepcopy(pod)
    metadata = made.setdefault("metadata", {})
    # As an Indexed Job's pods differ: by their index, in a label, an annotation and the hostname.
    for field in ("labels", "annotations"):
        metadata[field] = {**(metadata.get(field) or {}), COMPLETION_INDEX: str(n)}
    made["spec"] = {**(made.get("spec") or {}), "hostname": f"sweep-{n}"}
    metadata.update(
        {
            "name": f"sweep-copy{n}x",
            "generateName": f"sweep-{n}-",
            "uid": f"0000000{n}-aaaa-bbbb-cccc-00000000000{n}",
            "creationTimestamp": f"2026-11-30T20:0{n}:00Z",
            "resourceVersion": str(4000 + n),
            "generation": n,
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "time": f"20:0{n}"}
            ],
        }
    )
    assert set(metadata) >= IDENTITY_FIELDS
    return made


@pytest.fixture(scope="module")
def opa() -> Iterator[OfflineOpa]:
    ensure_tools("opa")
    facts = facts_from_manifests(
        load_manifests([inventory_path(POLICY_DIR)]), platform_namespace="labgate-system"
    )
    with OfflineOpa(binary("opa"), POLICY_DIR, facts) as offline:
        yield offline


def test_the_samples_give_pods_of_every_kind() -> None:
    assert len(CASES) >= 30
    assert sum(pod["metadata"]["name"] == "from-template" for _, _, pod in CASES) >= 5  # from workloads


@pytest.mark.parametrize(("name", "sample", "pod"), CASES, ids=[c[0] for c in CASES])
def test_copies_of_a_pod_get_the_same_answer_but_for_their_name(
    opa: OfflineOpa, name: str, sample: Sample, pod: dict[str, Any]
) -> None:
    results = []
    for n in (1, 2):
        request = admission_request(
            obj=_copy(pod, n),
            username=sample.user.username,
            groups=sample.user.groups,
            namespace=sample.namespace,
            uid=f"review-{n}",
        )
        results.append(opa.check(request, gpu_usage=sample.gpu_usage, images=sample.images))
    first, second = results
    assert first.is_allowed == second.is_allowed, name
    assert sorted(first.rule_ids) == sorted(second.rule_ids), name
    assert first.mutation.patch == second.mutation.patch, name
    assert first.mutation.reads_gpu_usage == second.mutation.reads_gpu_usage, name
    assert first.decision.gpu_demand == second.decision.gpu_demand, name
    assert first.decision.gpu_headroom == second.decision.gpu_headroom, name
    assert first.visible_text.replace("sweep-copy1x", "sweep-copy2x") == second.visible_text, name
