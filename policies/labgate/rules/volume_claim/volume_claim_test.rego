package labgate.rules.volume_claim_test

import data.labgate.lib.testdata
import data.labgate.rules.volume_claim

claim(name, volume) := {
	"apiVersion": "v1",
	"kind": "PersistentVolumeClaim",
	"metadata": {"name": name},
	"spec": {"volumeName": volume, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}

volume(name, labels, claim_ref) := {"name": name, "exists": true, "labels": labels, "claimRef": claim_ref}

violations_for(operation, user, new, pv) := violations if {
	violations := volume_claim.violation
		with input.request as testdata.request(operation, "PersistentVolumeClaim", "team-a", user, new, new)
		with input.persistent_volume as pv
		with data.inventory as testdata.inventory
}

message(problem) := sprintf(
	concat("", [
		`[volume-claim] PersistentVolumeClaim "data" spec.volumeName names PersistentVolume "pv-1", %s: a claim may `,
		`bind only its own tenant's volumes. Fix: remove spec.volumeName and let a StorageClass provision the `,
		`volume, or ask the infra team to label the volume labgate.io/tenant=team-a`,
	]),
	[problem],
)

test_own_volumes_and_claims_without_volume_name_are_allowed if {
	count(violations_for(
		"CREATE",
		testdata.alice,
		claim("data", "pv-1"),
		volume("pv-1", {"labgate.io/tenant": "team-a"}, null),
	)) == 0
	count(violations_for(
		"UPDATE",
		testdata.alice,
		claim("data", "pv-1"),
		volume("pv-1", {}, {"namespace": "team-a-data", "name": "old"}),
	)) == 0
	count(violations_for("CREATE", testdata.alice, json.remove(claim("data", "x"), ["spec/volumeName"]), null)) == 0
	count(violations_for(
		"CREATE",
		testdata.cluster_admin,
		claim("data", "pv-1"),
		volume("pv-1", {"labgate.io/tenant": "team-b"}, null),
	)) == 0
}

test_another_tenants_volume_is_refused if {
	violations_for(
		"CREATE",
		testdata.alice,
		claim("data", "pv-1"),
		volume("pv-1", {"labgate.io/tenant": "team-b"}, null),
	) == {{
		"rule": "volume-claim",
		"field": "spec.volumeName",
		"message": message(`which belongs to tenant "team-b" (it is labelled labgate.io/tenant=team-b)`),
	}}
	[v.message |
		some v in violations_for(
			"UPDATE",
			testdata.alice,
			claim("data", "pv-1"),
			volume("pv-1", {}, {"namespace": "team-b", "name": "db"}),
		)
	] == [message(`which belongs to tenant "team-b" (it is bound to a claim in namespace "team-b")`)]
}

test_volume_of_no_tenant_missing_or_unread_is_refused if {
	[v.message | some v in violations_for("CREATE", testdata.alice, claim("data", "pv-1"), volume("pv-1", {}, null))] == [
		message(`which belongs to no tenant (no labgate.io/tenant label, no claim of a tenant)`),
	]
	[v.message |
		some v in violations_for("CREATE", testdata.alice, claim("data", "pv-1"), {"name": "pv-1", "exists": false})
	] == [message(`which does not exist (a volume created later could be another tenant's)`)]
	[v.message | some v in violations_for("CREATE", testdata.alice, claim("data", "pv-1"), null)] == [
		message(`which labgate could not read (retry)`),
	]
}

test_claims_of_kubernetes_controllers_are_judged_too if {
	controller := {"username": "system:serviceaccount:kube-system:persistent-volume-binder", "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"]}
	[v.message |
		some v in violations_for(
			"UPDATE",
			controller,
			claim("data", "pv-1"),
			volume("pv-1", {"labgate.io/tenant": "team-b"}, {"namespace": "team-a", "name": "data"}),
		)
	] == [message(`which belongs to tenant "team-b" (it is labelled labgate.io/tenant=team-b)`)]
	count(violations_for(
		"UPDATE",
		controller,
		claim("data", "pv-1"),
		volume("pv-1", {}, {"namespace": "team-a", "name": "data"}),
	)) == 0
}
