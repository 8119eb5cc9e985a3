# METADATA
# title: Image provenance
# description: |
#   In a tenant's namespace, every image of every pod template (containers, initContainers,
#   ephemeralContainers, and image volumes: spec.volumes[].image.reference) must come from an
#   allowed registry or repository prefix (the tenant's spec.images.registries plus
#   data.labgate.config.allowed_registries; no list at all means no restriction), be pinned by digest
#   when the tenant says spec.images.requireDigest, and be signed by
#   one of the tenant's spec.images.signingKeys when it sets requireSignature or lists any key. Which
#   registry an image comes from is decided from the reference alone: input.image_references (parsed by
#   the webhook's input builder for every image of every tenant, no registry asked) gives
#   {registry, repository, error}, so the cluster-wide allowed_registries hold for tenants without
#   spec.images too. Facts that need the registry come from the webhook (webhook/provenance/facts.py)
#   in input.images, only for tenants with spec.images, keyed by the image as written:
#   {reference, normalized, registry, repository, tag, digest, signed_by, error}. An image labgate could
#   not check where the check is needed (error set or no facts when a signature must be verified; a
#   reference that does not parse) is refused: never admitted by accident. A registry that did not
#   answer refuses nothing else: a registries-only or requireDigest tenant does not depend on it.
#   Pods the platform creates are not checked again: their templates were checked when the workload was
#   applied.
package labgate.rules.image

import data.labgate.lib.tenancy

# Every image of every pod template: where it is (for messages), its field, and the reference.
_images contains {
	"where": sprintf("%s.%s (%q)", [template.path, c.field, c.container.name]),
	"field": sprintf("%s.%s.image", [template.path, c.field]),
	"image": c.container.image,
} if {
	some template in input.pod_templates
	some c in tenancy.containers(template.spec)
	is_string(c.container.image)
}

# Image volumes (spec.volumes[].image.reference, Kubernetes 1.31+ behind a gate): an image's files
# mounted into the pod, judged like a container's image.
_images contains {
	"where": sprintf("%s.volumes[%d] (%q)", [template.path, i, volume.name]),
	"field": sprintf("%s.volumes[%d].image.reference", [template.path, i]),
	"image": volume.image.reference,
} if {
	some template in input.pod_templates
	some i, volume in object.get(template.spec, "volumes", [])
	is_string(volume.image.reference)
}

_is_checked if {
	input.request.operation in {"CREATE", "UPDATE"}
	not tenancy.is_trusted_requester
}

_images_spec(tenant) := object.get(tenant, ["spec", "images"], {})

# --- allowed registries ---

_allowed_registries(tenant) := array.concat(
	object.get(_images_spec(tenant), "registries", []),
	object.get(data.labgate.config, "allowed_registries", []),
)

# An entry is `host[/path]`: the host lowercased with Docker Hub's names folded to docker.io, the path a
# repository prefix matched on "/" boundaries (as webhook/provenance/reference.py parses it).
_prefix(entry) := {
	"registry": _registry_name(lower(parts[0])), "path": concat("/", array.slice(parts, 1, count(parts))),
} if {
	parts := split(trim_right(trim_space(entry), "/"), "/")
}

_registry_name(host) := "docker.io" if {
	host in {"index.docker.io", "registry-1.docker.io"}
} else := host

_allows(entry, fact) if {
	prefix := _prefix(entry)
	prefix.registry == fact.registry
	_under(fact.repository, prefix.path)
}

_under(_, "")

_under(repository, path) if repository == path

_under(repository, path) if startswith(repository, concat("", [path, "/"]))

# Where an image comes from, from its reference alone: input.image_references (every tenant), else the
# registry facts (older callers and tests that give only input.images).
_reference(image) := input.image_references[image] if {
	is_string(input.image_references[image].registry)
} else := input.images[image] if {
	is_string(input.images[image].registry)
}

# Known to be outside the allowed registries: decided from the reference alone, even when the
# registry could not be reached (an unreachable, unallowed registry is refused for being unallowed).
_is_disallowed(tenant, fact) if {
	count(_allowed_registries(tenant)) > 0
	is_string(fact.registry)
	not _is_allowed(tenant, fact)
}

_is_allowed(tenant, fact) if {
	some entry in _allowed_registries(tenant)
	_allows(entry, fact)
}

# METADATA
# title: Images come from the tenant's or the cluster's allowed registries
# custom:
#   rule_id: image-registry
violation contains {"rule": rule_id, "message": msg, "field": image.field} if {
	_is_checked
	tenant := tenancy.namespace_tenant
	allowed := _allowed_registries(tenant)
	count(allowed) > 0
	some image in _images
	fact := _reference(image.image)
	_is_disallowed(tenant, fact)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s runs image %q (%s/%s), which is not under a registry tenant %q allows (%s). Fix: use an image ",
			"from one of those, or ask the infra team to add its registry to spec.images.registries",
		]),
		[
			rule_id, tenancy.object_ref, image.where, image.image, fact.registry, fact.repository,
			tenant.metadata.name, concat(", ", allowed),
		],
	)
}

# --- digests ---

# Pinned as written: `name@<algorithm>:<hex>` (a tag before the digest is allowed and ignored).
_is_pinned(reference) if regex.match(`@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-f0-9]{32,}$`, reference)

_pin_fix(reference) := sprintf(
	"write it as %q",
	[sprintf("%s/%s@%s", [fact.registry, fact.repository, fact.digest])],
) if {
	fact := input.images[reference]
	is_string(fact.digest)
} else := "write it as <image>@sha256:<digest> (`crane digest <image>` prints the digest)"

# METADATA
# title: Images are pinned by digest when the tenant requires it
# custom:
#   rule_id: image-digest
violation contains {"rule": rule_id, "message": msg, "field": image.field} if {
	_is_checked
	tenant := tenancy.namespace_tenant
	_images_spec(tenant).requireDigest == true
	some image in _images
	not _is_pinned(image.image)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s runs image %q, which is not pinned by digest; tenant %q requires digests ",
			"(spec.images.requireDigest). Fix: %s",
		]),
		[rule_id, tenancy.object_ref, image.where, image.image, tenant.metadata.name, _pin_fix(image.image)],
	)
}

# --- signatures ---

_signing_key_names(tenant) := [key.name | some key in object.get(_images_spec(tenant), "signingKeys", [])]

_requires_signature(tenant) if _images_spec(tenant).requireSignature == true

_requires_signature(tenant) if count(_signing_key_names(tenant)) > 0

_signature_fix(tenant, _) := "ask the tenant's admins to add the signer's public key to spec.images.signingKeys" if {
	count(_signing_key_names(tenant)) == 0
}

_signature_fix(tenant, fact) := sprintf(
	"sign it with one of those keys (cosign sign --key <key> %s/%s@%s) or use an image one of them signed",
	[fact.registry, fact.repository, fact.digest],
) if {
	count(_signing_key_names(tenant)) > 0
}

_trusted_keys_text(tenant) := concat(", ", _signing_key_names(tenant)) if {
	count(_signing_key_names(tenant)) > 0
} else := "none listed"

# METADATA
# title: Images are signed by a key the tenant trusts
# custom:
#   rule_id: image-signature
violation contains {"rule": rule_id, "message": msg, "field": image.field} if {
	_is_checked
	tenant := tenancy.namespace_tenant
	_requires_signature(tenant)
	some image in _images
	fact := input.images[image.image]
	fact.error == null
	count(fact.signed_by) == 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s runs image %q (digest %s), which no key tenant %q trusts has signed (trusted keys: %s). Fix: %s",
		[
			rule_id, tenancy.object_ref, image.where, image.image, fact.digest, tenant.metadata.name,
			_trusted_keys_text(tenant), _signature_fix(tenant, fact),
		],
	)
}

# --- images labgate could not check ---

# Registry facts are needed only to know signatures: registries are matched on the reference, and a
# digest is seen as written.
_needs_facts(tenant) if _requires_signature(tenant)

_unverifiable contains {"image": image, "reason": fact.error} if {
	some image in _images
	fact := input.images[image.image]
	is_string(fact.error)
	_needs_fact(tenancy.namespace_tenant, fact)
	not _is_disallowed(tenancy.namespace_tenant, _reference_or_fact(image.image, fact))
}

# A registry that could not be asked refuses only what needs its answer (a signature): the allowlist
# is decided from the reference, a digest as written, and the tag's pin is the mutation's (it says
# when it could not pin). A reference that does not parse is unknown whatever the tenant asks.
_needs_fact(tenant, _) if _needs_facts(tenant)

_needs_fact(_, fact) if not is_string(fact.registry)

_reference_or_fact(image, _) := _reference(image)

_reference_or_fact(image, fact) := fact if not _reference(image)

# A reference that does not parse, where registries are restricted: which registry it names is unknown.
_unverifiable contains {"image": image, "reason": reference.error} if {
	count(_allowed_registries(tenancy.namespace_tenant)) > 0
	some image in _images
	reference := input.image_references[image.image]
	is_string(reference.error)
	not _has_fact_error(image.image)
}

_has_fact_error(image) if is_string(input.images[image].error)

_unverifiable contains {"image": image, "reason": "labgate has no facts about it"} if {
	_needs_facts(tenancy.namespace_tenant)
	some image in _images
	not input.images[image.image]
}

# METADATA
# title: Images labgate could not check are refused
# custom:
#   rule_id: image-unverifiable
violation contains {"rule": rule_id, "message": msg, "field": item.image.field} if {
	_is_checked
	tenant := tenancy.namespace_tenant
	some item in _unverifiable
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s runs image %q, which labgate could not check for tenant %q: %s. Fix: check the image name and ",
			"the pod's imagePullSecrets, then retry; if it persists, tell the infra team",
		]),
		[rule_id, tenancy.object_ref, item.image.where, item.image.image, tenant.metadata.name, item.reason],
	)
}

# --- images changed on a running pod ---

# The image at each field of the pod before the update (a Pod's spec is its only template).
_old_images[field] := image if {
	some c in tenancy.containers(object.get(input.request, ["oldObject", "spec"], {}))
	image := c.container.image
	field := sprintf("spec.%s.image", [c.field])
}

_old_images[field] := image if {
	some i, volume in object.get(input.request, ["oldObject", "spec", "volumes"], [])
	image := volume.image.reference
	field := sprintf("spec.volumes[%d].image.reference", [i])
}

# METADATA
# title: Images changed on a running pod are pinned by digest where images must be signed
# description: |
#   labgate pins an image to the digest it verified only when a pod is created (the mutating
#   webhook sees CREATE only: see docs/operations.md, "Blast radius"). An image set on a running pod
#   (`kubectl set image`, an ephemeral container of `kubectl debug`) is verified but could not be
#   pinned, so a tag moved afterwards would run what no trusted key signed. Where the tenant requires
#   signatures, such an image must come pinned by digest.
# custom:
#   rule_id: image-digest-update
violation contains {"rule": rule_id, "message": msg, "field": image.field} if {
	input.request.kind.kind == "Pod" # first, for rule indexing
	input.request.kind.group == ""
	input.request.operation == "UPDATE"
	_is_checked
	tenant := tenancy.namespace_tenant
	_requires_signature(tenant)
	not _images_spec(tenant).requireDigest == true # image-digest refuses every unpinned image there
	some image in _images
	not _is_pinned(image.image)
	object.get(_old_images, image.field, null) != image.image
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s is set to image %q on a running pod; tenant %q requires signed images, and labgate pins a tag ",
			"to the digest it verified only when a pod is created, so a tag moved later would run unsigned. Fix: %s ",
			"(or delete the pod and create it again)",
		]),
		[rule_id, tenancy.object_ref, image.where, image.image, tenant.metadata.name, _pin_fix(image.image)],
	)
}
