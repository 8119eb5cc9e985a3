package labgate.rules.tenant_quota_test

import data.labgate.lib.testdata
import data.labgate.rules.tenant_quota

# vision with its own CPU and pod limits; memory from the infra team's default.
_limited := json.patch(
	testdata.gpu_inventory,
	[{"op": "add", "path": "/tenants/vision/spec/limits", "value": {"cpu": "8", "pods": 10}}],
)

_defaults := {"tenant_limits": {"memory": "16Gi", "cpu": "100"}}

_container(name, requests) := object.union(testdata.main_container, {"name": name, "resources": {"requests": requests}})

_pod(name, spec) := testdata.pod(name, spec)

_pod_input(namespace, pod, usage) := object.union(
	testdata.workload_input("Pod", namespace, testdata.vera, pod),
	{"tenant_usage": usage},
)

violations(input_doc) := v if {
	v := tenant_quota.violation with input as input_doc
		with data.inventory as _limited
		with data.labgate.config as object.union(data.labgate.config, _defaults)
}

_two_cpus := _pod("train-7", {"containers": [_container("main", {"cpu": "2", "memory": "1Gi"})]})

test_pod_within_limits_is_allowed if {
	count(violations(_pod_input("vision-eval", _two_cpus, {"cpu": 6000, "memory": 1073741824, "pods": 3}))) == 0
}

test_pod_beyond_cpu_limit_across_namespaces_is_refused if {
	violations(_pod_input("vision-eval", _two_cpus, {"cpu": 6500, "memory": 0, "pods": 3})) == {{
		"rule": "tenant-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[tenant-quota] Pod "train-7" asks 2 CPUs; tenant "vision" uses 6500m of 8 CPUs across its namespaces. `,
			`Fix: lower the request, delete pods you no longer need or wait for running ones to finish, or ask the `,
			`infra team to raise spec.limits.cpu of Tenant "vision"`,
		]),
	}}
}

test_pod_beyond_pod_count_is_refused if {
	violations(_pod_input("vision", _two_cpus, {"cpu": 0, "memory": 0, "pods": 10})) == {{
		"rule": "tenant-quota",
		"field": "spec",
		"message": concat("", [
			`[tenant-quota] Pod "train-7" asks 1 pod; tenant "vision" uses 10 of 10 pods across its namespaces. Fix: `,
			`lower the request, delete pods you no longer need or wait for running ones to finish, or ask the infra `,
			`team to raise spec.limits.pods of Tenant "vision"`,
		]),
	}}
}

test_memory_default_limit_applies if {
	violations(_pod_input("vision", _two_cpus, {"memory": 16642998272})) == {{
		"rule": "tenant-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[tenant-quota] Pod "train-7" asks 1Gi memory; tenant "vision" uses 15872Mi of 16Gi memory across its `,
			`namespaces. Fix: lower the request, delete pods you no longer need or wait for running ones to finish, or `,
			`ask the infra team to raise the default tenant_limits.memory (or set spec.limits.memory of Tenant `,
			`"vision")`,
		]),
	}}
}

test_pod_alone_beyond_the_limit_says_waiting_cannot_help if {
	pod := _pod("huge", {"containers": [_container("main", {"cpu": "9"})]})
	violations(_pod_input("vision", pod, {})) == {{
		"rule": "tenant-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[tenant-quota] Pod "huge" asks 9 CPUs; tenant "vision" uses 0 of 8 CPUs across its namespaces. Fix: ask `,
			`less per pod (the pod alone exceeds the limit, so waiting cannot help), or ask the infra team to raise `,
			`spec.limits.cpu of Tenant "vision"`,
		]),
	}}
}

# The scheduler's count: a native sidecar runs beside the containers, an init container before
# them (with the sidecars declared before it), and the overhead on top.
test_sidecars_init_containers_and_overhead_count_as_the_scheduler_counts if {
	pod := _pod("sneaky", {
		"initContainers": [
			object.union(_container("proxy", {"cpu": "1"}), {"restartPolicy": "Always"}),
			_container("warmup", {"cpu": "6"}),
		],
		"containers": [_container("main", {"cpu": "500m"})],
		"overhead": {"cpu": "250m"},
	})
	tenant_quota.asks(pod.spec, "cpu") == 7250
	violations(_pod_input("vision", pod, {"cpu": 1000})) == {{
		"rule": "tenant-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[tenant-quota] Pod "sneaky" asks 7250m CPU; tenant "vision" uses 1 of 8 CPUs across its namespaces. Fix: `,
			`lower the request, delete pods you no longer need or wait for running ones to finish, or ask the infra `,
			`team to raise spec.limits.cpu of Tenant "vision"`,
		]),
	}}
}

# A container with a limit and no request asks its limit (the apiserver's defaulting).
test_a_limit_without_a_request_counts_as_the_request if {
	tenant_quota.asks({"containers": [{"name": "m", "resources": {"limits": {"cpu": "3"}}}]}, "cpu") == 3000
	tenant_quota.asks(
		{"containers": [{"name": "m", "resources": {"limits": {"cpu": "3"}, "requests": {"cpu": "1"}}}]},
		"cpu",
	) == 1000
}

# A tenant without limits and no defaults is not limited.
test_unlimited_tenant_is_allowed if {
	count(tenant_quota.violation) == 0 with input as _pod_input("speech", _two_cpus, {"cpu": 999000, "pods": 999})
		with data.inventory as _limited
		with data.labgate.config as object.union(data.labgate.config, {"tenant_limits": {}})
}

# Only a Pod being created is counted: an update of a running pod, or a Job, is not.
test_pod_update_and_workloads_are_not_counted if {
	update := object.union(_pod_input("vision", _two_cpus, {"pods": 10}), {"request": {"operation": "UPDATE"}})
	count(violations(update)) == 0
	job := testdata.job("sweep", 4, {}, {"containers": [_container("main", {"cpu": "4"})]})
	count(violations(object.union(testdata.workload_input("Job", "vision", testdata.vera, job), {"tenant_usage": {"pods": 10}}))) == 0
}

# Pod-level resources (spec.resources): the scheduler counts the pod-level request where one is
# set, whatever the containers ask, and the refusal says so.
_pod_level_pod(name, memory) := _pod(name, {
	"containers": [_container("main", {"cpu": "250m", "memory": "256Mi"})],
	"resources": {"requests": {"memory": memory}},
})

test_a_pod_level_request_is_what_the_pod_asks if {
	tenant_quota.asks(_pod_level_pod("big", "900Gi").spec, "memory") == 966367641600
	tenant_quota.asks(_pod_level_pod("big", "900Gi").spec, "cpu") == 250
}

test_a_pod_level_request_beyond_the_limit_is_refused if {
	violations(_pod_input("vision", _pod_level_pod("big", "12Gi"), {"memory": 5368709120})) == {{
		"rule": "tenant-quota",
		"field": "spec.resources",
		"message": concat("", [
			`[tenant-quota] Pod "big" asks 12Gi memory (spec.resources); tenant "vision" uses 5Gi of 16Gi memory `,
			`across its namespaces. Fix: lower the request, delete pods you no longer need or wait for running ones to `,
			`finish, or ask the infra team to raise the default tenant_limits.memory (or set spec.limits.memory of `,
			`Tenant "vision")`,
		]),
	}}
}

test_a_pod_level_request_within_the_limit_is_allowed if {
	count(violations(_pod_input("vision", _pod_level_pod("fits", "10Gi"), {"memory": 5368709120}))) == 0
}

# A pod-level limit alone: the request when no container names the resource (the apiserver's
# defaulting), else the containers' count stands; the overhead comes on top either way.
test_a_pod_level_limit_is_the_request_when_no_container_names_the_resource if {
	spec := {
		"containers": [_container("main", {"cpu": "1"})],
		"resources": {"limits": {"memory": "8Gi", "cpu": "4"}},
		"overhead": {"memory": "1Gi"},
	}
	tenant_quota.asks(spec, "memory") == 9663676416
	tenant_quota.asks(spec, "cpu") == 1000
}
