package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata
import data.labgate.mutation
import data.labgate.rules.gpu_quota

# A pod behind Kueue's admission gate and the ledger (issue 20): it holds no GPUs while gated, and is
# judged against the usage and reserved when the gate is removed (split from gpu_quota_test.rego,
# whose helpers it uses: one package).

_gate := {"name": "kueue.x-k8s.io/admission"}

_gated(pod) := json.patch(pod, [{"op": "add", "path": "/spec/schedulingGates", "value": [_gate]}])

_solo(per_pod) := gpu_pod("solo", "h100", {"nvidia.com/gpu": per_pod})

_update(new, old, usage) := {
	"request": testdata.request(
		"UPDATE",
		"Pod",
		"vision",
		{"username": "kueue", "groups": ["system:authenticated"]},
		new,
		old,
	),
	"pod_templates": testdata.pod_templates("Pod", new),
	"gpu_usage": usage,
}

_full := {"total": 8, "by_model": {"h100": 8}}

test_a_gated_pod_beyond_what_is_free_waits_and_reserves_nothing if {
	doc := pod_input("vision", testdata.vera, _gated(_solo("4")), _full)
	count(violations(doc)) == 0
	gpu_quota.demand == {"total": 0, "by_model": {}} with input as doc with data.inventory as testdata.gpu_inventory
	gpu_quota.headroom == null with input as doc with data.inventory as testdata.gpu_inventory

	# The same pod without the gate is refused (and would reserve 4).
	[v.rule | some v in violations(pod_input("vision", testdata.vera, _solo("4"), _full))] == ["gpu-quota"]
}

test_a_gated_pod_that_alone_exceeds_a_limit_is_refused_at_once if {
	[v.message |
		some v in violations(pod_input("vision", testdata.vera, _gated(_solo("12")), {"total": 0, "by_model": {}}))
	] == [
		concat("", [
			`[gpu-quota] Pod "solo" asks 12 nvidia.com/gpu (h100); tenant "vision" uses 0 of 8 h100 GPUs. Fix: ask at `,
			`most 8 h100 GPUs per pod (the request alone exceeds the limit, so waiting cannot help), or ask the infra `,
			`team to raise spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
}

test_removing_the_gate_is_judged_against_the_usage_and_reserves if {
	# Kueue admitted it within the quota: admitted, and the webhook reserves its 4 GPUs.
	fits := _update(_solo("4"), _gated(_solo("4")), {"total": 4, "by_model": {"h100": 4}})
	count(violations(fits)) == 0
	gpu_quota.demand == {"total": 4, "by_model": {"h100": 4}}
		with input as fits
		with data.inventory as testdata.gpu_inventory

	# Beyond what the ledger holds free: refused, whoever removes the gate (Kueue retries).
	[v.message | some v in violations(_update(_solo("4"), _gated(_solo("4")), _full))] == [
		concat("", [
			`[gpu-quota] Pod "solo" asks 4 nvidia.com/gpu (h100); tenant "vision" uses 8 of 8 h100 GPUs. Fix: lower `,
			`the request or wait for running pods to finish`,
		]),
	]
}

test_other_pod_updates_reserve_nothing_and_are_not_judged if {
	still_gated := _update(_gated(_solo("4")), _gated(_solo("4")), _full)
	count(violations(still_gated)) == 0
	gpu_quota.demand == {"total": 0, "by_model": {}}
		with input as still_gated
		with data.inventory as testdata.gpu_inventory
	running := _update(_solo("4"), _solo("4"), _full)
	count(violations(running)) == 0
	gpu_quota.demand == {"total": 0, "by_model": {}} with input as running with data.inventory as testdata.gpu_inventory
}

test_a_gated_pod_is_not_marked_preemptible_by_what_is_used_before_it_is_admitted if {
	inventory := json.patch(
		testdata.gpu_inventory,
		[{"op": "add", "path": "/tenants/vision/spec/gpu/overQuota", "value": "preemptible"}],
	)
	gated := pod_input("vision", testdata.vera, _gated(_solo("4")), _full)
	not _marked_preemptible with input as gated with data.inventory as inventory
	plain := pod_input("vision", testdata.vera, _solo("4"), _full)
	_marked_preemptible with input as plain with data.inventory as inventory
}

_marked_preemptible if {
	some op in mutation.patch
	op.value == "research-preemptible"
}
