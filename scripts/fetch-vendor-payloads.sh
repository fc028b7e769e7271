#!/usr/bin/env bash
# Fetches the real vendor Redfish payloads the tests serve and parse:   bash scripts/fetch-vendor-payloads.sh
#
# scripts/test.sh runs it in its install step. The payloads are test samples published inside
# public packages (see docs/engineering/fidelity.md for what each holds and its licence); they are
# downloaded with the ordinary clients (pip, cargo) into target/vendor-payloads and never
# committed. The step is idempotent: a stamp of the pins below skips it when nothing changed.
#
#   sushy-oem-idrac  (PyPI, Apache-2.0)  Dell iDRAC samples:  sushy_oem_idrac/tests/unit/json_samples
#   proliantutils    (PyPI, Apache-2.0)  HPE iLO 5 samples:   proliantutils/tests/redfish/json_samples
#   libredfish       (crates, MIT)       Dell, Lenovo XCC, NVIDIA BlueField, HPE: src/model/testdata
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD

PIP_PINS=(sushy-oem-idrac==6.0.0 proliantutils==2.16.3)
CRATE_PIN='libredfish = "=0.2.0"'

out=${BAREMEND_VENDOR_PAYLOADS:-$repo_root/target/vendor-payloads}
stamp=$out/.pins.sha256
want=$(printf '%s\n' "${PIP_PINS[@]}" "$CRATE_PIN" | sha256sum | cut -d' ' -f1)

die() {
    printf '\nfetch-vendor-payloads.sh: FAILED: %s\n' "$*" >&2
    exit 1
}

if [[ $(cat "$stamp" 2>/dev/null || true) == "$want" ]]; then
    echo "vendor payloads up to date ($out)"
    exit 0
fi

# pip from the test venv (scripts/test.sh builds it first), else from python3.
venv=${BAREMEND_VENV:-$repo_root/target/venv}
python=python3
[[ -x $venv/bin/python ]] && python=$venv/bin/python
"$python" -m pip --version >/dev/null 2>&1 \
    || die "$python has no pip (run 'bash scripts/test.sh', which builds target/venv, or install python3-pip)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"

# --- PyPI: the wheels carry the JSON samples (so do the sdists); no build is needed.
"$python" -m pip download --disable-pip-version-check --progress-bar off --no-deps \
    --only-binary :all: -d "$work/wheels" "${PIP_PINS[@]}" \
    || die "pip download ${PIP_PINS[*]} failed (is the Python package registry reachable?)"
"$python" - "$work/wheels" "$out" <<'PY' || die "extracting the JSON samples from the wheels failed"
import pathlib, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
samples = {
    "sushy_oem_idrac": ("sushy-oem-idrac", "sushy_oem_idrac/tests/unit/json_samples/"),
    "proliantutils": ("proliantutils", "proliantutils/tests/redfish/json_samples/"),
}
for wheel in sorted(wheels.glob("*.whl")):
    dist, version = wheel.name.split("-")[:2]
    package, prefix = samples[dist]
    target = out / package
    target.mkdir(parents=True, exist_ok=True)
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(prefix) and name.endswith(".json") and "/" not in name[len(prefix):]:
                (target / name[len(prefix):]).write_bytes(archive.read(name))
                count += 1
    if count == 0:
        sys.exit(f"{wheel.name}: no JSON samples under {prefix}")
    (target / "SOURCE").write_text(f"{package} {version} (PyPI wheel {wheel.name}), Apache-2.0\n")
    print(f"{package} {version}: {count} JSON samples")
PY

# --- crates: cargo downloads the .crate into its own cache; cargo metadata says where.
command -v cargo >/dev/null || die "cargo not found"
manifest_dir=$work/libredfish-fetch
mkdir -p "$manifest_dir/src"
: >"$manifest_dir/src/lib.rs"
cat >"$manifest_dir/Cargo.toml" <<EOF
[package]
name = "vendor-payload-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$CRATE_PIN

[workspace]
EOF
# cargo metadata resolves libredfish's whole dependency tree, so cargo fetches it too (most of it
# is shared with the workspace); only this machine's platform is fetched.
host=$(rustc -vV | sed -n 's/^host: //p')
[[ -n $host ]] || die "rustc -vV names no host triple"
cargo fetch --quiet --target "$host" --manifest-path "$manifest_dir/Cargo.toml" \
    || die "cargo fetch of libredfish failed (is the crate registry reachable?)"
crate_dir=$(cargo metadata --quiet --format-version 1 --filter-platform "$host" \
    --manifest-path "$manifest_dir/Cargo.toml" \
    | "$python" -c '
import json, pathlib, sys
meta = json.load(sys.stdin)
for p in meta["packages"]:
    if p["name"] == "libredfish":
        print(pathlib.Path(p["manifest_path"]).parent, p["version"], p["license"])
') || die "cargo metadata failed"
read -r crate_src crate_version crate_licence <<<"$crate_dir"
[[ -d $crate_src/src/model/testdata ]] || die "libredfish $crate_version has no src/model/testdata"
mkdir -p "$out/libredfish"
cp "$crate_src"/src/model/testdata/*.json "$out/libredfish/"
echo "libredfish $crate_version (crate), $crate_licence" >"$out/libredfish/SOURCE"
echo "libredfish $crate_version: $(ls "$out/libredfish"/*.json | wc -l) JSON test files"

echo "$want" >"$stamp"
echo "vendor payloads in $out"
