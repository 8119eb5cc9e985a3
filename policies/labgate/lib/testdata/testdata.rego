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
	"CronJob": {"group": "batch", "version": "v1", "kind": "CronJob", "resource": "cronjobs"},
	"Namespace": {"group": "", "version": "v1", "kind": "Namespace", "resource": "namespaces"},
	"Secret": {"group": "", "version": "v1", "kind": "Secret", "resource": "secrets"},
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
# as webhook/workloads.py finds them.
workload_input(kind, namespace, user, obj) := {
	"request": request("CREATE", kind, namespace, user, obj, null),
	"pod_templates": [{"path": path, "spec": object.get(obj, split(path, "."), {})} |
		some path in template_paths[kind]
	],
}

template_paths := {
	"Pod": ["spec"],
	"Deployment": ["spec.template.spec"],
	"CronJob": ["spec.jobTemplate.spec.template.spec"],
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

main_container := {"name": "main", "image": "registry.lab.example/research/trainer:v1"}
