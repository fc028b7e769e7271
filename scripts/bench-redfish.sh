#!/usr/bin/env bash
# Throughput benchmark (not a test): our Redfish simulator (baremend-sim)
# against the sushy-tools emulator (fake driver), side by side in one run,
# with wrk on loopback. Prints a Markdown table.
#
#   bash scripts/bench-redfish.sh
#
# Environment:
#   DURATION=8s      length of each wrk run (16 runs in all)
#   NO_BUILD=1       use the existing target/release/baremend-sim
#   SIM_BIN=PATH     run this simulator binary instead (implies NO_BUILD)
#   SKIP_SIM=1       benchmark sushy-tools only (e.g. before the simulator exists)
#   SKIP_SUSHY=1     benchmark baremend-sim only
#   BAREMEND_VENV    Python venv with sushy-tools (default target/venv; made by
#                    scripts/test.sh)
#
# Both servers run on this machine next to wrk, so the numbers depend on the
# load: the two servers are measured row by row, one right after the other,
# so that both see the same conditions, and the load average is printed
# before and after. Raw wrk outputs are kept under target/bench-redfish/.
#
# sushy-tools runs without auth (as in the baseline of the design notes);
# baremend-sim requires auth, so every request to it carries Basic
# credentials. sushy-tools answers "Connection: close" to everything, so its
# keep-alive rows still open one connection per request.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD

DURATION=${DURATION:-8s}
venv=${BAREMEND_VENV:-$repo_root/target/venv}
sim_bin=${SIM_BIN:-$repo_root/target/release/baremend-sim}
[[ -n ${SIM_BIN:-} ]] && NO_BUILD=1
sushy_uuid=27946b59-9e44-4fa7-8e91-f3527a1ef094 # node-0 in sushy_emulator.sh
user='admin'
password='password'

die() {
    echo "bench-redfish.sh: $*" >&2
    exit 1
}

command -v wrk >/dev/null || die "wrk not found: apt-get install -y wrk"
command -v curl >/dev/null || die "curl not found: apt-get install -y curl"
[[ -n ${SKIP_SIM:-} && -n ${SKIP_SUSHY:-} ]] && die "SKIP_SIM and SKIP_SUSHY together leave nothing to run"

out_dir=$repo_root/target/bench-redfish/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out_dir"
tmp=$(mktemp -d)
sim_pid=
sushy_pid=
cleanup() {
    local pid
    for pid in $sim_pid $sushy_pid; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---------------------------------------------------------------------------
# Servers

sim_system=
if [[ -z ${SKIP_SIM:-} ]]; then
    if [[ -z ${NO_BUILD:-} ]]; then
        echo "building baremend-sim (release)..." >&2
        cargo build --release -p baremend-sim >&2
    fi
    [[ -x $sim_bin ]] || die "$sim_bin not found (build it, or unset NO_BUILD)"
    port=$(free_port)
    "$sim_bin" redfish --listen "127.0.0.1:$port" --systems 1 \
        --username "$user" --password "$password" --power-delay-ms 0 \
        >"$out_dir/sim.stdout" 2>"$out_dir/sim.stderr" &
    sim_pid=$!
    # The simulator prints "READY <base-url>" once it accepts connections.
    base=
    for _ in $(seq 300); do
        base=$(sed -n 's/^READY \(.*\)$/\1/p' "$out_dir/sim.stdout" | head -n1)
        [[ -n $base ]] && break
        kill -0 "$sim_pid" 2>/dev/null || die "baremend-sim exited; see $out_dir/sim.stderr"
        sleep 0.1
    done
    [[ -n $base ]] || die "baremend-sim printed no READY line in 30 s"
    sim_system=${base%/}/redfish/v1/Systems/1
fi

sushy_system=
if [[ -z ${SKIP_SUSHY:-} ]]; then
    port=$(free_port)
    BAREMEND_VENV=$venv bash scripts/interop/sushy_emulator.sh "$tmp/sushy" "$port" --no-auth \
        >"$out_dir/sushy.log" 2>&1 &
    sushy_pid=$! # the script execs the emulator: this is the server's PID
    for _ in $(seq 300); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/redfish/v1/" && break
        kill -0 "$sushy_pid" 2>/dev/null || die "sushy-emulator exited; see $out_dir/sushy.log"
        sleep 0.1
    done
    curl -sf -o /dev/null "http://127.0.0.1:$port/redfish/v1/" || die "sushy-emulator did not answer in 30 s"
    sushy_system=http://127.0.0.1:$port/redfish/v1/Systems/$sushy_uuid
fi

basic="Authorization: Basic $(printf '%s:%s' "$user" "$password" | base64 -w0)"
post_lua=$tmp/post.lua
cat >"$post_lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"ResetType":"On"}'
wrk.headers["Content-Type"] = "application/json"
EOF

# A benchmark of 401s or 404s would be meaningless: check each request once.
check() { # NAME EXPECTED_CODES CURL_ARGS...
    local name=$1 expected=$2 code
    shift 2
    code=$(curl -s -o /dev/null -w '%{http_code}' "$@") || true
    [[ " $expected " == *" $code "* ]] || die "$name answered HTTP $code (want $expected): curl $*"
}
if [[ -n $sim_system ]]; then
    check "baremend-sim GET system" 200 -H "$basic" "$sim_system"
    check "baremend-sim POST Reset" "200 204" -H "$basic" -H 'Content-Type: application/json' \
        -d '{"ResetType":"On"}' "$sim_system/Actions/ComputerSystem.Reset"
fi
if [[ -n $sushy_system ]]; then
    check "sushy-tools GET system" 200 "$sushy_system"
    check "sushy-tools POST Reset" "200 204" -H 'Content-Type: application/json' \
        -d '{"ResetType":"On"}' "$sushy_system/Actions/ComputerSystem.Reset"
fi

# ---------------------------------------------------------------------------
# wrk runs

# Prints req/s, followed by a note when some requests failed (non-2xx
# answers or socket errors), so a fast but broken server cannot look good.
run_wrk() { # LABEL URL CONNS close|keep-alive GET|POST [wrk args...]
    local label=$1 url=$2 conns=$3 conn_mode=$4 method=$5
    shift 5
    local args=(-t1 "-c$conns" "-d$DURATION" --timeout 10s "$@")
    [[ $conn_mode == close ]] && args+=(-H 'Connection: close')
    [[ $method == POST ]] && args+=(-s "$post_lua") && url=$url/Actions/ComputerSystem.Reset
    local log=$out_dir/$label-$method-c$conns-$conn_mode.txt
    wrk "${args[@]}" "$url" >"$log" 2>&1 || die "wrk failed; see $log"
    local rps non2xx errors note=
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$log")
    [[ -n $rps ]] || die "no Requests/sec in $log"
    non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$log")
    errors=$(sed -n 's/^ *Socket errors: *//p' "$log")
    [[ -n $non2xx ]] && note+=" ($non2xx non-2xx)"
    [[ -n $errors ]] && note+=" (socket errors: $errors)"
    printf '%.0f%s' "$rps" "$note"
}

ratio() { # SUSHY SIM
    local a=${1%% *} b=${2%% *}
    if [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]] && ((a > 0)); then
        awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1fx", b / a }'
    else
        printf -- '-'
    fi
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
for method in GET POST; do
    for conns in 1 16; do
        for conn_mode in keep-alive close; do
            sushy=- sim=-
            echo "wrk: $method c=$conns $conn_mode ($DURATION each)..." >&2
            [[ -n $sushy_system ]] && sushy=$(run_wrk sushy "$sushy_system" "$conns" "$conn_mode" "$method")
            [[ -n $sim_system ]] && sim=$(run_wrk sim "$sim_system" "$conns" "$conn_mode" "$method" -H "$basic")
            if [[ $method == GET ]]; then request="GET /redfish/v1/Systems/{id}"; else request="POST …/ComputerSystem.Reset"; fi
            rows+=("| $request | $conns | $conn_mode | $sushy | $sim | $(ratio "$sushy" "$sim") |")
        done
    done
done

# ---------------------------------------------------------------------------
# Report (stdout)

sushy_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("sushy-tools"))' 2>/dev/null || echo '?')
echo
echo "Redfish throughput, $(date -u '+%Y-%m-%d %H:%M UTC'): wrk -t1, $DURATION per run, loopback"
echo
echo "- machine: nproc $(nproc), load average at start $load_start, at end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- sushy-tools $sushy_version (fake driver, no auth); baremend-sim (Basic auth on every request)"
echo "- raw wrk output: ${out_dir#"$repo_root"/}"
echo
echo "| request | connections | keep-alive/close | sushy-tools req/s | baremend-sim req/s | ratio |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
