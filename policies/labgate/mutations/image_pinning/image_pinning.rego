# METADATA
# title: Images run by digest
# description: |
#   Each image the webhook resolved (input.images[ref].pinned, for tenants with spec.images) runs by
#   digest: what was checked is what runs, even if the tag moves later. A tenant that requires images
#   to come pinned (spec.images.requireDigest) gets a refusal (image-digest) instead of a rewrite.
#   Containers' images first, then image volumes. Gathered by labgate.mutation.
package labgate.mutations.image_pinning

import data.labgate.lib.json_patch
import data.labgate.lib.tenancy

# Each mutated template's changes, by its path: [{"rule", "ops", "warning"}].
template_changes[template.path] := changes if {
	tenant := tenancy.namespace_tenant
	some template in json_patch.mutated_templates
	changes := array.flatten([
		_pins(tenant, template), _unpinned(tenant, template),
		_volume_pinning_changes(tenant, template),
	])
}

_pins(tenant, template) := [{"rule": "image-digest-pin", "ops": [op], "warning": warning} |
	not tenant.spec.images.requireDigest
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some i, container in json_patch.array_or_empty(object.get(template.spec, field, []))
	pinned := input.images[container.image].pinned
	is_string(pinned)
	pinned != container.image
	op := {"op": "add", "path": sprintf("%s/%d/image", [json_patch.field_pointer(template, field), i]), "value": pinned}
	warning := sprintf("labgate pinned %s to %s", [container.image, substring(split(pinned, "@")[1], 0, 19)])
]

# A tag labgate could not resolve (its registry did not answer) runs as written: said, not refused.
# Not where a signature is required: that image is refused [image-unverifiable] instead.
_unpinned(tenant, template) := [{"rule": "image-digest-pin", "ops": [], "warning": warning} |
	not tenant.spec.images.requireDigest
	not _requires_signature(tenant)
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some container in json_patch.array_or_empty(object.get(template.spec, field, []))
	fact := input.images[container.image]
	is_string(fact.error)
	is_string(fact.registry)
	warning := sprintf(
		"labgate did not pin %s (no digest from its registry): it runs by tag as written",
		[container.image],
	)
]

_requires_signature(tenant) if tenant.spec.images.requireSignature == true

_requires_signature(tenant) if count(object.get(tenant.spec.images, "signingKeys", [])) > 0

# Image volumes (spec.volumes[].image.reference) are pinned like containers' images.
_volume_pinning_changes(tenant, template) := [{"rule": "image-digest-pin", "ops": [op], "warning": warning} |
	not tenant.spec.images.requireDigest
	some i, volume in json_patch.array_or_empty(object.get(template.spec, "volumes", []))
	reference := volume.image.reference
	pinned := input.images[reference].pinned
	is_string(pinned)
	pinned != reference
	op := {
		"op": "add", "path": sprintf("%s/%d/image/reference", [json_patch.field_pointer(template, "volumes"), i]),
		"value": pinned,
	}
	warning := sprintf("labgate pinned %s to %s", [reference, substring(split(pinned, "@")[1], 0, 19)])
]
