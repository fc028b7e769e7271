#!/usr/bin/env bash
# Builds the pinned control plane the real-plane tests run — kube-apiserver,
# kube-controller-manager and kubectl of Kubernetes v1.36.3, and the etcd that
# release requires — from the Go module in tools/kubernetes/, and the real
# OpenShift MachineHealthCheck controller from tools/machine-healthcheck/, into a
# cache outside the work tree keyed by what decides the binaries (the modules'
# go.mod and go.sum, and the Go toolchain). A second run finds them and builds
# nothing.
#
#   bash scripts/kubernetes.sh          # prints the folder that holds the binaries, last
#
# BAREMEND_KUBE_CACHE overrides the cache's root (default ~/.cache/baremend/kubernetes).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
module=tools/kubernetes
mhc_module=tools/machine-healthcheck

die() {
    printf '\nkubernetes.sh: FAILED: %s\n' "$*" >&2
    exit 1
}

command -v go >/dev/null \
    || die "go not found: the real control plane is built from its Go modules (Go 1.26 or newer, with the Go module proxy reachable)"

kube_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$module/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$module/go.sum")
[[ -n $kube_version && -n $etcd_version ]] || die "cannot read the pinned versions from $module/go.mod and go.sum"
go_version=$(go env GOVERSION)
key=$(cat "$module/go.mod" "$module/go.sum" "$mhc_module/go.mod" "$mhc_module/go.sum" <(echo "$go_version") \
    | sha256sum | cut -c1-12)
root=${BAREMEND_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/baremend/kubernetes}
dir=$root/$kube_version-etcd$etcd_version-$key

# What each binary reports as its version: without these, /version says v0.0.0-master.
major=${kube_version#v}
minor=${major#*.}
major=${major%%.*}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
done

build() {
    local name=$1 pkg=$2 flags=$3 from=${4:-$module} started elapsed
    if [[ -x $dir/$name ]]; then
        echo "$name: cached ($dir/$name)"
        return
    fi
    echo "$name: building $pkg ..."
    started=$SECONDS
    # Upstream's flags: static, no test code, SELinux labels compiled in.
    (cd "$from" && CGO_ENABLED=0 go build -mod=readonly -trimpath -tags selinux,notest \
        -ldflags "$flags" -o "$dir/.$name.partial" "$pkg") \
        || die "go build $pkg failed (is the Go module proxy reachable? 'go env GOPROXY' says $(go env GOPROXY))"
    mv "$dir/.$name.partial" "$dir/$name"
    elapsed=$((SECONDS - started))
    printf '%s: built in %dm%02ds\n' "$name" $((elapsed / 60)) $((elapsed % 60))
}

mkdir -p "$dir"
echo "Kubernetes $kube_version, etcd $etcd_version, $go_version -> $dir"
build etcd go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags"
build kubectl k8s.io/kubernetes/cmd/kubectl "$ldflags"
build machine-healthcheck github.com/openshift/machine-api-operator/cmd/machine-healthcheck "-s -w" "$mhc_module"
# Read whole before matching: `grep -q` would stop reading at the first match, and under
# pipefail kubectl's broken pipe would fail the check at random.
reported=$("$dir/kubectl" version --client 2>/dev/null || true)
[[ $reported == *"$kube_version"* ]] || die "$dir/kubectl does not report $kube_version (it says: $reported)"
echo "$dir"
