package labgate.rules.volume_claim

import data.labgate.lib.tenancy

# volume-claim-template, volume-claim-selector, volume-claim-data-source: claim templates,
# selectors and data sources reach only the tenant's own volumes (one package with volume_claim.rego,
# so its own helper names).
# A claim made from a template binds what the template says, whoever creates the claim: a generic
# ephemeral volume (spec.volumes[].ephemeral.volumeClaimTemplate, in a Pod or any workload's pod
# template) and a StatefulSet's spec.volumeClaimTemplates become PersistentVolumeClaims that
# kube-controller-manager creates. So in a tenant's namespace:
# - a claim template's spec.volumeName must name a volume of the same tenant (labelled
#   labgate.io/tenant with its name, or bound to a claim in one of its namespaces); the webhook
#   reads every volume a template names and gives them as input.persistent_volumes
#   (name -> {name, exists, labels, claimRef});
# - a claim's or claim template's spec.selector binds any volume whose labels it matches, so it
#   must require the tenant's own label (matchLabels labgate.io/tenant: <tenant>, or a
#   matchExpressions "In" of that key with only the tenant's name): judged by what it could ever
#   match, not by the volumes that exist today;
# - a claim's spec.dataSourceRef may name another namespace (cross-namespace data sources): it
#   must be one of the tenant's own namespaces.
# Judged on CREATE and UPDATE for every requester (a controller acting on a tenant's template acts
# for the tenant) but cluster admins (system:masters), and not while the object is being deleted.

_is_cluster_admin if "system:masters" in input.request.userInfo.groups

_is_judged if {
	input.request.operation in {"CREATE", "UPDATE"}
	tenancy.namespace_tenant
	not _is_cluster_admin
	not input.request.object.metadata.deletionTimestamp
}

# Claim specs in the request, with the field that holds them; `template` when kube-controller-manager
# makes claims from it (the PersistentVolumeClaim's own spec.volumeName is the volume-claim rule's).
_claims contains {"field": "spec", "spec": input.request.object.spec, "template": false} if {
	_is_judged
	input.request.kind.group == ""
	input.request.kind.kind == "PersistentVolumeClaim"
}

_claims contains {"field": field, "spec": volume.ephemeral.volumeClaimTemplate.spec, "template": true} if {
	_is_judged
	some template in input.pod_templates
	some i, volume in object.get(template.spec, "volumes", [])
	is_object(volume.ephemeral.volumeClaimTemplate.spec)
	field := sprintf("%s.volumes[%d].ephemeral.volumeClaimTemplate.spec", [template.path, i])
}

_claims contains {
	"field": sprintf("spec.volumeClaimTemplates[%d].spec", [i]), "spec": claim.spec, "template": true,
} if {
	_is_judged
	input.request.kind.group == "apps"
	input.request.kind.kind == "StatefulSet"
	some i, claim in object.get(input.request.object, ["spec", "volumeClaimTemplates"], [])
	is_object(claim.spec)
}

# The tenant a volume belongs to, and why; undefined for a volume of no tenant.
_volume_owner(volume) := {"tenant": name, "why": sprintf("it is labelled %s=%s", [tenancy.tenant_label, name])} if {
	name := volume.labels[tenancy.tenant_label]
} else := {"tenant": name, "why": sprintf("it is bound to a claim in namespace %q", [ref.namespace])} if {
	ref := volume.claimRef
	name := data.inventory.namespaces[ref.namespace].labels[tenancy.tenant_label]
}

_volume_problem(name) := "which labgate could not read (retry)" if {
	not input.persistent_volumes[name]
} else := "which does not exist (a volume created later could be another tenant's)" if {
	not input.persistent_volumes[name].exists
} else := sprintf("which belongs to no tenant (no %s label, no claim of a tenant)", [tenancy.tenant_label]) if {
	not _volume_owner(input.persistent_volumes[name])
} else := sprintf("which belongs to tenant %q (%s)", [owner.tenant, owner.why]) if {
	owner := _volume_owner(input.persistent_volumes[name])
	owner.tenant != tenancy.namespace_tenant.metadata.name
}

# METADATA
# title: A claim template names only a volume of its own tenant
# custom:
#   rule_id: volume-claim-template
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenant := tenancy.namespace_tenant.metadata.name
	some claim in _claims
	claim.template
	name := claim.spec.volumeName
	is_string(name)
	name != ""
	problem := _volume_problem(name)
	field := sprintf("%s.volumeName", [claim.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s names PersistentVolume %q, %s: the claims made from a template may bind only their own ",
			"tenant's volumes. Fix: remove volumeName from the claim template and let a StorageClass provision the ",
			"volume, or ask the infra team to label the volume %s=%s",
		]),
		[rule_id, tenancy.object_ref, field, name, problem, tenancy.tenant_label, tenant],
	)
}

# A selector that can only ever match volumes labelled for `tenant`.
_is_confined(selector, tenant) if selector.matchLabels[tenancy.tenant_label] == tenant

_is_confined(selector, tenant) if {
	some expression in object.get(selector, "matchExpressions", [])
	expression.key == tenancy.tenant_label
	expression.operator == "In"
	count(expression.values) > 0
	every value in expression.values {
		value == tenant
	}
}

# METADATA
# title: A claim selects only volumes labelled for its own tenant
# custom:
#   rule_id: volume-claim-selector
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenant := tenancy.namespace_tenant.metadata.name
	some claim in _claims
	selector := claim.spec.selector
	is_object(selector)
	not _is_confined(selector, tenant)
	field := sprintf("%s.selector", [claim.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s could match volumes of any tenant (it does not require %s=%s): a claim may select only its own ",
			"tenant's volumes. Fix: add %s: %s to the selector's matchLabels, or remove the selector and let a ",
			"StorageClass provision the volume",
		]),
		[rule_id, tenancy.object_ref, field, tenancy.tenant_label, tenant, tenancy.tenant_label, tenant],
	)
}

# METADATA
# title: A claim copies data only from its own tenant's namespaces
# custom:
#   rule_id: volume-claim-data-source
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenant := tenancy.namespace_tenant.metadata.name
	some claim in _claims
	source := claim.spec.dataSourceRef
	namespace := source.namespace
	is_string(namespace)
	namespace != ""
	not namespace in tenancy.tenant_namespaces(tenant)
	field := sprintf("%s.dataSourceRef", [claim.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s names %s %q in namespace %q, which is not a namespace of tenant %q: a claim may copy only its ",
			"own tenant's data. Fix: copy from a claim or snapshot in one of tenant %q's namespaces, or leave ",
			"dataSourceRef.namespace out",
		]),
		[
			rule_id, tenancy.object_ref, field, object.get(source, "kind", "object"), object.get(source, "name", ""), namespace,
			tenant, tenant,
		],
	)
}
