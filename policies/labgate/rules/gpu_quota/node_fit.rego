package labgate.rules.gpu_quota

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.tenancy

# gpu-quota-node: pods no node of the tenant's pools can ever hold (split from gpu_quota.rego, whose
# helpers it uses: one package). The quota is not the only bound: a pod larger than the largest node
# of its pools, or a gang larger than all their nodes together, is admitted by the quota and then
# pends for ever. Judged from what the Tenant's status says its pools' nodes hold (input.gpu_pools);
# without it, nothing is said.

# METADATA
# title: A pod no node of its tenant's pools can ever hold is refused when applied
# description: |
#   A pod (or a workload's pod template) that asks more whole GPUs of a model than the largest node
#   of its tenant's pools has is never scheduled, whatever the quota: refused on CREATE, with the
#   largest node. A gang (its pods start together: lib is_gang) whose pods of one model, all at once,
#   cannot fit on the pools' nodes (more than they hold, or more pods of its size than they can
#   hold) is refused too: it would wait in its queue, or pend, for ever. Only with facts: the nodes
#   the Tenant's status says its pools hold (input.gpu_pools); a model of no node there says nothing
#   (rules.placement may warn).
# custom:
#   rule_id: gpu-quota-node
violation contains {"rule": rule_id, "message": msg, "field": sprintf("%s.containers", [template.path])} if {
	input.request.operation == "CREATE"
	tenancy.namespace_tenant
	some template in gpu.checked_templates
	some model, asked in gpu.template_demand[template.path].by_model
	n := _largest_node(model)
	asked > n
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks %s%s; the largest node of your pools has %s, so no node can ever hold it. Fix: ask at most ",
			"%s per pod (more pods for more GPUs), or ask the infra team for larger %s nodes in your pools",
		]),
		[
			rule_id, _pod_ref(template), gpu_text.describe_asks(template.spec), _per_pod_text,
			gpu_text.plural(n, gpu_word(_node_model(model))), gpu_text.plural(n, gpu_word(_node_model(model))),
			_node_model_word(model),
		],
	)
}

# METADATA
# title: A gang no set of nodes of its tenant's pools can hold is refused when applied
# custom:
#   rule_id: gpu-quota-node
violation contains {"rule": rule_id, "message": msg, "field": _unfit_field} if {
	input.request.operation == "CREATE"
	_is_gang
	tenancy.namespace_tenant
	some model in _gang_models
	terms := limit_terms(model)
	held := _pools[model]
	not _is_larger_than_a_node(terms, held)
	all_at_once(model) > _gang_room(terms, held)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s runs %s, which start together; the nodes of your pools hold %s (%s, the largest %v)%s, so it ",
			"would wait for ever. Fix: %s, or ask the infra team for more %s nodes in your pools",
		]),
		[
			rule_id, tenancy.object_ref, arithmetic_text(terms, model), gpu_text.plural(held.gpus, gpu_word(model)),
			gpu_text.plural(held.nodes, "node"), held.largestNode, _room_text(terms, held),
			_gang_fix(terms, held), model,
		],
	)
}

_pod_ref(template) := tenancy.object_ref if {
	gpu.is_pod
} else := sprintf("%s %s", [tenancy.object_ref, template.path])

_per_pod_text := "" if {
	gpu.is_pod
} else := " per pod"

_node_model_word(model) := "GPU" if {
	model == gpu.unspecified_model
} else := model

# The models whose pools a gang's pods ask, with facts about those pools' nodes.
_gang_models contains model if {
	some t in gpu.checked_templates
	some model, _ in gpu.template_demand[t.path].by_model
	model != gpu.unspecified_model
	_pools[model]
}

# A pod larger than a node is said by the rule above, with the fix that comes first.
_is_larger_than_a_node(terms, held) if {
	some t in terms
	t.each > held.largestNode
}

# How many GPUs of the model the gang's pods can have at once on the pools' nodes: with one pod
# size, only whole pods per node count (pods of 6 on nodes of 8 take a node each); an upper bound,
# for the nodes may differ in size (never refused on what might fit).
_gang_room(terms, held) := min([held.gpus, (held.nodes * floor(held.largestNode / terms[0].each)) * terms[0].each]) if {
	count(terms) == 1
} else := held.gpus

# With one pod size, how many such pods fit at once: ", room for 2 of its pods at once".
_room_text(terms, held) := sprintf(", room for %v of its pods at once", [_pods_room(terms, held)]) if {
	count(terms) == 1
} else := ""

_pods_room(terms, held) := floor(_gang_room(terms, held) / terms[0].each)

_gang_fix(terms, held) := sprintf(
	"run at most %s together (fewer replicas, or fewer GPUs per pod)",
	[gpu_text.plural(_pods_room(terms, held), "pod")],
) if {
	count(terms) == 1
	_pods_room(terms, held) > 0
} else := sprintf("ask at most %v GPUs in all (fewer replicas, or fewer GPUs per pod)", [_gang_room(terms, held)])
