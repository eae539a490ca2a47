# vrmig router container from an OCI image: set-up, run by the host's /bin/sh (the image's shell
# is linked dynamically, and before the pivot its loader and libraries would be the host's) under
# the netlink filter (nlfilter.py) as PID 1 of fresh mount/pid/uts/ipc/net namespaces:
#   sh -c "<this script>" vrmig-oci-setup ROOTFS INIT LOADER LIBRARY_PATH UMOUNT INIT-ARG...
# ROOTFS (a per-host copy of the unpacked image) becomes the container's read-only root; /proc,
# /sys (of the container's network namespace), /dev (a tmpfs with the basic nodes) and tmpfs on
# /run, /tmp, /var/tmp and /var/log (holding the image's own content of those directories) are
# the container's own.  After pivot_root the host's tree is detached with the host's umount run
# by the host's loader (the image need not have umount), every inherited descriptor is closed, and
# the image's /bin/sh runs INIT (the text of oci-init.sh) as a session leader with INIT-ARG...
fail() {
    echo "vrmig-oci-setup: $*" >&2
    exit 1
}
R=$1 INIT=$2 LOADER=$3 LIBS=$4 UMOUNT=$5
shift 5
mount --bind "$R" "$R" || fail "cannot bind-mount $R"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc" || fail "cannot mount /proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys" || fail "cannot mount /sys"
mount -t tmpfs -o mode=0755,nosuid,size=64k tmpfs "$R/dev" || fail "cannot mount /dev"
for node in null:3 zero:5 full:7 random:8 urandom:9; do
    mknod -m 666 "$R/dev/${node%%:*}" c 1 "${node#*:}" || fail "cannot create /dev/${node%%:*}"
done
# a tmpfs is filled on the (empty) pivot mount point, then moved over the directory it replaces
for d in run:64m tmp:16m var/tmp:16m var/log:16m; do
    [ -d "$R/${d%:*}" ] || continue
    mount -t tmpfs -o "mode=0755,nosuid,nodev,size=${d#*:}" tmpfs "$R/.oldroot" || fail "cannot mount a tmpfs"
    cp -a "$R/${d%:*}/." "$R/.oldroot/" || fail "cannot copy /${d%:*}"
    mount --move "$R/.oldroot" "$R/${d%:*}" || fail "cannot mount /${d%:*}"
done
mount -o remount,bind,ro "$R" || fail "cannot make $R read-only"
cd "$R" || fail "cannot enter $R"
pivot_root . .oldroot || fail "pivot_root into $R failed"
cd / || fail "cannot enter the new root"
"/.oldroot$LOADER" --library-path "/.oldroot${LIBS%%:*}:/.oldroot${LIBS#*:}" "/.oldroot$UMOUNT" -l /.oldroot ||
    fail "cannot detach the host's tree"
for fd in /proc/self/fd/*; do
    n=${fd##*/}
    case $n in
        0 | 1 | 2) ;;
        *) eval "exec $n>&-" 2>/dev/null ;;
    esac
done
exec </dev/null >/dev/null 2>&1
exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /usr/bin/setsid /bin/sh -c "$INIT" vrmig-oci-init "$@"
