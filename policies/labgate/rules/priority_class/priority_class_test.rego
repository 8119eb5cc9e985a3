package labgate.rules.priority_class_test

import data.labgate.lib.testdata
import data.labgate.rules.priority_class

priority_classes := {
	"research-default": {"value": 0, "preemptionPolicy": "PreemptLowerPriority"},
	"research-preemptible": {"value": -100, "preemptionPolicy": "PreemptLowerPriority"},
	"research-high": {"value": 1000, "preemptionPolicy": "PreemptLowerPriority"},
	"research-batch": {"value": -10, "preemptionPolicy": "Never"},
	"system-node-critical": {"value": 2000001000, "preemptionPolicy": "PreemptLowerPriority"},
}

inventory := object.union(testdata.inventory, {"priority_classes": priority_classes})

# team-a may also use research-high and research-batch, up to priority 1000, with gVisor and a gang scheduler.
generous := json.patch(inventory, [{"op": "add", "path": "/tenants/team-a/spec/scheduling", "value": {
	"priorityClasses": ["research-high", "research-batch"],
	"maxPriority": 1000,
	"runtimeClasses": ["gvisor"],
	"schedulers": ["volcano"],
}}])

messages(kind, user, obj, inv) := {v.message |
	some v in priority_class.violation with input as testdata.workload_input(kind, "team-a", user, obj)
		with data.inventory as inv
}

pod_with(spec) := testdata.pod("x", object.union({"containers": [testdata.main_container]}, spec))

job_with(spec) := testdata.job("j", 1, {}, object.union({"containers": [testdata.main_container]}, spec))

test_research_classes_are_allowed if {
	messages("Pod", testdata.alice, pod_with({"priorityClassName": "research-default", "priority": 0}), inventory) == set()
	messages("Job", testdata.alice, job_with({"priorityClassName": "research-preemptible"}), inventory) == set()
	messages("Job", testdata.alice, job_with({}), inventory) == set()
}

test_system_classes_are_refused_even_when_listed if {
	listed := json.patch(
		generous,
		[{"op": "add", "path": "/tenants/team-a/spec/scheduling/priorityClasses/-", "value": "system-node-critical"}],
	)
	pod := pod_with({"priorityClassName": "system-node-critical", "priority": 2000001000})
	messages("Pod", testdata.alice, pod, listed) == {
		concat("", [
			`[priority-class] Pod "x" spec.priorityClassName asks PriorityClass "system-node-critical", which is `,
			`reserved for the cluster's own components (it would preempt other tenants' pods and be the last evicted). `,
			`Fix: remove priorityClassName (labgate sets "research-default") or use one of tenant "team-a"'s classes `,
			`("research-batch", "research-default", "research-high", "research-preemptible")`,
		]),
	}
}

test_a_class_the_tenant_does_not_list_is_refused if {
	violations := priority_class.violation
		with input as testdata.workload_input(
			"Job",
			"team-a",
			testdata.alice,
			job_with({"priorityClassName": "research-high"}),
		)
		with data.inventory as inventory
	violations == {{
		"rule": "priority-class",
		"field": "spec.template.spec.priorityClassName",
		"message": concat("", [
			`[priority-class] Job "j" spec.template.spec.priorityClassName asks PriorityClass "research-high", which `,
			`tenant "team-a" may not use. Fix: remove priorityClassName (labgate sets "research-default") or use one `,
			`of tenant "team-a"'s classes ("research-default", "research-preemptible"), or ask the infra team to add `,
			`"research-high" to spec.scheduling.priorityClasses of Tenant "team-a"`,
		]),
	}}
	messages("Job", testdata.alice, job_with({"priorityClassName": "research-high"}), generous) == set()
}

test_a_listed_class_above_the_ceiling_is_refused if {
	lowered := json.patch(
		generous,
		[{"op": "replace", "path": "/tenants/team-a/spec/scheduling/maxPriority", "value": 10}],
	)
	messages("Job", testdata.alice, job_with({"priorityClassName": "research-high"}), lowered) == {
		concat("", [
			`[priority-class] Job "j" runs at priority 1000 (PriorityClass "research-high"), above tenant "team-a"'s `,
			`ceiling of 10. Fix: use a priority class at or below it (tenant "team-a"'s classes: "research-batch", `,
			`"research-default", "research-high", "research-preemptible"), or ask the infra team to raise `,
			`spec.scheduling.maxPriority of Tenant "team-a"`,
		]),
	}
}

test_a_pods_resolved_priority_is_judged_without_class_facts if {
	pod := pod_with({"priorityClassName": "research-default", "priority": 5000})
	messages("Pod", testdata.alice, pod, testdata.inventory) == {
		concat("", [
			`[priority-class] Pod "x" runs at priority 5000 (PriorityClass "research-default"), above tenant `,
			`"team-a"'s ceiling of 0. Fix: use a priority class at or below it (tenant "team-a"'s classes: `,
			`"research-default", "research-preemptible"), or ask the infra team to raise spec.scheduling.maxPriority `,
			`of Tenant "team-a"`,
		]),
	}
}

test_an_explicit_priority_in_a_template_is_judged if {
	messages("Job", testdata.alice, job_with({"priority": 1000000}), testdata.inventory) == {
		concat("", [
			`[priority-class] Job "j" runs at priority 1000000 (spec.template.spec.priority), above tenant "team-a"'s `,
			`ceiling of 0. Fix: use a priority class at or below it (tenant "team-a"'s classes: "research-default", `,
			`"research-preemptible"), or ask the infra team to raise spec.scheduling.maxPriority of Tenant "team-a"`,
		]),
	}
	messages("Job", testdata.alice, job_with({"priority": -5}), testdata.inventory) == set()
}

test_an_explicit_priority_must_match_its_class if {
	messages(
		"Job",
		testdata.alice,
		job_with({"priorityClassName": "research-preemptible", "priority": -100}),
		inventory,
	) == set()
	messages(
		"Job",
		testdata.alice,
		job_with({"priorityClassName": "research-preemptible", "priority": -5}),
		inventory,
	) == {
		concat("", [
			`[priority-class] Job "j" spec.template.spec.priority is -5, but PriorityClass "research-preemptible" `,
			`gives -100: the apiserver would refuse every pod made from it. Fix: remove spec.template.spec.priority `,
			`(the class sets the priority)`,
		]),
	}
	messages("Job", testdata.alice, job_with({"priority": -5}), inventory) == {
		concat("", [
			`[priority-class] Job "j" spec.template.spec.priority is -5, but no PriorityClass gives 0: the apiserver `,
			`would refuse every pod made from it. Fix: remove spec.template.spec.priority (the class sets the priority)`,
		]),
	}
}

test_a_workload_naming_a_missing_class_is_refused if {
	missing := json.patch(inventory, [{"op": "remove", "path": "/priority_classes/research-preemptible"}])
	messages("Job", testdata.alice, job_with({"priorityClassName": "research-preemptible"}), missing) == {
		concat("", [
			`[priority-class] Job "j" spec.template.spec.priorityClassName asks PriorityClass "research-preemptible", `,
			`which does not exist, so none of its pods could be created. Fix: remove priorityClassName (labgate sets `,
			`"research-default") or use one of tenant "team-a"'s classes ("research-default", "research-preemptible"), `,
			`or ask the infra team to create it`,
		]),
	}
}

test_preempting_under_a_never_class_is_refused if {
	job := job_with({"priorityClassName": "research-batch", "preemptionPolicy": "PreemptLowerPriority"})
	messages("Job", testdata.alice, job, generous) == {
		concat("", [
			`[priority-class] Job "j" spec.template.spec.preemptionPolicy asks PreemptLowerPriority, but PriorityClass `,
			`"research-batch" is configured Never (its pods wait, they do not evict others). Fix: remove `,
			`spec.template.spec.preemptionPolicy`,
		]),
	}
	messages(
		"Job",
		testdata.alice,
		job_with({"priorityClassName": "research-batch", "preemptionPolicy": "Never"}),
		generous,
	) == set()
}

test_the_platform_and_other_namespaces_are_not_judged if {
	pod := pod_with({"priorityClassName": "system-node-critical", "priority": 2000001000, "nodeName": "n1"})
	messages("Pod", testdata.cluster_admin, pod, inventory) == set()
	count(priority_class.violation) == 0 with input as testdata.workload_input("Pod", "default", testdata.alice, pod)
		with data.inventory as inventory
}

test_a_running_pods_update_is_not_judged if {
	pod := pod_with({"priorityClassName": "research-default", "priority": 0, "nodeName": "n1"})
	request := testdata.request("UPDATE", "Pod", "team-a", testdata.alice, pod, pod)
	count(priority_class.violation) == 0
		with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", pod)}
		with data.inventory as inventory
}
