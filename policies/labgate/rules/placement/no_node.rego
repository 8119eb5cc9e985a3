package labgate.rules.placement

import data.labgate.lib.node_pools
import data.labgate.lib.tenancy

# placement-no-node: a GPU pod placed on pools none of whose nodes has its model (split from
# placement.rego, whose helpers it uses: one package). Said from what the Tenant's status says the
# nodes of its pools hold (input.gpu_pools); nothing without it.

# METADATA
# title: A GPU pod whose pools have no node of its model says so when applied
# description: |
#   Announced, not refused (config rule_modes gives it warn): a pool may be scaled to zero, and an
#   autoscaler add the node the pod waits for. A GPU pod placed on its tenant's pools (it asks a
#   model some pool says it has: rules.placement refuses the rest) pends while no node of those
#   pools has that model. Only when labgate knows what the pools' nodes hold (the Tenant's status,
#   input.gpu_pools) and the pod is admitted (`if_admitted`).
# custom:
#   rule_id: placement-no-node
violation contains {"rule": rule_id, "message": msg, "field": field, "if_admitted": true} if {
	input.request.operation == "CREATE"
	some placed in _placed
	template := placed.template
	model := node_pools.asked_model(placed.tenant, template)
	count(_held_models) > 0
	not model in _held_models
	field := _model_field(template)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks GPU model %q, and no node of tenant %q's pools has it now (their nodes have %s): it pends ",
			"until one does. Fix: ask %s, or ask the infra team for %q nodes in your pools",
		]),
		[
			rule_id, tenancy.object_ref, field, model, placed.tenant.metadata.name,
			_held_text, _held_choice, model,
		],
	)
}

# The models the nodes of the tenant's pools have, as its status says (input.gpu_pools).
_held_models := {model | some model, _ in object.get(input, "gpu_pools", {})}

_held_text := concat(", ", sort(_held_models))

_held_choice := sprintf("model %s", [_held_text]) if {
	count(_held_models) == 1
} else := sprintf("one of the models %s", [_held_text])
