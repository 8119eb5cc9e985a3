package labgate.rules.volume_claim_test

import data.labgate.lib.testdata
import data.labgate.rules.volume_claim

controller := {"username": "system:serviceaccount:kube-system:ephemeral-volume-controller", "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]}

claim_spec(extra) := object.union(
	{"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
	extra,
)

ephemeral_pod(extra) := testdata.pod("train-1", {
	"containers": [{"name": "main", "image": "registry.lab.example/team-a/trainer:v1"}],
	"volumes": [
		{"name": "scratch", "emptyDir": {}},
		{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": claim_spec(extra)}}},
	],
})

statefulset(extra) := {
	"apiVersion": "apps/v1",
	"kind": "StatefulSet",
	"metadata": {"name": "db"},
	"spec": {
		"template": {"spec": {"containers": [{"name": "main", "image": "registry.lab.example/team-a/db:v1"}]}},
		"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim_spec(extra)}],
	},
}

pvc(extra) := {
	"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}, "spec": claim_spec(extra),
}

volumes := {
	"pv-a": {"name": "pv-a", "exists": true, "labels": {"labgate.io/tenant": "team-a"}, "claimRef": null},
	"pv-a-bound": {
		"name": "pv-a-bound", "exists": true, "labels": {}, "claimRef": {"namespace": "team-a-data", "name": "old"},
	},
	"pv-b": {"name": "pv-b", "exists": true, "labels": {"labgate.io/tenant": "team-b"}, "claimRef": null},
	"pv-b-bound": {"name": "pv-b-bound", "exists": true, "labels": {}, "claimRef": {"namespace": "team-b", "name": "db"}},
	"pv-host": {"name": "pv-host", "exists": true, "labels": {}, "claimRef": null},
	"pv-later": {"name": "pv-later", "exists": false, "labels": {}, "claimRef": null},
}

statefulset_kind := {"group": "apps", "version": "v1", "kind": "StatefulSet"}

pod_violations(operation, user, pod) := violations if {
	violations := volume_claim.violation with input as {
		"request": testdata.request(operation, "Pod", "team-a", user, pod, null),
		"pod_templates": testdata.pod_templates("Pod", pod),
		"persistent_volumes": volumes,
	}
		with data.inventory as testdata.inventory
}

statefulset_violations(operation, user, sts) := violations if {
	violations := volume_claim.violation with input as {
		"request": object.union(
			testdata.request(operation, "Deployment", "team-a", user, sts, null),
			{"kind": statefulset_kind, "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"}},
		),
		"pod_templates": [{"path": "spec.template.spec", "spec": sts.spec.template.spec, "metadata": {}, "replicas": 1}],
		"persistent_volumes": volumes,
	}
		with data.inventory as testdata.inventory
}

pvc_violations(operation, user, claim) := violations if {
	violations := volume_claim.violation with input as {
		"request": testdata.request(operation, "PersistentVolumeClaim", "team-a", user, claim, claim),
		"pod_templates": [],
	}
		with data.inventory as testdata.inventory
}

messages(violations) := {v.message | some v in violations}

template_message(object_ref, field, volume, problem) := sprintf(
	concat("", [
		`[volume-claim-template] %s %s.volumeName names PersistentVolume %q, %s: the claims made from a template `,
		`may bind only their own tenant's volumes. Fix: remove volumeName from the claim template and let a `,
		`StorageClass provision the volume, or ask the infra team to label the volume labgate.io/tenant=team-a`,
	]),
	[object_ref, field, volume, problem],
)

pod_field := "spec.volumes[1].ephemeral.volumeClaimTemplate.spec"

test_templates_of_own_volumes_or_of_no_volume_are_allowed if {
	count(pod_violations("CREATE", testdata.alice, ephemeral_pod({"storageClassName": "fast"}))) == 0
	count(pod_violations("CREATE", testdata.alice, ephemeral_pod({"volumeName": "pv-a"}))) == 0
	count(pod_violations("CREATE", controller, ephemeral_pod({"volumeName": "pv-a-bound"}))) == 0
	count(statefulset_violations("CREATE", testdata.ann, statefulset({"volumeName": "pv-a"}))) == 0
	count(statefulset_violations("UPDATE", testdata.alice, statefulset({}))) == 0

	# Cluster admins bind platform volumes into tenants on purpose.
	count(pod_violations("CREATE", testdata.cluster_admin, ephemeral_pod({"volumeName": "pv-b"}))) == 0
}

test_an_ephemeral_template_naming_another_tenants_volume_is_refused_whoever_creates_the_pod if {
	expected := {{
		"rule": "volume-claim-template",
		"field": sprintf("%s.volumeName", [pod_field]),
		"message": template_message(
			`Pod "train-1"`,
			pod_field,
			"pv-b",
			`which belongs to tenant "team-b" (it is labelled labgate.io/tenant=team-b)`,
		),
	}}
	pod_violations("CREATE", testdata.alice, ephemeral_pod({"volumeName": "pv-b"})) == expected
	pod_violations("CREATE", testdata.ann, ephemeral_pod({"volumeName": "pv-b"})) == expected
	pod_violations("CREATE", controller, ephemeral_pod({"volumeName": "pv-b"})) == expected
	messages(pod_violations("UPDATE", testdata.alice, ephemeral_pod({"volumeName": "pv-b-bound"}))) == {
		template_message(
			`Pod "train-1"`,
			pod_field,
			"pv-b-bound",
			`which belongs to tenant "team-b" (it is bound to a claim in namespace "team-b")`,
		),
	}
}

test_templates_naming_platform_missing_or_unread_volumes_are_refused if {
	messages(pod_violations("CREATE", testdata.alice, ephemeral_pod({"volumeName": "pv-host"}))) == {
		template_message(
			`Pod "train-1"`,
			pod_field,
			"pv-host",
			"which belongs to no tenant (no labgate.io/tenant label, no claim of a tenant)",
		),
	}
	messages(pod_violations("CREATE", testdata.alice, ephemeral_pod({"volumeName": "pv-later"}))) == {
		template_message(
			`Pod "train-1"`,
			pod_field,
			"pv-later",
			"which does not exist (a volume created later could be another tenant's)",
		),
	}
	messages(pod_violations("CREATE", testdata.alice, ephemeral_pod({"volumeName": "pv-unread"}))) == {
		template_message(`Pod "train-1"`, pod_field, "pv-unread", "which labgate could not read (retry)"),
	}
}

test_a_statefulsets_claim_template_naming_another_tenants_volume_is_refused if {
	messages(statefulset_violations("CREATE", testdata.alice, statefulset({"volumeName": "pv-b"}))) == {
		template_message(
			`StatefulSet "db"`,
			"spec.volumeClaimTemplates[0].spec",
			"pv-b",
			`which belongs to tenant "team-b" (it is labelled labgate.io/tenant=team-b)`,
		),
	}
	messages(statefulset_violations("UPDATE", testdata.ann, statefulset({"volumeName": "pv-host"}))) == {
		template_message(
			`StatefulSet "db"`,
			"spec.volumeClaimTemplates[0].spec",
			"pv-host",
			"which belongs to no tenant (no labgate.io/tenant label, no claim of a tenant)",
		),
	}
}

selector_message(object_ref, field) := sprintf(
	concat("", [
		`[volume-claim-selector] %s %s.selector could match volumes of any tenant (it does not require `,
		`labgate.io/tenant=team-a): a claim may select only its own tenant's volumes. Fix: add labgate.io/tenant: `,
		`team-a to the selector's matchLabels, or remove the selector and let a StorageClass provision the volume`,
	]),
	[object_ref, field],
)

test_selectors_confined_to_the_tenants_label_are_allowed if {
	count(pvc_violations(
		"CREATE",
		testdata.alice,
		pvc({"selector": {"matchLabels": {"labgate.io/tenant": "team-a", "set": "imagenet"}}}),
	)) == 0
	count(pvc_violations(
		"CREATE",
		controller,
		pvc({"selector": {"matchExpressions": [{"key": "labgate.io/tenant", "operator": "In", "values": ["team-a"]}]}}),
	)) == 0
	count(pod_violations(
		"CREATE",
		testdata.alice,
		ephemeral_pod({"selector": {"matchLabels": {"labgate.io/tenant": "team-a"}}}),
	)) == 0
}

test_selectors_that_could_match_other_volumes_are_refused if {
	messages(pvc_violations("CREATE", testdata.alice, pvc({"selector": {"matchLabels": {"set": "imagenet"}}}))) == {
		selector_message(`PersistentVolumeClaim "data"`, "spec"),
	}
	messages(pvc_violations("CREATE", controller, pvc({"selector": {}}))) == {
		selector_message(`PersistentVolumeClaim "data"`, "spec"),
	}
	foreign := pvc({"selector": {"matchLabels": {"labgate.io/tenant": "team-b"}}})
	messages(pvc_violations("CREATE", testdata.ann, foreign)) == {
		selector_message(`PersistentVolumeClaim "data"`, "spec"),
	}
	messages(pvc_violations(
		"CREATE",
		testdata.alice,
		pvc({
			"selector": {"matchExpressions": [{"key": "labgate.io/tenant", "operator": "In", "values": ["team-a", "team-b"]}]},
		}),
	)) == {selector_message(`PersistentVolumeClaim "data"`, "spec")}
	messages(pvc_violations(
		"CREATE",
		testdata.alice,
		pvc({"selector": {"matchExpressions": [{"key": "labgate.io/tenant", "operator": "NotIn", "values": ["team-b"]}]}}),
	)) == {selector_message(`PersistentVolumeClaim "data"`, "spec")}
	messages(pod_violations("CREATE", testdata.alice, ephemeral_pod({"selector": {"matchLabels": {"tier": "gold"}}}))) == {
		selector_message(`Pod "train-1"`, pod_field),
	}
	messages(statefulset_violations(
		"CREATE",
		testdata.alice,
		statefulset({"selector": {"matchLabels": {"tier": "gold"}}}),
	)) == {selector_message(`StatefulSet "db"`, "spec.volumeClaimTemplates[0].spec")}
}

source_message(object_ref, field, kind, name, namespace) := sprintf(
	concat("", [
		`[volume-claim-data-source] %s %s.dataSourceRef names %s %q in namespace %q, which is not a namespace of `,
		`tenant "team-a": a claim may copy only its own tenant's data. Fix: copy from a claim or snapshot in one of `,
		`tenant "team-a"'s namespaces, or leave dataSourceRef.namespace out`,
	]),
	[object_ref, field, kind, name, namespace],
)

test_data_sources_in_the_tenants_namespaces_are_allowed if {
	count(pvc_violations(
		"CREATE",
		testdata.alice,
		pvc({"dataSource": {"kind": "PersistentVolumeClaim", "name": "base"}}),
	)) == 0
	count(pvc_violations(
		"CREATE",
		testdata.alice,
		pvc({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "base"}}),
	)) == 0
	count(pvc_violations(
		"CREATE",
		testdata.alice,
		pvc({
			"dataSourceRef": {
				"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "s", "namespace": "team-a-data",
			},
		}),
	)) == 0
}

test_data_sources_in_other_namespaces_are_refused if {
	snapshot := {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "weights", "namespace": "team-b"}
	messages(pvc_violations("CREATE", testdata.alice, pvc({"dataSourceRef": snapshot}))) == {
		source_message(`PersistentVolumeClaim "data"`, "spec", "VolumeSnapshot", "weights", "team-b"),
	}
	messages(pvc_violations(
		"CREATE",
		controller,
		pvc({"dataSourceRef": object.union(snapshot, {"namespace": "default"})}),
	)) == {source_message(`PersistentVolumeClaim "data"`, "spec", "VolumeSnapshot", "weights", "default")}
	messages(pod_violations("CREATE", testdata.alice, ephemeral_pod({"dataSourceRef": snapshot}))) == {
		source_message(`Pod "train-1"`, pod_field, "VolumeSnapshot", "weights", "team-b"),
	}
}

test_objects_being_deleted_and_deletions_are_not_judged if {
	gone := json.patch(
		pvc({"selector": {}}),
		[{"op": "add", "path": "/metadata/deletionTimestamp", "value": "2026-01-01T00:00:00Z"}],
	)
	count(pvc_violations("UPDATE", controller, gone)) == 0
	count(pvc_violations("DELETE", testdata.alice, pvc({"selector": {}}))) == 0
}
