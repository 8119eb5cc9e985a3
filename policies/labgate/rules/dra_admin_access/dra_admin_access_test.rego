package labgate.rules.dra_admin_access_test

import data.labgate.lib.testdata
import data.labgate.rules.dra_admin_access

controller := {"username": "system:serviceaccount:kube-system:resource-claim-controller", "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"]}

claim_kind(kind) := {"group": "resource.k8s.io", "version": "v1", "kind": kind}

gpu_request(extra) := object.union({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}, extra)

claim(requests) := {
	"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "peek"},
	"spec": {"devices": {"requests": requests}},
}

template(requests) := {
	"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "peek"},
	"spec": {"spec": {"devices": {"requests": requests}}},
}

claim_violations(operation, user, obj) := violations if {
	request := object.union(
		testdata.request(operation, "Secret", "team-a", user, obj, null),
		{"kind": claim_kind(obj.kind)},
	)
	violations := dra_admin_access.violation with input as {"request": request, "pod_templates": []}
		with data.inventory as testdata.inventory
}

messages(violations) := {v.message | some v in violations}

why := "admin access reaches devices allocated to other pods, other tenants' included, and no tenant may ask for it"

claim_message(kind, field, request) := sprintf(
	concat("", [
		`[dra-admin-access] %s "peek" %s (request %q) asks adminAccess: true: %s. Fix: remove adminAccess from the `,
		`request; monitoring that needs it is the infra team's`,
	]),
	[kind, field, request, why],
)

test_claims_without_admin_access_are_allowed if {
	count(claim_violations("CREATE", testdata.alice, claim([gpu_request({})]))) == 0
	count(claim_violations(
		"CREATE",
		testdata.alice,
		claim([gpu_request({"exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": false}})]),
	)) == 0
	count(claim_violations("CREATE", testdata.ann, template([gpu_request({})]))) == 0
	count(claim_violations(
		"CREATE",
		testdata.cluster_admin,
		claim([gpu_request({"exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": true}})]),
	)) == 0
}

test_admin_access_claims_and_templates_are_refused_whoever_creates_them if {
	asked := gpu_request({"exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": true}})
	expected := {claim_message("ResourceClaim", "spec.devices.requests[0].exactly", "gpu")}
	messages(claim_violations("CREATE", testdata.alice, claim([asked]))) == expected
	messages(claim_violations("CREATE", testdata.ann, claim([asked]))) == expected
	messages(claim_violations("CREATE", controller, claim([asked]))) == expected
	messages(claim_violations("CREATE", testdata.alice, template([gpu_request({}), asked]))) == {
		claim_message("ResourceClaimTemplate", "spec.spec.devices.requests[1].exactly", "gpu"),
	}

	# v1beta1 puts it on the request itself; firstAvailable subrequests too.
	messages(claim_violations(
		"UPDATE",
		testdata.alice,
		claim([{"name": "old", "deviceClassName": "gpu.nvidia.com", "adminAccess": true}]),
	)) == {claim_message("ResourceClaim", "spec.devices.requests[0]", "old")}
	messages(claim_violations(
		"CREATE",
		testdata.alice,
		claim([{"name": "any", "firstAvailable": [{"name": "small"}, {"name": "big", "adminAccess": true}]}]),
	)) == {claim_message("ResourceClaim", "spec.devices.requests[0].firstAvailable[1]", "any/big")}
}

test_pods_naming_an_admin_access_claim_are_refused if {
	pod := testdata.pod(
		"train-1",
		{
			"containers": [{"name": "main", "image": "i"}],
			"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "peek"}, {"name": "h", "resourceClaimName": "fine"}],
		},
	)
	facts := {
		"ResourceClaimTemplate/peek": {
			"found": true, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"adminAccess": true}}]}},
		},
		"ResourceClaim/fine": {"found": true, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {}}]}}},
	}
	found := dra_admin_access.violation
		with input as object.union(testdata.workload_input("Pod", "team-a", testdata.alice, pod), {"resource_claims": facts})
		with data.inventory as testdata.inventory
	messages(found) == {
		sprintf(
			concat("", [
				`[dra-admin-access] Pod "train-1" spec.resourceClaims names ResourceClaimTemplate "peek", whose request `,
				`"gpu" asks adminAccess: true: %s. Fix: name a claim without adminAccess`,
			]),
			[why],
		),
	}
	clean := dra_admin_access.violation
		with input as object.union(
			testdata.workload_input("Pod", "team-a", testdata.alice, pod),
			{"resource_claims": object.remove(facts, ["ResourceClaimTemplate/peek"])},
		)
		with data.inventory as testdata.inventory
	count(clean) == 0
}
