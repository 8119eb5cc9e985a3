package labgate.admission_test

import data.labgate.admission
import data.labgate.lib.testdata

test_member_request_is_allowed if {
	d := admission.decision with input.request as testdata.pod_request("team-a", testdata.alice)
		with data.inventory as testdata.inventory
	d.allowed
	d.denials == []
	d.tenant == "team-a"
}

test_enforced_violation_denies if {
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as testdata.inventory
	not d.allowed
	[f.rule | some f in d.denials] == ["tenant-membership"]
	d.denials[0].mode == "enforce"
}

test_warn_mode_admits_with_warning if {
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/enforcement/tenant-membership", "value": "warn"}],
	)
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as inventory
	d.allowed
	[f.rule | some f in d.warnings] == ["tenant-membership"]
}

test_dry_run_mode_admits_and_records if {
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/enforcement/tenant-membership", "value": "dry-run"}],
	)
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as inventory
	d.allowed
	d.warnings == []
	[f.rule | some f in d.dry_run] == ["tenant-membership"]
}

test_unknown_mode_falls_back_to_enforce if {
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/enforcement/tenant-membership", "value": "off"}],
	)
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as inventory
	not d.allowed
}

test_decision_carries_the_pods_gpu_demand if {
	pod := testdata.pod("train-1", {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": 1})],
	})
	d := admission.decision with input as testdata.workload_input("Pod", "vision", testdata.vera, pod)
		with data.inventory as testdata.gpu_inventory
	d.allowed
	d.gpu_demand == {"total": 5, "by_model": {"h100": 4, "mig-1g.10gb": 1}}
}

test_decision_without_gpus_demands_nothing if {
	d := admission.decision with input.request as testdata.pod_request("team-a", testdata.alice)
		with data.inventory as testdata.inventory
	d.gpu_demand == {"total": 0, "by_model": {}}
}

# What the mutating webhook changes, the validating webhook admits: a GPU pod placed by labgate
# passes the placement rules.
test_mutated_gpu_pod_is_admitted if {
	pod := testdata.pod("train-1", {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "2"})],
	})
	before := testdata.workload_input("Pod", "vision", testdata.vera, pod)
	patch := data.labgate.mutation.patch with input as before
		with data.inventory as testdata.gpu_inventory
	count(patch) > 0
	mutated := json.patch(pod, patch)
	d := admission.decision
		with input as object.union(
			testdata.workload_input("Pod", "vision", testdata.vera, mutated),
			{"gpu_usage": {"total": 4, "by_model": {"h100": 2}}},
		)
		with data.inventory as testdata.gpu_inventory
	d.allowed
	d.gpu_demand == {"total": 2, "by_model": {"h100": 2}}
	mutated.spec.nodeSelector["labgate.io/node-pool"] == "h100-spot"
}

test_decision_without_an_inventory_is_defined_and_says_so if {
	d := admission.decision with input.request as testdata.pod_request("team-a", testdata.alice)
	d.inventory_revision == null
}

test_decision_reports_the_inventory_revision if {
	inventory := object.union(testdata.inventory, {"revision": 7})
	d := admission.decision with input.request as testdata.pod_request("team-a", testdata.alice)
		with data.inventory as inventory
	d.inventory_revision == 7
}

# --- per-rule default modes (config rule_modes), overridable per tenant ---

test_config_default_mode_applies_to_every_tenant if {
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as testdata.inventory
		with data.labgate.config.rule_modes as {"tenant-membership": "dry-run"}
	d.allowed
	[f.rule | some f in d.dry_run] == ["tenant-membership"]
}

test_tenant_mode_overrides_the_config_default if {
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/enforcement/tenant-membership", "value": "enforce"}],
	)
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as inventory
		with data.labgate.config.rule_modes as {"tenant-membership": "warn"}
	not d.allowed
	[f.rule | some f in d.denials] == ["tenant-membership"]
}

test_unknown_config_mode_falls_back_to_enforce if {
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as testdata.inventory
		with data.labgate.config.rule_modes as {"tenant-membership": "off"}
	not d.allowed
}

test_batch_gives_each_input_its_own_decision if {
	pod := testdata.pod("train-1", {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "4"})],
	})
	item := testdata.workload_input("Pod", "vision", testdata.vera, pod)
	fits := object.union(item, {"gpu_usage": {"total": 0, "by_model": {}}})
	full := object.union(item, {"gpu_usage": {"total": 16, "by_model": {"h100": 8}}})
	ds := admission.decisions with input as {"batch": [fits, full, fits]}
		with data.inventory as testdata.gpu_inventory
	count(ds) == 3
	ds[0] == admission.decision with input as fits with data.inventory as testdata.gpu_inventory
	ds[1] == admission.decision with input as full with data.inventory as testdata.gpu_inventory
	ds[0].allowed
	not ds[1].allowed
	[f.rule | some f in ds[1].denials] == ["gpu-quota"]
	ds[2].allowed
}

test_empty_batch_gives_no_decisions if {
	ds := admission.decisions with input as {"batch": []} with data.inventory as testdata.gpu_inventory
	ds == []
}

# Issue 22 item 5: "will wait" was said of a workload that was refused. A finding marked if_admitted
# is a warning only when nothing refuses the request.
_pending_job := object.union(
	testdata.workload_input("Job", "vision", testdata.vera, testdata.job("sweep", 4, {}, {
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "2"})],
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
	})),
	{"gpu_usage": {"total": 6, "by_model": {"h100": 6}}},
)

test_a_waiting_announcement_is_said_when_the_workload_is_admitted if {
	d := admission.decision with input as _pending_job with data.inventory as testdata.gpu_inventory
	d.allowed
	[object.keys(f) | some f in d.warnings] == [{"rule", "message", "field", "mode"}]
	[f.rule | some f in d.warnings] == ["gpu-quota-pending"]
}

test_a_waiting_announcement_is_not_said_beside_a_refusal if {
	# An outsider's Job: refused [tenant-membership]; its pods would never wait.
	outsider := json.patch(_pending_job, [{"op": "replace", "path": "/request/userInfo", "value": testdata.alice}])
	d := admission.decision with input as outsider with data.inventory as testdata.gpu_inventory
	not d.allowed
	"tenant-membership" in {f.rule | some f in d.denials}
	d.warnings == []
}
