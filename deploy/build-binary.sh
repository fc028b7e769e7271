#!/bin/sh
# Builds the static (musl) baremend binary of the image for one architecture, on any build
# machine: the Containerfile's build stage runs it on the build machine's own platform and
# cross-compiles when the image's architecture differs (no emulation).
#
#   deploy/build-binary.sh ARCH OUTPUT
#
# ARCH is the image's architecture as container tools name it: amd64 or arm64 (default: the
# build machine's, from dpkg). The C parts (ring) are compiled and the binary linked with the
# GNU compiler for that architecture (`<arch>-linux-gnu-gcc`: the native one, or Debian's
# gcc-x86-64-linux-gnu / gcc-aarch64-linux-gnu cross compiler); Rust's musl targets bring
# their own C library and start files. It builds with --no-default-features: the controller
# without `baremend lab` and without any simulator code.
set -eu

arch="${1:-$(dpkg --print-architecture)}"
out="${2:?usage: deploy/build-binary.sh ARCH OUTPUT}"
case "$arch" in
    amd64) target=x86_64-unknown-linux-musl gcc=x86_64-linux-gnu-gcc ;;
    arm64) target=aarch64-unknown-linux-musl gcc=aarch64-linux-gnu-gcc ;;
    *)
        echo "deploy/build-binary.sh: unsupported architecture '$arch' (amd64 or arm64)" >&2
        exit 2
        ;;
esac
command -v "$gcc" >/dev/null || {
    echo "deploy/build-binary.sh: $gcc is missing (the C compiler for $arch)" >&2
    exit 2
}

rustup target add "$target"
upper=$(echo "$target" | tr 'a-z-' 'A-Z_')
lower=$(echo "$target" | tr '-' '_')
export "CARGO_TARGET_${upper}_LINKER=$gcc" "CC_${lower}=$gcc"
cargo build --release --locked --no-default-features --target "$target" --bin baremend
cp "${CARGO_TARGET_DIR:-target}/$target/release/baremend" "$out"
