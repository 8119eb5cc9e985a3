# METADATA
# title: Shared test inventory
# description: |
#   Two tenants and their namespaces, used by the Rego unit tests of every rule, and builders for
#   admission requests in the wire form the webhook sends (absent fields left out, as Python does).
package labgate.lib.testdata

inventory := {
	"tenants": {
		"team-a": {
			"metadata": {"name": "team-a"},
			"spec": {
				"members": {
					"admins": [{"kind": "User", "name": "ann"}],
					"researchers": [{"kind": "Group", "name": "team-a"}],
					"viewers": [{"kind": "User", "name": "victor"}],
				},
				"namespaces": {"names": ["team-a"], "prefix": "team-a-"},
				"network": {"allowEgress": false, "allowIngressFromTenants": ["team-b"]},
			},
		},
		"team-b": {
			"metadata": {"name": "team-b"},
			"spec": {
				"members": {
					"admins": [{"kind": "User", "name": "carol"}],
					"researchers": [
						{"kind": "Group", "name": "team-b"},
						{"kind": "ServiceAccount", "namespace": "ci", "name": "runner"},
					],
				},
				"namespaces": {"names": ["team-b"]},
				"exceptions": {"hostNetwork": true, "hostPID": true},
				"enforcement": {},
			},
		},
	},
	"namespaces": {
		"team-a": {"labels": {"labgate.io/tenant": "team-a"}},
		"team-a-data": {"labels": {"labgate.io/tenant": "team-a", "purpose": "data"}},
		"team-b": {"labels": {"labgate.io/tenant": "team-b"}},
		"orphan": {"labels": {"labgate.io/tenant": "ghost"}},
		"default": {"labels": {}},
		"ci": {"labels": {"purpose": "ci"}},
	},
}

alice := {"username": "alice", "groups": ["team-a", "system:authenticated"]}

ann := {"username": "ann", "groups": ["system:authenticated"]}

bob := {"username": "bob", "groups": ["team-b", "system:authenticated"]}

carol := {"username": "carol", "groups": ["system:authenticated"]}

cluster_admin := {"username": "root", "groups": ["system:masters", "system:authenticated"]}

pod_request(namespace, user) := {
	"uid": "test-uid",
	"operation": "CREATE",
	"kind": {"group": "", "version": "v1", "kind": "Pod"},
	"resource": {"group": "", "version": "v1", "resource": "pods"},
	"namespace": namespace,
	"name": "train-1",
	"userInfo": user,
	"object": {"metadata": {"name": "train-1", "namespace": namespace}},
}

# Kinds the rules look at, as {group, version, kind} plus the resource the apiserver names.
kinds := {
	"Pod": {"group": "", "version": "v1", "kind": "Pod", "resource": "pods"},
	"Deployment": {"group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments"},
	"Job": {"group": "batch", "version": "v1", "kind": "Job", "resource": "jobs"},
	"CronJob": {"group": "batch", "version": "v1", "kind": "CronJob", "resource": "cronjobs"},
	"Namespace": {"group": "", "version": "v1", "kind": "Namespace", "resource": "namespaces"},
	"Secret": {"group": "", "version": "v1", "kind": "Secret", "resource": "secrets"},
	"Service": {"group": "", "version": "v1", "kind": "Service", "resource": "services"},
	"PersistentVolumeClaim": {
		"group": "", "version": "v1", "kind": "PersistentVolumeClaim", "resource": "persistentvolumeclaims",
	},
	"NetworkPolicy": {
		"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy",
		"resource": "networkpolicies",
	},
}

# An AdmissionRequest for `kind` (a key of `kinds`). `new` and `old` are the object and oldObject,
# or null to leave them out (CREATE has no oldObject, DELETE no object); the name comes from either.
request(operation, kind, namespace, user, new, old) := object.union(
	{
		"uid": "test-uid",
		"operation": operation,
		"kind": object.remove(kinds[kind], ["resource"]),
		"resource": {"group": kinds[kind].group, "version": kinds[kind].version, "resource": kinds[kind].resource},
		"namespace": namespace,
		"name": _name(new, old),
		"userInfo": user,
	},
	{key: value |
		some key, value in {"object": new, "oldObject": old}
		value != null
	},
)

_name(new, _) := new.metadata.name if new != null

_name(null, old) := old.metadata.name

# A whole policy input for a workload: the request plus its pod templates, found at the same paths
# as webhook/pod_templates.py finds them, with the metadata beside each spec and how many pods it makes at
# once.
workload_input(kind, namespace, user, obj) := {
	"request": request("CREATE", kind, namespace, user, obj, null),
	"pod_templates": pod_templates(kind, obj),
}

pod_templates(kind, obj) := [{
	"path": path,
	"spec": object.get(obj, split(path, "."), {}),
	"metadata": object.get(obj, _metadata_path(path), {}),
	"replicas": _replicas(kind, obj),
} |
	some path in template_paths[kind]
]

_metadata_path(path) := array.concat(array.slice(parts, 0, count(parts) - 1), ["metadata"]) if {
	parts := split(path, ".")
}

template_paths := {
	"Pod": ["spec"],
	"Job": ["spec.template.spec"],
	"Deployment": ["spec.template.spec"],
	"CronJob": ["spec.jobTemplate.spec.template.spec"],
}

# How many pods a workload runs at once: a Pod is one, other kinds say it (1 when unset).
_replicas("Pod", _) := 1

_replicas(kind, obj) := object.get(obj, replica_paths[kind], 1) if kind != "Pod"

replica_paths := {
	"Job": ["spec", "parallelism"],
	"Deployment": ["spec", "replicas"],
	"CronJob": ["spec", "jobTemplate", "spec", "parallelism"],
}

# A Pod named `name` with `spec`.
pod(name, spec) := {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}

# A Deployment named `name` whose pod template has `spec` and `labels`.
deployment(name, labels, spec) := {
	"apiVersion": "apps/v1",
	"kind": "Deployment",
	"metadata": {"name": name},
	"spec": {"template": {"metadata": {"labels": labels}, "spec": spec}},
}

# A container as the validating webhook sees it in a tenant's pod: labgate's mutation made it pull
# always (mutations.image_pull; rules.image_pull refuses it otherwise).
main_container := {"name": "main", "image": "registry.lab.example/research/trainer:v1", "imagePullPolicy": "Always"}

# A Job named `name` running `parallelism` pods at once, whose pod template has `annotations` and `spec`.
job(name, parallelism, annotations, spec) := {
	"apiVersion": "batch/v1",
	"kind": "Job",
	"metadata": {"name": name},
	"spec": {
		"parallelism": parallelism,
		"template": {"metadata": {"annotations": annotations}, "spec": spec},
	},
}

# A container asking `limits` (resource name -> quantity).
gpu_container(name, limits) := object.union(main_container, {"name": name, "resources": {"limits": limits}})

# --- GPU tenants: the shared inventory plus two tenants with GPU quotas and node pools ---

# The taint every pool of a tenant carries, and the spot taint.
pool_toleration(tenant) := {"key": "labgate.io/pool", "operator": "Equal", "value": tenant, "effect": "NoSchedule"}

spot_toleration := {"key": "labgate.io/spot", "operator": "Exists", "effect": "NoSchedule"}

# vision: 16 GPUs over three models, a spot pool and an on-demand pool it may not use, and an
# operator whose pods keep their service-account token.
vision := {
	"metadata": {"name": "vision"},
	"spec": {
		"members": {
			"admins": [{"kind": "User", "name": "vic"}],
			"researchers": [{"kind": "Group", "name": "vision"}],
		},
		"namespaces": {"names": ["vision"], "prefix": "vision-"},
		"gpu": {"total": 16, "models": {"h100": 8, "a100": 8, "mig-1g.10gb": 4}},
		"placement": {
			"nodePools": [
				{
					"name": "h100-reserved",
					"models": ["h100"],
					"nodeSelector": {"labgate.io/node-pool": "h100-reserved"},
					"tolerations": [pool_toleration("vision")],
					"spot": false,
				},
				{
					"name": "h100-spot",
					"models": ["h100"],
					"nodeSelector": {"labgate.io/node-pool": "h100-spot"},
					"tolerations": [pool_toleration("vision"), spot_toleration],
					"spot": true,
				},
			],
			"allowOnDemand": false,
		},
		"secrets": {"automountServiceAccountToken": ["operator"]},
	},
}

# speech: one model (a100), a spot pool whose selector is not the pool label (and that names no model),
# and on-demand allowed. The pools of both tenants list their models (models), but a100-spot.
speech := {
	"metadata": {"name": "speech"},
	"spec": {
		"members": {"researchers": [{"kind": "Group", "name": "speech"}]},
		"namespaces": {"names": ["speech"], "prefix": "speech-"},
		"gpu": {"total": 8, "models": {"a100": 8}},
		"placement": {
			"nodePools": [
				{
					"name": "a100-ondemand",
					"models": ["a100"],
					"nodeSelector": {"labgate.io/node-pool": "a100-ondemand"},
					"tolerations": [pool_toleration("speech")],
				},
				{
					"name": "a100-spot",
					"nodeSelector": {"cloud.example/pool": "speech-a100-spot"},
					"tolerations": [pool_toleration("speech"), spot_toleration],
					"spot": true,
				},
			],
			"allowOnDemand": true,
		},
	},
}

gpu_inventory := {
	"tenants": object.union(inventory.tenants, {"vision": vision, "speech": speech}),
	"namespaces": object.union(inventory.namespaces, {
		"vision": {"labels": {"labgate.io/tenant": "vision"}},
		"vision-eval": {"labels": {"labgate.io/tenant": "vision"}},
		"speech": {"labels": {"labgate.io/tenant": "speech"}},
	}),
}

vera := {"username": "vera", "groups": ["vision", "system:authenticated"]}

sam := {"username": "sam", "groups": ["speech", "system:authenticated"]}

# The job controller, as kube-controller-manager runs it with per-controller credentials.
job_controller := {
	"username": "system:serviceaccount:kube-system:job-controller",
	"groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
}
