# vrmig router container from an OCI image: its init, run by the image's /bin/sh as PID 1:
#   sh -c "<this script>" vrmig-oci-init HOSTNAME eth0=CIDR,CIDR eth1=CIDR,CIDR WORKDIR N ENV... ARGV...
# Output goes to /run/console.log (a tmpfs: CRIU checkpoints it with the rest).  It waits for eth0
# and eth1 to be moved in (observed in /sys, bounded), sets their addresses with the image's `ip`
# (no duplicate address detection: the router's addresses are the testbed's) and the forwarding
# sysctls, exports the image's N environment entries and execs the image's entry point and
# command (ARGV): that process stays PID 1, and its own SIGTERM handling ends the container.
exec </dev/null >/run/console.log 2>&1
HOST=$1 IF0=$2 IF1=$3 WD=$4 N=$5
shift 5
echo "VRMIG-CT-BOOT image pid=$$"
hostname "$HOST" 2>/dev/null || echo "$HOST" >/proc/sys/kernel/hostname
n=0
while [ ! -e /sys/class/net/eth0 ] || [ ! -e /sys/class/net/eth1 ]; do
    n=$((n + 1))
    if [ "$n" -gt 400 ]; then
        echo "VRMIG-FAIL eth0/eth1 not moved into the container within 20 s"
        exit 1
    fi
    sleep 0.05
done
echo 1 >/proc/sys/net/ipv4/ip_forward
echo 1 >/proc/sys/net/ipv6/conf/all/forwarding
ip link set lo up
for spec in "$IF0" "$IF1"; do
    dev=${spec%%=*}
    echo 0 >"/proc/sys/net/ipv6/conf/$dev/accept_dad"
    echo 0 >"/proc/sys/net/ipv6/conf/$dev/accept_ra"
    for cidr in $(echo "${spec#*=}" | tr ',' ' '); do
        ip addr add "$cidr" dev "$dev" || echo "VRMIG-FAIL ip addr add $cidr dev $dev"
    done
    ip link set "$dev" up || echo "VRMIG-FAIL ip link set $dev up"
done
while [ "$N" -gt 0 ]; do
    export "$1"
    shift
    N=$((N - 1))
done
cd "$WD" || echo "vrmig-oci-init: no working directory $WD, staying in /"
echo "VRMIG-CT-EXEC $*"
exec "$@"
