/*
 * The guest's side of `cargo xtask test-in-vm --virtiofs` (see
 * xtask/src/vm/virtiofs.rs): file operations, a data-integrity check and a
 * load, run on a virtiofs mount that the host's passthroughfs serves.
 *
 *   vm-virtiofs check DIR      file operations; the file the host seeded;
 *                              random reads and writes against a model in
 *                              memory, buffered and O_DIRECT; files left
 *                              for the host to compare
 *   vm-virtiofs reconnect DIR  a later boot against the same daemon: the
 *                              files the first boot left are there
 *   vm-virtiofs load DIR       writes 1 MiB blocks until killed
 *   vm-virtiofs prepare DIR    the file the benchmark's I/O workloads use
 *   vm-virtiofs syscount DIR LABEL MIB
 *                              each benchmark workload a fixed number of
 *                              times after a marker LOOKUP (the host
 *                              counts the daemon's syscalls per operation)
 *   vm-virtiofs bench DIR SECS LABEL WORKLOAD
 *                              one benchmark workload for SECS seconds
 *
 * Lines the host reads (anywhere in a console line):
 *   XTASK-VIRTIOFS-HASH: NAME SIZE FNV1A64   a file the host compares
 *   XTASK-VIRTIOFS-LOAD: N                   writes done so far
 *   XTASK-VIRTIOFS-BENCH: LABEL NAME OPS BYTES SECS  a workload's result
 *   XTASK-VIRTIOFS-SYSCOUNT: LABEL NAME OPS  a syscount phase begins
 * Every failed check prints "FAIL: ..." and makes the exit status 1.
 *
 * Data is a pattern of xorshift64* words from a seed; the host makes the
 * same pattern to check what the guest wrote.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static int failures;

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("FAIL: ");
	vprintf(fmt, ap);
	printf(" (errno %d: %s)\n", errno, strerror(errno));
	va_end(ap);
	fflush(stdout);
	failures++;
}

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		errno = 0;                                                     \
		if (!(cond))                                                   \
			fail(__VA_ARGS__);                                     \
	} while (0)

static uint64_t next_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* The pattern: byte i of a file made from `seed`. */
static void pattern(unsigned char *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed | 1, w = 0;
	for (size_t i = 0; i < len; i++) {
		if (i % 8 == 0)
			w = next_rand(&s);
		buf[i] = (unsigned char)(w >> (8 * (i % 8)));
	}
}

static uint64_t fnv1a(const unsigned char *buf, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < len; i++) {
		h ^= buf[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static char *path(const char *dir, const char *name)
{
	static char bufs[4][4096];
	static int at;
	char *p = bufs[at++ % 4];
	snprintf(p, 4096, "%s/%s", dir, name);
	return p;
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
	const unsigned char *b = buf;
	while (len > 0) {
		ssize_t n = pwrite(fd, b, len, off);
		if (n <= 0)
			return -1;
		b += n, len -= (size_t)n, off += n;
	}
	return 0;
}

static ssize_t read_all(int fd, void *buf, size_t len, off_t off)
{
	unsigned char *b = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, b + done, len - done, off + (off_t)done);
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static unsigned char *slurp(const char *p, size_t *len)
{
	int fd = open(p, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return NULL;
	unsigned char *buf = malloc((size_t)st.st_size + 1);
	ssize_t n = read_all(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return NULL;
	}
	*len = (size_t)n;
	return buf;
}

static void report_hash(const char *dir, const char *name)
{
	size_t len = 0;
	unsigned char *buf = slurp(path(dir, name), &len);
	CHECK(buf != NULL, "reading %s back", name);
	if (!buf)
		return;
	printf("XTASK-VIRTIOFS-HASH: %s %zu %016" PRIx64 "\n", name, len,
	       fnv1a(buf, len));
	free(buf);
}

/* Creating, renaming, linking, listing, changing modes, removing. */
static void file_ops(const char *dir)
{
	const char text[] = "hello virtio-fs\n";
	char buf[256];
	struct stat st;

	CHECK(mkdir(path(dir, "d"), 0755) == 0, "mkdir d");
	int fd = open(path(dir, "d/f1"), O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(fd >= 0, "create d/f1");
	CHECK(write(fd, text, sizeof text - 1) == sizeof text - 1, "write d/f1");
	CHECK(fsync(fd) == 0, "fsync d/f1");
	CHECK(close(fd) == 0, "close d/f1");
	CHECK(rename(path(dir, "d/f1"), path(dir, "d/f2")) == 0, "rename");
	CHECK(access(path(dir, "d/f1"), F_OK) < 0 && errno == ENOENT,
	      "d/f1 gone after rename");
	fd = open(path(dir, "d/f2"), O_RDONLY);
	CHECK(fd >= 0, "open d/f2");
	memset(buf, 0, sizeof buf);
	CHECK(read(fd, buf, sizeof buf) == sizeof text - 1 &&
		      memcmp(buf, text, sizeof text - 1) == 0,
	      "read d/f2 back");
	close(fd);
	CHECK(symlink("d/f2", path(dir, "link")) == 0, "symlink");
	ssize_t n = readlink(path(dir, "link"), buf, sizeof buf);
	CHECK(n == 4 && memcmp(buf, "d/f2", 4) == 0, "readlink");
	CHECK(stat(path(dir, "link"), &st) == 0 && S_ISREG(st.st_mode) &&
		      st.st_size == sizeof text - 1,
	      "stat through the symlink");
	CHECK(chmod(path(dir, "d/f2"), 0640) == 0, "chmod");
	CHECK(stat(path(dir, "d/f2"), &st) == 0 && (st.st_mode & 07777) == 0640,
	      "mode after chmod");
	CHECK(link(path(dir, "d/f2"), path(dir, "d/hard")) == 0, "link");
	CHECK(stat(path(dir, "d/f2"), &st) == 0 && st.st_nlink == 2,
	      "two links");
	CHECK(unlink(path(dir, "d/hard")) == 0, "unlink");
	CHECK(mkdir(path(dir, "d/sub"), 0700) == 0, "mkdir d/sub");
	CHECK(rmdir(path(dir, "d/sub")) == 0, "rmdir d/sub");
	CHECK(truncate(path(dir, "link"), 5) == 0 &&
		      stat(path(dir, "d/f2"), &st) == 0 && st.st_size == 5,
	      "truncate through the symlink");
	fd = open(path(dir, "d/f2"), O_WRONLY | O_TRUNC);
	CHECK(fd >= 0 && write(fd, text, sizeof text - 1) == sizeof text - 1,
	      "rewrite d/f2");
	close(fd);

	DIR *d = opendir(path(dir, "d"));
	CHECK(d != NULL, "opendir d");
	int seen = 0, others = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (!strcmp(e->d_name, "f2"))
			seen++;
		else
			others++;
	}
	if (d)
		closedir(d);
	CHECK(seen == 1 && others == 0, "readdir d: f2 only (%d, %d others)",
	      seen, others);

	/* Many entries: readdir across several replies. */
	CHECK(mkdir(path(dir, "many"), 0755) == 0, "mkdir many");
	for (int i = 0; i < 500; i++) {
		char name[64];
		snprintf(name, sizeof name, "many/entry-with-a-longish-name-%04d", i);
		fd = open(path(dir, name), O_CREAT | O_WRONLY, 0600);
		CHECK(fd >= 0, "create %s", name);
		close(fd);
	}
	d = opendir(path(dir, "many"));
	int count = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		count += e->d_name[0] != '.';
	if (d)
		closedir(d);
	CHECK(count == 500, "readdir many: %d of 500 entries", count);

	struct statfs sf;
	CHECK(statfs(dir, &sf) == 0 && sf.f_blocks > 0, "statfs");
	CHECK(open(path(dir, "nope/x"), O_RDONLY) < 0 && errno == ENOENT,
	      "ENOENT for a missing path");
}

/* The file the host wrote before the boot. */
static void host_file(const char *dir)
{
	size_t len = 0;
	unsigned char *got = slurp(path(dir, "from-host.bin"), &len);
	CHECK(got != NULL && len == 5 * 1024 * 1024 + 77,
	      "from-host.bin: size %zu", len);
	if (!got)
		return;
	unsigned char *want = malloc(len);
	pattern(want, len, 1);
	CHECK(memcmp(got, want, len) == 0, "from-host.bin: content");
	free(got);
	free(want);
}

/* Random reads and writes against a model, through a buffered and an
 * O_DIRECT descriptor, interleaved; then the whole file compared. */
static void integrity(const char *dir)
{
	const size_t size = 16 << 20;
	const size_t max_io = 1 << 20;
	unsigned char *model = calloc(size, 1);
	unsigned char *buf = NULL, *check = NULL;
	if (posix_memalign((void **)&buf, 4096, max_io) ||
	    posix_memalign((void **)&check, 4096, max_io + 4096)) {
		fail("posix_memalign");
		return;
	}
	int fd = open(path(dir, "model.bin"), O_CREAT | O_TRUNC | O_RDWR, 0644);
	CHECK(fd >= 0, "create model.bin");
	CHECK(ftruncate(fd, (off_t)size) == 0, "ftruncate model.bin");
	int dfd = open(path(dir, "model.bin"), O_RDWR | O_DIRECT);
	CHECK(dfd >= 0, "open model.bin O_DIRECT");
	uint64_t s = 0x5eed;
	int ops = 0, direct_ops = 0, bad_reads = 0;
	for (int i = 0; i < 1500; i++) {
		int direct = dfd >= 0 && next_rand(&s) % 3 == 0;
		size_t len, off;
		if (direct) {
			len = 4096 * (1 + next_rand(&s) % (max_io / 4096));
			off = 4096 * (next_rand(&s) % ((size - len) / 4096 + 1));
		} else {
			len = 1 + next_rand(&s) % max_io;
			off = next_rand(&s) % (size - len + 1);
		}
		int use = direct ? dfd : fd;
		if (next_rand(&s) % 2) {
			pattern(buf, len, next_rand(&s));
			if (write_all(use, buf, len, (off_t)off) != 0) {
				fail("write %zu at %zu (%s)", len, off,
				     direct ? "O_DIRECT" : "buffered");
				break;
			}
			memcpy(model + off, buf, len);
		} else {
			ssize_t n = read_all(use, check, len, (off_t)off);
			if (n != (ssize_t)len || memcmp(check, model + off, len)) {
				if (bad_reads++ < 5)
					fail("read %zu at %zu (%s): %zd bytes, %s",
					     len, off,
					     direct ? "O_DIRECT" : "buffered", n,
					     n == (ssize_t)len ? "wrong data"
							       : "short");
			}
		}
		ops++;
		direct_ops += direct;
	}
	/* A whole 1 MiB-aligned write of 1 MiB: the 256-page WRITE. */
	pattern(buf, max_io, 99);
	CHECK(dfd >= 0 && write_all(dfd, buf, max_io, 3 << 20) == 0,
	      "1 MiB O_DIRECT write");
	memcpy(model + (3 << 20), buf, max_io);
	CHECK(fsync(fd) == 0, "fsync model.bin");
	for (size_t off = 0; off < size; off += max_io) {
		ssize_t n = read_all(fd, check, max_io, (off_t)off);
		CHECK(n == (ssize_t)max_io && memcmp(check, model + off, max_io) == 0,
		      "model.bin differs from the model in [%zu, +1 MiB)", off);
	}
	close(fd);
	if (dfd >= 0)
		close(dfd);
	printf("integrity: %d random operations (%d O_DIRECT), 16 MiB compared\n",
	       ops, direct_ops);
	printf("XTASK-VIRTIOFS-HASH: model.bin %zu %016" PRIx64 "\n", size,
	       fnv1a(model, size));
	free(model);
	free(buf);
	free(check);
}

/* A file for the host to compare, and for the next boot. */
static void guest_file(const char *dir)
{
	size_t len = 3 * 1024 * 1024 + 123;
	unsigned char *buf = malloc(len);
	pattern(buf, len, 2);
	int fd = open(path(dir, "from-guest.bin"), O_CREAT | O_TRUNC | O_WRONLY,
		      0644);
	CHECK(fd >= 0 && write_all(fd, buf, len, 0) == 0, "write from-guest.bin");
	CHECK(fd >= 0 && close(fd) == 0, "close from-guest.bin");
	free(buf);
	report_hash(dir, "from-guest.bin");
	report_hash(dir, "d/f2");
}

static void reconnect(const char *dir)
{
	size_t len = 0;
	unsigned char *got = slurp(path(dir, "from-guest.bin"), &len);
	CHECK(got != NULL && len == 3 * 1024 * 1024 + 123,
	      "from-guest.bin of the first boot: size %zu", len);
	if (got) {
		unsigned char *want = malloc(len);
		pattern(want, len, 2);
		CHECK(memcmp(got, want, len) == 0,
		      "from-guest.bin of the first boot: content");
		free(want);
		free(got);
	}
	char buf[64] = { 0 };
	CHECK(readlink(path(dir, "link"), buf, sizeof buf) == 4,
	      "the first boot's symlink");
}

static void load(const char *dir)
{
	unsigned char *buf = malloc(1 << 20);
	pattern(buf, 1 << 20, 3);
	int fd = open(path(dir, "load.bin"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
	if (fd < 0) {
		fail("create load.bin");
		return;
	}
	uint64_t s = 7;
	for (long i = 1;; i++) {
		off_t off = (off_t)(next_rand(&s) % 64) << 20;
		if (write_all(fd, buf, 1 << 20, off) != 0) {
			printf("XTASK-VIRTIOFS-LOAD: write %ld failed: %s\n", i,
			       strerror(errno));
			fflush(stdout);
			sleep(1);
		}
		if (i % 16 == 0) {
			printf("XTASK-VIRTIOFS-LOAD: %ld\n", i);
			fflush(stdout);
		}
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *bench_label = "-";

static void bench_result(const char *name, long ops, long long bytes, double secs)
{
	printf("XTASK-VIRTIOFS-BENCH: %s %s %ld %lld %.3f\n", bench_label, name, ops,
	       bytes, secs);
}

/* O_DIRECT transfers of `block` bytes on a file of `size` bytes, for
 * `secs` seconds: sequential (wrapping) or at random aligned offsets. */
static void bench_io(const char *dir, const char *name, size_t block,
		     size_t size, int write, int random, double secs)
{
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 4096, block)) {
		fail("posix_memalign");
		return;
	}
	pattern(buf, block, 5);
	int fd = open(path(dir, "bench.bin"), O_RDWR | O_DIRECT);
	CHECK(fd >= 0, "open bench.bin O_DIRECT");
	if (fd < 0) {
		free(buf);
		return;
	}
	uint64_t s = 11;
	size_t blocks = size / block, at = 0;
	long ops = 0;
	double start = now(), end = start + secs, t = start;
	while (t < end) {
		size_t b = random ? next_rand(&s) % blocks : at++ % blocks;
		ssize_t n = write ? pwrite(fd, buf, block, (off_t)(b * block))
				  : pread(fd, buf, block, (off_t)(b * block));
		if (n != (ssize_t)block) {
			fail("%s: %zd of %zu bytes", name, n, block);
			break;
		}
		ops++;
		if (ops % 16 == 0)
			t = now();
	}
	t = now();
	close(fd);
	free(buf);
	bench_result(name, ops, (long long)ops * (long long)block, t - start);
}

/* Create, stat and unlink a file, over and over, for `secs` seconds. */
static void bench_metadata(const char *dir, double secs)
{
	CHECK(mkdir(path(dir, "meta"), 0755) == 0 || errno == EEXIST, "mkdir meta");
	long ops = 0;
	double start = now(), end = start + secs, t = start;
	char name[64];
	struct stat st;
	while (t < end) {
		snprintf(name, sizeof name, "meta/f%ld", ops);
		int fd = open(path(dir, name), O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0 || close(fd) || stat(path(dir, name), &st) ||
		    unlink(path(dir, name))) {
			fail("metadata: %s", name);
			break;
		}
		ops++;
		if (ops % 8 == 0)
			t = now();
	}
	t = now();
	bench_result("create-stat-unlink", ops, 0, t - start);
}

#define BENCH_FILE_SIZE ((size_t)64 << 20)
/* Files in the directory the stat and readdir workloads use. */
#define BENCH_DIR_FILES 1000

/* stat the directory's files one after another, for `secs` seconds (a
 * LOOKUP or GETATTR each once the guest's cache times out). */
static void bench_stat(const char *dir, double secs)
{
	long ops = 0;
	double start = now(), end = start + secs, t = start;
	char name[64];
	struct stat st;
	while (t < end) {
		snprintf(name, sizeof name, "tree/f%ld", ops % BENCH_DIR_FILES);
		if (stat(path(dir, name), &st)) {
			fail("stat %s", name);
			break;
		}
		ops++;
		if (ops % 16 == 0)
			t = now();
	}
	t = now();
	bench_result("stat", ops, 0, t - start);
}

/* List the directory whole, over and over, for `secs` seconds. */
static void bench_readdir(const char *dir, double secs)
{
	long ops = 0;
	double start = now(), end = start + secs, t = start;
	while (t < end) {
		DIR *d = opendir(path(dir, "tree"));
		long n = 0;
		if (!d) {
			fail("opendir tree");
			break;
		}
		while (readdir(d))
			n++;
		closedir(d);
		if (n != BENCH_DIR_FILES + 2) {
			fail("readdir tree: %ld entries", n);
			break;
		}
		ops++;
		t = now();
	}
	bench_result("readdir", ops, 0, t - start);
}

/* The file the I/O workloads use, written whole. */
static void bench_prepare(const char *dir)
{
	int fd = open(path(dir, "bench.bin"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
	unsigned char *buf = malloc(1 << 20);
	pattern(buf, 1 << 20, 4);
	for (size_t off = 0; fd >= 0 && off < BENCH_FILE_SIZE; off += 1 << 20)
		CHECK(write_all(fd, buf, 1 << 20, (off_t)off) == 0, "fill bench.bin");
	CHECK(fd >= 0 && fsync(fd) == 0 && close(fd) == 0, "bench.bin");
	free(buf);
	CHECK(mkdir(path(dir, "tree"), 0755) == 0 || errno == EEXIST, "mkdir tree");
	char name[64];
	for (int i = 0; i < BENCH_DIR_FILES; i++) {
		snprintf(name, sizeof name, "tree/f%d", i);
		int f = open(path(dir, name), O_CREAT | O_WRONLY, 0644);
		CHECK(f >= 0 && close(f) == 0, "create %s", name);
	}
}

/* The start of a phase of `syscount`: a LOOKUP of a name that doesn't
 * exist, which the host finds in the daemon's trace (the name is an
 * argument of its syscalls). */
static void phase_marker(const char *dir, const char *label, const char *phase,
			 long ops)
{
	char name[96];
	struct stat st;
	snprintf(name, sizeof name, ".xtask-phase-%s", phase);
	CHECK(stat(path(dir, name), &st) < 0 && errno == ENOENT, "marker %s", name);
	if (ops >= 0)
		printf("XTASK-VIRTIOFS-SYSCOUNT: %s %s %ld\n", label, phase, ops);
}

/* Files in the directory of `syscount`'s stat and readdir phases. */
#define SYSCOUNT_FILES 200

/* The benchmark's workloads once each, a fixed number of operations, each
 * phase after a marker, for the host to count the syscalls the daemon
 * made per operation: `mib` O_DIRECT 1 MiB writes to `syscount.bin` (one
 * WRITE request of 256 pages each), 1000 O_DIRECT 4 KiB random writes and
 * reads there, 200 create/stat/unlink, 1000 stats of the files of a
 * 200-file directory, 20 listings of it. */
static void syscount(const char *dir, const char *label, int mib)
{
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 4096, 1 << 20)) {
		fail("posix_memalign");
		return;
	}
	pattern(buf, 1 << 20, 6);
	char name[64];
	CHECK(mkdir(path(dir, "sc"), 0755) == 0 || errno == EEXIST, "mkdir sc");
	for (int i = 0; i < SYSCOUNT_FILES; i++) {
		snprintf(name, sizeof name, "sc/f%d", i);
		int f = open(path(dir, name), O_CREAT | O_WRONLY, 0644);
		CHECK(f >= 0 && close(f) == 0, "create %s", name);
	}
	int fd = open(path(dir, "syscount.bin"), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT,
		      0644);
	CHECK(fd >= 0, "open syscount.bin O_DIRECT");
	if (fd < 0) {
		free(buf);
		return;
	}
	phase_marker(dir, label, "seq-write-1m", mib);
	for (int i = 0; i < mib; i++)
		CHECK(pwrite(fd, buf, 1 << 20, (off_t)i << 20) == 1 << 20,
		      "syscount.bin: 1 MiB write %d", i);
	uint64_t s = 3;
	size_t blocks = ((size_t)mib << 20) / 4096;
	phase_marker(dir, label, "rand-write-4k", 1000);
	for (int i = 0; i < 1000; i++)
		CHECK(pwrite(fd, buf, 4096, (off_t)(next_rand(&s) % blocks * 4096)) == 4096,
		      "4 KiB write %d", i);
	phase_marker(dir, label, "rand-read-4k", 1000);
	for (int i = 0; i < 1000; i++)
		CHECK(pread(fd, buf, 4096, (off_t)(next_rand(&s) % blocks * 4096)) == 4096,
		      "4 KiB read %d", i);
	CHECK(fsync(fd) == 0 && close(fd) == 0, "syscount.bin");
	struct stat st;
	phase_marker(dir, label, "create-stat-unlink", 200);
	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof name, "sc/m%d", i);
		int f = open(path(dir, name), O_CREAT | O_EXCL | O_WRONLY, 0644);
		CHECK(f >= 0 && close(f) == 0 && stat(path(dir, name), &st) == 0 &&
			      unlink(path(dir, name)) == 0,
		      "create-stat-unlink %s", name);
	}
	phase_marker(dir, label, "stat", 1000);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof name, "sc/f%d", i % SYSCOUNT_FILES);
		CHECK(stat(path(dir, name), &st) == 0, "stat %s", name);
	}
	phase_marker(dir, label, "readdir", 20);
	for (int i = 0; i < 20; i++) {
		DIR *d = opendir(path(dir, "sc"));
		long n = 0;
		CHECK(d != NULL, "opendir sc");
		while (d && readdir(d))
			n++;
		CHECK(n == SYSCOUNT_FILES + 2, "readdir sc: %ld entries", n);
		if (d)
			closedir(d);
	}
	phase_marker(dir, label, "end", -1);
	free(buf);
}

static void bench(const char *dir, double secs, const char *workload)
{
	const size_t size = BENCH_FILE_SIZE;
	if (!strcmp(workload, "seq-write-1m"))
		bench_io(dir, workload, 1 << 20, size, 1, 0, secs);
	else if (!strcmp(workload, "seq-read-1m"))
		bench_io(dir, workload, 1 << 20, size, 0, 0, secs);
	else if (!strcmp(workload, "rand-write-4k"))
		bench_io(dir, workload, 4096, size, 1, 1, secs);
	else if (!strcmp(workload, "rand-read-4k"))
		bench_io(dir, workload, 4096, size, 0, 1, secs);
	else if (!strcmp(workload, "create-stat-unlink"))
		bench_metadata(dir, secs);
	else if (!strcmp(workload, "stat"))
		bench_stat(dir, secs);
	else if (!strcmp(workload, "readdir"))
		bench_readdir(dir, secs);
	else
		fail("unknown workload %s", workload);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr,
			"usage: %s check|reconnect|load|prepare DIR | "
			"syscount DIR LABEL MIB | bench DIR SECS LABEL WORKLOAD\n",
			argv[0]);
		return 2;
	}
	const char *dir = argv[2];
	if (!strcmp(argv[1], "check")) {
		file_ops(dir);
		host_file(dir);
		integrity(dir);
		guest_file(dir);
	} else if (!strcmp(argv[1], "reconnect")) {
		reconnect(dir);
	} else if (!strcmp(argv[1], "load")) {
		load(dir);
	} else if (!strcmp(argv[1], "syscount") && argc == 5) {
		syscount(dir, argv[3], atoi(argv[4]));
	} else if (!strcmp(argv[1], "prepare")) {
		bench_prepare(dir);
	} else if (!strcmp(argv[1], "bench") && argc == 6) {
		bench_label = argv[4];
		bench(dir, atof(argv[3]), argv[5]);
		/* One line per run is enough: no failure count. */
		return failures ? 1 : 0;
	} else {
		fprintf(stderr, "unknown mode %s\n", argv[1]);
		return 2;
	}
	printf("%s: %d failure(s)\n", argv[1], failures);
	return failures ? 1 : 0;
}
