package labgate.rules.secret_scoping_test

import data.labgate.lib.testdata
import data.labgate.rules.secret_scoping

token_secret(name, service_account) := {
	"apiVersion": "v1",
	"kind": "Secret",
	"type": "kubernetes.io/service-account-token",
	"metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": service_account}},
}

token_violations(namespace, user, secret) := violations if {
	violations := secret_scoping.violation
		with input.request as testdata.request("CREATE", "Secret", namespace, user, secret, null)
		with input.pod_templates as []
		with data.inventory as testdata.inventory
}

# --- service-account-token ---

test_token_for_own_service_account_is_allowed if {
	count(token_violations("team-a", testdata.alice, token_secret("trainer-token", "trainer"))) == 0
}

test_member_mints_token_for_listed_service_account if {
	count(token_violations("ci", testdata.bob, token_secret("runner-token", "runner"))) == 0
}

test_opaque_secret_is_not_checked if {
	secret := {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {
		"name": "x",
		"annotations": {"kubernetes.io/service-account.name": "labgate-reconciler"},
	}}
	count(token_violations("team-a", testdata.alice, secret)) == 0
}

test_platform_mints_any_token if {
	count(token_violations("team-a", testdata.cluster_admin, token_secret("t", "labgate-reconciler"))) == 0
}

test_token_for_privileged_service_account_is_refused if {
	token_violations("team-a", testdata.alice, token_secret("steal", "labgate-reconciler")) == {{
		"rule": "service-account-token",
		"field": "metadata.annotations[kubernetes.io/service-account.name]",
		"message": concat("", [
			`[service-account-token] Secret "steal" in namespace "team-a" asks a token for service account `,
			`"labgate-reconciler" (annotation kubernetes.io/service-account.name), which is reserved for the platform. `,
			`Fix: name one of your own service accounts in kubernetes.io/service-account.name, or let Kubernetes mount `,
			`a short-lived token (projected serviceAccountToken volume)`,
		]),
	}}
}

test_token_for_another_tenants_member_service_account_is_refused if {
	token_violations("ci", testdata.alice, token_secret("runner-token", "runner")) == {{
		"rule": "service-account-token",
		"field": "metadata.annotations[kubernetes.io/service-account.name]",
		"message": concat("", [
			`[service-account-token] Secret "runner-token" in namespace "ci" asks a token for service account `,
			`"ci/runner" (annotation kubernetes.io/service-account.name), which tenant "team-b" lists as a researcher; `,
			`user "alice" (groups: team-a) is not one of its researchers. Fix: use a service account of your own `,
			`tenant, or ask an admin of "team-b" (carol) to create the token`,
		]),
	}}
}

# --- privileged-service-account ---

test_pod_as_default_service_account_is_allowed if {
	pod := testdata.pod("train-1", {"containers": [testdata.main_container]})
	count(secret_scoping.violation) == 0 with input as testdata.workload_input("Pod", "team-a", testdata.alice, pod)
		with data.inventory as testdata.inventory
}

test_pod_as_privileged_service_account_is_refused if {
	deployment := testdata.deployment(
		"web",
		{},
		{"serviceAccountName": "labgate-reconciler", "containers": [testdata.main_container]},
	)
	violations := secret_scoping.violation
		with input as testdata.workload_input("Deployment", "team-a", testdata.alice, deployment)
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "privileged-service-account",
		"field": "spec.template.spec.serviceAccountName",
		"message": concat("", [
			`[privileged-service-account] Deployment "web" spec.template.spec.serviceAccountName asks service account `,
			`"labgate-reconciler", which is reserved for the platform. Fix: run the pod as one of your own service `,
			`accounts (or remove spec.template.spec.serviceAccountName to run as "default")`,
		]),
	}}
}

test_deprecated_service_account_field_is_read if {
	pod := testdata.pod("x", {"serviceAccount": "labgate-reconciler", "containers": [testdata.main_container]})
	violations := secret_scoping.violation with input as testdata.workload_input("Pod", "team-a", testdata.alice, pod)
		with data.inventory as testdata.inventory
	[v.field | some v in violations] == ["spec.serviceAccount"]
}

# --- secret-scope ---

restricted_secrets := {
	"wandb-key": {"annotations": {"labgate.io/restricted-to-service-account": "trainer, evaluator"}},
	"registry": {"annotations": {"labgate.io/restricted-to-service-account": "trainer"}},
	"shared": {"annotations": {}},
}

pod_using_secrets(service_account) := testdata.pod("train-1", {
	"serviceAccountName": service_account,
	"imagePullSecrets": [{"name": "registry"}],
	"volumes": [
		{"name": "keys", "secret": {"secretName": "wandb-key"}},
		{"name": "all", "projected": {"sources": [{"secret": {"name": "shared"}}, {"secret": {"name": "wandb-key"}}]}},
	],
	"containers": [object.union(testdata.main_container, {
		"env": [{"name": "WANDB", "valueFrom": {"secretKeyRef": {"name": "wandb-key", "key": "k"}}}],
		"envFrom": [{"secretRef": {"name": "shared"}}],
	})],
})

test_pod_running_as_allowed_service_account_may_use_restricted_secrets if {
	input_doc := object.union(
		testdata.workload_input("Pod", "team-a", testdata.ann, pod_using_secrets("trainer")),
		{"secrets": restricted_secrets},
	)
	count(secret_scoping.violation) == 0 with input as input_doc
		with data.inventory as testdata.inventory
}

# --- restricted-service-account ---

restricted_identity_message(kind, field, user) := sprintf(
	concat("", [
		`[restricted-service-account] %s %s runs as service account "trainer", to which Secrets "registry", `,
		`"wandb-key" are restricted (annotation labgate.io/restricted-to-service-account); only admins of tenant `,
		`"team-a" (ann) may run pods as it, and user %s is not one. Fix: run the pod as another service account (or `,
		`remove %s to run as "default"), or ask an admin of "team-a" (ann) to run it`,
	]),
	[kind, field, user, field],
)

test_researchers_may_not_run_pods_as_a_restricted_service_account if {
	input_doc := object.union(
		testdata.workload_input("Pod", "team-a", testdata.alice, pod_using_secrets("trainer")),
		{"secrets": restricted_secrets},
	)
	violations := secret_scoping.violation with input as input_doc
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "restricted-service-account",
		"field": "spec.serviceAccountName",
		"message": restricted_identity_message(`Pod "train-1"`, "spec.serviceAccountName", `"alice" (groups: team-a)`),
	}}

	# Without naming the Secret at all: running as the account is enough (its token, a later mount).
	plain := testdata.deployment("web", {}, {"serviceAccountName": "trainer", "containers": [testdata.main_container]})
	found := secret_scoping.violation
		with input as object.union(
			testdata.workload_input("Deployment", "team-a", testdata.alice, plain),
			{"secrets": restricted_secrets},
		)
		with data.inventory as testdata.inventory
	{v.message | some v in found} == {
		restricted_identity_message(`Deployment "web"`, "spec.template.spec.serviceAccountName", `"alice" (groups: team-a)`),
	}
}

deployment_update(user, old_spec, new_spec) := object.union(
	{
		"request": testdata.request(
			"UPDATE", "Deployment", "team-a", user,
			testdata.deployment("web", {}, new_spec), testdata.deployment("web", {}, old_spec),
		),
		"pod_templates": testdata.pod_templates("Deployment", testdata.deployment("web", {}, new_spec)),
	},
	{"secrets": restricted_secrets},
)

test_researchers_may_not_change_the_template_of_a_workload_running_as_it if {
	old := {"serviceAccountName": "trainer", "containers": [testdata.main_container]}
	new := {"serviceAccountName": "trainer", "containers": [object.union(testdata.main_container, {"image": "other"})]}
	found := secret_scoping.violation with input as deployment_update(testdata.alice, old, new)
		with data.inventory as testdata.inventory
	{v.message | some v in found} == {
		restricted_identity_message(`Deployment "web"`, "spec.template.spec.serviceAccountName", `"alice" (groups: team-a)`),
	}

	# An update that leaves the template as it was (labels, replicas) starts nothing as the account.
	count(secret_scoping.violation) == 0 with input as deployment_update(testdata.alice, old, old)
		with data.inventory as testdata.inventory

	# Admins may.
	count(secret_scoping.violation) == 0 with input as deployment_update(testdata.ann, old, new)
		with data.inventory as testdata.inventory
}

test_without_secret_facts_nothing_is_refused if {
	count(secret_scoping.violation) == 0
		with input as testdata.workload_input("Pod", "team-a", testdata.alice, pod_using_secrets("default"))
		with data.inventory as testdata.inventory
}

test_evaluator_may_use_wandb_key_but_not_registry if {
	input_doc := object.union(
		testdata.workload_input("Pod", "team-a", testdata.ann, pod_using_secrets("evaluator")),
		{"secrets": restricted_secrets},
	)
	violations := secret_scoping.violation with input as input_doc
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "secret-scope",
		"field": "spec.imagePullSecrets[0].name",
		"message": concat("", [
			`[secret-scope] Pod "train-1" spec.imagePullSecrets[0].name references Secret "registry", which is `,
			`restricted to service account "trainer" (annotation labgate.io/restricted-to-service-account); the pod `,
			`runs as "evaluator" (spec.serviceAccountName). Fix: run the pod as "trainer", or stop referencing `,
			`"registry"`,
		]),
	}}
}

test_pod_as_default_may_not_use_restricted_secrets if {
	input_doc := object.union(
		testdata.workload_input("Pod", "team-a", testdata.alice, pod_using_secrets("")),
		{"secrets": restricted_secrets},
	)
	violations := secret_scoping.violation with input as input_doc
		with data.inventory as testdata.inventory
	{v.field | some v in violations} == {
		"spec.imagePullSecrets[0].name",
		"spec.volumes[0].secret.secretName",
		"spec.volumes[1].projected.sources[1].secret.name",
		"spec.containers[0].env[0].valueFrom.secretKeyRef.name",
	}
	some v in violations
	v.field == "spec.volumes[0].secret.secretName"
	v.message == concat("", [
		`[secret-scope] Pod "train-1" spec.volumes[0].secret.secretName references Secret "wandb-key", which is `,
		`restricted to service account "evaluator" or "trainer" (annotation `,
		`labgate.io/restricted-to-service-account); the pod runs as "default" (spec.serviceAccountName). Fix: run `,
		`the pod as "evaluator" or "trainer", or stop referencing "wandb-key"`,
	])
}

# --- identities: token Secrets and pods of member service accounts ---

# team-a lists its own deployer as an admin; team-b lists team-a's runner as a researcher.
identities := json.patch(testdata.inventory, [
	{
		"op": "add", "path": "/tenants/team-a/spec/members/admins/-",
		"value": {"kind": "ServiceAccount", "namespace": "team-a", "name": "deployer"},
	},
	{
		"op": "add", "path": "/tenants/team-b/spec/members/researchers/-",
		"value": {"kind": "ServiceAccount", "namespace": "team-a", "name": "runner"},
	},
])

identity_messages(kind, user, obj) := {v.message |
	some v in secret_scoping.violation with input as testdata.workload_input(kind, "team-a", user, obj)
		with data.inventory as identities
}

token_messages(user, secret) := {v.message |
	some v in secret_scoping.violation
		with input.request as testdata.request("CREATE", "Secret", "team-a", user, secret, null)
		with input.pod_templates as []
		with data.inventory as identities
}

test_token_of_an_admin_account_only_from_admins if {
	token_messages(testdata.ann, token_secret("d", "deployer")) == set()
	token_messages(testdata.alice, token_secret("d", "deployer")) == {
		concat("", [
			`[service-account-token] Secret "d" in namespace "team-a" asks a token for service account `,
			`"team-a/deployer" (annotation kubernetes.io/service-account.name), which tenant "team-a" lists as an `,
			`admin; user "alice" (groups: team-a) is not one of its admins. Fix: use a service account of your own `,
			`tenant, or ask an admin of "team-a" (ann, team-a/deployer) to create the token`,
		]),
	}
}

test_token_of_another_tenants_account_in_this_namespace_is_refused_even_to_its_members if {
	token_messages(testdata.bob, token_secret("r", "runner")) == {
		concat("", [
			`[service-account-token] Secret "r" in namespace "team-a" asks a token for service account "team-a/runner" `,
			`(annotation kubernetes.io/service-account.name), which tenant "team-b" lists as a researcher; namespace `,
			`"team-a" belongs to tenant "team-a", so "team-b"'s identity would be in another tenant's hands. Fix: use `,
			`a service account of your own tenant, or ask an admin of "team-b" (carol) to create the token`,
		]),
	}
}

test_pod_may_run_as_an_unlisted_account if {
	identity_messages(
		"Pod",
		testdata.alice,
		testdata.pod("x", {"serviceAccountName": "trainer", "containers": [testdata.main_container]}),
	) == set()
}

test_pod_as_another_tenants_member_account_is_refused if {
	job := testdata.job("j", 1, {}, {"serviceAccountName": "runner", "containers": [testdata.main_container]})
	violations := secret_scoping.violation with input as testdata.workload_input("Job", "team-a", testdata.alice, job)
		with data.inventory as identities
	violations == {{
		"rule": "service-account-identity",
		"field": "spec.template.spec.serviceAccountName",
		"message": concat("", [
			`[service-account-identity] Job "j" spec.template.spec.serviceAccountName runs as service account `,
			`"team-a/runner", which tenant "team-b" lists as a researcher; namespace "team-a" belongs to tenant `,
			`"team-a", so "team-b"'s identity would be in another tenant's hands. Fix: run the pod as a service `,
			`account no tenant lists as a member (or remove spec.template.spec.serviceAccountName to run as `,
			`"default"), or ask an admin of "team-b" (carol)`,
		]),
	}}
}

test_pod_as_an_admin_account_only_from_admins if {
	pod := testdata.pod("x", {"serviceAccountName": "deployer", "containers": [testdata.main_container]})
	identity_messages("Pod", testdata.ann, pod) == set()
	identity_messages("Pod", testdata.alice, pod) == {
		concat("", [
			`[service-account-identity] Pod "x" spec.serviceAccountName runs as service account "team-a/deployer", `,
			`which tenant "team-a" lists as an admin; user "alice" (groups: team-a) is not one of its admins. Fix: run `,
			`the pod as a service account no tenant lists as a member (or remove spec.serviceAccountName to run as `,
			`"default"), or ask an admin of "team-a" (ann, team-a/deployer)`,
		]),
	}
}

# --- every field that names a Secret ---

test_secret_references_are_found_wherever_the_spec_names_them if {
	pod := testdata.pod("x", {
		"serviceAccountName": "evaluator",
		"volumes": [
			{"name": "csi", "csi": {"driver": "secrets-store.csi.k8s.io", "nodePublishSecretRef": {"name": "registry"}}},
			{"name": "az", "azureFile": {"secretName": "registry", "shareName": "s"}},
			{
				"name": "ceph",
				"cephfs": {"monitors": ["m"], "secretRef": {"name": "registry"}, "secretFile": "/etc/ceph/registry"},
			},
			{"name": "flex", "flexVolume": {"driver": "x/y", "secretRef": {"name": "registry"}}},
			{"name": "rbd", "rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "shared"}}},
		],
		"initContainers": [
			object.union(testdata.main_container, {"name": "init", "envFrom": [{"secretRef": {"name": "registry"}}]}),
		],
		"containers": [testdata.main_container],
	})
	input_doc := object.union(testdata.workload_input("Pod", "team-a", testdata.ann, pod), {"secrets": restricted_secrets})
	violations := secret_scoping.violation with input as input_doc
		with data.inventory as testdata.inventory
	{v.field | some v in violations} == {
		"spec.volumes[0].csi.nodePublishSecretRef.name",
		"spec.volumes[1].azureFile.secretName",
		"spec.volumes[2].cephfs.secretRef.name",
		"spec.volumes[3].flexVolume.secretRef.name",
		"spec.initContainers[0].envFrom[0].secretRef.name",
	}
}

# The walk starts only where the spec's JSON says "secret" in some letter case: a spec whose only
# mention is a capitalised key (imagePullSecrets, a driver's own field) is still walked.
test_secret_references_named_only_by_capitalised_keys_are_found if {
	pod := testdata.pod("x", {
		"serviceAccountName": "evaluator",
		"imagePullSecrets": [{"name": "registry"}],
		"volumes": [{"name": "csi", "csi": {"driver": "d", "NodeStageSECRETRef": {"name": "shared"}}}],
		"containers": [testdata.main_container],
	})
	templates := [{"path": "spec", "spec": pod.spec}]
	{ref.field | some ref in secret_scoping._secret_references(templates[0])} == {
		"spec.imagePullSecrets[0].name",
		"spec.volumes[0].csi.NodeStageSECRETRef.name",
	}
	{ref | some ref in secret_scoping._secret_references({"path": "spec", "spec": testdata.main_container})} == set()
}

# --- secret-restriction ---

restricted_secret(annotations) := {
	"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wandb-key", "annotations": annotations},
}

restriction := {"labgate.io/restricted-to-service-account": "trainer"}

restriction_messages(operation, user, new, old) := {v.message |
	some v in secret_scoping.violation
		with input.request as testdata.request(operation, "Secret", "team-a", user, new, old)
		with input.pod_templates as []
		with data.inventory as testdata.inventory
}

test_researcher_may_not_lift_a_restriction if {
	restriction_messages("UPDATE", testdata.alice, restricted_secret({}), restricted_secret(restriction)) == {
		concat("", [
			`[secret-restriction] user "alice" (groups: team-a) may not change Secret "wandb-key" in namespace `,
			`"team-a": it is restricted to service account "trainer" (annotation `,
			`labgate.io/restricted-to-service-account), and the API hands its data to whoever changes or deletes it. `,
			`Fix: ask an admin of tenant "team-a" (ann)`,
		]),
	}
}

test_researcher_may_not_delete_a_restricted_secret if {
	restriction_messages("DELETE", testdata.alice, null, restricted_secret(restriction)) == {
		concat("", [
			`[secret-restriction] user "alice" (groups: team-a) may not delete Secret "wandb-key" in namespace `,
			`"team-a": it is restricted to service account "trainer" (annotation `,
			`labgate.io/restricted-to-service-account), and the API hands its data to whoever changes or deletes it. `,
			`Fix: ask an admin of tenant "team-a" (ann)`,
		]),
	}
}

test_admin_may_lift_a_restriction_and_researchers_may_add_one if {
	restriction_messages("UPDATE", testdata.ann, restricted_secret({}), restricted_secret(restriction)) == set()
	restriction_messages("UPDATE", testdata.alice, restricted_secret(restriction), restricted_secret({})) == set()
	restriction_messages("DELETE", testdata.alice, null, restricted_secret({})) == set()
}

test_researchers_may_not_mint_tokens_for_a_restricted_service_account if {
	found := secret_scoping.violation
		with input.request as testdata.request(
			"CREATE",
			"Secret",
			"team-a",
			testdata.alice,
			token_secret("t", "trainer"),
			null,
		)
		with input.pod_templates as []
		with input.secrets as restricted_secrets
		with data.inventory as testdata.inventory
	found == {{
		"rule": "restricted-service-account",
		"field": "metadata.annotations[kubernetes.io/service-account.name]",
		"message": concat("", [
			`[restricted-service-account] Secret "t" in namespace "team-a" asks a token for service account "trainer" `,
			`(annotation kubernetes.io/service-account.name), to which Secrets "registry", "wandb-key" are restricted `,
			`(annotation labgate.io/restricted-to-service-account); only admins of tenant "team-a" (ann) may act as `,
			`it, and user "alice" (groups: team-a) is not one. Fix: name another service account, or ask an admin of `,
			`"team-a" (ann) to create the token`,
		]),
	}}
	count(secret_scoping.violation) == 0
		with input.request as testdata.request("CREATE", "Secret", "team-a", testdata.ann, token_secret("t", "trainer"), null)
		with input.pod_templates as []
		with input.secrets as restricted_secrets
		with data.inventory as testdata.inventory
}
