package labgate.rules.tenant_identity_test

import data.labgate.lib.testdata
import data.labgate.rules.namespace as namespace_rules
import data.labgate.rules.tenant_identity

namespace(name, labels, annotations) := {
	"apiVersion": "v1",
	"kind": "Namespace",
	"metadata": {"name": name, "labels": labels, "annotations": annotations},
}

create_namespace(user, name, labels) := testdata.request(
	"CREATE",
	"Namespace",
	"",
	user,
	namespace(name, labels, {}),
	null,
)

update_namespace(user, old, new) := testdata.request("UPDATE", "Namespace", "", user, new, old)

# Both rule packages about namespaces and labgate's labels: each test pins what they find together,
# as before they were split by concern.
namespace_violations := namespace_rules.violation | tenant_identity.violation

violations_for(request) := violations if {
	violations := namespace_violations with input.request as request
		with input.pod_templates as []
		with data.inventory as testdata.inventory
}

# --- tenant-label-protected (UPDATE) ---

test_member_changes_ordinary_labels if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a", {"labgate.io/tenant": "team-a", "purpose": "training"}, {"note": "hi"})
	count(violations_for(update_namespace(testdata.alice, old, new))) == 0
}

test_admin_changes_labgate_annotation if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a", {"labgate.io/tenant": "team-a"}, {"labgate.io/gpu-pool": "h100"})
	count(violations_for(update_namespace(testdata.ann, old, new))) == 0
}

test_platform_moves_namespace_between_tenants if {
	old := namespace("team-a-data", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a-data", {"labgate.io/tenant": "team-b"}, {})
	count(violations_for(update_namespace(testdata.cluster_admin, old, new))) == 0
}

release_message(user) := concat("", [
	`[namespace-release] user `, user, ` may not remove label labgate.io/tenant="team-a" from namespace "team-a": `,
	`without it the namespace leaves tenant "team-a"'s quotas and labgate's admission, while the pods and `,
	`workloads in it run on. Fix: keep the label; to give the namespace up, delete it once its work is done, or `,
	`ask the infra team to release it or move it to another tenant`,
])

test_researcher_may_not_remove_tenant_label if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a", {}, {})
	violations := violations_for(update_namespace(testdata.alice, old, new))
	violations == {{
		"rule": "namespace-release",
		"field": "metadata.labels",
		"message": release_message(`"alice" (groups: team-a)`),
	}}
}

# Its admin neither: the namespace's pods and controllers would run on outside the tenant's quotas
# (the webhook's recount lists the pods of the tenant's namespaces only) and outside admission.
test_admin_may_not_take_namespace_out_of_every_tenant if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a", "purpose": "training"}, {})
	new := namespace("team-a", {"purpose": "training"}, {})
	violations := violations_for(update_namespace(testdata.ann, old, new))
	violations == {{"rule": "namespace-release", "field": "metadata.labels", "message": release_message(`"ann"`)}}
}

# The legitimate actions beside it: the platform releases it; an admin changes other labels, and
# the namespace keeps its tenant. An empty label value is a move to a tenant that does not exist:
# refused as a move out of the tenant.
test_platform_releases_a_namespace if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a", {}, {})
	count(violations_for(update_namespace(testdata.cluster_admin, old, new))) == 0
}

test_admin_relabels_a_namespace_that_keeps_its_tenant if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a", "purpose": "training"}, {})
	new := namespace("team-a", {"labgate.io/tenant": "team-a"}, {})
	count(violations_for(update_namespace(testdata.ann, old, new))) == 0
}

test_an_empty_tenant_label_is_a_move_out_of_the_tenant if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a", {"labgate.io/tenant": ""}, {})

	# (and the name team-a lists, now labelled for no tenant of its own: namespace-reserved)
	rules := sort([v.rule | some v in violations_for(update_namespace(testdata.ann, old, new))])
	rules == ["namespace-release", "namespace-reserved"]
}

test_researcher_may_not_change_labgate_annotation if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {"labgate.io/gpu-pool": "a100"})
	new := namespace("team-a", {"labgate.io/tenant": "team-a"}, {"labgate.io/gpu-pool": "h100"})
	violations_for(update_namespace(testdata.alice, old, new)) == {{
		"rule": "tenant-label-protected",
		"field": "metadata.annotations",
		"message": concat("", [
			`[tenant-label-protected] user "alice" (groups: team-a) may not change annotation labgate.io/gpu-pool: `,
			`"a100" -> "h100" on namespace "team-a": labgate.io/ labels and annotations are changed only by admins `,
			`of tenant "team-a" (ann) and the platform. Fix: leave the labgate.io/ keys as they were, or ask an `,
			`admin of tenant "team-a" or the infra team to make the change`,
		]),
	}}
}

move_message := concat("", [
	`[namespace-release] user "ann" may not change label labgate.io/tenant of namespace "team-a-data" from `,
	`"team-a" to "team-b": the namespace would leave tenant "team-a"'s quotas and join tenant "team-b"'s with no `,
	`quota check, while the pods and workloads in it run on. Fix: keep the label; to give the namespace up, `,
	`delete it once its work is done, or ask the infra team to release it or move it to another tenant`,
])

test_admin_of_one_tenant_may_not_hand_namespace_to_another if {
	old := namespace("team-a-data", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a-data", {"labgate.io/tenant": "team-b"}, {})
	violations := violations_for(update_namespace(testdata.ann, old, new))
	violations == {
		{
			"rule": "namespace-release",
			"field": "metadata.labels",
			"message": move_message,
		},
		{
			"rule": "namespace-prefix",
			"field": "metadata.name",
			"message": concat("", [
				`[namespace-prefix] namespace "team-a-data" may not be labelled labgate.io/tenant="team-b": tenant `,
				`"team-b" allows the names "team-b". Fix: use one of the tenant's names, or ask the infra team to add `,
				`"team-a-data" to spec.namespaces.names of Tenant "team-b"`,
			]),
		},
		{
			"rule": "namespace-reserved",
			"field": "metadata.name",
			"message": concat("", [
				`[namespace-reserved] namespace "team-a-data" is reserved for tenant "team-a" (its spec.namespaces.prefix `,
				`is "team-a-"): only its admins and researchers create it, labelled labgate.io/tenant=team-a. Fix: name `,
				`it with your tenant's prefix ("team-a-"); labgate labels it, or ask an admin of "team-a" (ann)`,
			]),
		},
	}
}

# Nor the admin of both tenants: the namespace's running pods would join team-b's count unchecked,
# and team-a's quota would be free to fill again.
test_admin_of_both_tenants_may_not_move_a_namespace if {
	old := namespace("team-a-data", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a-data", {"labgate.io/tenant": "team-b"}, {})
	both := json.patch(testdata.inventory, [{
		"op": "add", "path": "/tenants/team-b/spec/members/admins/-",
		"value": {"kind": "User", "name": "ann"},
	}])
	violations := namespace_violations with input.request as update_namespace(testdata.ann, old, new)
		with input.pod_templates as []
		with data.inventory as both
	[v.message | some v in violations; v.rule == "namespace-release"] == [move_message]
	[v.rule | some v in violations; v.rule == "tenant-label-protected"] == []
}

test_claiming_an_unowned_namespace_for_a_missing_tenant_is_refused if {
	old := namespace("ci", {"purpose": "ci"}, {})
	new := namespace("ci", {"purpose": "ci", "labgate.io/tenant": "ghost"}, {})
	[v.message | some v in violations_for(update_namespace(testdata.alice, old, new))] == [
		concat("", [
			`[tenant-label-protected] user "alice" (groups: team-a) may not change label labgate.io/tenant: (none) -> `,
			`"ghost" on namespace "ci": labgate.io/ labels and annotations are changed only by admins of tenant `,
			`"ghost" (no Tenant "ghost" exists) and the platform. Fix: leave the labgate.io/ keys as they were, or ask `,
			`an admin of tenant "ghost" or the infra team to make the change`,
		]),
	]
}

test_labgate_keys_on_a_namespace_of_no_tenant_are_for_the_platform if {
	old := namespace("default", {}, {})
	new := namespace("default", {}, {"labgate.io/gpu-pool": "h100"})
	violations := violations_for(update_namespace(testdata.alice, old, new))
	violations == {{
		"rule": "tenant-label-protected",
		"field": "metadata.annotations",
		"message": concat("", [
			`[tenant-label-protected] user "alice" (groups: team-a) may not change annotation labgate.io/gpu-pool: `,
			`(none) -> "h100" on namespace "default": it belongs to no tenant, so only the platform changes its `,
			`labgate.io/ labels and annotations. Fix: leave the labgate.io/ keys as they were, or ask the infra team `,
			`to make the change`,
		]),
	}}
}

# --- tenant-identity-claim ---

test_object_may_carry_its_own_tenant_label if {
	obj := object.union(
		testdata.pod("train-1", {"containers": [testdata.main_container]}),
		{"metadata": {"labels": {"labgate.io/tenant": "team-a"}}},
	)
	count(namespace_violations) == 0 with input as testdata.workload_input("Pod", "team-a", testdata.alice, obj)
		with data.inventory as testdata.inventory
}

test_unlabelled_object_is_allowed if {
	obj := testdata.pod("train-1", {"containers": [testdata.main_container]})
	count(namespace_violations) == 0 with input as testdata.workload_input("Pod", "default", testdata.alice, obj)
		with data.inventory as testdata.inventory
}

test_pod_may_not_claim_another_tenant if {
	obj := object.union(
		testdata.pod("train-1", {"containers": [testdata.main_container]}),
		{"metadata": {"labels": {"labgate.io/tenant": "team-b"}}},
	)
	violations := namespace_violations with input as testdata.workload_input("Pod", "team-a", testdata.alice, obj)
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "tenant-identity-claim",
		"field": "metadata.labels",
		"message": concat("", [
			`[tenant-identity-claim] Pod "train-1" metadata.labels carries labgate.io/tenant="team-b", but namespace `,
			`"team-a" belongs to tenant "team-a": an object may not claim another tenant's identity. Fix: remove the `,
			`labgate.io/tenant label (labgate derives the tenant from the namespace) or set it to "team-a"`,
		]),
	}}
}

test_pod_template_may_not_claim_another_tenant if {
	obj := testdata.deployment("web", {"labgate.io/tenant": "team-a"}, {"containers": [testdata.main_container]})
	violations := namespace_violations with input as testdata.workload_input("Deployment", "default", testdata.alice, obj)
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "tenant-identity-claim",
		"field": "spec.template.metadata.labels",
		"message": concat("", [
			`[tenant-identity-claim] Deployment "web" spec.template.metadata.labels carries `,
			`labgate.io/tenant="team-a", but namespace "default" belongs to no tenant: an object may not claim another `,
			`tenant's identity. Fix: remove the labgate.io/tenant label (labgate derives the tenant from the namespace)`,
		]),
	}}
}

test_cronjob_job_template_labels_are_checked if {
	obj := {
		"apiVersion": "batch/v1",
		"kind": "CronJob",
		"metadata": {"name": "nightly"},
		"spec": {"jobTemplate": {
			"metadata": {"labels": {"labgate.io/tenant": "team-a"}},
			"spec": {"template": {"spec": {"containers": [testdata.main_container]}}},
		}},
	}
	violations := namespace_violations with input as testdata.workload_input("CronJob", "team-b", testdata.bob, obj)
		with data.inventory as testdata.inventory
	[v.field | some v in violations] == ["spec.jobTemplate.metadata.labels"]
}

test_platform_may_label_objects if {
	obj := object.union(
		testdata.pod("train-1", {"containers": [testdata.main_container]}),
		{"metadata": {"labels": {"labgate.io/tenant": "team-b"}}},
	)
	count(namespace_violations) == 0 with input as testdata.workload_input("Pod", "team-a", testdata.cluster_admin, obj)
		with data.inventory as testdata.inventory
}

test_label_and_annotation_changes_in_a_tenant_without_admins if {
	inventory := json.patch(testdata.inventory, [{"op": "remove", "path": "/tenants/team-b/spec/members/admins"}])
	old := namespace("team-b", {"labgate.io/tenant": "team-b"}, {})
	new := namespace("team-b", {"labgate.io/tenant": "team-b", "labgate.io/tier": "gold"}, {"labgate.io/gpu-pool": "h100"})
	violations := namespace_violations with input.request as update_namespace(testdata.bob, old, new)
		with input.pod_templates as []
		with data.inventory as inventory
	violations == {{
		"rule": "tenant-label-protected",
		"field": "metadata",
		"message": concat("", [
			`[tenant-label-protected] user "bob" (groups: team-b) may not change annotation labgate.io/gpu-pool: `,
			`(none) -> "h100"; label labgate.io/tier: (none) -> "gold" on namespace "team-b": labgate.io/ labels and `,
			`annotations are changed only by admins of tenant "team-b" (it lists no admins) and the platform. Fix: `,
			`leave the labgate.io/ keys as they were, or ask an admin of tenant "team-b" or the infra team to make the `,
			`change`,
		]),
	}}
}
