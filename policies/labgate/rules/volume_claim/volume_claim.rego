# METADATA
# title: Volume claims bind only the tenant's own volumes
# description: |
#   A PersistentVolumeClaim in a tenant's namespace that names a PersistentVolume (spec.volumeName)
#   binds that volume directly, data and all. It is admitted only when the volume belongs to the same
#   tenant: labelled labgate.io/tenant with the tenant's name, or (unlabelled) already claimed by a
#   claim in one of the tenant's namespaces. A volume of another tenant, of no tenant, or one that
#   does not exist yet (it could be another tenant's when created) is refused. The webhook reads the
#   volume and gives it as input.persistent_volume: {name, exists, labels, claimRef}.
#   Judged whoever creates or updates the claim (kube-controller-manager makes claims from ephemeral
#   volumes and StatefulSets, and its volume binder sets spec.volumeName): only cluster admins
#   (system:masters) are not judged, nor a claim being deleted.
package labgate.rules.volume_claim

import data.labgate.lib.tenancy

_claim := input.request.object if {
	input.request.kind.kind == "PersistentVolumeClaim"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	not "system:masters" in input.request.userInfo.groups
	not input.request.object.metadata.deletionTimestamp
}

_volume_name := _claim.spec.volumeName if _claim.spec.volumeName != ""

_volume := input.persistent_volume if input.persistent_volume.name == _volume_name

# The tenant a volume belongs to, and why, as {"tenant", "why"}; undefined for a volume of no tenant.
_owner := {"tenant": name, "why": sprintf("it is labelled %s=%s", [tenancy.tenant_label, name])} if {
	name := _volume.labels[tenancy.tenant_label]
} else := {"tenant": name, "why": sprintf("it is bound to a claim in namespace %q", [ref.namespace])} if {
	ref := _volume.claimRef
	name := data.inventory.namespaces[ref.namespace].labels[tenancy.tenant_label]
}

_problem := "which labgate could not read (retry)" if {
	not _volume
} else := "which does not exist (a volume created later could be another tenant's)" if {
	not _volume.exists
} else := sprintf("which belongs to no tenant (no %s label, no claim of a tenant)", [tenancy.tenant_label]) if {
	not _owner
} else := sprintf("which belongs to tenant %q (%s)", [_owner.tenant, _owner.why]) if {
	_owner.tenant != tenancy.namespace_tenant.metadata.name
}

# METADATA
# title: A claim names only a volume of its own tenant
# custom:
#   rule_id: volume-claim
violation contains {"rule": rule_id, "message": msg, "field": "spec.volumeName"} if {
	input.request.kind.kind == "PersistentVolumeClaim" # first, for rule indexing
	input.request.kind.group == ""
	tenant := tenancy.namespace_tenant
	_volume_name
	problem := _problem
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] PersistentVolumeClaim %q spec.volumeName names PersistentVolume %q, %s: a claim may bind only its ",
			"own tenant's volumes. Fix: remove spec.volumeName and let a StorageClass provision the volume, or ask the ",
			"infra team to label the volume %s=%s",
		]),
		[rule_id, tenancy.object_name, _volume_name, problem, tenancy.tenant_label, tenant.metadata.name],
	)
}
