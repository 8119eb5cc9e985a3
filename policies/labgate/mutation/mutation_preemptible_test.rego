package labgate.mutation_test

import data.labgate.lib.testdata
import data.labgate.mutation

# The mutation's tests of marking a pod beyond its tenant's GPU quota as preemptible (split from
# mutation_test.rego, whose helpers they use: one package).

_preempt_inventory := json.patch(
	testdata.gpu_inventory,
	[{"op": "add", "path": "/tenants/vision/spec/gpu/overQuota", "value": "preemptible"}],
)

_preempt_input(usage) := {
	"request": object.union(testdata.pod_request("vision", testdata.vera), {"object": {"metadata": {"name": "extra"}}}),
	"pod_templates": [{"path": "spec", "metadata": {"name": "extra"}, "replicas": 1, "spec": {
		"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
		"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "h100-spot"},
		"automountServiceAccountToken": false, "priority": 0,
	}}],
	"gpu_usage": usage,
}

test_a_pod_beyond_quota_is_marked_preemptible if {
	patch := mutation.patch with input as _preempt_input({"total": 12, "by_model": {"h100": 4}})
		with data.inventory as _preempt_inventory
	{"op": "add", "path": "/spec/priorityClassName", "value": "research-preemptible"} in patch
	{"op": "add", "path": "/spec/priority", "value": -100} in patch
	{"op": "add", "path": "/metadata/labels", "value": {"labgate.io/preemptible": "true"}} in patch
}

# The warning names the rule and the numbers (issue 22 item 12).
test_the_preemptible_warning_says_the_rule_and_the_numbers if {
	warnings := mutation.warnings with input as _preempt_input({"total": 12, "by_model": {"h100": 4}})
		with data.inventory as _preempt_inventory
	`[gpu-preemptible] asks 8 GPUs, uses 12 of 16 GPUs (h100: 4 of 8): admitted as preemptible, may be evicted` in warnings
}

test_a_pod_within_quota_is_not_marked if {
	patch := mutation.patch with input as _preempt_input({"total": 0, "by_model": {}})
		with data.inventory as _preempt_inventory
	not {"op": "add", "path": "/spec/priorityClassName", "value": "research-preemptible"} in patch
}

# The webhook reuses a mutation for an identical pod at another GPU usage only when reads_gpu_usage
# is false: then the patch must indeed be the same at any usage.
test_without_preemptible_pods_the_patch_does_not_read_the_usage if {
	not mutation.reads_gpu_usage with input as _preempt_input({"total": 12, "by_model": {"h100": 4}})
		with data.inventory as testdata.gpu_inventory
	over := mutation.patch with input as _preempt_input({"total": 12, "by_model": {"h100": 4}})
		with data.inventory as testdata.gpu_inventory
	within := mutation.patch with input as _preempt_input({"total": 0, "by_model": {}})
		with data.inventory as testdata.gpu_inventory
	over == within
}

test_with_preemptible_pods_the_patch_reads_the_usage if {
	mutation.reads_gpu_usage with input as _preempt_input({"total": 0, "by_model": {}})
		with data.inventory as _preempt_inventory
}

# Regression: the opt-out written on the Job's own metadata was ignored and the pods went to spot.
test_on_demand_on_a_jobs_own_metadata_places_its_template_on_demand if {
	job := json.patch(testdata.job("sweep", 1, {}, {"containers": [gpu_container("1")]}), [{
		"op": "add", "path": "/metadata/annotations",
		"value": {"labgate.io/capacity": "on-demand"},
	}])
	input_doc := testdata.workload_input("Job", "speech", testdata.sam, job)
	mutate(input_doc).patch[0] == {
		"op": "add", "path": "/spec/template/spec/nodeSelector",
		"value": {"labgate.io/node-pool": "a100-ondemand", "nvidia.com/gpu.product": "a100"},
	}
	`labgate placed template spec.template.spec on on-demand pool "a100-ondemand"` in mutate(input_doc).warnings
	is_idempotent(input_doc)
}
