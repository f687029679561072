#!/bin/busybox sh
# /init of the initramfs that `cargo xtask test-in-vm` boots (see xtask/src/vm.rs).
#
# Sets up a minimal system (proc, sys, devtmpfs, /dev/fuse, /tmp,
# loopback, fusectl, /etc/passwd comes with the initramfs), then runs the
# plan the xtask generated (/xtask/plan.sh: the FUSE INIT probe and each test
# binary through `run_test`) and powers off.
#
# Lines the host parses (anywhere in a console line):
#   XTASK-VM-BOOTED: <uptime> <kernel release> enable_uring=<Y|N>
#   XTASK-VM-START: <name>
#   XTASK-VM-RESULT: <name> <exit status>      (128+N: killed by signal N)
#   XTASK-VM-DONE: <uptime>
# If this script fails or exits, the kernel panics (init died), `panic=-1`
# reboots at once and qemu's `-no-reboot` ends the run: the host then reports
# the missing sentinel.

/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root TMPDIR=/tmp TERM=dumb

mkdir -p /proc /sys /dev /tmp /root /run
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || echo "xtask-vm: devtmpfs not mounted"
# The kernel gives init the console only if the initramfs has /dev/console;
# take it from devtmpfs in any case.
[ -c /dev/console ] && exec </dev/console >/dev/console 2>&1
# FUSE is built in; devtmpfs normally has the node, create it if not.
[ -c /dev/fuse ] || mknod -m 666 /dev/fuse c 10 229
[ -c /dev/null ] || mknod -m 666 /dev/null c 1 3
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# A checkout under /tmp puts the test binaries and crate directories under
# /tmp in the initramfs: a tmpfs mounted there would hide them. The
# initramfs's root is writable already, so /tmp then stays as it is.
if [ -z "$(ls -A /tmp 2>/dev/null)" ]; then
	mount -t tmpfs -o mode=1777 tmpfs /tmp
else
	chmod 1777 /tmp
fi
mount -t tmpfs -o mode=755 tmpfs /run
mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null ||
	echo "xtask-vm: fusectl not mounted"
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
hostname xtask-vm
ulimit -n 65536 2>/dev/null

uptime_s() { cut -d' ' -f1 /proc/uptime; }

echo "XTASK-VM-BOOTED: $(uptime_s) $(uname -r) enable_uring=$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo '?')"

# run_test NAME DIR EXECUTABLE [ARGS...]: runs EXECUTABLE in DIR, with
# stdin from /dev/null, and reports its exit status.
run_test() {
	name=$1 dir=$2
	shift 2
	echo "XTASK-VM-START: $name"
	(cd "$dir" && exec "$@" </dev/null)
	status=$?
	echo
	echo "XTASK-VM-RESULT: $name $status"
}

if [ -f /xtask/plan.sh ]; then
	. /xtask/plan.sh
else
	echo "xtask-vm: /xtask/plan.sh is missing"
fi

echo "XTASK-VM-DONE: $(uptime_s)"
sync
poweroff -f
# Not reached unless poweroff failed; exiting makes the kernel panic, which
# (panic=-1, -no-reboot) also ends qemu.
exit 1
