# METADATA
# title: A new namespace's tenant label
# description: |
#   A Namespace created by a listed member of the one tenant whose spec.namespaces.prefix its name
#   (or its generateName) starts with gets that tenant's label (config tenant_label). Gathered by
#   labgate.mutation.
package labgate.mutations.namespace_label

import data.labgate.lib.json_patch
import data.labgate.lib.tenancy

_is_namespace_create if {
	input.request.kind.kind == "Namespace"
	input.request.kind.group == ""
	input.request.operation == "CREATE"
}

# The name, or while the apiserver has not generated one its generateName: every name generated from
# it starts with it, so it is under a prefix when the generateName is.
_namespace_name := tenancy.object_name

_prefix_tenants := {name |
	some name, tenant in data.inventory.tenants
	prefix := object.get(tenant, ["spec", "namespaces", "prefix"], "")
	prefix != ""
	startswith(_namespace_name, prefix)
}

# METADATA
# title: The tenant label a new namespace gets
# description: |
#   At most one change ({rule, ops, warning}): a namespace created by a listed member of the one
#   tenant whose spec.namespaces.prefix its name starts with is labelled for that tenant, so it
#   belongs to the tenant from its creation.
changes := [{"rule": "namespace-label", "ops": [op], "warning": warning} |
	_is_namespace_create
	not tenancy.is_trusted_requester
	count(_prefix_tenants) == 1
	some name in _prefix_tenants
	tenancy.is_listed_member(data.inventory.tenants[name], input.request.userInfo)
	labels := object.get(input.request.object, ["metadata", "labels"], null)
	not tenancy.tenant_label in object.keys(json_patch.object_or_empty(labels))
	op := json_patch.label_op(labels, tenancy.tenant_label, name)
	warning := sprintf("labgate labelled namespace %q %s=%s", [_namespace_name, tenancy.tenant_label, name])
]
