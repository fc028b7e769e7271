#!/usr/bin/env bash
# The single test command of baremend:   bash scripts/test.sh
#
# Works on a fresh Debian 12 machine (as root) that has rustup's cargo and
# python3; everything else comes from the package registries. Each step stops
# the run on the first failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD

# Debian packages the tests need: the reference IPMI BMC (ipmi_sim), the
# IPMI clients that check our simulator (ipmitool, FreeIPMI's ipmipower), and
# Prometheus (promtool and the server) that checks the alerts and the dashboard.
APT_PACKAGES=(openipmi ipmitool freeipmi-tools prometheus)

requirements=scripts/requirements-interop.txt

# What the test command installs that is not the project's build (the venv, the vendor
# payloads, cargo-nextest, the control plane) is cached outside target/, each keyed by what
# decides it, so that a fresh clone or a `cargo clean` does not pay for it again.
cache=${BAREMEND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/baremend}
mkdir -p "$cache"
python_version=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
venv_key=$( (cat "$requirements"; echo "$python_version") | sha256sum | cut -c1-16)
venv=$cache/venv-$venv_key

# cargo-nextest runs the tests (.config/nextest.toml): every test a process of its own, under
# a timeout that ends it and whatever it started, the heavy labs one at a time, timings in a
# JUnit report. Installed from crates.io at this version, once per machine.
NEXTEST_VERSION=0.9.151

step_no=0
step() {
    step_no=$((step_no + 1))
    printf '\n==> [%d] %s\n' "$step_no" "$*"
}
die() {
    printf '\ntest.sh: FAILED: %s\n' "$*" >&2
    exit 1
}

command -v cargo >/dev/null || die "cargo not found (install Rust with rustup)"
command -v python3 >/dev/null || die "python3 not found"

# A fresh build gains nothing from incremental compilation, which would double
# target/'s size; a developer's own CARGO_INCREMENTAL is kept.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# The build and the tests write about 7 GiB under target/ (measured on a fresh
# clone); a full disk fails deep in the build with a linker's error, so it is
# said here first.
need_gib=8
mkdir -p target
free_gib=$(df -Pk target | awk 'NR == 2 { print int($4 / 1048576) }')
if ((free_gib < need_gib)); then
    echo "warning: ${free_gib} GiB free under $repo_root/target; the build and the tests need about ${need_gib} GiB" >&2
    echo "         (free space with 'cargo clean' in other checkouts, or remove old target/ directories)" >&2
fi

# ---------------------------------------------------------------------------
step "system packages"
# Debian's own python3 ships venv without ensurepip; python3-venv adds it.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    APT_PACKAGES+=(python3-venv)
fi
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [[ $status == installed ]] || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    echo "nothing to install (${APT_PACKAGES[*]:-no packages required})"
elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "installing: ${missing[*]}"
    # One update only: the package lists of a fresh machine are empty.
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    echo "missing Debian packages: ${missing[*]}" >&2
    echo "install them with:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi

# ---------------------------------------------------------------------------
step "python venv for interop tests ($venv)"
# The venv is rebuilt from scratch whenever the requirements change, so a
# developer's venv never carries packages that a fresh CI machine lacks. The
# stamp is written only after a successful install.
# The folder is keyed by the requirements and the Python version; the stamp is written
# only after a successful install, so a half-built venv is built again.
stamp=$venv/.requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
if [[ $have != "$want" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    echo "(re)creating venv from $requirements"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" || die "python3 -m venv failed (on Debian's python3: apt-get install python3-venv)"
    "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
        -r "$requirements" || die "pip install -r $requirements failed"
    echo "$want" >"$stamp"
else
    echo "up to date ($requirements unchanged)"
fi
export BAREMEND_VENV=$venv

# ---------------------------------------------------------------------------
step "vendor Redfish payloads"
# Real iDRAC, iLO 5, XCC and BlueField JSON published in public packages (docs/engineering/fidelity.md),
# fetched with pip and cargo, never committed; kept in the cache, keyed by the script that
# pins them.
export BAREMEND_VENDOR_PAYLOADS=$cache/vendor-payloads-$(sha256sum scripts/fetch-vendor-payloads.sh | cut -c1-16)
echo "$BAREMEND_VENDOR_PAYLOADS"
bash scripts/fetch-vendor-payloads.sh || die "fetching the vendor payloads failed (see above)"

# ---------------------------------------------------------------------------
step "the pinned control plane and kubectl (tools/kubernetes: Kubernetes v1.36.3, etcd 3.6)"
# Built from their Go modules into a cache outside the work tree keyed by the versions; a
# second run finds them. The real-plane tests start them; every kubectl a test runs is this one.
kube_log=$repo_root/target/kubernetes-build.log
mkdir -p "$repo_root/target"
bash scripts/kubernetes.sh 2>&1 | tee "$kube_log" || die "building the control plane failed (log in $kube_log)"
BAREMEND_KUBE_BIN=$(tail -n 1 "$kube_log")
[[ -x $BAREMEND_KUBE_BIN/kube-apiserver ]] || die "scripts/kubernetes.sh did not name its folder last"
export BAREMEND_KUBE_BIN
export PATH=$BAREMEND_KUBE_BIN:$PATH

# ---------------------------------------------------------------------------
step "cargo-nextest $NEXTEST_VERSION"
nextest_root=$cache/cargo-nextest-$NEXTEST_VERSION
if [[ ! -x $nextest_root/bin/cargo-nextest ]]; then
    echo "installing cargo-nextest $NEXTEST_VERSION from crates.io into $nextest_root (once per machine)"
    rm -rf "$nextest_root.partial"
    cargo install cargo-nextest --version "=$NEXTEST_VERSION" --locked --root "$nextest_root.partial" \
        || die "cargo install cargo-nextest failed (is crates.io reachable?)"
    rm -rf "$nextest_root"
    mv "$nextest_root.partial" "$nextest_root"
else
    echo "cached ($nextest_root)"
fi
nextest=$nextest_root/bin/cargo-nextest
"$nextest" nextest --version

# ---------------------------------------------------------------------------
step "cargo fmt --check"
cargo fmt --version >/dev/null 2>&1 || die "rustfmt missing: rustup component add rustfmt"
cargo fmt --all -- --check || die "code is not formatted: run 'cargo fmt --all'"

# ---------------------------------------------------------------------------
step "no second rustls crypto provider (aws-lc-rs / aws-lc-sys)"
# We build rustls with ring only. If anything pulls in aws-lc-rs, rustls sees
# two providers, has no process default and panics at the first TLS
# connection unless a provider is installed explicitly; aws-lc-sys also needs
# cmake and a long C build. `cargo tree -i` fails with "did not match any
# packages" when the crate is absent from the lock file: that is the only
# outcome accepted. Anything else (a tree, "nothing to print" for a crate
# locked for another platform, "ambiguous" for two versions, a resolution
# error) fails the check, with cargo's output shown.
for crate in aws-lc-rs aws-lc-sys; do
    rc=0
    out=$(cargo tree --workspace --edges normal,build,dev -i "$crate" 2>&1) || rc=$?
    if ((rc != 0)) && grep -q "package ID specification \`$crate\` did not match any packages" <<<"$out"; then
        echo "$crate: not in the dependency graph"
    else
        printf '%s\n' "$out" >&2
        die "$crate is in the dependency graph (or cargo tree failed, exit $rc); see above"
    fi
done

# ---------------------------------------------------------------------------
step "the production artefact compiles no simulator code"
# The image builds `--no-default-features` (deploy/Containerfile runs deploy/build-binary.sh)
# and the fuzz targets use
# the library the same way: neither may pull in baremend-sim (simulated API server, BMCs,
# the chaos oracle). `baremend lab` lives behind the default feature `lab`.
grep -q 'deploy/build-binary.sh' deploy/Containerfile \
    || die "deploy/Containerfile must build the binary with deploy/build-binary.sh"
grep -q -- 'cargo build .*--no-default-features' deploy/build-binary.sh \
    || die "deploy/build-binary.sh must build with --no-default-features"
no_simulator() {
    local what=$1 tree
    shift
    tree=$(cargo tree "$@" -e normal,build --prefix none 2>&1) \
        || { printf '%s\n' "$tree" >&2; die "cargo tree failed for $what"; }
    if grep -q '^baremend-sim ' <<<"$tree"; then
        die "$what depends on baremend-sim"
    fi
    echo "$what: no baremend-sim in its dependency graph"
}
no_simulator "the image's build" -p baremend --no-default-features
no_simulator "the fuzz targets" --manifest-path fuzz/Cargo.toml
cargo check --quiet -p baremend --no-default-features --bin baremend \
    || die "the controller does not build without the lab feature"

# ---------------------------------------------------------------------------
step "cargo clippy -D warnings"
cargo clippy --version >/dev/null 2>&1 || die "clippy missing: rustup component add clippy"
cargo clippy --workspace --all-targets -- -D warnings || die "clippy found problems"

# ---------------------------------------------------------------------------
step "the tests (cargo nextest, profile ci; BAREMEND_VENV=$BAREMEND_VENV)"
# Every binary runs even after one fails: a red run names all its failures at once. The
# JUnit report (each test's time) is target/nextest/ci/junit.xml; the heaviest binaries and
# tests are printed after the run.
junit=$repo_root/target/nextest/ci/junit.xml
rm -f "$junit"
rc=0
"$nextest" nextest run --workspace --profile ci \
    --no-fail-fast || rc=$?
if [[ -f $junit ]]; then
    python3 scripts/junit-times.py "$junit" || true
fi
((rc == 0)) || die "tests failed (the report above names them; timings in $junit)"
# The doc tests, which nextest does not run.
cargo test -p baremend --doc --quiet || die "the doc tests failed"
