#!/usr/bin/env bash
# Start the sushy-tools Redfish emulator (fake driver) as a reference BMC.
#
# Usage: scripts/interop/sushy_emulator.sh STATE_DIR PORT [--no-auth]
#
#   STATE_DIR  directory owned by this instance (created if missing). The
#              config, the htpasswd file and the emulator's sqlite state go
#              here; the state is reset at every start. sushy-tools otherwise
#              keeps state in one folder under the system temp dir, shared by
#              every instance and kept across restarts, so two tests would
#              see each other's power states.
#   PORT       TCP port on 127.0.0.1 (plain HTTP).
#   --no-auth  serve without Basic auth (the throughput baseline does this).
#
# Serves two fake systems:
#   node-0  uuid 27946b59-9e44-4fa7-8e91-f3527a1ef094  starts Off
#   node-1  uuid 48295861-2522-3561-6729-621118518810  starts On
# /redfish/v1/Systems/<name> answers 307 to the uuid URL: use the uuid.
# Credentials (unless --no-auth): admin / password, HTTP Basic only (the
# emulator has no SessionService; sushy falls back to Basic against it).
#
# The script execs the emulator, so the PID of this script is the PID of the
# server: kill it to stop it. It is ready when GET /redfish/v1/ answers
# (measured on the 2-core dev machine: 0.25-0.35 s after start when idle,
# 0.45-0.55 s with both cores busy; poll every ~50 ms with a generous
# timeout, e.g. 30 s, rather than sleeping a fixed time).
#
# Power changes are applied 1-11 s (random, not configurable) after a Reset
# is accepted, and only show up on the next GET; there are no
# PoweringOn/PoweringOff states. Reset answers 204.
#
# The Python environment is $BAREMEND_VENV (default: <repo>/target/venv),
# made by scripts/test.sh from scripts/requirements-interop.txt.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]] || [[ $# -eq 3 && $3 != --no-auth ]]; then
    echo "usage: $0 STATE_DIR PORT [--no-auth]" >&2
    exit 2
fi
state_dir=$1
port=$2
auth=yes
[[ ${3:-} == --no-auth ]] && auth=no

if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
    echo "sushy_emulator.sh: bad port: $port" >&2
    exit 2
fi

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${BAREMEND_VENV:-$repo_root/target/venv}
if [[ ! -x $venv/bin/sushy-emulator ]]; then
    echo "sushy_emulator.sh: $venv/bin/sushy-emulator not found; run 'bash scripts/test.sh' once to create the venv" >&2
    exit 1
fi

mkdir -p "$state_dir"
state_dir=$(cd "$state_dir" && pwd)
# The path is pasted into a Python literal below.
if [[ $state_dir == *[\'\\]* ]]; then
    echo "sushy_emulator.sh: STATE_DIR must not contain quotes or backslashes: $state_dir" >&2
    exit 2
fi
config=$state_dir/emulator.conf
htpasswd=$state_dir/htpasswd

# sushy-tools reads only bcrypt entries ($2a$/$2b$/$2y$) of an Apache-style
# "user:hash" file; anything else (MD5 apr1, SHA, plain text) makes it refuse
# to start with "Only bcrypt digested passwords are supported". Cost 5 keeps
# each request's bcrypt check cheap (~2 ms); the default cost 12 would add
# ~250 ms to every authenticated request.
if [[ $auth == yes ]]; then
    "$venv/bin/python" - "$htpasswd" <<'EOF'
import sys, bcrypt
with open(sys.argv[1], "w") as f:
    f.write("admin:" + bcrypt.hashpw(b"password", bcrypt.gensalt(5)).decode() + "\n")
EOF
fi

# The config is a Python file read by Flask's from_pyfile. STATE_DIR is a
# config key, not an environment variable, so it has to be set here.
{
    cat <<EOF
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = $port
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_STATE_DIR = '$state_dir/state'
SUSHY_EMULATOR_FAKE_SYSTEMS = [
    {'uuid': '27946b59-9e44-4fa7-8e91-f3527a1ef094', 'name': 'node-0',
     'power_state': 'Off', 'external_notifier': False,
     'nics': [{'mac': '00:5c:52:31:3a:9c', 'ip': '127.0.0.10'}]},
    {'uuid': '48295861-2522-3561-6729-621118518810', 'name': 'node-1',
     'power_state': 'On', 'external_notifier': False,
     'nics': [{'mac': '00:5c:52:31:3a:9d', 'ip': '127.0.0.11'}]},
]
EOF
    if [[ $auth == yes ]]; then
        echo "SUSHY_EMULATOR_AUTH_FILE = '$htpasswd'"
    fi
} >"$config"

# Start from the configured power states: the fake driver seeds a system
# only if its uuid is not in the sqlite state yet, so a reused STATE_DIR
# would otherwise keep the power states of the previous run.
rm -rf "$state_dir/state" "$state_dir/tmp"
# Anything else sushy-tools caches under the temp dir stays in STATE_DIR too.
mkdir -p "$state_dir/tmp"
export TMPDIR=$state_dir/tmp
# Keep a stray SUSHY_EMULATOR_CONFIG from the environment out of the picture:
# the Flask app loads it at import time, before --config.
unset SUSHY_EMULATOR_CONFIG
export PYTHONUNBUFFERED=1

exec "$venv/bin/sushy-emulator" --config "$config"
