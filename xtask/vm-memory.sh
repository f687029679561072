#!/bin/busybox sh
# The memory measurement of `cargo xtask test-in-vm --measure-memory` (see
# xtask/src/vm.rs and docs/fuse-uring-performance.md), run by the guest's
# /init through its plan:
#
#   vm-memory.sh DAEMON LOAD
#
# DAEMON is `passthroughfs`, LOAD the `direct_read_load` example of
# fuse-transport-uring. The plan sets, in the environment:
#   MEM_BUFS      buffers per queue to compare, e.g. "0 4u 4 4z" (0:
#                 per-entry; a trailing u: pools left unregistered; a
#                 trailing z: zero copy; all others without zero copy)
#   MEM_ENTRIES   ring entries per queue
#   MEM_ROUNDS    rounds; each runs every MEM_BUFS value once, alternating
#   MEM_SECONDS   seconds of load per run
#   MEM_READERS   reader threads per guest CPU
#   MEM_FILE_MIB  size of the file read, in MiB
#   MEM_PATTERN   rand-read, seq-read or seq-write
#   MEM_BLOCK     bytes per read or write
#
# One run: a fresh `DAEMON --uring --uring-bufs B --uring-entries E
# --uring-threads-per-queue 1 --no-passthrough` (with
# --uring-unregistered-pools for Bu, --uring-no-zero-copy but for Bz, which
# gets --zero-copy always)
# serves a tmpfs directory; LOAD reads or writes the file there with
# MEM_PATTERN O_DIRECT operations of MEM_BLOCK bytes from MEM_READERS
# threads per CPU (each pinned to its CPU, so every queue is loaded) and
# samples the daemon's
# /proc/PID/status; SIGUSR1 before and after the load
# makes the daemon log its transport state (mode, reserved and resident
# ring memory, requests), SIGTERM unmounts it. Each run prints one line
#   XTASK-MEMORY: key=value ...
# for the host's table. Exits non-zero if a run failed or served a
# different mode than asked (no pools with B > 0, pools with B = 0, reads
# that did not go through the rings, zero copy where not asked for, or
# not used or with copied bytes where asked for).

daemon=$1 load=$2
: "${MEM_BUFS:=0 4}" "${MEM_ENTRIES:=16}" "${MEM_ROUNDS:=5}" "${MEM_SECONDS:=10}"
: "${MEM_READERS:=16}" "${MEM_FILE_MIB:=256}" "${MEM_PATTERN:=rand-read}" "${MEM_BLOCK:=1048576}"
export NO_COLOR=1 RUST_LOG=info

src=/tmp/memory-src mnt=/tmp/memory-mnt logs=/tmp/memory-logs
mkdir -p "$src" "$mnt" "$logs"
cpus=$(nproc)
possible=$(cat /sys/devices/system/cpu/possible)
readers=$((MEM_READERS * cpus))
failed=0

thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)
echo "memory: $cpus CPUs online (possible: $possible), $(grep MemTotal /proc/meminfo), transparent hugepages: ${thp:-?}"
# Random content: buffers full of zeros could be split and partly freed by
# the kernel's shrinker of underused transparent hugepages.
echo "memory: writing a $MEM_FILE_MIB MiB file of random bytes on tmpfs"
dd if=/dev/urandom of="$src/data" bs=1048576 count="$MEM_FILE_MIB" 2>/dev/null || exit 1

# wait_for FILE PATTERN SECONDS: until PATTERN is in FILE.
wait_for() {
	i=0
	while ! grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ "$i" -gt $(($3 * 10)) ] && return 1
		sleep 0.1
	done
}

# field NAME FILE: the value of NAME=value in the last "transport state" line.
field() {
	grep 'transport state' "$2" | tail -n 1 | sed -n "s/.* $1=\([^ ]*\).*/\1/p"
}

# cpu_ticks PID: user + system clock ticks of the process so far.
cpu_ticks() {
	awk '{print $14 + $15}' "/proc/$1/stat"
}

# one_run ROUND BUFS
one_run() {
	round=$1 label=$2
	bufs=${label%[uz]}
	unregistered= nozc=--uring-no-zero-copy
	case $label in
	*u) unregistered=--uring-unregistered-pools ;;
	# Every file, O_DIRECT opens on tmpfs too (the default policy leaves
	# those to the copying path: tmpfs has no RWF_NOWAIT).
	*z) nozc="--zero-copy always" ;;
	esac
	log=$logs/daemon-$round-$label.log
	out=$logs/load-$round-$label.txt
	echo "memory: round $round, --uring-bufs $bufs --uring-entries $MEM_ENTRIES $unregistered $nozc"
	# --no-passthrough: with kernel passthrough the kernel would read the
	# backing file itself and no READ would reach the rings. One ring
	# thread per queue holds all of a queue's entries, as in the runs that
	# docs/fuse-uring-performance.md reports.
	"$daemon" --foreground --uring --uring-bufs "$bufs" --uring-entries "$MEM_ENTRIES" \
		--uring-threads-per-queue 1 --no-passthrough $unregistered $nozc "$src" "$mnt" 2>"$log" &
	pid=$!
	if ! wait_for "$log" "passthroughfs serving" 120; then
		echo "memory: the daemon did not start:"
		cat "$log"
		kill -KILL "$pid" 2>/dev/null
		umount -l "$mnt" 2>/dev/null
		return 1
	fi
	grep "passthroughfs serving" "$log"
	status=0
	# The ring memory before any load: mapped at start, resident as used.
	kill -USR1 "$pid"
	wait_for "$log" "transport state" 30 || status=1
	resident_idle=$(field resident "$log")
	mounted=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
	ticks0=$(cpu_ticks "$pid")
	"$load" "$mnt/data" --threads "$readers" --seconds "$MEM_SECONDS" \
		--pattern "$MEM_PATTERN" --block "$MEM_BLOCK" --watch "$pid" >"$out" || status=$?
	ticks1=$(cpu_ticks "$pid")
	cat "$out"
	huge=$(awk '/^AnonHugePages:/ {print $2}' "/proc/$pid/smaps_rollup")
	kill -USR1 "$pid"
	i=0
	while [ "$(grep -c 'transport state' "$log")" -lt 2 ]; do
		i=$((i + 1))
		[ "$i" -gt 300 ] && { status=1; break; }
		sleep 0.1
	done
	grep "transport state" "$log" | tail -n 1
	reserved=$(field reserved "$log")
	resident=$(field resident "$log")
	ring=$(field ring_requests "$log")
	pooled=$(field pooled_requests "$log")
	zc=$(field zero_copy_requests "$log")
	zc_copied=$(field zero_copy_copied_bytes "$log")
	kill -TERM "$pid"
	i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		if [ "$i" -gt 600 ]; then
			echo "memory: the daemon did not exit on SIGTERM"
			kill -KILL "$pid"
			status=1
			break
		fi
		sleep 0.1
	done
	wait "$pid" || status=1
	grep -q " $mnt " /proc/mounts && { umount -l "$mnt"; status=1; }
	if [ "$status" != 0 ]; then
		echo "memory: the run failed; daemon log:"
		cat "$log"
		return 1
	fi
	reads=$(sed -n 's/.* reads=\([0-9]*\).*/\1/p' "$out")
	# The serving line names the transport, "registered buffer pools" only
	# when they are.
	case "$(grep 'passthroughfs serving' "$log")" in
	*"registered buffer pools"*) registered=1 ;;
	*) registered=0 ;;
	esac
	if [ "$bufs" -gt 0 ] && [ -z "$unregistered" ] && [ "$registered" = 0 ]; then
		echo "memory: --uring-bufs $bufs but the pools are not registered"
		return 1
	fi
	if [ -n "$unregistered" ] && [ "$registered" = 1 ]; then
		echo "memory: --uring-unregistered-pools but the pools are registered"
		return 1
	fi
	case "$(grep 'passthroughfs serving' "$log")" in
	*"zero copy"*) zero_copy=1 ;;
	*) zero_copy=0 ;;
	esac
	if [ "$nozc" = --uring-no-zero-copy ] && { [ "$zero_copy" = 1 ] || [ "${zc:-0}" -ne 0 ]; }; then
		echo "memory: --uring-no-zero-copy but zero copy is on ($zc requests)"
		return 1
	fi
	if [ "$nozc" != --uring-no-zero-copy ] && { [ "$zero_copy" = 0 ] || [ "${zc:-0}" -eq 0 ] || [ "${zc_copied:-1}" -ne 0 ]; }; then
		echo "memory: zero copy asked for, but on: $zero_copy, requests: ${zc:-0}, copied bytes: ${zc_copied:-?}"
		return 1
	fi
	if [ "$bufs" -gt 0 ] && [ "${pooled:-0}" -eq 0 ]; then
		echo "memory: --uring-bufs $bufs but no request used a pool buffer"
		return 1
	fi
	if [ "$bufs" -eq 0 ] && [ "${pooled:-0}" -ne 0 ]; then
		echo "memory: --uring-bufs 0 but requests used pool buffers"
		return 1
	fi
	if [ "${ring:-0}" -lt "${reads:-1}" ]; then
		echo "memory: $reads reads but only ${ring:-0} requests through the rings"
		return 1
	fi
	# The daemon's CPU time during the load, in milliseconds (USER_HZ 100).
	cpu_ms=$(((ticks1 - ticks0) * 10))
	echo "XTASK-MEMORY: cpus=$cpus possible=$possible thp=${thp:-?} bufs=$label cpu_ms=$cpu_ms entries=$MEM_ENTRIES round=$round file_mib=$MEM_FILE_MIB rss_mounted_kib=$mounted $(cat "$out") reserved=$reserved resident_idle=$resident_idle resident=$resident anon_huge_kib=${huge:-0} ring_requests=$ring pooled_requests=$pooled zero_copy_requests=${zc:-0} zero_copy_copied_bytes=${zc_copied:-0}"
}

round=1
while [ "$round" -le "$MEM_ROUNDS" ]; do
	for bufs in $MEM_BUFS; do
		one_run "$round" "$bufs" || failed=1
	done
	round=$((round + 1))
done
rm -f "$src/data"
exit $failed
