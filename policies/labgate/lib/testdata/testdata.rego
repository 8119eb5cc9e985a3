# METADATA
# title: Shared test inventory
# description: Two tenants and their namespaces, used by the Rego unit tests of every rule.
package labgate.lib.testdata

inventory := {
	"tenants": {
		"team-a": {
			"metadata": {"name": "team-a"},
			"spec": {"members": {
				"admins": [{"kind": "User", "name": "ann"}],
				"researchers": [{"kind": "Group", "name": "team-a"}],
				"viewers": [{"kind": "User", "name": "victor"}],
			}},
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
				"enforcement": {},
			},
		},
	},
	"namespaces": {
		"team-a": {"labels": {"labgate.io/tenant": "team-a"}},
		"team-b": {"labels": {"labgate.io/tenant": "team-b"}},
		"orphan": {"labels": {"labgate.io/tenant": "ghost"}},
		"default": {"labels": {}},
	},
}

alice := {"username": "alice", "groups": ["team-a", "system:authenticated"]}

bob := {"username": "bob", "groups": ["team-b", "system:authenticated"]}

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
