# METADATA
# title: Tenancy helpers
# description: |
#   Who owns a namespace, who is a member or admin of a tenant, and which requesters are the platform
#   itself; plus the few request helpers every rule's messages share (how to name the object, where
#   the containers of a pod spec are). Reads data.inventory (tenants and namespaces, kept in
#   sync by the webhook), data.labgate.config and input.request.
package labgate.lib.tenancy

# METADATA
# title: The namespace label that names its tenant
# description: |
#   The label (config tenant_label) whose value on a namespace names the tenant that owns it.
tenant_label := data.labgate.config.tenant_label

# METADATA
# scope: document
# title: The namespace the request writes into
# description: |
#   The namespace of the admission request, or for a Namespace object the namespace itself: where
#   the tenant that owns the request is looked up.
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

# METADATA
# title: The tenant a namespace's label names
# description: |
#   The tenant named by the request namespace's tenant label, whether or not such a Tenant exists.
claimed_tenant_name := _namespace_labels[tenant_label]

# METADATA
# title: The tenant that owns the request's namespace
# description: |
#   The Tenant object that owns the request's namespace; undefined outside tenant namespaces, where
#   the tenant rules do not apply.
namespace_tenant := data.inventory.tenants[claimed_tenant_name]

# METADATA
# scope: document
# title: A requester that is the platform itself
# description: |
#   Cluster admins, controllers and nodes (config trusted_users, trusted_groups) and labgate's own
#   service accounts, which tenant rules let through.
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

# METADATA
# scope: document
# title: A Tenant subject that names the user
# description: |
#   Whether a User, Group or ServiceAccount subject of a Tenant's member lists names the
#   requesting user.
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

# METADATA
# title: A tenant's namespaces
# description: |
#   The namespaces labelled with the tenant's name in the inventory: the tenant's own namespaces.
tenant_namespaces(tenant_name) := {name |
	some name, ns in data.inventory.namespaces
	ns.labels[tenant_label] == tenant_name
}

# METADATA
# scope: document
# title: A user who may run workloads for the tenant
# description: |
#   A member (an admin or researcher subject) may run workloads in the tenant's namespaces; so may
#   service accounts living there (a training operator or a Job's controller acting inside the tenant).
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

# METADATA
# title: The tenants a user belongs to
# description: |
#   Names of the tenants a user is a member of, for messages that tell people where they may work.
tenants_of(user) := {name |
	some name, tenant in data.inventory.tenants
	is_member(tenant, user)
}

# METADATA
# title: A requesting user, for messages
# description: |
#   A user as a denial names them: "alice" (groups: team-a), the system: groups left out and no
#   groups part when none is left.
describe_user(user) := sprintf("%q (groups: %s)", [user.username, concat(", ", _shown_groups(user))]) if {
	count(_shown_groups(user)) > 0
} else := sprintf("%q", [user.username])

_shown_groups(user) := [g |
	some g in object.get(user, "groups", [])
	not startswith(g, "system:")
]

# METADATA
# title: The tenant name of the request's namespace
# description: |
#   The tenant label of the request's namespace, or "" when it has none (or is not known yet).
namespace_tenant_name := name if {
	name := claimed_tenant_name
} else := ""

# METADATA
# title: A user the Tenant lists as a member
# description: |
#   Listed as an admin or researcher of the tenant (a user, group or service account subject);
#   unlike is_member, a service account merely living in the tenant's namespaces is not listed.
is_listed_member(tenant, user) if {
	some subject in _workload_subjects(tenant)
	subject_matches(subject, user)
}

# METADATA
# title: A tenant admin
# description: |
#   Whether the user is one of the tenant's admins (spec.members.admins), who manage its members
#   and namespaces.
is_admin(tenant, user) if {
	some subject in object.get(tenant, ["spec", "members", "admins"], [])
	subject_matches(subject, user)
}

# METADATA
# title: A tenant's admins, for messages
# description: |
#   The tenant's admins as a denial names them, "ann, ci/deployer": who to ask; a service account
#   is shown as namespace/name.
admin_names(tenant) := concat(", ", [_subject_name(s) |
	some s in object.get(tenant, ["spec", "members", "admins"], [])
])

_subject_name(subject) := sprintf("%s/%s", [subject.namespace, subject.name]) if {
	subject.kind == "ServiceAccount"
} else := subject.name

# METADATA
# title: The request's object name
# description: |
#   The name of the request's object: request.name, else the name the apiserver generated (a
#   validating webhook finds it in the object), else its generateName (a mutating webhook, an
#   offline check). Always defined: a CREATE with generateName comes without request.name, and a
#   refusal whose message read that field would be undefined, so the object admitted. Rules name the
#   object through this, never through input.request.name.
object_name := name if {
	name := object.get(input.request, "name", "")
	name != ""
} else := name if {
	name := object.get(input.request, ["object", "metadata", "name"], "")
	name != ""
} else := object.get(input.request, ["object", "metadata", "generateName"], "")

# METADATA
# scope: document
# title: A request that writes a Tenant's spec
# description: |
#   A CREATE of a Tenant, or an UPDATE that changes its spec. The rules on a Tenant's spec (its
#   namespaces, pools, enforcement, quota) judge only these: an UPDATE that leaves the spec as it was
#   (the reconciler adding or removing its finalizer, a label or an annotation) cannot make what they
#   check worse, while the world around the Tenant may have changed since its spec was admitted (a
#   cluster admin moved a namespace it lists to another tenant, a rule id it names left the
#   policies). Refusing such an UPDATE would keep a deleted Tenant from ever going.
tenant_spec_written if {
	input.request.kind.group == "labgate.io"
	input.request.kind.kind == "Tenant"
	input.request.operation == "CREATE"
}

tenant_spec_written if {
	input.request.kind.group == "labgate.io"
	input.request.kind.kind == "Tenant"
	input.request.operation == "UPDATE"
	object.get(input.request.object, "spec", {}) != object.get(input.request, ["oldObject", "spec"], {})
}

# METADATA
# title: The request's object, for messages
# description: |
#   The request's kind and name as a denial names them, Pod "train-1" (object_name: the generateName
#   while it has none).
object_ref := sprintf("%s %q", [input.request.kind.kind, object_name])

# METADATA
# title: Every container of a pod spec
# description: |
#   Every container of a pod spec with its field relative to the spec ("containers[0]",
#   "initContainers[1]", "ephemeralContainers[0]"), for rules that check each container.
containers(spec) := {{"field": sprintf("%s[%d]", [group, i]), "container": container} |
	some group in ["containers", "initContainers", "ephemeralContainers"]
	some i, container in object.get(spec, group, [])
}
