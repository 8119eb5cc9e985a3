# METADATA
# title: Service-account token automount off
# description: |
#   automountServiceAccountToken: false where the spec does not say, unless the pod runs as a
#   service account the Tenant lists in spec.secrets.automountServiceAccountToken. On a Pod the
#   ServiceAccount admission plugin has already mounted the token by then, so its volume
#   (kube-api-access-*) and mounts are taken out too, or the token would stay mounted. Gathered by
#   labgate.mutation.
package labgate.mutations.token_automount

import data.labgate.lib.gpu
import data.labgate.lib.json_patch
import data.labgate.lib.tenancy

# Each mutated template's changes, by its path: [{"rule", "ops", "warning"}].
template_changes[template.path] := _automount_changes(tenant, template) if {
	tenant := tenancy.namespace_tenant
	some template in json_patch.mutated_templates
}

_runs_as(spec) := name if {
	name := object.get(spec, "serviceAccountName", "")
	is_string(name)
	name != ""
} else := name if {
	name := object.get(spec, "serviceAccount", "")
	is_string(name)
	name != ""
} else := "default"

_keeps_token(tenant, spec) if {
	_runs_as(spec) in object.get(tenant, ["spec", "secrets", "automountServiceAccountToken"], [])
}

_automount_changes(tenant, template) := [{"rule": "token-automount", "ops": ops, "warning": warning} |
	not is_boolean(object.get(template.spec, "automountServiceAccountToken", null))
	not _keeps_token(tenant, template.spec)
	ops := array.concat(
		[{"op": "add", "path": json_patch.field_pointer(template, "automountServiceAccountToken"), "value": false}],
		_token_volume_ops(template),
	)
	warning := sprintf(
		"labgate turned off token automount (service account %q) for %s",
		[_runs_as(template.spec), json_patch.subject(template)],
	)
]

# The token volume the ServiceAccount admission plugin adds to a Pod: kube-api-access-<random>,
# projected from a serviceAccountToken.
_is_token_volume(volume) if {
	startswith(volume.name, "kube-api-access-")
	some source in volume.projected.sources
	is_object(source.serviceAccountToken)
}

_token_volumes(template) := {volume.name |
	gpu.is_pod
	some volume in json_patch.array_or_empty(object.get(template.spec, "volumes", []))
	_is_token_volume(volume)
}

_token_volume_ops(template) := [] if {
	count(_token_volumes(template)) == 0
} else := array.concat(
	[{"op": "add", "path": json_patch.field_pointer(template, "volumes"), "value": [v |
		some v in template.spec.volumes
		not v.name in _token_volumes(template)
	]}],
	[{"op": "add", "path": sprintf("%s/%s/%d/volumeMounts", [json_patch.pointer(template.path), group, i]), "value": [m |
		some m in container.volumeMounts
		not m.name in _token_volumes(template)
	]} |
		some group in ["initContainers", "containers"]
		some i, container in json_patch.array_or_empty(object.get(template.spec, group, []))
		_mounts_token(container, _token_volumes(template))
	],
)

_mounts_token(container, names) if {
	some m in json_patch.array_or_empty(object.get(container, "volumeMounts", []))
	m.name in names
}
