# METADATA
# title: Secret and service-account scoping
# description: |
#   Keeps identities where they belong. A service-account token Secret may not mint a token for a
#   privileged service account (data.labgate.config.privileged_service_accounts) nor for one that a
#   Tenant lists as its member unless the requester is a member of that Tenant. Pods may not run as a
#   privileged service account. A Secret annotated labgate.io/restricted-to-service-account=<names>
#   (comma-separated, in the pod's namespace) may be referenced only by pods running as one of those
#   service accounts; the webhook provides the annotations of the Secrets a request's pods reference
#   as input.secrets[name].annotations, and without those facts this check finds nothing.
#   The platform (trusted requesters, and so controller-created pods) is never refused here.
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
	sa := _token_service_account
	sa in _privileged
	not tenancy.is_trusted_requester
	field := sprintf("metadata.annotations[%s]", [_token_annotation])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s asks a token for service account %q (annotation %s), which is reserved for the platform. Fix: name one of your own service accounts in %s, or let Kubernetes mount a short-lived token (projected serviceAccountToken volume)",
		[rule_id, _secret_ref, sa, _token_annotation, _token_annotation],
	)
}

# Tenants that list the token's service account (this namespace, that name) as an admin or researcher.
_tenants_listing_token_service_account contains name if {
	sa := _token_service_account
	some name, tenant in data.inventory.tenants
	some subject in tenancy.workload_subjects(tenant)
	subject.kind == "ServiceAccount"
	subject.namespace == input.request.namespace
	subject.name == sa
}

# METADATA
# title: A tenant's member service account gets tokens only from that tenant's members
# custom:
#   rule_id: service-account-token
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	sa := _token_service_account
	not tenancy.is_trusted_requester
	some name in _tenants_listing_token_service_account
	tenant := data.inventory.tenants[name]
	not tenancy.is_member(tenant, input.request.userInfo)
	field := sprintf("metadata.annotations[%s]", [_token_annotation])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s asks a token for service account %q (annotation %s), which tenant %q lists as a member; user %s is not a member of %q. Fix: use a service account of your own tenant, or ask an admin of %q (%s) to create the token",
		[
			rule_id, _secret_ref, concat("/", [input.request.namespace, sa]), _token_annotation, name,
			tenancy.describe_user(input.request.userInfo), name, name, tenancy.admin_names(tenant),
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
		"[%s] %s %s asks service account %q, which is reserved for the platform. Fix: run the pod as one of your own service accounts (or remove %s to run as \"default\")",
		[rule_id, tenancy.object_ref, runs_as.field, runs_as.name, runs_as.field],
	)
}

# Every Secret a pod template references by name, with the field that references it.
_secret_references(template) := {ref |
	some refs in [_volume_references(template), _container_references(template), _pull_secret_references(template)]
	some ref in refs
}

_pull_secret_references(template) := [{"field": sprintf("%s.imagePullSecrets[%d].name", [template.path, i]), "name": s.name} |
	some i, s in object.get(template.spec, "imagePullSecrets", [])
]

_volume_references(template) := array.concat(
	[{"field": sprintf("%s.volumes[%d].secret.secretName", [template.path, i]), "name": v.secret.secretName} |
		some i, v in object.get(template.spec, "volumes", [])
	],
	[{"field": sprintf("%s.volumes[%d].projected.sources[%d].secret.name", [template.path, i, j]), "name": source.secret.name} |
		some i, v in object.get(template.spec, "volumes", [])
		some j, source in v.projected.sources
	],
)

_container_references(template) := array.concat(
	[{"field": sprintf("%s.%s.env[%d].valueFrom.secretKeyRef.name", [template.path, c.field, j]), "name": e.valueFrom.secretKeyRef.name} |
		some c in tenancy.containers(template.spec)
		some j, e in object.get(c.container, "env", [])
	],
	[{"field": sprintf("%s.%s.envFrom[%d].secretRef.name", [template.path, c.field, j]), "name": e.secretRef.name} |
		some c in tenancy.containers(template.spec)
		some j, e in object.get(c.container, "envFrom", [])
	],
)

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
	some template in input.pod_templates
	some ref in _secret_references(template)
	allowed := _restricted_to(ref.name)
	count(allowed) > 0
	runs_as := _runs_as(template)
	not runs_as.name in allowed
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s references Secret %q, which is restricted to service account %s (annotation %s); the pod runs as %q (%s). Fix: run the pod as %s, or stop referencing %q",
		[
			rule_id, tenancy.object_ref, ref.field, ref.name, _quoted_list(allowed), _restriction_annotation,
			runs_as.name, runs_as.field, _quoted_list(allowed), ref.name,
		],
	)
}

_quoted_list(names) := concat(" or ", [sprintf("%q", [n]) | some n in sort(names)])
