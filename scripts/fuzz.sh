#!/usr/bin/env bash
# Runs a cargo-fuzz target for a while (not part of the test command).
#
#   bash scripts/fuzz.sh [TARGET] [SECONDS]      defaults: ipmi_packets 600
#
# cargo-fuzz needs nightly compiler flags (sanitizers); the machine has one stable toolchain,
# so RUSTC_BOOTSTRAP=1 lets it accept them. cargo-fuzz itself is installed from crates.io when
# missing. A crash leaves its input under fuzz/artifacts/TARGET/; turn it into a regression
# test before fixing it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
target=${1:-ipmi_packets}
seconds=${2:-600}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
mkdir -p "corpus/$target"
RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -print_final_stats=1
