#!/usr/bin/env bash
# Build the tools pinned in toolchain/versions.env from the Go module proxy.
#
#   toolchain/build.sh             build every tool that is not already in the cache
#   toolchain/build.sh opa etcd    build only these
#   toolchain/build.sh --bin-dirs  print the bin directory of every tool (for PATH), build nothing
#
# Binaries go to $LABGATE_TOOLS_CACHE (default ~/.cache/labgate/tools)/<tool>-<version>/bin and are
# never committed. A tool whose directory holds a .complete stamp is skipped, so a second run takes
# seconds; changing a version in versions.env rebuilds only that tool. Independent tools build in
# parallel ($LABGATE_BUILD_JOBS, default 2) and share Go's build cache.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

cache="${LABGATE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/labgate/tools}"
jobs="${LABGATE_BUILD_JOBS:-2}"
all_tools=(kubernetes kube-proxy kube-router etcd opa regal helm registry crane cosign-v2 cosign-v3 kwok kueue vegeta gatekeeper)

die() { echo "toolchain: error: $*" >&2; exit 1; }

# The staging modules k8s.io/kubernetes replaces with ./staging/src/...; a wrapper module has no
# staging tree, so each is pinned to the published module of the matching release instead.
k8s_staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver)

# The version stamps and staging pins every binary built from k8s.io/kubernetes gets.
kubernetes_build_settings() {
  local minor v m
  minor=${version#v1.}; minor=${minor%%.*}
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor"
    ldflags+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  done
  for m in "${k8s_staging[@]}"; do replaces+="	k8s.io/$m => k8s.io/$m $KUBERNETES_STAGING_VERSION"$'\n'; done
}

# tool_spec NAME sets: version, module, packages, binaries, ldflags, replaces, and the modules a
# tool's tests read files from (go_modules, downloaded into Go's module cache beside the build).
tool_spec() {
  ldflags="-s -w"
  replaces=""
  crd_dir=""
  go_modules=""
  case "$1" in
    kubernetes)
      version=$KUBERNETES_VERSION module=k8s.io/kubernetes
      packages="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl"
      binaries="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
      kubernetes_build_settings
      # Pod Security's own fixtures (test/testdata/<level>/v1.<minor>), which
      # tests/unit/policies/test_pod_security_fixtures.py runs through pod-hardening. Building
      # kube-apiserver downloads it already; named here so the tests do not rest on that.
      go_modules="k8s.io/pod-security-admission@$KUBERNETES_STAGING_VERSION"
      ;;
    kube-proxy)
      # The real node's Service routing (the `node` tests), from the same sources as `kubernetes`;
      # a tool of its own so that adding it never rebuilds the control plane's binaries.
      version=$KUBERNETES_VERSION module=k8s.io/kubernetes
      packages=k8s.io/kubernetes/cmd/kube-proxy binaries=kube-proxy
      kubernetes_build_settings
      ;;
    kube-router)
      # The real node's NetworkPolicy enforcer (the `node` tests), run with --run-firewall only.
      version=$KUBE_ROUTER_VERSION module=github.com/cloudnativelabs/kube-router/v2
      packages=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router binaries=kube-router
      ldflags+=" -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$version" ;;
    etcd)
      version=$ETCD_VERSION module=go.etcd.io/etcd/server/v3
      packages=go.etcd.io/etcd/server/v3 binaries=etcd ;;
    opa)
      version=$OPA_VERSION module=github.com/open-policy-agent/opa
      packages=github.com/open-policy-agent/opa binaries=opa
      ldflags+=" -X github.com/open-policy-agent/opa/v1/version.Version=${version#v}" ;;
    regal)
      version=$REGAL_VERSION module=github.com/open-policy-agent/regal
      packages=github.com/open-policy-agent/regal binaries=regal
      ldflags+=" -X github.com/open-policy-agent/regal/pkg/version.Version=${version#v}" ;;
    helm)
      version=$HELM_VERSION module=helm.sh/helm/v3
      packages=helm.sh/helm/v3/cmd/helm binaries=helm
      ldflags+=" -X helm.sh/helm/v3/internal/version.version=$version" ;;
    registry)
      version=$REGISTRY_VERSION module=github.com/distribution/distribution/v3
      packages=github.com/distribution/distribution/v3/cmd/registry binaries=registry ;;
    crane)
      version=$CRANE_VERSION module=github.com/google/go-containerregistry
      packages=github.com/google/go-containerregistry/cmd/crane binaries=crane ;;
    cosign-v2)
      version=$COSIGN_V2_VERSION module=github.com/sigstore/cosign/v2
      packages=github.com/sigstore/cosign/v2/cmd/cosign binaries=cosign
      ldflags+=" -X sigs.k8s.io/release-utils/version.gitVersion=$version" ;;
    cosign-v3)
      version=$COSIGN_V3_VERSION module=github.com/sigstore/cosign/v3
      packages=github.com/sigstore/cosign/v3/cmd/cosign binaries=cosign
      ldflags+=" -X sigs.k8s.io/release-utils/version.gitVersion=$version" ;;
    kwok)
      # KWOK simulates nodes and pod lifecycles for the scheduler-backed cluster tests.
      version=$KWOK_VERSION module=sigs.k8s.io/kwok
      packages=sigs.k8s.io/kwok/cmd/kwok binaries=kwok
      ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${version#v}" ;;
    kueue)
      # Kueue, run out of cluster by the stack; its CRDs are copied from the module beside the binary.
      version=$KUEUE_VERSION module=sigs.k8s.io/kueue
      packages=sigs.k8s.io/kueue/cmd/kueue binaries=kueue crd_dir=config/components/crd/bases
      ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" ;;
    vegeta)
      version=$VEGETA_VERSION module=github.com/tsenart/vegeta/v12
      packages=github.com/tsenart/vegeta/v12 binaries=vegeta ;;
    gatekeeper)
      # Gatekeeper run out of cluster, only as the benchmarks' reference webhook.
      version=$GATEKEEPER_VERSION module=github.com/open-policy-agent/gatekeeper/v3
      packages=github.com/open-policy-agent/gatekeeper/v3 binaries=gatekeeper ;;
    *) die "unknown tool '$1' (known: ${all_tools[*]})" ;;
  esac
}

tool_dir() { tool_spec "$1"; echo "$cache/$1-$version"; }
# Built means stamped and every expected binary present, so adding a binary to a tool rebuilds it.
is_built() {
  local dir b
  dir=$(tool_dir "$1")
  [ -f "$dir/.complete" ] || return 1
  for b in $binaries; do [ -x "$dir/bin/$b" ] || return 1; done
}

if [ "${1:-}" = "--bin-dirs" ]; then
  for t in "${all_tools[@]}"; do echo "$(tool_dir "$t")/bin"; done
  exit 0
fi

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${all_tools[@]}")
todo=()
for t in "${wanted[@]}"; do
  tool_spec "$t"
  if is_built "$t"; then echo "toolchain: ✓ $t $version (cached in $(tool_dir "$t"))"; else todo+=("$t"); fi
done
[ ${#todo[@]} -gt 0 ] || exit 0

# Preflight: fail early and clearly when Go or the module proxy cannot be had.
command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH; install Go >= 1.24 (apt-get install golang, or see go.dev)"
go_version=$(go env GOVERSION)
echo "toolchain: $go_version, GOPROXY=$(go env GOPROXY), cache $cache"
tool_spec "${todo[0]}"
if ! probe=$(cd /tmp && timeout 90 go list -m -json "$module@$version" 2>&1); then
  die "cannot reach the Go module proxy ($(go env GOPROXY)) to fetch $module@$version: ${probe##*$'\n'}"
fi

mkdir -p "$cache/logs"
go_directive=$(echo "$go_version" | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')

build_one() {  # runs in a subshell; output goes to the tool's log
  local name=$1 dir work pkg
  tool_spec "$name"
  dir="$cache/$name-$version"
  # One build of a tool at a time, whoever started it (make, a test's ensure_tools, a second shell):
  # wait for the other, then use what it built.
  exec 9>"$cache/.lock-$name-$version"
  if ! flock -n 9; then
    echo "+ another build of $name $version is running; waiting for it"
    flock 9
  fi
  if is_built "$name"; then echo "+ built meanwhile by the other build"; return 0; fi
  work="$cache/work/$name-$version"
  rm -rf "$work" && mkdir -p "$work/bin"
  cd "$work"
  {
    echo "module labgate.local/toolchain/$name"
    echo
    echo "go $go_directive"
    if [ -n "$replaces" ]; then printf 'replace (\n%s)\n' "$replaces"; fi
  } >go.mod
  local get_args=()
  for pkg in $packages; do get_args+=("$pkg@$version"); done
  echo "+ go get ${get_args[*]}"
  go get "${get_args[@]}"
  # One package: name the binary (etcd's main package would otherwise be called "server").
  local out="$work/bin/"
  [ "$(wc -w <<<"$packages")" -gt 1 ] || out="$work/bin/$binaries"
  echo "+ go build -o $out $packages"
  # shellcheck disable=SC2086
  CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out" $packages
  local b
  for b in $binaries; do [ -x "$work/bin/$b" ] || { echo "expected binary $b was not built"; return 1; }; done
  rm -rf "$dir" && mkdir -p "$dir"
  mv "$work/bin" "$dir/bin"
  if [ -n "$crd_dir" ]; then
    local src
    src="$(go list -mod=mod -m -f '{{.Dir}}' "$module")/$crd_dir"
    echo "+ copy CRDs from $src"
    mkdir -p "$dir/crds" && cp "$src"/*.yaml "$dir/crds/"
  fi
  if [ -n "$go_modules" ]; then
    echo "+ go mod download $go_modules"
    # shellcheck disable=SC2086
    go mod download $go_modules
  fi
  echo "$version built by $go_version on $(date -u +%FT%TZ)" >"$dir/.complete"
  rm -rf "$work"
}

declare -A pid_of=() start_of=()
failed=()
started=$(date +%s)
pending=("${todo[@]}")
last_report=$started

reap() {  # collect finished builds
  local t rc
  for t in "${!pid_of[@]}"; do
    if ! kill -0 "${pid_of[$t]}" 2>/dev/null; then
      rc=0; wait "${pid_of[$t]}" || rc=$?
      tool_spec "$t"
      if [ $rc -eq 0 ]; then
        echo "toolchain: ✓ $t $version built in $(( $(date +%s) - ${start_of[$t]} ))s"
      else
        echo "toolchain: ✗ $t $version failed (exit $rc); last lines of $cache/logs/$t-$version.log:" >&2
        tail -n 25 "$cache/logs/$t-$version.log" >&2
        [ ! -s "$cache/logs/$t-$version.waiting.log" ] || tail -n 5 "$cache/logs/$t-$version.waiting.log" >&2
        failed+=("$t")
      fi
      unset "pid_of[$t]"
    fi
  done
}

while [ ${#pending[@]} -gt 0 ] || [ ${#pid_of[@]} -gt 0 ]; do
  while [ ${#pending[@]} -gt 0 ] && [ ${#pid_of[@]} -lt "$jobs" ]; do
    t=${pending[0]}; pending=("${pending[@]:1}")
    tool_spec "$t"
    log="$cache/logs/$t-$version.log"
    if ! flock -n "$cache/.lock-$t-$version" true 2>/dev/null; then
      # Another build (another make, a test's ensure_tools) holds the tool: wait for it, and leave
      # its log whole (this run's lines go to a log of their own).
      echo "toolchain: … $t $version is being built by another process (its log: $log); waiting for it"
      log="$cache/logs/$t-$version.waiting.log"
    else
      echo "toolchain: → building $t $version (log: $log)"
    fi
    ( build_one "$t" ) >"$log" 2>&1 &
    pid_of[$t]=$!
    start_of[$t]=$(date +%s)
  done
  sleep 2
  reap
  now=$(date +%s)
  if [ $(( now - last_report )) -ge 30 ] && [ ${#pid_of[@]} -gt 0 ]; then
    line=""
    for t in "${!pid_of[@]}"; do line+=" $t $(( now - ${start_of[$t]} ))s;"; done
    echo "toolchain: … still building:$line ${#pending[@]} waiting; $(( now - started ))s elapsed"
    last_report=$now
  fi
done

if [ ${#failed[@]} -gt 0 ]; then die "failed to build: ${failed[*]}"; fi
echo "toolchain: all requested tools built in $(( $(date +%s) - started ))s"
