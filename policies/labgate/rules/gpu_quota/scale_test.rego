package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata

# gpu-quota-scale: a replica count raised past what the tenant has free is refused at the call, by
# `kubectl scale` (the Scale subresource) or by an UPDATE of the workload; each refusal beside the
# scaling it must not break (split from gpu_quota_test.rego, whose helpers it uses: one package).

_serve(replicas) := json.patch(_web, [{"op": "add", "path": "/spec/replicas", "value": replicas}])

_scale(old, new) := {
	"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "serve", "namespace": "vision"},
	"spec": {"replicas": new}, "status": {"replicas": old},
}

# A scale call as the apiserver sends it: kind Scale, the workload's resource, subResource "scale";
# the webhook adds the workload it read (input.scaled_workload).
scale_input(resource, kind, user, old, new, usage) := {
	"request": {
		"uid": "test-uid",
		"operation": "UPDATE",
		"kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
		"resource": {"group": "apps", "version": "v1", "resource": resource},
		"subResource": "scale",
		"namespace": "vision",
		"name": "serve",
		"userInfo": user,
		"object": _scale(old, new),
		"oldObject": _scale(old, old),
	},
	"pod_templates": [],
	"gpu_usage": usage,
	"scaled_workload": {"kind": kind, "pod_templates": testdata.pod_templates("Deployment", _serve(old))},
}

_deployment_scale(old, new, usage) := scale_input("deployments", "Deployment", testdata.vera, old, new, usage)

# An UPDATE of the Deployment itself (kubectl patch, apply, edit).
update_input(old, new, usage) := {
	"request": testdata.request("UPDATE", "Deployment", "vision", testdata.vera, _serve(new), _serve(old)),
	"pod_templates": testdata.pod_templates("Deployment", _serve(new)),
	"replicas_before": {"spec.template.spec": old},
	"gpu_usage": usage,
}

# vision: 16 GPUs, 8 of them h100; the h100s all in use.
_h100_full := {"total": 8, "by_model": {"h100": 8}}

_three_h100_free := {"total": 5, "by_model": {"h100": 5}}

messages(doc) := [v.message | some v in violations(doc)]

test_a_scale_up_with_no_gpu_free_is_refused_with_the_numbers if {
	messages(_deployment_scale(0, 5, _h100_full)) == [
		concat("", [
			`[gpu-quota-scale] Deployment "serve" scales from 0 to 5 replicas of 1 nvidia.com/gpu (h100) each, which `,
			`asks 5 h100 GPUs more; tenant "vision" uses 8 of 8 h100 GPUs (0 free). Fix: wait for running pods to `,
			`finish before scaling up (no replica more fits now)`,
		]),
	]
	[v.field | some v in violations(_deployment_scale(0, 5, _h100_full))] == ["spec.replicas"]
}

test_a_scale_up_past_what_is_free_names_how_far_it_may_scale if {
	messages(_deployment_scale(1, 5, _three_h100_free)) == [
		concat("", [
			`[gpu-quota-scale] Deployment "serve" scales from 1 to 5 replicas of 1 nvidia.com/gpu (h100) each, which `,
			`asks 4 h100 GPUs more; tenant "vision" uses 5 of 8 h100 GPUs (3 free). Fix: scale to at most 4 replicas `,
			`(what fits now), or wait for running pods to finish`,
		]),
	]
}

test_a_scale_up_the_limit_can_never_hold_says_so if {
	# vision has 8 h100: 12 replicas of 1 never fit, whatever finishes.
	messages(_deployment_scale(0, 12, _h100_full)) == [
		concat("", [
			`[gpu-quota-scale] Deployment "serve" scales from 0 to 12 replicas of 1 nvidia.com/gpu (h100) each, which `,
			`asks 12 h100 GPUs more; tenant "vision" uses 8 of 8 h100 GPUs (0 free). Fix: no replica more fits now and `,
			`at most 8 ever fit spec.gpu.models[h100]: wait for running pods to finish, or ask the infra team to raise `,
			`spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
	messages(_deployment_scale(1, 12, _three_h100_free)) == [
		concat("", [
			`[gpu-quota-scale] Deployment "serve" scales from 1 to 12 replicas of 1 nvidia.com/gpu (h100) each, which `,
			`asks 11 h100 GPUs more; tenant "vision" uses 5 of 8 h100 GPUs (3 free). Fix: scale to at most 4 replicas `,
			`(what fits now; at most 8 ever fit spec.gpu.models[h100]), or ask the infra team to raise `,
			`spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
}

test_a_scale_up_within_what_is_free_is_admitted if {
	count(violations(_deployment_scale(1, 4, _three_h100_free))) == 0
	count(violations(_deployment_scale(0, 3, _three_h100_free))) == 0
}

test_a_scale_down_is_admitted_with_no_gpu_free if {
	count(violations(_deployment_scale(5, 2, _h100_full))) == 0
	count(violations(_deployment_scale(5, 0, _h100_full))) == 0
}

test_a_statefulset_scale_up_is_judged_the_same if {
	doc := scale_input("statefulsets", "StatefulSet", testdata.vera, 0, 2, _h100_full)
	messages(doc) == [
		concat("", [
			`[gpu-quota-scale] StatefulSet "serve" scales from 0 to 2 replicas of 1 nvidia.com/gpu (h100) each, which `,
			`asks 2 h100 GPUs more; tenant "vision" uses 8 of 8 h100 GPUs (0 free). Fix: wait for running pods to `,
			`finish before scaling up (no replica more fits now)`,
		]),
	]
}

test_the_total_binds_when_it_leaves_less_room_than_the_model if {
	# 2 of 16 GPUs free in total, 8 h100 free: the total lets fewer replicas start.
	messages(_deployment_scale(0, 5, {"total": 14, "by_model": {"h100": 0}})) == [
		concat("", [
			`[gpu-quota-scale] Deployment "serve" scales from 0 to 5 replicas of 1 nvidia.com/gpu (h100) each, which `,
			`asks 5 GPUs more; tenant "vision" uses 14 of 16 GPUs (2 free). Fix: scale to at most 2 replicas (what `,
			`fits now), or wait for running pods to finish`,
		]),
	]
}

# Fail closed: a scale up of a workload labgate could not read is refused; a scale down needs no read.
_unread(old, new) := json.patch(
	_deployment_scale(old, new, _h100_full),
	[
		{
			"op": "replace", "path": "/scaled_workload",
			"value": {"kind": "Deployment", "error": "the API did not answer within 1.5 s"},
		},
	],
)

test_a_scale_up_of_a_workload_that_could_not_be_read_is_refused if {
	messages(_unread(0, 5)) == [
		concat("", [
			`[gpu-quota-scale] Deployment "serve" scales from 0 to 5 replicas, but labgate could not read it to count `,
			`the GPUs its pods ask (the API did not answer within 1.5 s). Fix: try again; if it persists, tell the `,
			`infra team`,
		]),
	]
	count(violations(_unread(5, 1))) == 0
}

test_controllers_scaling_are_not_judged if {
	hpa := {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler", "groups": ["system:serviceaccounts:kube-system"]}
	count(violations(scale_input("deployments", "Deployment", hpa, 0, 5, _h100_full))) == 0
}

test_a_tenant_kueue_manages_is_not_refused_for_quota if {
	found := violations(_deployment_scale(0, 5, _h100_full)) with data.labgate.config.queue as {"managed_by_kueue": true}
	count(found) == 0
	unread := violations(_unread(0, 5)) with data.labgate.config.queue as {"managed_by_kueue": true}
	count(unread) == 0
}

test_a_tenant_that_runs_pods_beyond_quota_as_preemptible_is_not_refused if {
	preemptible := json.patch(
		testdata.gpu_inventory,
		[{"op": "add", "path": "/tenants/vision/spec/gpu/overQuota", "value": "preemptible"}],
	)
	found := gpu_violations with input as _deployment_scale(0, 5, _h100_full) with data.inventory as preemptible
	count(found) == 0
}

test_an_update_raising_replicas_past_what_is_free_is_refused_the_same if {
	messages(update_input(0, 5, _h100_full)) == [
		concat("", [
			`[gpu-quota-scale] Deployment "serve" scales from 0 to 5 replicas of 1 nvidia.com/gpu (h100) each, which `,
			`asks 5 h100 GPUs more; tenant "vision" uses 8 of 8 h100 GPUs (0 free). Fix: wait for running pods to `,
			`finish before scaling up (no replica more fits now)`,
		]),
	]
}

test_updates_that_do_not_raise_demand_past_what_is_free_are_admitted if {
	count(violations(update_input(1, 4, _three_h100_free))) == 0 # within
	count(violations(update_input(5, 5, _h100_full))) == 0 # the count unchanged (a label, an image)
	count(violations(update_input(5, 3, _h100_full))) == 0 # down
}

test_an_update_the_quota_can_never_hold_is_refused_as_unfit_only if {
	[v.rule | some v in violations(update_input(2, 20, _h100_full))] == ["gpu-quota-unfit"]
}

test_a_suspended_or_cronjob_update_makes_no_pods_now if {
	job := json.patch(sweep(8, "1"), [{"op": "add", "path": "/spec/suspend", "value": true}])
	doc := {
		"request": testdata.request("UPDATE", "Job", "vision", testdata.vera, job, sweep(1, "1")),
		"pod_templates": testdata.pod_templates("Job", job),
		"replicas_before": {"spec.template.spec": 1},
		"gpu_usage": _h100_full,
	}
	count(violations(doc)) == 0
	running := json.patch(doc, [{"op": "replace", "path": "/request/object/spec/suspend", "value": false}])
	[v.rule | some v in violations(running)] == ["gpu-quota-scale"]
}
