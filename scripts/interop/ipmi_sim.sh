#!/usr/bin/env bash
# Start OpenIPMI's ipmi_sim as a reference IPMI-over-LAN BMC on loopback.
#
# Usage: scripts/interop/ipmi_sim.sh WORK_DIR PORT
#
# Environment read by the chassis hook (inherited by ipmi_sim):
#   IPMI_SIM_POWER_DELAY=N   power changes become visible N seconds after the request
#                            (so that a client has to poll); default 0
#   IPMI_SIM_IGNORE_SOFT=1   the "OS" ignores ACPI soft shutdown (a hung kernel)
#
# Accounts: admin/password (admin), oper/operpass (operator), viewer/viewpass (user).
# The host starts powered on. ipmi_sim speaks RMCP+ cipher suites 0-3 and 6 (no SHA-256
# suites) and does not implement Get Channel Cipher Suites. It sets SO_REUSEADDR, so a second
# instance on a busy port starts "fine": give every instance its own port.
#
# The script execs ipmi_sim (no daemon, no console, no persistence): kill the PID to stop it.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 WORK_DIR PORT" >&2
    exit 2
fi
command -v ipmi_sim >/dev/null || {
    echo "ipmi_sim not found: apt-get install -y openipmi" >&2
    exit 1
}
mkdir -p "$1"
work=$(cd "$1" && pwd)
port=$2

echo 1 >"$work/power.state"
rm -f "$work/power.pending"

# ipmi_sim runs this for Get Chassis Status ("get power") and Chassis Control ("set ...").
cat >"$work/chassis.sh" <<'HOOK'
#!/bin/sh
# $1 = MC address, then "get power" or "set <what> <value>".
state=$IPMI_SIM_POWER_FILE
pending=$state.pending
now=$(date +%s)
settle() {
    if [ -f "$pending" ]; then
        read -r target due <"$pending"
        if [ "$now" -ge "$due" ]; then
            echo "$target" >"$state"
            rm -f "$pending"
        fi
    fi
}
request() {
    delay=${IPMI_SIM_POWER_DELAY:-0}
    if [ "$delay" -gt 0 ]; then
        echo "$1 $((now + delay))" >"$pending"
    else
        rm -f "$pending"
        echo "$1" >"$state"
    fi
}
settle
case "$2 $3" in
"get power") echo "power:$(cat "$state")" ;;
"set power") request "$4" ;;
"set shutdown")
    if [ "${IPMI_SIM_IGNORE_SOFT:-0}" != 1 ]; then
        request 0
    fi
    ;;
*) ;;
esac
exit 0
HOOK
chmod +x "$work/chassis.sh"

cat >"$work/lan.conf" <<CONF
name "baremend-test-bmc"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 $port
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid 0b1a2c3d4e5f60718293a4b5c6d7e8f9
  endlan
  chassis_control "$work/chassis.sh 0x20"
  user 2 true  "admin"  "password" admin    10 none md2 md5 straight
  user 3 true  "oper"   "operpass" operator 10 none md2 md5 straight
  user 4 true  "viewer" "viewpass" user     10 none md2 md5 straight
CONF

cat >"$work/sim.emu" <<'EMU'
mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
mc_enable 0x20
EMU

export IPMI_SIM_POWER_FILE=$work/power.state
exec ipmi_sim -c "$work/lan.conf" -f "$work/sim.emu" -n -p </dev/null
