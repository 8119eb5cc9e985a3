package labgate.rules.gpu_preemptible_test

import data.labgate.lib.testdata
import data.labgate.rules.gpu_countable
import data.labgate.rules.gpu_model
import data.labgate.rules.gpu_preemptible
import data.labgate.rules.gpu_quota

# A Pod named `name` asking `limits` with the model `model` selected ("" for none).
gpu_pod(name, model, limits) := testdata.pod(name, object.union(
	{"containers": [testdata.gpu_container("main", limits)]},
	{"nodeSelector": {"nvidia.com/gpu.product": model} | model != ""},
))

pod_input(namespace, user, pod, usage) := object.union(
	testdata.workload_input("Pod", namespace, user, pod),
	{"gpu_usage": usage},
)

# Every GPU rule's findings: each test pins what all of them find together, as before the rules
# were split by concern into packages.
violations(input_doc) := v if {
	v := gpu_violations with input as input_doc
		with data.inventory as testdata.gpu_inventory
}

gpu_violations := ((gpu_quota.violation | gpu_model.violation) | gpu_preemptible.violation) | gpu_countable.violation

# --- beyond quota as preemptible ---

preemptible_inventory := json.patch(
	testdata.gpu_inventory,
	[{"op": "add", "path": "/tenants/vision/spec/gpu/overQuota", "value": "preemptible"}],
)

marked(pod, class) := json.patch(pod, [
	{"op": "add", "path": "/metadata/labels", "value": {"labgate.io/preemptible": "true"}},
	{"op": "add", "path": "/spec/priorityClassName", "value": class},
])

test_a_marked_pod_beyond_quota_is_admitted_for_a_preemptible_tenant_and_reserves_nothing if {
	pod := marked(gpu_pod("extra", "h100", {"nvidia.com/gpu": "8"}), "research-preemptible")
	doc := pod_input("vision", testdata.vera, pod, {"total": 12, "by_model": {"h100": 4}})
	count(gpu_violations) == 0 with input as doc with data.inventory as preemptible_inventory
	gpu_quota.demand == {"total": 0, "by_model": {}} with input as doc with data.inventory as preemptible_inventory
}

test_the_preemptible_label_without_the_tenants_consent_is_refused if {
	pod := marked(gpu_pod("extra", "h100", {"nvidia.com/gpu": "1"}), "research-preemptible")
	doc := pod_input("vision", testdata.vera, pod, {"total": 0, "by_model": {}})
	[v.rule | some v in violations(doc)] == ["gpu-preemptible"]
	some v in violations(doc)
	contains(v.message, `tenant "vision" admits no pods beyond quota`)
}

test_a_preemptible_pod_at_another_priority_is_refused if {
	pod := marked(gpu_pod("extra", "h100", {"nvidia.com/gpu": "8"}), "research-high")
	doc := pod_input("vision", testdata.vera, pod, {"total": 12, "by_model": {"h100": 4}})
	found := gpu_violations with input as doc with data.inventory as preemptible_inventory
	{v.rule | some v in found} == {"gpu-preemptible", "gpu-quota"}
}
