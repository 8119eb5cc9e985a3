# METADATA
# title: A tenant's container never starts from an image it did not pull
# description: |
#   A node shared by tenants keeps every image it pulled. With imagePullPolicy IfNotPresent (the
#   API's default for a tagged image) or Never, the kubelet starts a container from an image another
#   tenant pulled with its own pull secret, without asking the registry whether this pod may pull it;
#   with Always it asks, with this pod's credentials (a digest the node holds is not downloaded
#   again). labgate's mutation (mutations.image_pull) sets Always on every container of a Pod created
#   in a tenant's namespace; this rule refuses what it did not set: on CREATE, any container
#   (containers, initContainers, ephemeralContainers) whose policy is not Always; on UPDATE (kubectl
#   debug's ephemeral containers, kubectl set image), a container that is new or runs a new image.
#   A pod that runs on unchanged is never refused. Only where config always_pull_images is true (the
#   default); judged for every requester but cluster admins (system:masters): a controller creating
#   a tenant's pods acts for the tenant.
package labgate.rules.image_pull

import data.labgate.lib.tenancy

_is_judged if {
	input.request.kind.group == ""
	input.request.kind.kind == "Pod"
	input.request.operation in {"CREATE", "UPDATE"}
	object.get(data.labgate.config, "always_pull_images", true) == true
	tenancy.namespace_tenant
	not "system:masters" in input.request.userInfo.groups
}

# The (field group, name, image) of every container of the pod before this request.
_before contains [split(c.field, "[")[0], c.container.name, c.container.image] if {
	input.request.operation == "UPDATE"
	some c in tenancy.containers(object.get(input.request, ["oldObject", "spec"], {}))
}

# The API server defaults imagePullPolicy before any webhook sees a Pod, so a container without one
# is not a Pod the API would store: only a policy that says not to pull is judged.
_pulls_from_cache(container) if container.imagePullPolicy != "Always"

# A container this request starts: every one on CREATE, a new one or a new image on UPDATE.
_is_started(_) if input.request.operation == "CREATE"

_is_started(c) if {
	input.request.operation == "UPDATE"
	not [split(c.field, "[")[0], c.container.name, c.container.image] in _before
}

_fix(c) := "add --image-pull-policy=Always to kubectl debug" if {
	startswith(c.field, "ephemeralContainers[")
} else := concat("", [
	"set imagePullPolicy: Always on the container (labgate sets it on every pod created in your namespaces; ",
	"a Pod's pull policy cannot change afterwards: create the pod again to run another image)",
])

# METADATA
# title: Every container a tenant's pod starts pulls its image (imagePullPolicy Always)
# custom:
#   rule_id: image-pull-always
violation contains {"rule": rule_id, "message": msg, "field": sprintf("spec.%s.imagePullPolicy", [c.field])} if {
	input.request.kind.kind == "Pod" # first, for rule indexing
	_is_judged
	some c in tenancy.containers(input.request.object.spec)
	_pulls_from_cache(c.container)
	_is_started(c)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s spec.%s (%q) has imagePullPolicy %q: on a node shared with other tenants it could start ",
			"from an image another tenant pulled with its own credentials, which this pod was never checked ",
			"for. Fix: %s",
		]),
		[rule_id, tenancy.object_ref, c.field, c.container.name, c.container.imagePullPolicy, _fix(c)],
	)
}
