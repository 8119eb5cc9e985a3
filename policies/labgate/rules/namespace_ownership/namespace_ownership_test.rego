package labgate.rules.namespace_ownership_test

import data.labgate.lib.testdata
import data.labgate.rules.namespace_ownership

namespace(name, labels, annotations) := {
	"apiVersion": "v1",
	"kind": "Namespace",
	"metadata": {"name": name, "labels": labels, "annotations": annotations},
}

create_namespace(user, name, labels) := testdata.request("CREATE", "Namespace", "", user, namespace(name, labels, {}), null)

update_namespace(user, old, new) := testdata.request("UPDATE", "Namespace", "", user, new, old)

violations_for(request) := violations if {
	violations := namespace_ownership.violation with input.request as request
		with input.pod_templates as []
		with data.inventory as testdata.inventory
}

# --- namespace-tenant-member and namespace-prefix (CREATE) ---

test_researcher_creates_namespace_under_prefix if {
	count(violations_for(create_namespace(testdata.alice, "team-a-sweep", {"labgate.io/tenant": "team-a"}))) == 0
}

test_admin_creates_explicitly_named_namespace if {
	count(violations_for(create_namespace(testdata.carol, "team-b", {"labgate.io/tenant": "team-b"}))) == 0
}

test_namespace_of_no_tenant_by_someone_of_no_tenant_is_not_checked if {
	count(violations_for(create_namespace({"username": "ops", "groups": ["ops"]}, "scratch", {"purpose": "play"}))) == 0
}

test_platform_creates_any_tenant_namespace if {
	count(violations_for(create_namespace(testdata.cluster_admin, "odd-name", {"labgate.io/tenant": "team-a"}))) == 0
}

test_viewer_may_not_create_tenant_namespace if {
	violations := violations_for(create_namespace({"username": "victor", "groups": []}, "team-a-x", {"labgate.io/tenant": "team-a"}))
	violations == {{
		"rule": "namespace-tenant-member",
		"field": "metadata.labels",
		"message": `[namespace-tenant-member] user "victor" (groups: ) may not create namespace "team-a-x" labelled labgate.io/tenant="team-a": only admins and researchers of tenant "team-a" may. Fix: you are not a member of any tenant: ask the infra team to add you to one, or ask an admin of "team-a" (ann) to add you`,
	}}
}

test_outsider_may_not_create_namespace_for_another_tenant if {
	violations := violations_for(create_namespace(testdata.alice, "team-b-mine", {"labgate.io/tenant": "team-b"}))
	violations == {
		{
			"rule": "namespace-tenant-member",
			"field": "metadata.labels",
			"message": `[namespace-tenant-member] user "alice" (groups: team-a) may not create namespace "team-b-mine" labelled labgate.io/tenant="team-b": only admins and researchers of tenant "team-b" may. Fix: label it with your own tenant (team-a), or ask an admin of "team-b" (carol) to add you`,
		},
		{
			"rule": "namespace-prefix",
			"field": "metadata.name",
			"message": `[namespace-prefix] namespace "team-b-mine" may not be labelled labgate.io/tenant="team-b": tenant "team-b" allows the names "team-b". Fix: use one of the tenant's names, or ask the infra team to add "team-b-mine" to spec.namespaces.names of Tenant "team-b"`,
		},
	}
}

test_namespace_for_missing_tenant_is_refused if {
	violations := violations_for(create_namespace(testdata.alice, "ghost-1", {"labgate.io/tenant": "ghost"}))
	violations == {{
		"rule": "namespace-tenant-member",
		"field": "metadata.labels",
		"message": `[namespace-tenant-member] user "alice" (groups: team-a) may not create namespace "ghost-1" labelled labgate.io/tenant="ghost": no Tenant "ghost" exists. Fix: label it with your own tenant (team-a), or ask the infra team to create the Tenant`,
	}}
}

test_member_may_not_create_namespace_outside_prefix if {
	violations := violations_for(create_namespace(testdata.alice, "scratch", {"labgate.io/tenant": "team-a"}))
	violations == {{
		"rule": "namespace-prefix",
		"field": "metadata.name",
		"message": `[namespace-prefix] namespace "scratch" may not be labelled labgate.io/tenant="team-a": tenant "team-a" allows names starting with "team-a-" or the names "team-a". Fix: name it "team-a-scratch", or ask the infra team to add "scratch" to spec.namespaces.names of Tenant "team-a"`,
	}}
}

test_tenant_without_namespace_spec_allows_no_names if {
	inventory := json.patch(testdata.inventory, [{"op": "remove", "path": "/tenants/team-b/spec/namespaces"}])
	violations := namespace_ownership.violation with input.request as create_namespace(testdata.bob, "team-b", {"labgate.io/tenant": "team-b"})
		with input.pod_templates as []
		with data.inventory as inventory
	[v.message | some v in violations] == [`[namespace-prefix] namespace "team-b" may not be labelled labgate.io/tenant="team-b": tenant "team-b" allows no namespace names (its spec.namespaces is empty). Fix: use one of the tenant's names, or ask the infra team to add "team-b" to spec.namespaces.names of Tenant "team-b"`]
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

test_researcher_may_not_remove_tenant_label if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a", {}, {})
	violations := violations_for(update_namespace(testdata.alice, old, new))
	violations == {{
		"rule": "tenant-label-protected",
		"field": "metadata.labels",
		"message": `[tenant-label-protected] user "alice" (groups: team-a) may not change label labgate.io/tenant: "team-a" -> (none) on namespace "team-a": labgate.io/ labels and annotations are changed only by admins of tenant "team-a" (ann) and the platform. Fix: leave the labgate.io/ keys as they were, or ask an admin of tenant "team-a" or the infra team to make the change`,
	}}
}

test_researcher_may_not_change_labgate_annotation if {
	old := namespace("team-a", {"labgate.io/tenant": "team-a"}, {"labgate.io/gpu-pool": "a100"})
	new := namespace("team-a", {"labgate.io/tenant": "team-a"}, {"labgate.io/gpu-pool": "h100"})
	[v.field | some v in violations_for(update_namespace(testdata.alice, old, new))] == ["metadata.annotations"]
}

test_admin_of_one_tenant_may_not_hand_namespace_to_another if {
	old := namespace("team-a-data", {"labgate.io/tenant": "team-a"}, {})
	new := namespace("team-a-data", {"labgate.io/tenant": "team-b"}, {})
	violations := violations_for(update_namespace(testdata.ann, old, new))
	violations == {
		{
			"rule": "tenant-label-protected",
			"field": "metadata.labels",
			"message": `[tenant-label-protected] user "ann" (groups: ) may not change label labgate.io/tenant: "team-a" -> "team-b" on namespace "team-a-data": labgate.io/ labels and annotations are changed only by admins of tenant "team-b" (carol) and the platform. Fix: leave the labgate.io/ keys as they were, or ask an admin of tenant "team-b" or the infra team to make the change`,
		},
		{
			"rule": "namespace-prefix",
			"field": "metadata.name",
			"message": `[namespace-prefix] namespace "team-a-data" may not be labelled labgate.io/tenant="team-b": tenant "team-b" allows the names "team-b". Fix: use one of the tenant's names, or ask the infra team to add "team-a-data" to spec.namespaces.names of Tenant "team-b"`,
		},
		{
			"rule": "namespace-reserved",
			"field": "metadata.name",
			"message": `[namespace-reserved] namespace "team-a-data" is reserved for tenant "team-a" (its spec.namespaces.prefix is "team-a-"): only its admins and researchers create it, labelled labgate.io/tenant=team-a. Fix: name it with your tenant's prefix ("team-a-"); labgate labels it, or ask an admin of "team-a" (ann)`,
		},
	}
}

test_claiming_an_unowned_namespace_for_a_missing_tenant_is_refused if {
	old := namespace("ci", {"purpose": "ci"}, {})
	new := namespace("ci", {"purpose": "ci", "labgate.io/tenant": "ghost"}, {})
	[v.message | some v in violations_for(update_namespace(testdata.alice, old, new))] == [`[tenant-label-protected] user "alice" (groups: team-a) may not change label labgate.io/tenant: (none) -> "ghost" on namespace "ci": labgate.io/ labels and annotations are changed only by admins of tenant "ghost" (no Tenant "ghost" exists) and the platform. Fix: leave the labgate.io/ keys as they were, or ask an admin of tenant "ghost" or the infra team to make the change`]
}

test_labgate_keys_on_a_namespace_of_no_tenant_are_for_the_platform if {
	old := namespace("default", {}, {})
	new := namespace("default", {}, {"labgate.io/gpu-pool": "h100"})
	violations := violations_for(update_namespace(testdata.alice, old, new))
	violations == {{
		"rule": "tenant-label-protected",
		"field": "metadata.annotations",
		"message": `[tenant-label-protected] user "alice" (groups: team-a) may not change annotation labgate.io/gpu-pool: (none) -> "h100" on namespace "default": it belongs to no tenant, so only the platform changes its labgate.io/ labels and annotations. Fix: leave the labgate.io/ keys as they were, or ask the infra team to make the change`,
	}}
}

# --- tenant-identity-claim ---

test_object_may_carry_its_own_tenant_label if {
	obj := object.union(testdata.pod("train-1", {"containers": [testdata.main_container]}), {"metadata": {"labels": {"labgate.io/tenant": "team-a"}}})
	count(namespace_ownership.violation) == 0 with input as testdata.workload_input("Pod", "team-a", testdata.alice, obj)
		with data.inventory as testdata.inventory
}

test_unlabelled_object_is_allowed if {
	obj := testdata.pod("train-1", {"containers": [testdata.main_container]})
	count(namespace_ownership.violation) == 0 with input as testdata.workload_input("Pod", "default", testdata.alice, obj)
		with data.inventory as testdata.inventory
}

test_pod_may_not_claim_another_tenant if {
	obj := object.union(testdata.pod("train-1", {"containers": [testdata.main_container]}), {"metadata": {"labels": {"labgate.io/tenant": "team-b"}}})
	violations := namespace_ownership.violation with input as testdata.workload_input("Pod", "team-a", testdata.alice, obj)
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "tenant-identity-claim",
		"field": "metadata.labels",
		"message": `[tenant-identity-claim] Pod "train-1" metadata.labels carries labgate.io/tenant="team-b", but namespace "team-a" belongs to tenant "team-a": an object may not claim another tenant's identity. Fix: remove the labgate.io/tenant label (labgate derives the tenant from the namespace) or set it to "team-a"`,
	}}
}

test_pod_template_may_not_claim_another_tenant if {
	obj := testdata.deployment("web", {"labgate.io/tenant": "team-a"}, {"containers": [testdata.main_container]})
	violations := namespace_ownership.violation with input as testdata.workload_input("Deployment", "default", testdata.alice, obj)
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "tenant-identity-claim",
		"field": "spec.template.metadata.labels",
		"message": `[tenant-identity-claim] Deployment "web" spec.template.metadata.labels carries labgate.io/tenant="team-a", but namespace "default" belongs to no tenant: an object may not claim another tenant's identity. Fix: remove the labgate.io/tenant label (labgate derives the tenant from the namespace)`,
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
	violations := namespace_ownership.violation with input as testdata.workload_input("CronJob", "team-b", testdata.bob, obj)
		with data.inventory as testdata.inventory
	[v.field | some v in violations] == ["spec.jobTemplate.metadata.labels"]
}

test_platform_may_label_objects if {
	obj := object.union(testdata.pod("train-1", {"containers": [testdata.main_container]}), {"metadata": {"labels": {"labgate.io/tenant": "team-b"}}})
	count(namespace_ownership.violation) == 0 with input as testdata.workload_input("Pod", "team-a", testdata.cluster_admin, obj)
		with data.inventory as testdata.inventory
}

test_label_and_annotation_changes_in_a_tenant_without_admins if {
	inventory := json.patch(testdata.inventory, [{"op": "remove", "path": "/tenants/team-b/spec/members/admins"}])
	old := namespace("team-b", {"labgate.io/tenant": "team-b"}, {})
	new := namespace("team-b", {"labgate.io/tenant": "team-b", "labgate.io/tier": "gold"}, {"labgate.io/gpu-pool": "h100"})
	violations := namespace_ownership.violation with input.request as update_namespace(testdata.bob, old, new)
		with input.pod_templates as []
		with data.inventory as inventory
	violations == {{
		"rule": "tenant-label-protected",
		"field": "metadata",
		"message": `[tenant-label-protected] user "bob" (groups: team-b) may not change annotation labgate.io/gpu-pool: (none) -> "h100"; label labgate.io/tier: (none) -> "gold" on namespace "team-b": labgate.io/ labels and annotations are changed only by admins of tenant "team-b" (it lists no admins) and the platform. Fix: leave the labgate.io/ keys as they were, or ask an admin of tenant "team-b" or the infra team to make the change`,
	}}
}

# --- namespace-untenanted, namespace-reserved, namespace-count ---

test_member_may_not_create_a_namespace_of_no_tenant if {
	violations_for(create_namespace(testdata.alice, "scratch", {"purpose": "play"})) == {{
		"rule": "namespace-untenanted",
		"field": "metadata.labels",
		"message": `[namespace-untenanted] user "alice" (groups: team-a) may not create namespace "scratch": it would belong to no tenant, and only the platform creates those. Fix: name it with your tenant's prefix ("team-a-"); labgate labels it, or ask the infra team for a namespace outside the tenants`,
	}}
}

test_name_under_another_tenants_prefix_is_reserved_for_it if {
	# Unlabelled (the mutation labels only for the prefix's own members), by a member of another tenant.
	violations_for(create_namespace(testdata.bob, "team-a-squat", {})) == {{
		"rule": "namespace-reserved",
		"field": "metadata.name",
		"message": `[namespace-reserved] namespace "team-a-squat" is reserved for tenant "team-a" (its spec.namespaces.prefix is "team-a-"): only its admins and researchers create it, labelled labgate.io/tenant=team-a. Fix: label it with your own tenant (team-b), or ask an admin of "team-a" (ann)`,
	}}

	# By someone of no tenant, and for a name a tenant lists.
	[v.rule | some v in violations_for(create_namespace({"username": "ops", "groups": ["ops"]}, "team-b", {}))] == ["namespace-reserved"]
}

test_longest_prefix_reserves_the_name if {
	inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-b/spec/namespaces/prefix", "value": "team-a-b-"}])
	refused := namespace_ownership.violation with input.request as create_namespace(testdata.alice, "team-a-b-x", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as inventory
	[v.rule | some v in refused] == ["namespace-reserved"]
	admitted := namespace_ownership.violation with input.request as create_namespace(testdata.bob, "team-a-b-x", {"labgate.io/tenant": "team-b"})
		with input.pod_templates as []
		with data.inventory as inventory
	count(admitted) == 0
}

test_namespace_count_is_bounded if {
	# team-a has two namespaces (team-a, team-a-data).
	inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-a/spec/namespaces/maxCount", "value": 2}])
	refused := namespace_ownership.violation with input.request as create_namespace(testdata.alice, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as inventory
	refused == {{
		"rule": "namespace-count",
		"field": "metadata.labels",
		"message": `[namespace-count] tenant "team-a" has 2 namespaces, its limit (spec.namespaces.maxCount: 2): namespace "team-a-three" would be number 3. Fix: delete a namespace the tenant no longer needs (kubectl delete namespace <name>), or ask the infra team to raise spec.namespaces.maxCount of Tenant "team-a"`,
	}}

	# The cluster's default applies without maxCount.
	by_default := namespace_ownership.violation with input.request as create_namespace(testdata.alice, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as testdata.inventory
		with data.labgate.config.max_namespaces_per_tenant as 2
	[v.message | some v in by_default] == [`[namespace-count] tenant "team-a" has 2 namespaces, its limit (the cluster's default, 2): namespace "team-a-three" would be number 3. Fix: delete a namespace the tenant no longer needs (kubectl delete namespace <name>), or ask the infra team to raise spec.namespaces.maxCount of Tenant "team-a"`]

	# Under the limit, and the platform beyond it.
	count(namespace_ownership.violation) == 0 with input.request as create_namespace(testdata.alice, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as testdata.inventory
	count(namespace_ownership.violation) == 0 with input.request as create_namespace(testdata.cluster_admin, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as inventory
}
