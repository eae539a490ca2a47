#!/bin/sh
# vrmig's CRIU action script (criu --action-script), run by criu in its own network namespace
# (R1 for pre-dump/dump, R2 for restore) with CRTOOLS_SCRIPT_ACTION set.
#
# 1. Records when criu reached the hooks that matter for the timeline: one line
#    "<action> <CLOCK_REALTIME ns>" appended to $VRMIG_CRIU_EVENTS (one `date` per such hook,
#    a few ms; the other hooks return at once).
# 2. Extends CRIU's network lock to the router's data plane.  CRIU locks a container's network
#    namespace with INPUT/OUTPUT rules only, so the kernel would keep forwarding while the router
#    is frozen and being dumped.  On the source (VRMIG_SIDE=src) the host-side veth peers listed
#    in $VRMIG_HOST_PORTS ("tapL@brL tapR@brR") are released from their bridges at
#    network-lock and enslaved again at network-unlock (criu unlocks only when the dump failed:
#    the router then keeps forwarding on R1).  Nothing inside the container changes.
case "$CRTOOLS_SCRIPT_ACTION" in
    pre-dump | network-lock | post-dump | pre-restore | network-unlock | post-resume)
        echo "$CRTOOLS_SCRIPT_ACTION $(date +%s%N)" >> "${VRMIG_CRIU_EVENTS:-/dev/null}"
        ;;
    *)
        exit 0
        ;;
esac
[ "${VRMIG_SIDE:-}" = src ] && [ -n "${VRMIG_HOST_PORTS:-}" ] || exit 0
batch=
for p in $VRMIG_HOST_PORTS; do
    case "$CRTOOLS_SCRIPT_ACTION" in
        network-lock) batch="${batch}link set dev ${p%%@*} nomaster
" ;;
        network-unlock) batch="${batch}link set dev ${p%%@*} master ${p#*@}
" ;;
    esac
done
[ -z "$batch" ] || printf '%s' "$batch" | ip -batch -
