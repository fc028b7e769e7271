#!/usr/bin/env bash
# Benchmark (not a test): remediations on a large simulated cluster, with the controller as
# its own process (`baremend run` on a real kube client over HTTPS). For each size it prints
# the per-remediation lines and a Markdown table: fence latency p50/p99, overhead over the
# physical floor p50/p99, Redfish and API requests per remediation and the controller's memory,
# beside two floors measured in the same run (the bare and the safe floor: the fastest
# controllers that could exist) and our fence latency as a ratio to the safe floor's. Each
# world is measured RUNS times (3), every world in turn; each figure is printed as the median
# of the runs with their spread, flagged (⚑) past 20 %. The safe floor's samples are triggered
# at ours' cadence (FLOOR_PACE, default `ours`; `0s`: back to back), so that its p99 is taken
# over as many minutes as ours: a world takes about twice as long as ours' remediations alone.
#
#   bash scripts/bench-remediation.sh              (1000 and 5000 machines, 100 remediations)
#   SIZES="1000" SAMPLES=50 bash scripts/bench-remediation.sh
#
# FLEET=1: the Cluster API fleet instead — FLEET_MACHINES (20000) over FLEET_CLUSTERS (100)
# workload clusters, FLEET_SHARDS (4) controller processes, SAMPLES (100) remediations, printed
# beside one cluster of COMPARE_MACHINES (5000) measured first in the same run.
#
#   FLEET=1 bash scripts/bench-remediation.sh
#
# REAL_PLANE=1: each size twice in one run, on the simulated API server and then on a real
# control plane (etcd, kube-apiserver, kube-controller-manager; built once by
# scripts/kubernetes.sh, which needs Go and the Go module proxy) that the same simulated world
# drives over HTTPS; the table has a column for each.
#
#   REAL_PLANE=1 SIZES=1000 bash scripts/bench-remediation.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release --bin baremend >&2
real_plane=()
if [[ "${REAL_PLANE:-0}" == 1 ]]; then
    [[ "${FLEET:-0}" != 1 ]] || { echo "REAL_PLANE=1 and FLEET=1: a real plane holds one cluster" >&2; exit 2; }
    kube_log=$(mktemp)
    bash scripts/kubernetes.sh >"$kube_log" 2>&1 || { cat "$kube_log" >&2; exit 1; }
    BAREMEND_KUBE_BIN=$(tail -n 1 "$kube_log")
    rm -f "$kube_log"
    export BAREMEND_KUBE_BIN
    real_plane=(--real-plane)
fi
if [[ "${FLEET:-0}" == 1 ]]; then
    ./target/release/baremend lab --scenario scale \
        --machines "${FLEET_MACHINES:-20000}" --workload-clusters "${FLEET_CLUSTERS:-100}" \
        --shards "${FLEET_SHARDS:-4}" --compare-machines "${COMPARE_MACHINES:-5000}" \
        --samples "${SAMPLES:-100}" --timeout 120s --runs "${RUNS:-3}" \
        --floor-pace "${FLOOR_PACE:-ours}"
    exit 0
fi
SIZES=${SIZES:-"1000 5000"}
# 100 remediations a run: below 100 a p99 is a run's slowest, one moment of the machine.
SAMPLES=${SAMPLES:-100}
for machines in $SIZES; do
    echo "## ${machines} machines"
    ./target/release/baremend lab --scenario scale --machines "$machines" \
        --samples "$SAMPLES" --timeout 120s --runs "${RUNS:-3}" \
        --floor-pace "${FLOOR_PACE:-ours}" "${real_plane[@]}"
    echo
done
