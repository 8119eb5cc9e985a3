# METADATA
# title: Required node selection, judged by what it can ever select
# description: |
#   What a pod template's required node selection can ever select: spec.nodeSelector ANDed with
#   each term of spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
#   (terms ORed, a term's matchExpressions ANDed; an empty term selects nothing; matchFields name
#   nodes, not labels, and rule out no pool). A node pool is its nodeSelector (else, without one,
#   the node-pool label with the pool's name), so a term can select a node of the pool iff every
#   label key the term constrains can take a value (or be absent) that both the term and the pool
#   allow; keys the pool does not fix may carry any value on its nodes. Judged against the pools'
#   selectors, never against today's nodes: a node added to the pool later is covered too.
#   Shared by rules.placement.
package labgate.lib.node_selection

import data.labgate.lib.node_pools

_object(value) := value if {
	is_object(value)
} else := {}

_array(value) := value if {
	is_array(value)
} else := []

_required_path := ["affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"]

_required(spec) := object.get(spec, _required_path, null)

_node_selector(spec) := _object(object.get(spec, "nodeSelector", {}))

# METADATA
# scope: document
# title: Whether a template confines its pods to some nodes
# description: |
#   True when the template asks the scheduler for some nodes only, by a nodeSelector or a required
#   node affinity; placement-pool then checks that the selection stays in the tenant's pools.
has_required_selection(template) if count(_node_selector(template.spec)) > 0

has_required_selection(template) if is_object(_required(template.spec))

_selector_requirements(spec) := [{"key": key, "operator": "In", "values": [value]} |
	some key, value in _node_selector(spec)
]

_is_empty_term(term) if {
	count(_array(object.get(term, "matchExpressions", []))) == 0
	count(_array(object.get(term, "matchFields", []))) == 0
}

_terms_field(template) := sprintf("%s.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", [template.path])

# METADATA
# title: A template's required node selection as alternatives
# description: |
#   Each {field, requirements}, any of which a node may match, with the requirements ANDed ({key,
#   operator, values}). The nodeSelector is part of every alternative; empty terms select nothing
#   and are left out.
alternatives(template) := [{"field": sprintf("%s[%d]", [_terms_field(template), i]), "requirements": requirements} |
	some i, term in _array(object.get(_required(template.spec), "nodeSelectorTerms", []))
	not _is_empty_term(term)
	requirements := array.concat(_selector_requirements(template.spec), _array(object.get(term, "matchExpressions", [])))
] if {
	is_object(_required(template.spec))
} else := [
	{"field": sprintf("%s.nodeSelector", [template.path]), "requirements": _selector_requirements(template.spec)},
]

# METADATA
# title: The labels every node of a node pool carries
# description: |
#   A pool's own nodeSelector, or else the node-pool label with the pool's name, as the Tenant
#   declares its pools.
pool_selector(pool) := selector if {
	selector := _object(object.get(pool, "nodeSelector", {}))
	count(selector) > 0
} else := {node_pools.node_pool_label: pool.name}

# METADATA
# title: Whether node requirements can select a node of a pool
# description: |
#   True when the requirements can all hold on some node carrying the pool's labels, so a pod
#   selecting that way may land in that pool.
can_select(requirements, pool) if {
	selector := pool_selector(pool)
	every key in {r.key | some r in requirements} {
		_satisfiable([r | some r in requirements; r.key == key], object.get(selector, key, null))
	}
}

# A key the pool fixes: its value must meet every requirement.
_satisfiable(requirements, value) if {
	is_string(value)
	every r in requirements {
		_holds(r, value)
	}
}

# A key the pool leaves free: some value, or its absence, meets them all.
_satisfiable(requirements, null) if {
	every r in requirements {
		r.operator in {"NotIn", "DoesNotExist"}
	}
}

_satisfiable(requirements, null) if {
	some r in requirements
	r.operator == "In"
	some value in _array(object.get(r, "values", []))
	every other in requirements {
		_holds(other, value)
	}
}

# No In: any string meets Exists and NotIn; Gt and Lt need a non-negative integer between their
# bounds (a label value cannot start with "-"; "07" reads as 7, so NotIn rules out no number).
_satisfiable(requirements, null) if {
	not _has_operator(requirements, "In")
	not _has_operator(requirements, "DoesNotExist")
	_some_integer_between(_lower(requirements), _upper(requirements))
}

_has_operator(requirements, operator) if {
	some r in requirements
	r.operator == operator
}

_bound(r) := to_number(r.values[0])

_lower(requirements) := max({_bound(r) | some r in requirements; r.operator == "Gt"} | {-1})

_upper(requirements) := min({_bound(r) | some r in requirements; r.operator == "Lt"}) if {
	_has_operator(requirements, "Lt")
} else := null

_some_integer_between(_, null)

_some_integer_between(low, high) if floor(low) + 1 < high

_holds(r, value) if {
	r.operator == "In"
	value in _array(object.get(r, "values", []))
}

_holds(r, value) if {
	r.operator == "NotIn"
	not value in _array(object.get(r, "values", []))
}

_holds(r, _) if r.operator == "Exists"

_holds(r, value) if {
	r.operator == "Gt"
	_integer(value) > _bound(r)
}

_holds(r, value) if {
	r.operator == "Lt"
	_integer(value) < _bound(r)
}

_integer(value) := to_number(value) if regex.match(`^[0-9]+$`, value)

# The values the requirements leave a key, where an In (or the nodeSelector) fixes them.
_allowed_values(requirements, key) := intersection({{v | some v in _array(object.get(r, "values", []))} |
	some r in requirements
	r.key == key
	r.operator == "In"
})

# METADATA
# title: Whether node requirements select only nodes of the given pools
# description: |
#   Some key they fix to a few values, each of which, with the values they fix for the pool's other
#   keys, is one of those pools' selectors. A node of the tenant's own pool is its own, whatever
#   other pools' selectors could also match it.
confined_to(requirements, pools) if {
	some key in {r.key | some r in requirements; r.operator == "In"}
	every value in _allowed_values(requirements, key) {
		_one_selects(requirements, pools, key, value)
	}
}

_one_selects(requirements, pools, key, value) if {
	some pool in pools
	selector := pool_selector(pool)
	selector[key] == value
	every other_key, other_value in object.remove(selector, [key]) {
		_fixes(requirements, other_key, other_value)
	}
}

# An In (or the nodeSelector) on the key allows that value alone (or none).
_fixes(requirements, key, value) if {
	some r in requirements
	r.key == key
	r.operator == "In"
	_allowed_values(requirements, key) - {value} == set()
}
