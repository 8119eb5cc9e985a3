#!/usr/bin/env bash
# labgate: the Debian packages the `image` tests and `make run --image` need (building the container
# image without Docker, and running it with containerd): debootstrap, umoci, containerd, runc; and
# what the `node` tests' real node needs beside containerd and runc: the reference CNI plugins
# (containernetworking-plugins), iptables and ipset (pod networking inside the node's network
# namespace), gcc and libc6-dev (the pod sandbox's pause, compiled statically from the Kubernetes sources).
#
# Installs the missing ones with apt where that is possible (root, apt-get present, not turned off
# with LABGATE_NO_APT=1); otherwise says which are missing and that the `image` and `node` tests will
# be skipped with that reason. Never fails the build: each is one capability among many.
set -u

packages=(debootstrap umoci containerd runc containernetworking-plugins iptables ipset gcc libc6-dev)
# The program or file each package brings (what the tests look for).
declare -A program=([debootstrap]=debootstrap [umoci]=umoci [containerd]=containerd [runc]=runc
  [containernetworking-plugins]=/usr/lib/cni/bridge [iptables]=iptables [ipset]=ipset [gcc]=gcc
  [libc6-dev]=/usr/lib/x86_64-linux-gnu/libc.a)

missing=()
for pkg in "${packages[@]}"; do
  case "${program[$pkg]}" in
    /*) [ -e "${program[$pkg]}" ] || missing+=("$pkg") ;;
    *) command -v "${program[$pkg]}" >/dev/null 2>&1 || missing+=("$pkg") ;;
  esac
done
[ ${#missing[@]} -eq 0 ] && exit 0

why=""
if [ "${LABGATE_NO_APT:-}" = 1 ]; then
  why="LABGATE_NO_APT=1"
elif [ "$(id -u)" != 0 ]; then
  why="not root"
elif ! command -v apt-get >/dev/null 2>&1; then
  why="no apt-get on this machine"
fi
if [ -n "$why" ]; then
  echo "debian-packages: ${missing[*]} missing and not installed ($why); the image and node tests that need them will be skipped" >&2
  exit 0
fi

echo "debian-packages: installing ${missing[*]} (for the image and node tests) with apt-get"
log=$(mktemp)
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >"$log" 2>&1 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
  echo "debian-packages: installed ${missing[*]}"
else
  echo "debian-packages: apt-get could not install ${missing[*]}; the image and node tests that need them will be skipped. Its output:" >&2
  tail -n 20 "$log" >&2
fi
rm -f "$log"
exit 0
