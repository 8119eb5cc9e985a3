package labgate.rules.dra_claim_in_use_test

import data.labgate.lib.testdata
import data.labgate.rules.dra_claim_in_use

claim_kind(kind) := {"group": "resource.k8s.io", "version": "v1", "kind": kind}

claim(kind) := {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": "gpus"}, "spec": {}}

found(operation, user, kind, users) := violations if {
	request := object.union(
		testdata.request(operation, "Secret", "team-a", user, _new(operation, kind), _old(operation, kind)),
		{"kind": claim_kind(kind)},
	)
	violations := dra_claim_in_use.violation with input as {"request": request, "pod_templates": [], "claim_users": users}
		with data.inventory as testdata.inventory
}

_new("DELETE", _) := null

_new(operation, kind) := claim(kind) if operation != "DELETE"

_old("DELETE", kind) := claim(kind)

_old(operation, _) := null if operation != "DELETE"

messages(violations) := {v.message | some v in violations}

waiting := {"name": "train-1", "field": "spec.resourceClaims[0]", "phase": "Pending", "is_deleting": false}

done := {"name": "old-run", "field": "spec.resourceClaims[0]", "phase": "Succeeded", "is_deleting": false}

going := {"name": "leaving", "field": "spec.resourceClaims[1]", "phase": "Running", "is_deleting": true}

delete_why := concat("", [
	"deleting it would let a claim of the same name, asking other devices, be allocated to them without being ",
	"judged against the GPU quota",
])

create_why := concat("", [
	"they were judged against the claim they named when admitted (or against none), and the scheduler would ",
	"allocate what this one asks without it being judged against the GPU quota",
])

test_claims_no_live_pod_names_may_be_deleted_and_created if {
	count(found("DELETE", testdata.alice, "ResourceClaim", {"pods": []})) == 0
	count(found("DELETE", testdata.alice, "ResourceClaim", {"pods": [done, going]})) == 0
	count(found("CREATE", testdata.alice, "ResourceClaim", {"pods": [done]})) == 0
	count(found("DELETE", testdata.ann, "ResourceClaimTemplate", {"pods": []})) == 0

	# Without the fact (a request the webhook gathers nothing for) nothing is found.
	count(dra_claim_in_use.violation) == 0
		with input as {
			"request": object.union(
				testdata.request("DELETE", "Secret", "team-a", testdata.alice, null, claim("ResourceClaim")),
				{"kind": claim_kind("ResourceClaim")},
			),
			"pod_templates": [],
		}
		with data.inventory as testdata.inventory

	# The platform (the namespace controller, the claim controller) is never refused.
	count(found("DELETE", testdata.cluster_admin, "ResourceClaim", {"pods": [waiting]})) == 0
}

expected_delete(user) := sprintf(
	concat("", [
		`[dra-claim-in-use] user %s may not delete ResourceClaim "gpus" in namespace "team-a": pod "train-1" names `,
		`it (train-1 spec.resourceClaims[0]) and has not finished; %s. Fix: delete pod "train-1" first (kubectl `,
		`delete pod train-1 -n team-a) or wait for it to finish, then delete the ResourceClaim`,
	]),
	[user, delete_why],
)

test_deleting_a_claim_a_live_pod_names_is_refused_for_researchers_and_admins if {
	messages(found("DELETE", testdata.alice, "ResourceClaim", {"pods": [waiting, done]})) == {
		expected_delete(`"alice" (groups: team-a)`),
	}
	messages(found("DELETE", testdata.ann, "ResourceClaim", {"pods": [waiting]})) == {expected_delete(`"ann"`)}
}

test_creating_a_claim_again_under_a_name_live_pods_use_is_refused if {
	second := {"name": "eval-2", "field": "spec.resourceClaims[0]", "phase": "Pending", "is_deleting": false}
	messages(found("CREATE", testdata.alice, "ResourceClaimTemplate", {"pods": [waiting, second]})) == {
		sprintf(
			concat("", [
				`[dra-claim-in-use] user "alice" (groups: team-a) may not create ResourceClaimTemplate "gpus" in `,
				`namespace "team-a": pods "eval-2", "train-1" name it (eval-2 spec.resourceClaims[0], train-1 `,
				`spec.resourceClaims[0]) and have not finished; %s. Fix: delete pods "eval-2", "train-1" first (kubectl `,
				`delete pod eval-2 train-1 -n team-a) or wait for them to finish, then create the ResourceClaimTemplate`,
			]),
			[create_why],
		),
	}
}

test_a_claim_whose_users_could_not_be_listed_is_refused if {
	messages(found("DELETE", testdata.alice, "ResourceClaim", {"error": "the API answered 503 Service Unavailable"})) == {
		concat("", [
			`[dra-claim-in-use] user "alice" (groups: team-a) may not delete ResourceClaim "gpus" in namespace `,
			`"team-a" now: labgate could not list the pods of namespace "team-a" to see whether a live pod names it `,
			`(the API answered 503 Service Unavailable). Fix: retry; if it persists, tell the infra team`,
		]),
	}
}
