package labgate.rules.placement_test

import data.labgate.lib.testdata
import data.labgate.rules.placement

# team-a may also use gVisor and a gang scheduler.
_choosing := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-a/spec/scheduling", "value": {
	"runtimeClasses": ["gvisor"],
	"schedulers": ["volcano"],
}}])

_choice_messages(kind, user, obj, inv) := {v.message |
	some v in placement.violation with input as testdata.workload_input(kind, "team-a", user, obj)
		with data.inventory as inv
}

_choice_pod(spec) := testdata.pod("x", object.union({"containers": [testdata.main_container]}, spec))

_choice_job(spec) := testdata.job("j", 1, {}, object.union({"containers": [testdata.main_container]}, spec))

test_node_name_is_refused if {
	violations := placement.violation
		with input as testdata.workload_input("Pod", "team-a", testdata.alice, _choice_pod({"nodeName": "gpu-node-7"}))
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "placement-node-name",
		"field": "spec.nodeName",
		"message": concat("", [
			`[placement-node-name] Pod "x" spec.nodeName names node "gpu-node-7": that skips the scheduler, and with `,
			`it taints, node pools and quotas. Fix: remove spec.nodeName; labgate places GPU pods on your tenant's `,
			`pools (or use a nodeSelector within them)`,
		]),
	}}
	_choice_messages("Job", testdata.alice, _choice_job({"nodeName": "gpu-node-7"}), testdata.inventory) == {
		concat("", [
			`[placement-node-name] Job "j" spec.template.spec.nodeName names node "gpu-node-7": that skips the `,
			`scheduler, and with it taints, node pools and quotas. Fix: remove spec.template.spec.nodeName; labgate `,
			`places GPU pods on your tenant's pools (or use a nodeSelector within them)`,
		]),
	}
}

test_runtime_class_must_be_allowed if {
	_choice_messages("Job", testdata.alice, _choice_job({"runtimeClassName": "runc-privileged"}), _choosing) == {
		concat("", [
			`[placement-runtime-class] Job "j" spec.template.spec.runtimeClassName asks RuntimeClass `,
			`"runc-privileged"; tenant "team-a" may use "gvisor". Fix: remove spec.template.spec.runtimeClassName, or `,
			`ask the infra team to add "runc-privileged" to spec.scheduling.runtimeClasses of Tenant "team-a"`,
		]),
	}
	_choice_messages("Job", testdata.alice, _choice_job({"runtimeClassName": "gvisor"}), _choosing) == set()
	_choice_messages("Pod", testdata.alice, _choice_pod({"runtimeClassName": "gvisor"}), testdata.inventory) == {
		concat("", [
			`[placement-runtime-class] Pod "x" spec.runtimeClassName asks RuntimeClass "gvisor"; tenant "team-a" may `,
			`use none. Fix: remove spec.runtimeClassName, or ask the infra team to add "gvisor" to `,
			`spec.scheduling.runtimeClasses of Tenant "team-a"`,
		]),
	}
}

test_scheduler_must_be_allowed if {
	_choice_messages(
		"Pod",
		testdata.alice,
		_choice_pod({"schedulerName": "default-scheduler"}),
		testdata.inventory,
	) == set()
	_choice_messages("Pod", testdata.alice, _choice_pod({"schedulerName": "volcano"}), _choosing) == set()
	_choice_messages("Pod", testdata.alice, _choice_pod({"schedulerName": "my-scheduler"}), _choosing) == {
		concat("", [
			`[placement-scheduler] Pod "x" spec.schedulerName asks scheduler "my-scheduler"; tenant "team-a" may use `,
			`"default-scheduler", "volcano". Fix: remove spec.schedulerName, or ask the infra team to add `,
			`"my-scheduler" to spec.scheduling.schedulers of Tenant "team-a"`,
		]),
	}
}

test_the_platform_and_a_running_pods_update_choose_nodes_freely if {
	pod := _choice_pod({"nodeName": "n1", "schedulerName": "my-scheduler"})
	_choice_messages("Pod", testdata.cluster_admin, pod, testdata.inventory) == set()
	request := testdata.request("UPDATE", "Pod", "team-a", testdata.alice, pod, pod)
	count(placement.violation) == 0 with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", pod)}
		with data.inventory as testdata.inventory
}
