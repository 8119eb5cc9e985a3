package labgate.rules.gpu_model_test

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

# Every GPU rule's findings: each test pins what all of them find together, as before the rules
# were split by concern into packages.
violations(input_doc) := v if {
	v := gpu_violations with input as input_doc
		with data.inventory as testdata.gpu_inventory
}

gpu_violations := ((gpu_quota.violation | gpu_model.violation) | gpu_preemptible.violation) | gpu_countable.violation

# --- gpu-quota-pending: pods that will wait, announced at apply time ---

sweep(parallelism, per_pod) := testdata.job("sweep", parallelism, {}, {
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": per_pod})],
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
})

_sidecar(limits) := object.union(testdata.gpu_container("proxy", limits), {"restartPolicy": "Always"})

# --- gpu-model-unknown ---

test_listed_model_is_allowed if {
	pod := gpu_pod("train-1", "a100", {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"})
	count(violations(testdata.workload_input("Pod", "vision", testdata.vera, pod))) == 0
}

test_no_model_is_allowed_where_the_tenant_lists_one if {
	pod := gpu_pod("train-1", "", {"nvidia.com/gpu": "1"})
	count(violations(testdata.workload_input("Pod", "speech", testdata.sam, pod))) == 0
}

test_no_model_among_several_is_refused if {
	pod := gpu_pod("train-1", "", {"nvidia.com/gpu": "2"})
	violations(testdata.workload_input("Pod", "vision", testdata.vera, pod)) == {{
		"rule": "gpu-model-unknown",
		"field": "spec.nodeSelector",
		"message": concat("", [
			`[gpu-model-unknown] Pod "train-1" spec asks 2 nvidia.com/gpu (model unspecified); tenant "vision" has GPU `,
			`models "a100", "h100", "mig-1g.10gb" only. Fix: select one with spec.nodeSelector nvidia.com/gpu.product: `,
			`<model>`,
		]),
	}}
}

test_unlisted_model_is_refused if {
	pod := gpu_pod("train-1", "b200", {"nvidia.com/gpu": "1"})
	violations(testdata.workload_input("Pod", "speech", testdata.sam, pod)) == {{
		"rule": "gpu-model-unknown",
		"field": "spec.nodeSelector",
		"message": concat("", [
			`[gpu-model-unknown] Pod "train-1" spec asks 1 nvidia.com/gpu (b200); tenant "speech" has GPU models `,
			`"a100" only. Fix: select one with spec.nodeSelector nvidia.com/gpu.product: <model>`,
		]),
	}}
}

test_unlisted_mig_profile_in_a_job_is_refused_when_applied if {
	job := testdata.job("sweep", 2, {}, {"containers": [testdata.gpu_container("main", {"nvidia.com/mig-3g.40gb": "1"})]})
	violations(testdata.workload_input("Job", "vision", testdata.vera, job)) == {{
		"rule": "gpu-model-unknown",
		"field": "spec.template.spec.containers",
		"message": concat("", [
			`[gpu-model-unknown] Job "sweep" spec.template.spec asks 1 nvidia.com/mig-3g.40gb; tenant "vision" has GPU `,
			`models "a100", "h100", "mig-1g.10gb" only. Fix: ask the MIG resource of one of those models instead `,
			`(model mig-1g.10gb is resource nvidia.com/mig-1g.10gb), or ask the infra team to add model "mig-3g.40gb" `,
			`to spec.gpu.models of Tenant "vision"`,
		]),
	}}
}

# A tenant with no MIG model: the Fix is the infra team's (issue 22 item 11).
test_a_mig_profile_of_a_tenant_without_mig_models_asks_the_infra_team if {
	pod := testdata.pod("small", {"containers": [testdata.gpu_container("main", {"nvidia.com/mig-1g.10gb": "1"})]})
	violations(testdata.workload_input("Pod", "speech", testdata.sam, pod)) == {{
		"rule": "gpu-model-unknown",
		"field": "spec.containers",
		"message": concat("", [
			`[gpu-model-unknown] Pod "small" spec asks 1 nvidia.com/mig-1g.10gb; tenant "speech" has GPU models "a100" `,
			`only. Fix: ask the infra team to add model "mig-1g.10gb" (resource nvidia.com/mig-1g.10gb) to `,
			`spec.gpu.models of Tenant "speech"`,
		]),
	}}
}

test_an_unlisted_model_in_a_sidecar_is_refused if {
	pod := testdata.pod("side", {
		"nodeSelector": {"nvidia.com/gpu.product": "b200"},
		"containers": [testdata.main_container],
		"initContainers": [_sidecar({"nvidia.com/gpu": "1"})],
	})
	[v.message | some v in violations(testdata.workload_input("Pod", "speech", testdata.sam, pod))] == [
		concat("", [
			`[gpu-model-unknown] Pod "side" spec asks 1 nvidia.com/gpu (b200); tenant "speech" has GPU models "a100" `,
			`only. Fix: select one with spec.nodeSelector nvidia.com/gpu.product: <model>`,
		]),
	]
}
