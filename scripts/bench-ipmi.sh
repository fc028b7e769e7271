#!/usr/bin/env bash
# Benchmark (not a test): the whole-process power-status round trip of `baremend bmc`
# against `ipmitool -I lanplus -C 3 chassis power status`, on the same simulated IPMI BMC
# (baremend-sim ipmi), side by side with hyperfine. Prints a Markdown table.
#
#   bash scripts/bench-ipmi.sh            (RUNS=300 by default)
#
# Each run is a new process that opens an RMCP+ session, raises its privilege, reads the
# chassis status and closes the session. baremend is measured with cipher suite 3 (the suite
# ipmitool uses here) and with its default (17 preferred, negotiated with Get Channel Cipher
# Suites on every run, since a new process has no cache).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUNS=${RUNS:-300}
die() { echo "bench-ipmi.sh: $*" >&2; exit 1; }
for tool in hyperfine ipmitool; do
    if ! command -v "$tool" >/dev/null; then
        if [[ $(id -u) -eq 0 ]]; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$tool" >/dev/null || die "cannot install $tool"
        else
            die "$tool not found: apt-get install -y $tool"
        fi
    fi
done

if [[ -z ${NO_BUILD:-} ]]; then
    cargo build --release --bin baremend >&2
    cargo build --release -p baremend-sim --bin baremend-sim >&2
fi
bin=target/release
out=target/bench-ipmi/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"

port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/baremend-sim" ipmi --listen "127.0.0.1:$port" --power-delay-ms 0 >"$out/sim.stdout" 2>"$out/sim.stderr" &
sim=$!
trap 'kill $sim 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q READY "$out/sim.stdout" 2>/dev/null && break
    sleep 0.05
done
grep -q READY "$out/sim.stdout" || die "the simulator did not start: $(cat "$out/sim.stderr")"

export BMC_PASSWORD=password
ours="$bin/baremend bmc --address ipmi://127.0.0.1:$port --username admin"
theirs="ipmitool -I lanplus -H 127.0.0.1 -p $port -U admin -P password -C 3"
# Check that all three work before timing them.
$ours --ipmi-cipher-suites 3 status >/dev/null
$ours status >/dev/null
$theirs chassis power status >/dev/null

hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$out/hyperfine.json" \
    -n "baremend bmc status (suite 3)" "$ours --ipmi-cipher-suites 3 status" \
    -n "baremend bmc status (default: negotiates, suite 17)" "$ours status" \
    -n "ipmitool -C 3 chassis power status" "$theirs chassis power status" >"$out/hyperfine.txt"

python3 - "$out/hyperfine.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
ipmitool = next(r for r in results if r["command"].startswith("ipmitool"))
print("| command | mean ms | median ms | min ms | max ms | vs ipmitool |")
print("|---|---|---|---|---|---|")
for r in results:
    ratio = r["mean"] / ipmitool["mean"]
    print(f"| {r['command']} | {r['mean']*1e3:.2f} | {r['median']*1e3:.2f} | {r['min']*1e3:.2f} | {r['max']*1e3:.2f} | {ratio:.2f}x |")
PY
echo
echo "runs: $RUNS each; nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); raw output in $out"
