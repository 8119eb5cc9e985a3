# METADATA
# title: Secret and service-account scoping
# description: |
#   Keeps identities where they belong. A service-account token Secret may not mint a token for a
#   privileged service account (data.labgate.config.privileged_service_accounts), and pods may not run
#   as one. A service account that a Tenant lists as a member (admin, researcher or viewer) is that
#   tenant's identity: a pod may run as it, and a token Secret may name it, only in a namespace of that
#   tenant (or of none) and only for a requester who is at least what the account is there (an admin
#   account needs an admin). A Secret annotated labgate.io/restricted-to-service-account=<names>
#   (comma-separated, in the pod's namespace) may be referenced, from any field of a pod spec that
#   names a Secret, only by pods running as one of those service accounts; the webhook provides the
#   annotations of the namespace's restricted Secrets as input.secrets[name].annotations, and without
#   those facts this check finds nothing. Since whoever runs a pod as such a service account gets the
#   Secret, only the tenant's admins may run pods as one (restricted-service-account): a researcher's
#   pod, Job or Deployment may not name it, nor change the pod template of one that does, nor mint
#   a token Secret for it. Only the
#   tenant's admins may change or delete a restricted Secret (the API returns its data to whoever
#   does). The platform (trusted requesters, and so controller-created pods) is never refused here.
package labgate.rules.secret_scoping

import data.labgate.lib.tenancy

_token_type := "kubernetes.io/service-account-token"

_token_annotation := "kubernetes.io/service-account.name"

_restriction_annotation := "labgate.io/restricted-to-service-account"

_privileged := {name | some name in object.get(data.labgate.config, "privileged_service_accounts", [])}

_writes := input.request.operation in {"CREATE", "UPDATE"}

# The service account a token Secret asks a token for (always in the Secret's own namespace).
_token_service_account := name if {
	_writes
	input.request.kind.kind == "Secret"
	input.request.kind.group == ""
	input.request.object.type == _token_type
	name := input.request.object.metadata.annotations[_token_annotation]
}

_secret_ref := sprintf("Secret %q in namespace %q", [
	object.get(input.request, ["object", "metadata", "name"], ""),
	input.request.namespace,
])

# METADATA
# title: No tokens for the platform's service accounts
# custom:
#   rule_id: service-account-token
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	input.request.kind.kind == "Secret" # first, for rule indexing
	input.request.kind.group == ""
	sa := _token_service_account
	sa in _privileged
	not tenancy.is_trusted_requester
	field := sprintf("metadata.annotations[%s]", [_token_annotation])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks a token for service account %q (annotation %s), which is reserved for the platform. Fix: ",
			"name one of your own service accounts in %s, or let Kubernetes mount a short-lived token (projected ",
			"serviceAccountToken volume)",
		]),
		[rule_id, _secret_ref, sa, _token_annotation, _token_annotation],
	)
}

# Every tenant that lists service account `name` of `namespace` as a member, with the role: admins,
# researchers or viewers. The member lists by reference (none where a Tenant has no such list): an
# object.get per tenant and role cost more than the whole scan.
_listings(namespace, name) := {{"tenant": tenant_name, "role": role} |
	some tenant_name, tenant in data.inventory.tenants
	some role in ["admins", "researchers", "viewers"]
	some subject in tenant.spec.members[role]
	subject.kind == "ServiceAccount"
	subject.namespace == namespace
	subject.name == name
}

_role_rank := {"viewers": 1, "researchers": 2, "admins": 3}

_singular := {"viewers": "a viewer", "researchers": "a researcher", "admins": "an admin"}

# How far `user` may act for `tenant`: 3 admin, 2 researcher (or a service account inside the
# tenant), 1 viewer, 0 none.
_requester_rank(tenant, user) := 3 if {
	tenancy.is_admin(tenant, user)
} else := 2 if {
	tenancy.is_member(tenant, user)
} else := 1 if {
	some subject in object.get(tenant, ["spec", "members", "viewers"], [])
	tenancy.subject_matches(subject, user)
} else := 0

# Why `user` may not take the identity a listing gives, in namespace `namespace`: the identity belongs
# to another tenant than the namespace's (whose members could then use it), or it ranks above what
# the user is in that tenant. Undefined when the user may.
_identity_problem(listing, namespace, _) := sprintf(
	"namespace %q belongs to tenant %q, so %q's identity would be in another tenant's hands",
	[namespace, owner, listing.tenant],
) if {
	owner := tenancy.namespace_tenant_name
	owner != ""
	owner != listing.tenant
}

_identity_problem(listing, _, user) := sprintf(
	"user %s is not one of its %s",
	[tenancy.describe_user(user), listing.role],
) if {
	tenancy.namespace_tenant_name in {"", listing.tenant}
	tenant := data.inventory.tenants[listing.tenant]
	_requester_rank(tenant, user) < _role_rank[listing.role]
}

# METADATA
# title: A tenant's member service account gets tokens only from those who may act as it
# custom:
#   rule_id: service-account-token
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	input.request.kind.kind == "Secret" # first, for rule indexing
	input.request.kind.group == ""
	sa := _token_service_account
	not tenancy.is_trusted_requester
	some listing in _listings(input.request.namespace, sa)
	problem := _identity_problem(listing, input.request.namespace, input.request.userInfo)
	tenant := data.inventory.tenants[listing.tenant]
	field := sprintf("metadata.annotations[%s]", [_token_annotation])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks a token for service account %q (annotation %s), which tenant %q lists as %s; %s. Fix: use a ",
			"service account of your own tenant, or ask an admin of %q (%s) to create the token",
		]),
		[
			rule_id, _secret_ref, concat("/", [input.request.namespace, sa]), _token_annotation, listing.tenant,
			_singular[listing.role], problem, listing.tenant, tenancy.admin_names(tenant),
		],
	)
}

# The service account a pod template runs as, and the field that says so ("default" when unset).
_runs_as(template) := {"field": sprintf("%s.serviceAccountName", [template.path]), "name": name} if {
	name := object.get(template.spec, "serviceAccountName", "")
	name != ""
} else := {"field": sprintf("%s.serviceAccount", [template.path]), "name": name} if {
	name := object.get(template.spec, "serviceAccount", "")
	name != ""
} else := {"field": sprintf("%s.serviceAccountName", [template.path]), "name": "default"}

# METADATA
# title: Pods do not run as the platform's service accounts
# custom:
#   rule_id: privileged-service-account
violation contains {"rule": rule_id, "message": msg, "field": runs_as.field} if {
	_writes
	not tenancy.is_trusted_requester
	some template in input.pod_templates
	runs_as := _runs_as(template)
	runs_as.name in _privileged
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks service account %q, which is reserved for the platform. Fix: run the pod as one of your ",
			"own service accounts (or remove %s to run as \"default\")",
		]),
		[rule_id, tenancy.object_ref, runs_as.field, runs_as.name, runs_as.field],
	)
}

# METADATA
# title: Pods run only as identities their requester may act as
# custom:
#   rule_id: service-account-identity
violation contains {"rule": rule_id, "message": msg, "field": runs_as.field} if {
	_writes
	not tenancy.is_trusted_requester
	input.request.namespace != ""
	some template in input.pod_templates
	runs_as := _runs_as(template)
	some listing in _listings(input.request.namespace, runs_as.name)
	problem := _identity_problem(listing, input.request.namespace, input.request.userInfo)
	tenant := data.inventory.tenants[listing.tenant]
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s runs as service account %q, which tenant %q lists as %s; %s. Fix: run the pod as a service ",
			"account no tenant lists as a member (or remove %s to run as \"default\"), or ask an admin of %q (%s)",
		]),
		[
			rule_id, tenancy.object_ref, runs_as.field, concat("/", [input.request.namespace, runs_as.name]),
			listing.tenant, _singular[listing.role], problem, runs_as.field, listing.tenant,
			tenancy.admin_names(tenant),
		],
	)
}

# Every Secret a pod template names, wherever in the spec (volumes of every kind, CSI and flexVolume
# secret refs, env, envFrom, projected sources, imagePullSecrets, ...), found by walking the spec:
# a string under a key that says "secret" (secretName), an object with a name under such a key
# (secretRef, secretKeyRef, nodePublishSecretRef, a projected source's secret), or the entries of a
# list under such a key (imagePullSecrets). cephfs.secretFile is a path on the node, not a Secret.
_secret_references(template) := {ref |
	_mentions_secret(template.spec) # one string search before walking every field of the spec
	walk(template.spec, [path, value])
	ref := _reference_at(template.path, path, value)
}

# Whether "secret" appears anywhere in the spec's JSON, in any letter case: every key _is_secret_key
# accepts appears there verbatim, so a spec without it references no Secret.
_mentions_secret(spec) if contains(lower(json.marshal(spec)), "secret")

_is_secret_key(key) if {
	is_string(key)
	contains(lower(key), "secret")
	key != "secretFile"
}

# The reference at one place of the walk, undefined where there is none. The three cases exclude one
# another (a string has no name; a key that says "secret" is not a list index), so at most one holds;
# each asks its cheap type test before the key's.
_reference_at(prefix, path, value) := {"field": _path_text(prefix, path), "name": value} if {
	is_string(value)
	_is_secret_key(path[count(path) - 1])
}

_reference_at(prefix, path, value) := {
	"field": concat(".", [_path_text(prefix, path), "name"]),
	"name": value.name,
} if {
	is_string(value.name)
	_is_secret_key(path[count(path) - 1])
}

_reference_at(prefix, path, value) := {
	"field": concat(".", [_path_text(prefix, path), "name"]),
	"name": value.name,
} if {
	is_number(path[count(path) - 1])
	is_string(value.name)
	_is_secret_key(path[count(path) - 2])
}

# "spec.volumes[0].csi.nodePublishSecretRef" for ["volumes", 0, "csi", "nodePublishSecretRef"] under "spec".
_path_text(prefix, path) := concat("", array.concat([prefix], [_path_part(p) | some p in path]))

_path_part(p) := sprintf("[%d]", [p]) if is_number(p)

else := concat("", [".", p])

# Whether the namespace holds a Secret restricted to service accounts (input.secrets).
_any_restricted if {
	some secret in object.get(input, "secrets", {})
	secret.annotations[_restriction_annotation]
}

# The service accounts a Secret is restricted to, from input.secrets (undefined without the facts).
_restricted_to(secret_name) := {trim_space(name) |
	some name in split(input.secrets[secret_name].annotations[_restriction_annotation], ",")
	trim_space(name) != ""
}

# METADATA
# title: A Secret restricted to service accounts is used only by pods running as one of them
# custom:
#   rule_id: secret-scope
violation contains {"rule": rule_id, "message": msg, "field": ref.field} if {
	_writes
	not tenancy.is_trusted_requester
	_any_restricted # before walking the pod specs: most namespaces hold no restricted Secret
	some template in input.pod_templates
	some ref in _secret_references(template)
	allowed := _restricted_to(ref.name)
	count(allowed) > 0
	runs_as := _runs_as(template)
	not runs_as.name in allowed
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s references Secret %q, which is restricted to service account %s (annotation %s); the pod runs ",
			"as %q (%s). Fix: run the pod as %s, or stop referencing %q",
		]),
		[
			rule_id, tenancy.object_ref, ref.field, ref.name, _quoted_list(allowed), _restriction_annotation,
			runs_as.name, runs_as.field, _quoted_list(allowed), ref.name,
		],
	)
}

_quoted_list(names) := concat(" or ", [sprintf("%q", [n]) | some n in sort(names)])

# The restricted Secrets of the namespace that name service account `name` (from input.secrets).
_restricting(name) := sort([secret_name |
	some secret_name, _ in object.get(input, "secrets", {})
	name in _restricted_to(secret_name)
])

_secrets_text(names) := sprintf("Secret %q is", [names[0]]) if {
	count(names) == 1
} else := sprintf("Secrets %s are", [concat(", ", [sprintf("%q", [n]) | some n in names])])

# Whether a pod template is new or changed by this request: an UPDATE that leaves it as it was (a
# label, a replica count) does not start anything as its service account. A template whose old
# copy cannot be found counts as changed.
_is_new_or_changed(_) if input.request.operation == "CREATE"

_is_new_or_changed(template) if {
	input.request.operation == "UPDATE"
	object.get(input.request, array.concat(["oldObject"], split(template.path, ".")), null) != template.spec
}

# METADATA
# title: Only the tenant's admins run pods as a service account a restricted Secret names
# description: |
#   A pod running as the service account a Secret is restricted to may mount the Secret: running as
#   it is reading it. So only the admins of the namespace's tenant may create a pod (or a workload)
#   that runs as such an account, or change the pod template of one.
# custom:
#   rule_id: restricted-service-account
violation contains {"rule": rule_id, "message": msg, "field": runs_as.field} if {
	_writes
	not tenancy.is_trusted_requester
	tenant := tenancy.namespace_tenant
	not tenancy.is_admin(tenant, input.request.userInfo)
	some template in input.pod_templates
	_is_new_or_changed(template)
	runs_as := _runs_as(template)
	secrets := _restricting(runs_as.name)
	count(secrets) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s runs as service account %q, to which %s restricted (annotation %s); only admins of tenant %q ",
			"(%s) may run pods as it, and user %s is not one. Fix: run the pod as another service account (or remove ",
			"%s to run as \"default\"), or ask an admin of %q (%s) to run it",
		]),
		[
			rule_id, tenancy.object_ref, runs_as.field, runs_as.name, _secrets_text(secrets), _restriction_annotation,
			tenant.metadata.name, tenancy.admin_names(tenant), tenancy.describe_user(input.request.userInfo),
			runs_as.field, tenant.metadata.name, tenancy.admin_names(tenant),
		],
	)
}

# The service accounts the Secret being changed or deleted was restricted to (from its oldObject).
_restricted_old_secret := {trim_space(name) |
	input.request.operation in {"UPDATE", "DELETE"}
	input.request.kind.kind == "Secret"
	input.request.kind.group == ""
	some name in split(input.request.oldObject.metadata.annotations[_restriction_annotation], ",")
	trim_space(name) != ""
}

# METADATA
# title: Only the tenant's admins mint tokens for a service account a restricted Secret names
# description: |
#   A token of the account is the account: whoever holds it acts as it through the API, and reads
#   the Secret wherever the account may.
# custom:
#   rule_id: restricted-service-account
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	input.request.kind.kind == "Secret" # first, for rule indexing
	input.request.kind.group == ""
	sa := _token_service_account
	not tenancy.is_trusted_requester
	tenant := tenancy.namespace_tenant
	not tenancy.is_admin(tenant, input.request.userInfo)
	secrets := _restricting(sa)
	count(secrets) > 0
	field := sprintf("metadata.annotations[%s]", [_token_annotation])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks a token for service account %q (annotation %s), to which %s restricted (annotation %s); only ",
			"admins of tenant %q (%s) may act as it, and user %s is not one. Fix: name another service account, or ask ",
			"an admin of %q (%s) to create the token",
		]),
		[
			rule_id, _secret_ref, sa, _token_annotation, _secrets_text(secrets), _restriction_annotation,
			tenant.metadata.name, tenancy.admin_names(tenant), tenancy.describe_user(input.request.userInfo),
			tenant.metadata.name, tenancy.admin_names(tenant),
		],
	)
}

# METADATA
# title: Only the tenant's admins change or delete a restricted Secret
# description: |
#   The API answers an update, a patch or a delete with the Secret itself, data included: whoever may
#   change a restricted Secret may read it, and whoever removes the annotation lifts the restriction.
# custom:
#   rule_id: secret-restriction
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	input.request.kind.kind == "Secret" # first, for rule indexing
	input.request.kind.group == ""
	count(_restricted_old_secret) > 0
	not tenancy.is_trusted_requester
	tenant := tenancy.namespace_tenant
	not tenancy.is_admin(tenant, input.request.userInfo)
	field := sprintf("metadata.annotations[%s]", [_restriction_annotation])
	rule_id := rego.metadata.rule().custom.rule_id
	verb := {"UPDATE": "change", "DELETE": "delete"}[input.request.operation]
	msg := sprintf(
		concat("", [
			"[%s] user %s may not %s Secret %q in namespace %q: it is restricted to service account %s (annotation ",
			"%s), and the API hands its data to whoever changes or deletes it. Fix: ask an admin of tenant %q (%s)",
		]),
		[
			rule_id, tenancy.describe_user(input.request.userInfo), verb, input.request.name,
			input.request.namespace, _quoted_list(_restricted_old_secret), _restriction_annotation,
			tenant.metadata.name, tenancy.admin_names(tenant),
		],
	)
}
