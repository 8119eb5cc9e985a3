# METADATA
# title: Tenancy helpers
# description: |
#   Who owns a namespace, who is a member or admin of a tenant, and which requesters are the platform
#   itself; plus the few request helpers every rule's messages share (how to name the object, where
#   the containers of a pod spec are). Reads data.inventory (tenants and namespaces, kept in
#   sync by the webhook), data.labgate.config and input.request.
package labgate.lib.tenancy

tenant_label := data.labgate.config.tenant_label

# The namespace the request writes into (for a Namespace object: the namespace itself).
request_namespace := input.request.namespace if input.request.namespace != ""

request_namespace := input.request.name if {
	input.request.kind.kind == "Namespace"
	input.request.kind.group == ""
}

# Labels of the request's namespace: from the object for a Namespace, else from the inventory.
_namespace_labels := object.get(input.request.object, ["metadata", "labels"], {}) if {
	input.request.kind.kind == "Namespace"
	input.request.kind.group == ""
} else := data.inventory.namespaces[request_namespace].labels

# The tenant named by the namespace's label, whether or not such a Tenant exists.
claimed_tenant_name := _namespace_labels[tenant_label]

# The Tenant object that owns the request's namespace.
namespace_tenant := data.inventory.tenants[claimed_tenant_name]

# The platform itself: cluster admins, controllers, nodes.
is_trusted_requester if input.request.userInfo.username in data.labgate.config.trusted_users

is_trusted_requester if {
	some group in input.request.userInfo.groups
	group in data.labgate.config.trusted_groups
}

# labgate's own service accounts (the reconciler), in whatever namespace labgate runs.
is_trusted_requester if {
	platform_namespace := data.inventory.platform.namespace
	sprintf("system:serviceaccounts:%s", [platform_namespace]) in input.request.userInfo.groups
}

# Subjects a tenant lists as able to run workloads (admins and researchers).
_workload_subjects(tenant) := array.concat(
	object.get(tenant, ["spec", "members", "admins"], []),
	object.get(tenant, ["spec", "members", "researchers"], []),
)

subject_matches(subject, user) if {
	subject.kind == "User"
	subject.name == user.username
}

subject_matches(subject, user) if {
	subject.kind == "Group"
	subject.name in user.groups
}

subject_matches(subject, user) if {
	subject.kind == "ServiceAccount"
	user.username == sprintf("system:serviceaccount:%s:%s", [subject.namespace, subject.name])
}

# The tenant's own namespaces (those labelled with its name in the inventory).
tenant_namespaces(tenant_name) := {name |
	some name, ns in data.inventory.namespaces
	ns.labels[tenant_label] == tenant_name
}

# A member may run workloads in the tenant's namespaces; so may service accounts living there
# (a training operator or a Job's controller acting inside the tenant).
is_member(tenant, user) if {
	some subject in _workload_subjects(tenant)
	subject_matches(subject, user)
}

is_member(tenant, user) if {
	some group in user.groups
	startswith(group, "system:serviceaccounts:")
	_is_tenant_namespace(trim_prefix(group, "system:serviceaccounts:"), tenant.metadata.name)
}

# The namespace is one of the tenant's (labelled with its name in the inventory): one lookup, where
# tenant_namespaces builds the set of all of them.
_is_tenant_namespace(namespace, tenant_name) if data.inventory.namespaces[namespace].labels[tenant_label] == tenant_name

# Names of the tenants `user` belongs to, for messages that tell people where they may work.
tenants_of(user) := {name |
	some name, tenant in data.inventory.tenants
	is_member(tenant, user)
}

# `"alice" (groups: team-a)` for messages (the system: groups left out; no groups part when none is left).
describe_user(user) := sprintf("%q (groups: %s)", [user.username, concat(", ", _shown_groups(user))]) if {
	count(_shown_groups(user)) > 0
} else := sprintf("%q", [user.username])

_shown_groups(user) := [g |
	some g in object.get(user, "groups", [])
	not startswith(g, "system:")
]

# The tenant label of the request's namespace, or "" when it has none (or is not known yet).
namespace_tenant_name := name if {
	name := claimed_tenant_name
} else := ""

# Listed as an admin or researcher of the tenant (a user, group or service account subject); unlike
# is_member, a service account merely living in the tenant's namespaces is not listed.
is_listed_member(tenant, user) if {
	some subject in _workload_subjects(tenant)
	subject_matches(subject, user)
}

is_admin(tenant, user) if {
	some subject in object.get(tenant, ["spec", "members", "admins"], [])
	subject_matches(subject, user)
}

# "ann, ci/deployer" for messages: who to ask; a service account is shown as namespace/name.
admin_names(tenant) := concat(", ", [subject_name(s) |
	some s in object.get(tenant, ["spec", "members", "admins"], [])
])

subject_name(subject) := sprintf("%s/%s", [subject.namespace, subject.name]) if {
	subject.kind == "ServiceAccount"
} else := subject.name

# `Pod "train-1"` for messages: the request's kind and name (the generateName while it has none).
object_ref := sprintf("%s %q", [input.request.kind.kind, name]) if {
	name := object.get(input.request, "name", "")
	name != ""
} else := sprintf("%s %q", [
	input.request.kind.kind,
	object.get(input.request, ["object", "metadata", "generateName"], ""),
])

# Every container of a pod spec, with its field relative to the spec: "containers[0]",
# "initContainers[1]", "ephemeralContainers[0]".
containers(spec) := {{"field": sprintf("%s[%d]", [group, i]), "container": container} |
	some group in ["containers", "initContainers", "ephemeralContainers"]
	some i, container in object.get(spec, group, [])
}
