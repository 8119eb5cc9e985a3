package labgate.admission_test

import data.labgate.admission
import data.labgate.lib.testdata

test_member_request_is_allowed if {
	d := admission.decision with input.request as testdata.pod_request("team-a", testdata.alice)
		with data.labgate.inventory as testdata.inventory
	d.allowed
	d.denials == []
	d.tenant == "team-a"
}

test_enforced_violation_denies if {
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.labgate.inventory as testdata.inventory
	not d.allowed
	[f.rule | some f in d.denials] == ["tenant-membership"]
	d.denials[0].mode == "enforce"
}

test_warn_mode_admits_with_warning if {
	inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-b/spec/enforcement/tenant-membership", "value": "warn"}])
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.labgate.inventory as inventory
	d.allowed
	[f.rule | some f in d.warnings] == ["tenant-membership"]
}

test_dry_run_mode_admits_and_records if {
	inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-b/spec/enforcement/tenant-membership", "value": "dry-run"}])
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.labgate.inventory as inventory
	d.allowed
	d.warnings == []
	[f.rule | some f in d.dry_run] == ["tenant-membership"]
}

test_unknown_mode_falls_back_to_enforce if {
	inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-b/spec/enforcement/tenant-membership", "value": "off"}])
	d := admission.decision with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.labgate.inventory as inventory
	not d.allowed
}
