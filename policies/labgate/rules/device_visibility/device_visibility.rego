# METADATA
# title: Containers see only the devices the scheduler gave them
# description: |
#   Container toolkits choose which of a node's devices a container sees from variables and mounts
#   the container itself carries: NVIDIA_VISIBLE_DEVICES=all (under the NVIDIA toolkit's default
#   settings) shows every GPU of the node to a pod that asked for none, outside any quota. In a
#   tenant's namespace, no container (containers, initContainers, ephemeralContainers) of any pod
#   template may set a device-selection variable (env, whatever its value or source), take one
#   through an envFrom prefix that starts one, or mount anything at the NVIDIA toolkit's device-list
#   path (nvidia-container-devices); no pod template may carry a CDI device annotation
#   (cdi.k8s.io/...). A ConfigMap or Secret of a tenant namespace may not hold a key named like a
#   device-selection variable (envFrom without a prefix would pass it on). Judged on CREATE and
#   UPDATE for every requester but cluster admins (system:masters).
package labgate.rules.device_visibility

import data.labgate.lib.tenancy

# Variables read by the NVIDIA container toolkit, ROCm (AMD) and oneAPI Level Zero (Intel) to select
# devices or driver features.
_device_variables := {
	"NVIDIA_VISIBLE_DEVICES",
	"NVIDIA_DRIVER_CAPABILITIES",
	"NVIDIA_MIG_CONFIG_DEVICES",
	"NVIDIA_MIG_MONITOR_DEVICES",
	"ROCR_VISIBLE_DEVICES",
	"HIP_VISIBLE_DEVICES",
	"GPU_DEVICE_ORDINAL",
	"ZE_AFFINITY_MASK",
}

_device_list_path := "nvidia-container-devices"

_is_judged if {
	input.request.operation in {"CREATE", "UPDATE"}
	tenancy.namespace_tenant
	not "system:masters" in input.request.userInfo.groups
}

_fix(variable) := sprintf(
	concat("", [
		"remove %s and ask for GPUs in resources.limits (e.g. nvidia.com/gpu) or through a ResourceClaim: the ",
		"device plugin or driver then shows the container exactly the GPUs it was given",
	]),
	[variable],
)

# Each finding: the field, what it does, and the fix.
_findings contains {
	"field": sprintf("%s.%s.env[%d]", [template.path, entry.field, i]),
	"what": sprintf("%s.%s (%q) sets %s", [template.path, entry.field, entry.container.name, env.name]),
	"fix": _fix(env.name),
} if {
	_is_judged
	some template in input.pod_templates
	some entry in tenancy.containers(template.spec)
	some i, env in object.get(entry.container, "env", [])
	env.name in _device_variables
}

_findings contains {
	"field": sprintf("%s.%s.envFrom[%d]", [template.path, entry.field, i]),
	"what": sprintf(
		"%s.%s (%q) takes variables with envFrom prefix %q, which starts %s",
		[template.path, entry.field, entry.container.name, source.prefix, variable],
	),
	"fix": sprintf("choose an envFrom prefix that starts no device-selection variable (%s is one)", [variable]),
} if {
	_is_judged
	some template in input.pod_templates
	some entry in tenancy.containers(template.spec)
	some i, source in object.get(entry.container, "envFrom", [])
	is_string(source.prefix)
	source.prefix != ""
	some variable in _device_variables
	startswith(variable, source.prefix)
}

_findings contains {
	"field": sprintf("%s.%s.volumeMounts[%d]", [template.path, entry.field, i]),
	"what": sprintf(
		"%s.%s (%q) mounts %q, where the NVIDIA toolkit reads the list of GPUs to show",
		[template.path, entry.field, entry.container.name, mount.mountPath],
	),
	"fix": concat("", [
		"mount the volume elsewhere, and ask for GPUs in resources.limits (e.g. nvidia.com/gpu) or through a ",
		"ResourceClaim",
	]),
} if {
	_is_judged
	some template in input.pod_templates
	some entry in tenancy.containers(template.spec)
	some i, mount in object.get(entry.container, "volumeMounts", [])
	contains(mount.mountPath, _device_list_path)
}

_findings contains {
	"field": _annotations_field(template.path),
	"what": sprintf("%s carries the CDI device annotation %q", [_annotations_field(template.path), key]),
	"fix": "remove the annotation, and ask for GPUs in resources.limits (e.g. nvidia.com/gpu) or through a ResourceClaim",
} if {
	_is_judged
	some template in input.pod_templates
	some key, _ in object.get(template, ["metadata", "annotations"], {})
	startswith(key, "cdi.k8s.io/")
}

_findings contains {
	"field": sprintf("%s[%q]", [group, key]),
	"what": sprintf(
		"%s holds the key %s, which envFrom would pass to a container as a device-selection variable",
		[group, key],
	),
	"fix": sprintf("rename the key %s", [key]),
} if {
	_is_judged
	input.request.kind.group == ""
	input.request.kind.kind in {"ConfigMap", "Secret"}
	some group in ["data", "binaryData", "stringData"]
	some key, _ in object.get(input.request.object, group, {})
	key in _device_variables
}

# Where a pod template's annotations are: metadata.annotations of a Pod, <template>.metadata.annotations.
_annotations_field("spec") := "metadata.annotations"

_annotations_field(path) := sprintf("%s.metadata.annotations", [trim_suffix(path, ".spec")]) if path != "spec"

# METADATA
# title: No device-selection variables, device-list mounts or CDI annotations in tenant pods
# custom:
#   rule_id: device-visibility
violation contains {"rule": rule_id, "message": msg, "field": finding.field} if {
	some finding in _findings
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s: device-selection settings choose which of the node's GPUs a container sees, outside the GPU ",
			"quota, and no tenant may set them. Fix: %s",
		]),
		[rule_id, tenancy.object_ref, finding.what, finding.fix],
	)
}
