#!/usr/bin/env bash
# Short self-test of a vrsampler binary (used by `make check`, also with the ASan/UBSan build).
# Needs no root; as root it also checks a namespace target and an interface that disappears.
set -euo pipefail
BIN=${1:?usage: selftest.sh /path/to/vrsampler}
T=$(mktemp -d)
NS=""
PID=""
cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill "$PID"; wait "$PID" || true; fi
    if [ -n "$NS" ]; then ip netns del "$NS" 2>/dev/null || true; fi
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "selftest FAILED: $*" >&2; for f in "$T"/*.err; do [ -f "$f" ] && sed 's/^/  | /' "$f" >&2; done; exit 1; }
# wait (polling, up to $3 s) until file $1 contains $2
wait_for() {
    local i
    for ((i = 0; i < ${3:-10} * 100; i++)); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        if [ -n "$PID" ] && ! kill -0 "$PID" 2>/dev/null; then return 1; fi
        sleep 0.01
    done
    return 1
}
check_file() { # file min_lines
    local f=$1
    [ "$(sed -n 1p "$f")" = "# vrmig-sampler 1 clock=CLOCK_REALTIME period_ns=10000000" ] || fail "$f: header"
    [ "$(sed -n 2p "$f")" = "t_ns late_ns netns ifname rx_packets rx_bytes tx_packets tx_bytes" ] || fail "$f: columns"
    tail -n 1 "$f" | grep -q '^# cpu_user_s=[0-9.]* cpu_sys_s=[0-9.]* .*rounds=[0-9]* .*max_late_ns=' || fail "$f: footer"
    local n
    n=$(awk 'NR > 2 && !/^#/ { if (NF != 8 || $1 !~ /^[0-9]+$/ || $2 !~ /^-?[0-9]+$/) bad++; n++ } END { print bad ? -1 : n + 0 }' "$f")
    [ "$n" -ge "$2" ] || fail "$f: $n sample lines (want >= $2, -1 = malformed)"
    # t_ns increases between samples of an interface, mostly by ~10 ms (a loaded machine may delay
    # a few rounds: timing is measured by `python -m probes.bench`, not asserted here)
    awk 'NR > 2 && !/^#/ { k = $3 " " $4; if (k in last) { d = $1 - last[k]; n++; if (d <= 0) bad++; else if (d > 5e6 && d < 15e6) ok++ } last[k] = $1 }
         END { exit (bad || ok < 0.8 * n) ? 1 : 0 }' "$f" || fail "$f: sample spacing not mostly ~10 ms"
}

# usage errors
set +e
"$BIN" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no arguments: want exit 2"
"$BIN" --period-ms 10 --out "$T/x" bad-target >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad target: want exit 2"
"$BIN" --period-ms 10 --out "$T/x" .:lo .:lo >/dev/null 2>&1; [ $? -eq 2 ] || fail "namespace twice: want exit 2"
"$BIN" --period-ms 10 --out "$T/x" .:no-such-if0 >/dev/null 2>"$T/noif.err"; [ $? -eq 1 ] || fail "missing interface: want exit 1"
set -e
grep -q "no interface no-such-if0" "$T/noif.err" || fail "missing interface: message"

# a timed run in the current namespace, every read method
for m in auto stats-dump stats-get link-get link-dump; do
    "$BIN" --period-ms 10 --out "$T/$m.tsv" --duration 0.5 --method "$m" .:lo 2>"$T/$m.err" || fail "$m: exit status"
    grep -q '^READY$' "$T/$m.err" || fail "$m: no READY"
    check_file "$T/$m.tsv" 40
done

# SIGTERM: clean exit with the footer
"$BIN" --period-ms 10 --out "$T/term.tsv" .:lo 2>"$T/term.err" &
PID=$!
wait_for "$T/term.err" '^READY$' 10 || fail "term: no READY"
wait_for "$T/term.tsv" '^[0-9]' 10 || true
kill -TERM "$PID"
set +e; wait "$PID"; rc=$?; set -e; PID=""
[ $rc -eq 0 ] || fail "SIGTERM: exit $rc"
check_file "$T/term.tsv" 1

# as root: a namespace target whose interface disappears mid-run
if [ "$(id -u)" = 0 ] && ip netns add "vrt-pr-check-$$" 2>/dev/null; then
    NS="vrt-pr-check-$$"
    ip -n "$NS" link add d0 type veth peer name p0
    ip -n "$NS" link add d1 type veth peer name p1
    "$BIN" --period-ms 10 --out "$T/ns.tsv" ".:lo" "$NS:d0,d1" 2>"$T/ns.err" &
    PID=$!
    wait_for "$T/ns.err" '^READY$' 10 || fail "netns: no READY"
    ip -n "$NS" link del d0
    wait_for "$T/ns.err" 'd0 disappeared' 10 || fail "netns: disappearance not reported"
    ip -n "$NS" link add d0 type veth peer name p0
    wait_for "$T/ns.err" 'd0 is back' 10 || fail "netns: reappearance not reported"
    kill -INT "$PID"
    set +e; wait "$PID"; rc=$?; set -e; PID=""
    [ $rc -eq 0 ] || fail "netns: SIGINT exit $rc"
    check_file "$T/ns.tsv" 3
    grep -q " $NS d1 " "$T/ns.tsv" || fail "netns: no samples of d1"
    echo "selftest: namespace target and disappearing interface OK"
fi
echo "selftest OK: $BIN"
