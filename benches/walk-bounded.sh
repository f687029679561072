#!/bin/sh
# A walk over a large tree through passthroughfs, for the bounded inode
# table (--max-nodes, FUSE_NOTIFY_PRUNE): see docs/benchmarks.md.
#
#   benches/walk-bounded.sh FILES [DAEMON-ARGS...]
#
# Makes (once, kept for the next run) a source of FILES empty files in
# directories of 10,000 under $WALK_DIR (default target/walk-bounded),
# mounts it with target/release/passthroughfs --foreground
# --no-passthrough DAEMON-ARGS, drops the kernel's clean dentries and
# inodes (so every run starts cold), walks the mount with `find -ls` and
# prints one line: files seen, errors, seconds, files per second, the
# daemon's peak and final RSS, and the inodes it holds and its heap in
# use after the walk (SIGUSR1's state line). Needs root. Not a test: nothing is asserted.
# WALK_DROP=0 leaves the kernel's caches alone (dropping them is
# machine-wide: it disturbs whatever else runs there).
set -eu

files=${1:?usage: benches/walk-bounded.sh FILES [DAEMON-ARGS...]}
shift
daemon=${DAEMON:-target/release/passthroughfs}
base=${WALK_DIR:-target/walk-bounded}
src=$base/src-$files
mnt=$base/mnt
log=$base/daemon.log
per_dir=10000

[ -x "$daemon" ] || { echo "no $daemon: cargo build --release -p fusewire-passthroughfs" >&2; exit 1; }
mkdir -p "$base" "$mnt"
if [ ! -e "$src/.complete" ]; then
    rm -rf "$src"
    mkdir -p "$src"
    d=0
    left=$files
    while [ "$left" -gt 0 ]; do
        n=$((left < per_dir ? left : per_dir))
        mkdir "$src/d$d"
        (cd "$src/d$d" && seq -f 'f%.0f' 1 "$n" | xargs touch)
        left=$((left - n))
        d=$((d + 1))
    done
    touch "$src/.complete"
fi

: >"$log"
"$daemon" --foreground --no-passthrough "$@" "$src" "$mnt" 2>>"$log" &
pid=$!
cleanup() {
    if grep -q " $(realpath "$mnt") fuse" /proc/self/mounts; then umount "$mnt" || umount -l "$mnt"; fi
    wait "$pid" 2>/dev/null || true
}
trap cleanup EXIT
i=0
until grep -q " $(realpath "$mnt") fuse" /proc/self/mounts; do
    i=$((i + 1))
    [ "$i" -lt 300 ] || { echo "the mount did not come up; see $log" >&2; exit 1; }
    kill -0 "$pid" || { echo "the daemon exited; see $log" >&2; exit 1; }
    sleep 0.1
done

if [ "${WALK_DROP:-1}" != 0 ]; then
    sync
    echo 2 >/proc/sys/vm/drop_caches
fi
start=$(date +%s.%N)
seen=$(find "$mnt" -ls 2>"$base/errors" | wc -l)
end=$(date +%s.%N)
errors=$(wc -l <"$base/errors")
kill -USR1 "$pid"
sleep 1
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
inodes=$(grep 'file system state' "$log" | tail -1 | sed 's/.*inodes=\([0-9]*\).*/\1/')
heap=$(grep 'file system state' "$log" | tail -1 | sed -n 's/.*heap_bytes=\([0-9]*\).*/\1/p')
awk -v f="$files" -v seen="$seen" -v e="$errors" -v s="$start" -v t="$end" \
    -v hwm="$hwm" -v rss="$rss" -v inodes="$inodes" -v heap="${heap:-0}" -v args="$*" 'BEGIN {
    secs = t - s
    printf "files=%d seen=%d errors=%d secs=%.1f rate=%.0f/s peak_rss=%.1fMiB rss=%.1fMiB inodes=%s heap=%.1fMiB args=[%s]\n",
        f, seen, e, secs, seen / secs, hwm / 1024, rss / 1024, inodes, heap / 1048576, args
}'
