#!/usr/bin/env bash
# Benchmark (not a test): remediations on a large simulated cluster, with the controller as
# its own process (`baremend run` on a real kube client over HTTPS). For each size it prints
# the per-remediation lines and a Markdown table: fence latency p50/p99, overhead over the
# physical floor p50/p99, Redfish requests per remediation and the controller's memory.
#
#   bash scripts/bench-remediation.sh              (1000 and 5000 machines, 30 remediations)
#   SIZES="1000" SAMPLES=50 bash scripts/bench-remediation.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SIZES=${SIZES:-"1000 5000"}
SAMPLES=${SAMPLES:-30}
cargo build --release --bin baremend >&2
for machines in $SIZES; do
    echo "## ${machines} machines"
    ./target/release/baremend lab --scenario scale --machines "$machines" \
        --samples "$SAMPLES" --timeout 120s
    echo
done
