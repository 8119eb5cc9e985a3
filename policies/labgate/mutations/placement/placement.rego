# METADATA
# title: GPU placement, node pool and model
# description: |
#   A GPU pod template that selects no node pool is placed on the tenant's first spot pool that has
#   the GPU model it asks (or, when it asks on-demand capacity and the Tenant allows it, the first
#   such pool that is not spot; lib.node_pools.default_pool): the pool's nodeSelector is merged in
#   (keys the template sets are kept) and its missing tolerations are appended. Where no pool has the
#   model, nothing is placed and rules.placement refuses the pod. Pods without GPUs are never placed:
#   they run on shared nodes. A template asking whole GPUs with no model selector, in a tenant that
#   lists exactly one (non-MIG) model, selects that model (model.rego): one package, because the
#   pool's and the model's selectors go into one nodeSelector op. Gathered by labgate.mutation.
package labgate.mutations.placement

import data.labgate.lib.gpu
import data.labgate.lib.json_patch
import data.labgate.lib.node_pools
import data.labgate.lib.tenancy

# Each mutated template's changes, by its path: [{"rule", "ops", "warning"}].
template_changes[template.path] := _placement_changes(tenant, template) if {
	tenant := tenancy.namespace_tenant
	some template in json_patch.mutated_templates
}

_selector(template) := json_patch.object_or_empty(object.get(template.spec, "nodeSelector", {}))

# The pool labgate places a GPU template on: only when it selects none itself.
_pool(tenant, template) := pool if {
	gpu.template_demand[template.path].total > 0
	not node_pools.node_pool_label in object.keys(_selector(template))
	pool := node_pools.default_pool(tenant, template)
}

_pool_selector(tenant, template) := {key: value |
	some key, value in json_patch.object_or_empty(object.get(_pool(tenant, template), "nodeSelector", {}))
	not key in object.keys(_selector(template))
}

_selector_ops(template, additions) := [] if {
	count(additions) == 0
} else := [{"op": "add", "path": json_patch.field_pointer(template, "nodeSelector"), "value": additions}] if {
	not is_object(object.get(template.spec, "nodeSelector", null))
} else := [{
	"op": "add", "path": concat("/", [json_patch.field_pointer(template, "nodeSelector"), json_patch.escape(key)]),
	"value": additions[key],
} |
	some key in sort(object.keys(additions))
]

_missing_tolerations(tenant, template) := [toleration |
	some toleration in json_patch.array_or_empty(object.get(_pool(tenant, template), "tolerations", []))
	not _has_toleration(template, toleration)
]

_has_toleration(template, toleration) if {
	some existing in json_patch.array_or_empty(object.get(template.spec, "tolerations", []))
	node_pools.same_toleration(existing, toleration)
}

_toleration_ops(template, missing) := [] if {
	count(missing) == 0
} else := [{"op": "add", "path": json_patch.field_pointer(template, "tolerations"), "value": missing}] if {
	not is_array(object.get(template.spec, "tolerations", null))
} else := [{"op": "add", "path": concat("/", [json_patch.field_pointer(template, "tolerations"), "-"]), "value": t} |
	some t in missing
]

_pool_kind(pool) := "spot" if {
	object.get(pool, "spot", false) == true
} else := "on-demand"

# One change with the ops (the pool's and the model's selectors go into one nodeSelector), and one
# without ops for each warning.
_placement_changes(tenant, template) := array.concat(
	[{"rule": "placement", "ops": ops, "warning": ""} |
		ops := array.concat(
			_selector_ops(template, object.union(_pool_selector(tenant, template), _model_selector(tenant, template))),
			_toleration_ops(template, _missing_tolerations(tenant, template)),
		)
		count(ops) > 0
	],
	[{"rule": "placement", "ops": [], "warning": warning} |
		some warning in [_pool_warning(tenant, template), _model_warning(tenant, template)]
		warning != ""
	],
)

_pool_warning(tenant, template) := sprintf(
	"labgate placed %s on %s pool %q",
	[json_patch.subject(template), _pool_kind(pool), pool.name],
) if {
	count(_pool_selector(tenant, template)) + count(_missing_tolerations(tenant, template)) > 0
	pool := _pool(tenant, template)
} else := ""
