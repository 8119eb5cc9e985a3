package labgate.rules.tenant_membership_test

import data.labgate.lib.testdata
import data.labgate.rules.tenant_membership

test_member_of_tenant_is_allowed if {
	count(tenant_membership.violation) == 0 with input.request as testdata.pod_request("team-a", testdata.alice)
		with data.inventory as testdata.inventory
}

test_admin_user_is_allowed if {
	count(tenant_membership.violation) == 0
		with input.request as testdata.pod_request("team-b", {"username": "carol", "groups": []})
		with data.inventory as testdata.inventory
}

test_member_service_account_is_allowed if {
	user := {
		"username": "system:serviceaccount:ci:runner", "groups": ["system:serviceaccounts", "system:serviceaccounts:ci"],
	}
	count(tenant_membership.violation) == 0 with input.request as testdata.pod_request("team-b", user)
		with data.inventory as testdata.inventory
}

test_service_account_inside_tenant_namespace_is_allowed if {
	user := {
		"username": "system:serviceaccount:team-b:default",
		"groups": ["system:serviceaccounts", "system:serviceaccounts:team-b"],
	}
	count(tenant_membership.violation) == 0 with input.request as testdata.pod_request("team-b", user)
		with data.inventory as testdata.inventory
}

test_controllers_are_trusted if {
	user := {
		"username": "system:serviceaccount:kube-system:job-controller", "groups": ["system:serviceaccounts:kube-system"],
	}
	count(tenant_membership.violation) == 0 with input.request as testdata.pod_request("team-b", user)
		with data.inventory as testdata.inventory
}

test_unlabelled_namespace_is_not_checked if {
	count(tenant_membership.violation) == 0 with input.request as testdata.pod_request("default", testdata.alice)
		with data.inventory as testdata.inventory
}

test_outsider_is_refused_with_rule_who_where_and_fix if {
	violations := tenant_membership.violation with input.request as testdata.pod_request("team-b", testdata.alice)
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "tenant-membership",
		"field": "metadata.namespace",
		"message": concat("", [
			`[tenant-membership] user "alice" (groups: team-a) may not create Pod "train-1" in namespace "team-b": it `,
			`belongs to tenant "team-b" and only its members may. Fix: apply it in a namespace of your own tenant `,
			`(team-a), or ask an admin of "team-b" (carol) to add you`,
		]),
	}}
}

test_viewer_is_refused if {
	violations := tenant_membership.violation
		with input.request as testdata.pod_request("team-a", {"username": "victor", "groups": []})
		with data.inventory as testdata.inventory
	[v.rule | some v in violations] == ["tenant-membership"]
	some v in violations
	contains(v.message, "you are not a member of any tenant")
}

test_namespace_naming_missing_tenant_is_refused if {
	violations := tenant_membership.violation with input.request as testdata.pod_request("orphan", testdata.alice)
		with data.inventory as testdata.inventory
	violations == {{
		"rule": "tenant-unknown",
		"field": "metadata.labels",
		"message": concat("", [
			`[tenant-unknown] namespace "orphan" is labelled labgate.io/tenant="ghost" but no Tenant "ghost" exists, `,
			`so nobody can work there yet. Fix: ask the infra team to create the Tenant or correct the label`,
		]),
	}}
}
