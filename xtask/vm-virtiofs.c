/*
 * The guest's side of `cargo xtask test-in-vm --virtiofs` (see
 * xtask/src/vm/virtiofs/): file operations, a data-integrity check and a
 * load, run on a virtiofs mount that the host's passthroughfs serves.
 *
 *   vm-virtiofs check DIR      file operations; the file the host seeded;
 *                              random reads and writes against a model in
 *                              memory, buffered and O_DIRECT; files left
 *                              for the host to compare; then the mount
 *                              suite's operations (each in a directory of
 *                              its own): xattrs, setattr (modes, owners,
 *                              truncation, times), renameat2 flags, hard
 *                              links, O_APPEND, fallocate and
 *                              SEEK_DATA/SEEK_HOLE, copy_file_range,
 *                              O_TMPFILE, special files, statx,
 *                              telldir/seekdir and a changing listing, a
 *                              shared writable mapping, concurrent writers
 *                              (child processes), lock waits between
 *                              processes (fcntl, OFD, flock)
 *   vm-virtiofs seed DIR       the file the host seeds, to run check on
 *                              the host (a plain directory or a FUSE mount)
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
 * Every failed check prints "FAIL: ..." and makes the exit status 1; a
 * feature the backing file system lacks prints "SKIP: ..." (the host lists
 * them). Child processes are sequenced by pipes, never by sleeping; the
 * only waits with a limit (PATIENCE_SECS, generous for TCG) are for
 * something that must happen, such as a lock waiter being seen asleep.
 *
 * Data is a pattern of xorshift64* words from a seed; the host makes the
 * same pattern to check what the guest wrote.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static int failures, skips;

static void fail(const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	printf("FAIL: ");
	vprintf(fmt, ap);
	printf(" (errno %d: %s)\n", e, strerror(e));
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

/* A path kept past the next calls of path(), which reuses its buffers. */
#define HELD_PATH(var, dir, name)                                              \
	char var[4096];                                                        \
	snprintf(var, sizeof var, "%s/%s", dir, name)

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

/* Whether file p holds exactly the len bytes at want. */
static int holds(const char *p, const void *want, size_t len)
{
	size_t n = 0;
	unsigned char *got = slurp(p, &n);
	int same = got && n == len && !memcmp(got, want, len);
	free(got);
	return same;
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

/*
 * The mount suite's file operations (crates/fuse-backend-passthrough/tests),
 * each in a directory of its own under DIR. A feature the backing file
 * system lacks prints "SKIP: ..." (counted, never silent); the lock waits
 * and concurrent writers run in child processes, sequenced by pipes.
 */

/* How long anything that must happen may take (a child's answer, a lock
 * wait to show up): only a broken mount takes this long. */
#define PATIENCE_SECS 120

static void skip(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("SKIP: ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	skips++;
}

/* A child process and the pipes to it: commands down, answers up, a byte
 * each. Its exit status is its failure count. */
struct child {
	pid_t pid;
	int to, from;
};

/* Runs `fn(in, out, arg)` in a child with no descriptor of the parent but
 * its pipes (a descriptor inherited would keep the parent's open files,
 * and with them their locks, alive). */
static int spawn(struct child *c, void (*fn)(int in, int out, void *arg), void *arg)
{
	int down[2], up[2];
	if (pipe(down)) {
		fail("pipe");
		return -1;
	}
	if (pipe(up)) {
		fail("pipe");
		close(down[0]), close(down[1]);
		return -1;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		fail("fork");
		close(down[0]), close(down[1]), close(up[0]), close(up[1]);
		return -1;
	}
	if (pid == 0) {
		for (int fd = 3; fd < 1024; fd++)
			if (fd != down[0] && fd != up[1])
				close(fd);
		failures = 0;
		fn(down[0], up[1], arg);
		fflush(stdout);
		_exit(failures > 100 ? 100 : failures);
	}
	close(down[0]);
	close(up[1]);
	c->pid = pid;
	c->to = down[1];
	c->from = up[0];
	return 0;
}

static void tell(struct child *c, char b)
{
	if (write(c->to, &b, 1) != 1)
		fail("telling child %d '%c'", (int)c->pid, b);
}

/* The child's next byte, waiting at most `secs` seconds: -1 if none came
 * (or the pipe closed). */
static int answer_within(struct child *c, int secs)
{
	struct pollfd p = { .fd = c->from, .events = POLLIN };
	int r;
	do
		r = poll(&p, 1, secs * 1000);
	while (r < 0 && errno == EINTR);
	unsigned char b;
	if (r <= 0 || read(c->from, &b, 1) != 1)
		return -1;
	return b;
}

/* The child's next byte must be `want`. */
static int expect(struct child *c, char want, const char *what)
{
	int got = answer_within(c, PATIENCE_SECS);
	CHECK(got == want, "%s: child %d answered %d, not '%c'%s", what,
	      (int)c->pid, got, want,
	      got < 0 ? " (nothing in " STR(PATIENCE_SECS) " s)" : "");
	return got == want;
}

/* The parent's next command, in a child. */
static int command(int in)
{
	unsigned char b;
	return read(in, &b, 1) == 1 ? b : -1;
}

static void say(int out, char b)
{
	if (write(out, &b, 1) != 1)
		fail("answering '%c'", b);
}

/* Set when the mount stopped answering: the checks that follow would wait
 * for it forever. */
static int stuck;

/* Tells the child to end and reaps it (within PATIENCE_SECS, killed if
 * need be; at once on a stuck mount); its failures count as ours. */
static void finish(struct child *c)
{
	int status = 0;
	pid_t r = 0;
	int kill_at = stuck ? 0 : PATIENCE_SECS * 10;
	tell(c, 'X');
	close(c->to);
	close(c->from);
	for (int i = 0; i <= kill_at + 50 && r == 0; i++) {
		r = waitpid(c->pid, &status, WNOHANG);
		if (r == 0 && i == kill_at) {
			if (!stuck)
				fail("child %d still running after " STR(PATIENCE_SECS)
				     " s: killed",
				     (int)c->pid);
			kill(c->pid, SIGKILL);
		}
		if (r == 0)
			usleep(100000);
	}
	if (r != c->pid) {
		fail("child %d can't be reaped, even killed (stuck in the mount?)",
		     (int)c->pid);
		stuck = 1;
		return;
	}
	if (WIFEXITED(status))
		failures += WEXITSTATUS(status);
	else
		fail("child %d ended by signal %d", (int)c->pid,
		     WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Waits until the child is seen asleep in system call `nr`
 * (/proc/PID/syscall), at most PATIENCE_SECS: 1 when seen, 0 if it
 * answered first (the answer in `*early`), -1 if never seen, -2 if the
 * kernel doesn't say. */
static int wait_asleep_in(struct child *c, long nr, int *early)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/syscall", (int)c->pid);
	for (int i = 0; i < PATIENCE_SECS * 100; i++) {
		struct pollfd pf = { .fd = c->from, .events = POLLIN };
		if (poll(&pf, 1, 0) > 0) {
			*early = answer_within(c, 0);
			return 0;
		}
		FILE *f = fopen(p, "r");
		if (!f)
			return -2;
		char word[32] = "";
		int got = fscanf(f, "%31s", word);
		fclose(f);
		if (got == 1 && strcmp(word, "running") != 0 &&
		    strtol(word, NULL, 10) == nr)
			return 1;
		usleep(10000);
	}
	return -1;
}

/* user.* attributes on a file and a directory: set, get (size query, too
 * small a buffer), list, remove, the XATTR_CREATE/REPLACE errors, ENODATA;
 * a symlink's own and its target's. */
static void xattrs(const char *dir)
{
	const size_t big = 4000;
	unsigned char want[4000], buf[4096];
	char list[4096];
	pattern(want, big, 3);
	CHECK(mkdir(path(dir, "xattr"), 0755) == 0, "mkdir xattr");
	CHECK(mkdir(path(dir, "xattr/d"), 0755) == 0, "mkdir xattr/d");
	int fd = open(path(dir, "xattr/f"), O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(fd >= 0, "create xattr/f");
	if (setxattr(path(dir, "xattr/f"), "user.one", "1", 1, 0) < 0) {
		if (errno == EOPNOTSUPP || errno == ENOTSUP)
			skip("xattrs: user.* attributes not supported (%s)",
			     strerror(errno));
		else
			fail("setxattr user.one on xattr/f");
		close(fd);
		return;
	}
	const char *names[] = { "xattr/f", "xattr/d" };
	for (int k = 0; k < 2; k++) {
		HELD_PATH(p, dir, names[k]);
		const char *n = names[k];
		CHECK(setxattr(p, "user.one", "1", 1, 0) == 0, "%s: set user.one", n);
		CHECK(setxattr(p, "user.big", want, big, 0) == 0, "%s: set user.big", n);
		CHECK(setxattr(p, "user.empty", "", 0, 0) == 0, "%s: set user.empty", n);
		memset(buf, 0, sizeof buf);
		CHECK(getxattr(p, "user.one", buf, 100) == 1 && buf[0] == '1',
		      "%s: get user.one", n);
		CHECK(getxattr(p, "user.big", NULL, 0) == (ssize_t)big,
		      "%s: size of user.big", n);
		CHECK(getxattr(p, "user.big", buf, sizeof buf) == (ssize_t)big &&
			      memcmp(buf, want, big) == 0,
		      "%s: get user.big", n);
		CHECK(getxattr(p, "user.big", buf, 10) < 0 && errno == ERANGE,
		      "%s: user.big into 10 bytes: ERANGE", n);
		CHECK(getxattr(p, "user.empty", buf, sizeof buf) == 0,
		      "%s: get user.empty", n);
		CHECK(getxattr(p, "user.none", buf, 10) < 0 && errno == ENODATA,
		      "%s: user.none: ENODATA", n);
		CHECK(setxattr(p, "user.one", "x", 1, XATTR_CREATE) < 0 &&
			      errno == EEXIST,
		      "%s: XATTR_CREATE of user.one: EEXIST", n);
		CHECK(setxattr(p, "user.two", "x", 1, XATTR_REPLACE) < 0 &&
			      errno == ENODATA,
		      "%s: XATTR_REPLACE of user.two: ENODATA", n);
		CHECK(setxattr(p, "user.one", "22", 2, XATTR_REPLACE) == 0 &&
			      getxattr(p, "user.one", buf, 10) == 2 &&
			      memcmp(buf, "22", 2) == 0,
		      "%s: XATTR_REPLACE of user.one", n);
		ssize_t len = listxattr(p, list, sizeof list);
		ssize_t size = listxattr(p, NULL, 0);
		CHECK(len > 0 && size == len, "%s: listxattr %zd, size %zd", n, len,
		      size);
		int found = 0;
		for (ssize_t at = 0; at < len; at += (ssize_t)strlen(list + at) + 1)
			found += !strcmp(list + at, "user.one") ||
				 !strcmp(list + at, "user.big") ||
				 !strcmp(list + at, "user.empty");
		CHECK(found == 3, "%s: listxattr names user.one, user.big, user.empty (%d)",
		      n, found);
		CHECK(listxattr(p, list, 5) < 0 && errno == ERANGE,
		      "%s: listxattr into 5 bytes: ERANGE", n);
		CHECK(removexattr(p, "user.one") == 0, "%s: remove user.one", n);
		CHECK(getxattr(p, "user.one", buf, 10) < 0 && errno == ENODATA,
		      "%s: user.one removed", n);
		CHECK(removexattr(p, "user.one") < 0 && errno == ENODATA,
		      "%s: remove user.one again: ENODATA", n);
	}
	/* Through the open file. */
	CHECK(fsetxattr(fd, "user.fd", "fd", 2, 0) == 0 &&
		      fgetxattr(fd, "user.fd", buf, 10) == 2 &&
		      memcmp(buf, "fd", 2) == 0,
	      "fsetxattr/fgetxattr");
	CHECK(flistxattr(fd, list, sizeof list) > 0, "flistxattr");
	CHECK(fremovexattr(fd, "user.fd") == 0, "fremovexattr");
	close(fd);
	/* A symlink: user.* on the link itself is refused (EPERM); through
	 * it, the target's. */
	CHECK(symlink("f", path(dir, "xattr/l")) == 0, "symlink xattr/l");
	CHECK(lsetxattr(path(dir, "xattr/l"), "user.x", "1", 1, 0) < 0 &&
		      errno == EPERM,
	      "lsetxattr user.x on a symlink: EPERM");
	CHECK(setxattr(path(dir, "xattr/l"), "user.via", "v", 1, 0) == 0 &&
		      getxattr(path(dir, "xattr/f"), "user.via", buf, 10) == 1 &&
		      buf[0] == 'v',
	      "setxattr through a symlink reaches the target");
	CHECK(lgetxattr(path(dir, "xattr/l"), "user.via", buf, 10) < 0 &&
		      errno == ENODATA,
	      "lgetxattr of the target's attribute on the link: ENODATA");
}

/* Modes (set-id and sticky bits), owners (as root), truncate and
 * ftruncate (shrink and grow, zeros after), times (explicit,
 * UTIME_OMIT, UTIME_NOW), a symlink's own owner and times. */
static void setattr(const char *dir)
{
	const size_t size = 10000;
	unsigned char want[10000], buf[10000];
	struct stat st;
	pattern(want, size, 2);
	CHECK(mkdir(path(dir, "setattr"), 0755) == 0, "mkdir setattr");
	HELD_PATH(f, dir, "setattr/f");
	int fd = open(f, O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(fd >= 0 && write_all(fd, want, size, 0) == 0, "write setattr/f");
	const mode_t modes[] = { 0600, 04755, 02711, 01777, 0 };
	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
		CHECK(chmod(f, modes[i]) == 0 && stat(f, &st) == 0 &&
			      (st.st_mode & 07777) == modes[i],
		      "chmod %04o", modes[i]);
	CHECK(fchmod(fd, 0644) == 0 && fstat(fd, &st) == 0 &&
		      (st.st_mode & 07777) == 0644,
	      "fchmod 0644");
	if (geteuid() == 0) {
		CHECK(chown(f, 1234, 5678) == 0 && stat(f, &st) == 0 &&
			      st.st_uid == 1234 && st.st_gid == 5678,
		      "chown 1234:5678");
		CHECK(chown(f, (uid_t)-1, 42) == 0 && stat(f, &st) == 0 &&
			      st.st_uid == 1234 && st.st_gid == 42,
		      "chown -1:42");
		CHECK(fchown(fd, 0, 0) == 0 && fstat(fd, &st) == 0 &&
			      st.st_uid == 0 && st.st_gid == 0,
		      "fchown 0:0");
	} else {
		skip("setattr: chown needs root");
	}
	/* Shrink and grow, by path and through the open file. */
	CHECK(truncate(f, 100) == 0 && stat(f, &st) == 0 && st.st_size == 100,
	      "truncate to 100");
	CHECK(truncate(f, 1 << 20) == 0 && stat(f, &st) == 0 &&
		      st.st_size == 1 << 20,
	      "truncate to 1 MiB");
	memset(buf, 1, sizeof buf);
	CHECK(read_all(fd, buf, 200, 0) == 200 && memcmp(buf, want, 100) == 0 &&
		      buf[100] == 0 && buf[199] == 0,
	      "after truncate: 100 bytes kept, zeros after");
	CHECK(ftruncate(fd, 7) == 0 && fstat(fd, &st) == 0 && st.st_size == 7,
	      "ftruncate to 7");
	CHECK(ftruncate(fd, 8192) == 0 && fstat(fd, &st) == 0 && st.st_size == 8192,
	      "ftruncate to 8192");
	memset(buf, 1, sizeof buf);
	int zeros = 1;
	ssize_t n = read_all(fd, buf, sizeof buf, 0);
	for (ssize_t i = 7; i < n; i++)
		zeros &= buf[i] == 0;
	CHECK(n == 8192 && memcmp(buf, want, 7) == 0 && zeros,
	      "after ftruncate: 7 bytes kept, zeros to 8192 (%zd bytes)", n);
	/* Times. */
	struct timespec times[2] = { { 1000000000, 123456789 },
				     { 1200000000, 987654321 } };
	CHECK(utimensat(AT_FDCWD, f, times, 0) == 0 && stat(f, &st) == 0 &&
		      st.st_atim.tv_sec == 1000000000 &&
		      st.st_atim.tv_nsec == 123456789 &&
		      st.st_mtim.tv_sec == 1200000000 &&
		      st.st_mtim.tv_nsec == 987654321,
	      "utimensat explicit: atime %lld.%09ld mtime %lld.%09ld",
	      (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec,
	      (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	struct timespec omit_now[2] = { { 0, UTIME_OMIT }, { 0, UTIME_NOW } };
	/* "Now" is the host's clock: only that it moved past 2008. */
	CHECK(utimensat(AT_FDCWD, f, omit_now, 0) == 0 && stat(f, &st) == 0 &&
		      st.st_atim.tv_sec == 1000000000 &&
		      st.st_atim.tv_nsec == 123456789 &&
		      st.st_mtim.tv_sec > 1500000000,
	      "utimensat UTIME_OMIT, UTIME_NOW: atime %lld.%09ld mtime %lld",
	      (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec,
	      (long long)st.st_mtim.tv_sec);
	struct timespec now_omit[2] = { { 0, UTIME_NOW }, { 0, UTIME_OMIT } };
	time_t mtime = st.st_mtim.tv_sec;
	long mtime_ns = st.st_mtim.tv_nsec;
	CHECK(futimens(fd, now_omit) == 0 && fstat(fd, &st) == 0 &&
		      st.st_atim.tv_sec > 1500000000 &&
		      st.st_mtim.tv_sec == mtime && st.st_mtim.tv_nsec == mtime_ns,
	      "futimens UTIME_NOW, UTIME_OMIT");
	close(fd);
	/* A symlink's own owner and times, not its target's. */
	HELD_PATH(l, dir, "setattr/l");
	CHECK(symlink("f", l) == 0, "symlink setattr/l");
	struct stat target;
	CHECK(stat(f, &target) == 0, "stat setattr/f");
	if (geteuid() == 0)
		CHECK(lchown(l, 77, 88) == 0 && lstat(l, &st) == 0 &&
			      st.st_uid == 77 && st.st_gid == 88 &&
			      stat(f, &st) == 0 && st.st_uid == target.st_uid,
		      "lchown of a symlink changes the link only");
	CHECK(utimensat(AT_FDCWD, l, times, AT_SYMLINK_NOFOLLOW) == 0 &&
		      lstat(l, &st) == 0 && st.st_mtim.tv_sec == 1200000000 &&
		      stat(f, &st) == 0 && st.st_mtim.tv_sec == target.st_mtim.tv_sec,
	      "utimensat AT_SYMLINK_NOFOLLOW changes the link only");
}

/* rename over an existing file and across directories; renameat2
 * RENAME_NOREPLACE (EEXIST) and RENAME_EXCHANGE (a file and a directory
 * swapped); a directory over a non-empty one. */
static void rename_flags(const char *dir)
{
	char buf[16];
	struct stat st;
	CHECK(mkdir(path(dir, "rename"), 0755) == 0, "mkdir rename");
	CHECK(mkdir(path(dir, "rename/d"), 0755) == 0, "mkdir rename/d");
	const char *names[] = { "a", "b", "x", "y", "d/in" };
	for (int i = 0; i < 5; i++) {
		char name[64];
		snprintf(name, sizeof name, "rename/%s", names[i]);
		int fd = open(path(dir, name), O_CREAT | O_EXCL | O_WRONLY, 0644);
		CHECK(fd >= 0 && write(fd, names[i], 1) == 1, "create %s", name);
		close(fd);
	}
	/* Over an existing file: an open descriptor of the old one still
	 * reads it. */
	int old = open(path(dir, "rename/b"), O_RDONLY);
	CHECK(rename(path(dir, "rename/a"), path(dir, "rename/b")) == 0,
	      "rename a over b");
	CHECK(access(path(dir, "rename/a"), F_OK) < 0 && errno == ENOENT,
	      "a gone after the rename");
	CHECK(holds(path(dir, "rename/b"), "a", 1), "b holds a's data");
	CHECK(old >= 0 && pread(old, buf, sizeof buf, 0) == 1 && buf[0] == 'b',
	      "the replaced b, still open, reads 'b'");
	if (old >= 0)
		close(old);
	CHECK(rename(path(dir, "rename/b"), path(dir, "rename/d/b")) == 0 &&
		      stat(path(dir, "rename/d/b"), &st) == 0,
	      "rename across directories");
	int r = renameat2(AT_FDCWD, path(dir, "rename/x"), AT_FDCWD,
			  path(dir, "rename/y"), RENAME_NOREPLACE);
	int e = r < 0 ? errno : 0;
	if (e == EINVAL || e == ENOSYS) {
		skip("renameat2: RENAME_NOREPLACE not supported (%s)", strerror(e));
	} else {
		CHECK(r < 0 && e == EEXIST, "RENAME_NOREPLACE onto y: EEXIST (%s)",
		      strerror(e));
		CHECK(renameat2(AT_FDCWD, path(dir, "rename/x"), AT_FDCWD,
				path(dir, "rename/z"), RENAME_NOREPLACE) == 0,
		      "RENAME_NOREPLACE to z");
		CHECK(holds(path(dir, "rename/z"), "x", 1), "z holds x's data");
	}
	/* Swap z (a file; x before without RENAME_NOREPLACE) and d. */
	if (access(path(dir, "rename/z"), F_OK) < 0)
		CHECK(rename(path(dir, "rename/x"), path(dir, "rename/z")) == 0,
		      "rename x to z");
	r = renameat2(AT_FDCWD, path(dir, "rename/z"), AT_FDCWD,
		      path(dir, "rename/d"), RENAME_EXCHANGE);
	e = r < 0 ? errno : 0;
	if (e == EINVAL || e == ENOSYS) {
		skip("renameat2: RENAME_EXCHANGE not supported (%s)", strerror(e));
	} else {
		CHECK(r == 0, "RENAME_EXCHANGE of z and d");
		CHECK(lstat(path(dir, "rename/z"), &st) == 0 && S_ISDIR(st.st_mode),
		      "z is the directory after the exchange");
		CHECK(holds(path(dir, "rename/d"), "x", 1),
		      "d is the file after the exchange");
		CHECK(holds(path(dir, "rename/z/in"), "d", 1),
		      "the directory's entries come along");
		CHECK(renameat2(AT_FDCWD, path(dir, "rename/y"), AT_FDCWD,
				path(dir, "rename/nothere"), RENAME_EXCHANGE) < 0 &&
			      errno == ENOENT,
		      "RENAME_EXCHANGE with a missing name: ENOENT");
	}
	/* A directory over a non-empty one. */
	CHECK(mkdir(path(dir, "rename/e"), 0755) == 0 &&
		      mkdir(path(dir, "rename/full"), 0755) == 0 &&
		      mkdir(path(dir, "rename/full/x"), 0755) == 0,
	      "mkdir rename/e, rename/full/x");
	CHECK(rename(path(dir, "rename/e"), path(dir, "rename/full")) < 0 &&
		      (errno == ENOTEMPTY || errno == EEXIST),
	      "a directory over a non-empty one: ENOTEMPTY");
	CHECK(rmdir(path(dir, "rename/full/x")) == 0 &&
		      rename(path(dir, "rename/e"), path(dir, "rename/full")) == 0,
	      "a directory over an empty one");
	CHECK(rename(path(dir, "rename/y"), path(dir, "rename/full")) < 0 &&
		      errno == EISDIR,
	      "a file over a directory: EISDIR");
}

/* Link counts and inode numbers through hard links; a link to a symlink
 * is a link of the symlink; a directory can't be linked. */
static void hard_links(const char *dir)
{
	struct stat a, b, c;
	char buf[16];
	CHECK(mkdir(path(dir, "links"), 0755) == 0 &&
		      mkdir(path(dir, "links/d"), 0755) == 0,
	      "mkdir links/d");
	HELD_PATH(f, dir, "links/f");
	int fd = open(f, O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(fd >= 0 && write(fd, "data", 4) == 4, "create links/f");
	CHECK(link(f, path(dir, "links/g")) == 0, "link f g");
	CHECK(link(f, path(dir, "links/d/h")) == 0, "link f d/h");
	CHECK(stat(f, &a) == 0 && stat(path(dir, "links/g"), &b) == 0 &&
		      stat(path(dir, "links/d/h"), &c) == 0 && a.st_nlink == 3 &&
		      b.st_nlink == 3 && c.st_nlink == 3 && a.st_ino == b.st_ino &&
		      a.st_ino == c.st_ino,
	      "three names, one inode, nlink 3 (%lu)", (unsigned long)a.st_nlink);
	int g = open(path(dir, "links/g"), O_WRONLY | O_TRUNC);
	CHECK(g >= 0 && write(g, "changed", 7) == 7, "write through g");
	if (g >= 0)
		close(g);
	CHECK(holds(path(dir, "links/d/h"), "changed", 7), "d/h reads what g wrote");
	CHECK(unlink(f) == 0, "unlink f");
	CHECK(stat(path(dir, "links/g"), &b) == 0 && b.st_nlink == 2,
	      "nlink 2 after unlink (%lu)", (unsigned long)b.st_nlink);
	CHECK(fstat(fd, &a) == 0 && a.st_nlink == 2,
	      "the open file's nlink 2 (%lu)", (unsigned long)a.st_nlink);
	CHECK(unlink(path(dir, "links/g")) == 0 &&
		      unlink(path(dir, "links/d/h")) == 0,
	      "unlink g and d/h");
	CHECK(fstat(fd, &a) == 0 && a.st_nlink == 0,
	      "the open file's nlink 0 after the last unlink (%lu)",
	      (unsigned long)a.st_nlink);
	CHECK(pread(fd, buf, sizeof buf, 0) == 7, "the unlinked open file reads");
	close(fd);
	CHECK(symlink("target", path(dir, "links/l")) == 0, "symlink links/l");
	CHECK(linkat(AT_FDCWD, path(dir, "links/l"), AT_FDCWD,
		     path(dir, "links/l2"), 0) == 0,
	      "linkat of a symlink");
	ssize_t n = readlink(path(dir, "links/l2"), buf, sizeof buf);
	CHECK(n == 6 && !memcmp(buf, "target", 6) &&
		      lstat(path(dir, "links/l"), &a) == 0 && a.st_nlink == 2,
	      "the link of a symlink is the symlink, nlink 2");
	CHECK(link(path(dir, "links/d"), path(dir, "links/dd")) < 0 &&
		      errno == EPERM,
	      "link of a directory: EPERM");
}

/* O_APPEND: writes land at the end, whatever the offset and whoever
 * wrote last. */
static void append(const char *dir)
{
	struct stat st;
	char buf[64];
	CHECK(mkdir(path(dir, "append"), 0755) == 0, "mkdir append");
	HELD_PATH(f, dir, "append/f");
	int a = open(f, O_CREAT | O_EXCL | O_WRONLY | O_APPEND, 0644);
	int w = open(f, O_RDWR);
	CHECK(a >= 0 && w >= 0, "open append/f twice");
	CHECK(write(a, "abc", 3) == 3, "append abc");
	CHECK(lseek(a, 0, SEEK_SET) == 0 && write(a, "def", 3) == 3,
	      "append def after a seek to 0");
	CHECK(pwrite(w, "0123456789", 10, 6) == 10, "pwrite through the other");
	CHECK(write(a, "ghi", 3) == 3, "append ghi after the other's write");
	/* Linux: pwrite on O_APPEND appends too. */
	CHECK(pwrite(a, "jk", 2, 0) == 2, "pwrite on O_APPEND");
	CHECK(fstat(w, &st) == 0 && st.st_size == 21, "size 21 (%lld)",
	      (long long)st.st_size);
	memset(buf, 0, sizeof buf);
	CHECK(pread(w, buf, sizeof buf, 0) == 21 &&
		      !memcmp(buf, "abcdef0123456789ghijk", 21),
	      "append/f: %s", buf);
	close(a);
	close(w);
}

/* fallocate: plain (allocates, grows), PUNCH_HOLE|KEEP_SIZE (zeros read
 * back, size kept), KEEP_SIZE past the end; SEEK_DATA/SEEK_HOLE find the
 * hole where the backing file system reports holes. */
static void fallocate_and_seek(const char *dir)
{
	const off_t mb = 1 << 20;
	struct stat st;
	unsigned char *buf = malloc((size_t)mb), *want = malloc((size_t)mb);
	CHECK(mkdir(path(dir, "falloc"), 0755) == 0, "mkdir falloc");
	int fd = open(path(dir, "falloc/f"), O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(fd >= 0, "create falloc/f");
	if (fallocate(fd, 0, 0, 4 * mb) < 0) {
		if (errno == EOPNOTSUPP)
			skip("fallocate: not supported");
		else
			fail("fallocate 4 MiB");
		close(fd);
		free(buf);
		free(want);
		return;
	}
	CHECK(fstat(fd, &st) == 0 && st.st_size == 4 * mb &&
		      st.st_blocks >= 4 * mb / 512,
	      "fallocate 4 MiB: size %lld, %lld blocks", (long long)st.st_size,
	      (long long)st.st_blocks);
	memset(buf, 1, (size_t)mb);
	CHECK(read_all(fd, buf, (size_t)mb, mb) == mb && buf[0] == 0 &&
		      buf[mb - 1] == 0 && !memcmp(buf, buf + 1, (size_t)mb - 1),
	      "fallocated space reads zeros");
	pattern(want, (size_t)mb, 4);
	CHECK(write_all(fd, want, (size_t)mb, 0) == 0 &&
		      write_all(fd, want, (size_t)mb, 3 * mb) == 0,
	      "write 1 MiB at 0 and 3 MiB");
	int punched = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				mb, 2 * mb);
	if (punched < 0 && errno == EOPNOTSUPP) {
		skip("fallocate: PUNCH_HOLE not supported");
	} else {
		CHECK(punched == 0, "PUNCH_HOLE|KEEP_SIZE of [1 MiB, 3 MiB)");
		CHECK(fstat(fd, &st) == 0 && st.st_size == 4 * mb,
		      "size kept after the punch (%lld)", (long long)st.st_size);
		memset(buf, 1, (size_t)mb);
		CHECK(read_all(fd, buf, (size_t)mb, mb + 1234) == mb &&
			      buf[0] == 0 && !memcmp(buf, buf + 1, (size_t)mb - 1),
		      "the punched hole reads zeros");
		CHECK(read_all(fd, buf, (size_t)mb, 0) == mb &&
			      !memcmp(buf, want, (size_t)mb) &&
			      read_all(fd, buf, (size_t)mb, 3 * mb) == mb &&
			      !memcmp(buf, want, (size_t)mb),
		      "data around the hole kept");
	}
	CHECK(fallocate(fd, FALLOC_FL_KEEP_SIZE, 4 * mb, mb) == 0 &&
		      fstat(fd, &st) == 0 && st.st_size == 4 * mb,
	      "KEEP_SIZE past the end keeps the size (%lld)",
	      (long long)st.st_size);
	CHECK(fallocate(fd, 0, 5 * mb, mb) == 0 && fstat(fd, &st) == 0 &&
		      st.st_size == 6 * mb,
	      "fallocate past the end grows to 6 MiB (%lld)",
	      (long long)st.st_size);
	CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096) < 0 &&
		      errno == EOPNOTSUPP,
	      "PUNCH_HOLE without KEEP_SIZE: EOPNOTSUPP");
	CHECK(fsync(fd) == 0, "fsync falloc/f");
	/* Holes. */
	off_t hole = lseek(fd, 0, SEEK_HOLE);
	int e = hole < 0 ? errno : 0;
	if (e == EINVAL || e == EOPNOTSUPP) {
		skip("lseek: SEEK_HOLE not supported (%s)", strerror(e));
	} else if (punched < 0) {
		skip("lseek: SEEK_DATA/SEEK_HOLE not checked (no hole punched)");
	} else if (hole == 6 * mb) {
		skip("lseek: the backing file system reports no holes (SEEK_HOLE "
		     "from 0 is the end)");
	} else {
		CHECK(hole == mb, "SEEK_HOLE from 0: %lld, not 1 MiB",
		      (long long)hole);
		off_t data = lseek(fd, mb, SEEK_DATA);
		CHECK(data == 3 * mb, "SEEK_DATA from 1 MiB: %lld, not 3 MiB",
		      (long long)data);
		CHECK(lseek(fd, 1000, SEEK_DATA) == 1000,
		      "SEEK_DATA inside data: the same offset");
		CHECK(lseek(fd, mb + 5, SEEK_HOLE) == mb + 5,
		      "SEEK_HOLE inside the hole: the same offset");
	}
	if (e != EINVAL && e != EOPNOTSUPP) {
		CHECK(lseek(fd, 7 * mb, SEEK_DATA) < 0 && errno == ENXIO,
		      "SEEK_DATA past the end: ENXIO");
		CHECK(lseek(fd, 7 * mb, SEEK_HOLE) < 0 && errno == ENXIO,
		      "SEEK_HOLE past the end: ENXIO");
		CHECK(lseek(fd, -4096, SEEK_DATA) < 0 && errno == ENXIO,
		      "SEEK_DATA to a negative offset: ENXIO");
	}
	CHECK(lseek(fd, -4096, SEEK_SET) < 0 && errno == EINVAL,
	      "SEEK_SET to a negative offset: EINVAL");
	close(fd);
	free(buf);
	free(want);
}

/* copy_file_range between two files of the mount: from an offset, then
 * into the middle of a file, then with the descriptors' own offsets. */
static void copy_range(const char *dir)
{
	const size_t len = 5 << 20;
	unsigned char *data = malloc(len), *got = NULL;
	size_t n = 0;
	pattern(data, len, 6);
	CHECK(mkdir(path(dir, "copy"), 0755) == 0, "mkdir copy");
	int a = open(path(dir, "copy/a"), O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(a >= 0 && write_all(a, data, len, 0) == 0, "write copy/a");
	int b = open(path(dir, "copy/b"), O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(b >= 0, "create copy/b");
	loff_t in = 1000, out = 0;
	size_t left = len - 1000;
	while (a >= 0 && b >= 0 && left > 0) {
		ssize_t r = copy_file_range(a, &in, b, &out, left, 0);
		if (r <= 0) {
			fail("copy_file_range: %zd with %zu bytes left", r, left);
			break;
		}
		left -= (size_t)r;
	}
	CHECK(in == (loff_t)len && out == (loff_t)(len - 1000),
	      "offsets moved: in %lld, out %lld", (long long)in, (long long)out);
	got = slurp(path(dir, "copy/b"), &n);
	CHECK(got && n == len - 1000 && !memcmp(got, data + 1000, n),
	      "copy/b is copy/a from 1000 (%zu bytes)", n);
	free(got);
	/* Into the middle of b: 64 KiB of a's start at 4096. */
	in = 0, out = 4096;
	CHECK(copy_file_range(a, &in, b, &out, 65536, 0) == 65536,
	      "copy_file_range into the middle");
	unsigned char *want = malloc(len - 1000);
	memcpy(want, data + 1000, len - 1000);
	memcpy(want + 4096, data, 65536);
	/* Through the descriptors' offsets. */
	CHECK(lseek(a, 100, SEEK_SET) == 100 && lseek(b, 200000, SEEK_SET) == 200000,
	      "lseek a and b");
	CHECK(copy_file_range(a, NULL, b, NULL, 3000, 0) == 3000 &&
		      lseek(a, 0, SEEK_CUR) == 3100 &&
		      lseek(b, 0, SEEK_CUR) == 203000,
	      "copy_file_range at the descriptors' offsets, which move");
	memcpy(want + 200000, data + 100, 3000);
	CHECK(holds(path(dir, "copy/b"), want, len - 1000),
	      "copy/b after the later copies");
	free(want);
	free(data);
	if (a >= 0)
		close(a);
	if (b >= 0)
		close(b);
}

/* O_TMPFILE: an unnamed file, then named with linkat; O_EXCL keeps it
 * unnamed. */
static void o_tmpfile(const char *dir)
{
	struct stat st, named;
	CHECK(mkdir(path(dir, "tmpfile"), 0755) == 0, "mkdir tmpfile");
	int fd = open(path(dir, "tmpfile"), O_TMPFILE | O_RDWR, 0640);
	if (fd < 0) {
		if (errno == EOPNOTSUPP || errno == EISDIR)
			skip("O_TMPFILE: not supported (%s)", strerror(errno));
		else
			fail("open O_TMPFILE");
		return;
	}
	CHECK(pwrite(fd, "temporary", 9, 0) == 9, "write the tmpfile");
	CHECK(fstat(fd, &st) == 0 && st.st_nlink == 0 &&
		      st.st_mode == (S_IFREG | 0640) && st.st_size == 9,
	      "the tmpfile: nlink %lu, mode %o", (unsigned long)st.st_nlink,
	      st.st_mode);
	DIR *d = opendir(path(dir, "tmpfile"));
	int entries = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		entries += e->d_name[0] != '.';
	if (d)
		closedir(d);
	CHECK(d && entries == 0, "nothing named in tmpfile/ (%d)", entries);
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	int r = linkat(AT_FDCWD, proc, AT_FDCWD, path(dir, "tmpfile/named"),
		       AT_SYMLINK_FOLLOW);
	if (r < 0 && errno == ENOENT && access("/proc/self", F_OK) < 0)
		r = linkat(fd, "", AT_FDCWD, path(dir, "tmpfile/named"),
			   AT_EMPTY_PATH);
	CHECK(r == 0, "linkat of the tmpfile");
	CHECK(holds(path(dir, "tmpfile/named"), "temporary", 9),
	      "the named tmpfile reads back");
	CHECK(stat(path(dir, "tmpfile/named"), &named) == 0 &&
		      named.st_ino == st.st_ino && fstat(fd, &st) == 0 &&
		      st.st_nlink == 1,
	      "named: the same inode, nlink 1");
	close(fd);
	fd = open(path(dir, "tmpfile"), O_TMPFILE | O_EXCL | O_RDWR, 0600);
	CHECK(fd >= 0, "open O_TMPFILE|O_EXCL");
	if (fd >= 0) {
		snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
		CHECK(linkat(AT_FDCWD, proc, AT_FDCWD, path(dir, "tmpfile/excl"),
			     AT_SYMLINK_FOLLOW) < 0,
		      "an O_EXCL tmpfile can't be linked");
		close(fd);
	}
}

/* Special files: a FIFO (data through it), a socket, a device node's
 * numbers; their types in a listing. */
static void special_files(const char *dir)
{
	struct stat st;
	char buf[32];
	CHECK(mkdir(path(dir, "special"), 0755) == 0, "mkdir special");
	HELD_PATH(p, dir, "special/fifo");
	CHECK(mkfifo(p, 0644) == 0 && lstat(p, &st) == 0 && S_ISFIFO(st.st_mode) &&
		      (st.st_mode & 0777) == 0644,
	      "mkfifo");
	CHECK(mknod(path(dir, "special/fifo2"), S_IFIFO | 0600, 0) == 0 &&
		      lstat(path(dir, "special/fifo2"), &st) == 0 &&
		      S_ISFIFO(st.st_mode),
	      "mknod S_IFIFO");
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int w = open(p, O_WRONLY);
		_exit(w >= 0 && write(w, "through the fifo", 16) == 16 ? 0 : 1);
	}
	CHECK(pid > 0, "fork");
	int r = open(p, O_RDONLY);
	memset(buf, 0, sizeof buf);
	CHECK(r >= 0 && read(r, buf, sizeof buf) == 16 &&
		      !memcmp(buf, "through the fifo", 16),
	      "data through the FIFO");
	if (r >= 0)
		close(r);
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		      WEXITSTATUS(status) == 0,
	      "the FIFO's writer");
	CHECK(mknod(path(dir, "special/sock"), S_IFSOCK | 0644, 0) == 0 &&
		      lstat(path(dir, "special/sock"), &st) == 0 &&
		      S_ISSOCK(st.st_mode),
	      "mknod S_IFSOCK");
	if (geteuid() == 0) {
		CHECK(mknod(path(dir, "special/null"), S_IFCHR | 0666, makedev(1, 3)) == 0 &&
			      lstat(path(dir, "special/null"), &st) == 0 &&
			      S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3),
		      "mknod a character device 1:3");
		CHECK(mknod(path(dir, "special/big"), S_IFBLK | 0600,
			    makedev(300, 70000)) == 0 &&
			      lstat(path(dir, "special/big"), &st) == 0 &&
			      S_ISBLK(st.st_mode) && st.st_rdev == makedev(300, 70000),
		      "mknod a block device 300:70000");
	} else {
		skip("special files: device nodes need root");
	}
	DIR *d = opendir(path(dir, "special"));
	int types = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (!strcmp(e->d_name, "fifo"))
			types += e->d_type == DT_FIFO;
		else if (!strcmp(e->d_name, "sock"))
			types += e->d_type == DT_SOCK;
		else if (!strcmp(e->d_name, "null"))
			types += e->d_type == DT_CHR;
		else if (!strcmp(e->d_name, "big"))
			types += e->d_type == DT_BLK;
	}
	if (d)
		closedir(d);
	CHECK(types == (geteuid() == 0 ? 4 : 2),
	      "readdir: the special files' types (%d right)", types);
}

/* statx: the basic fields agree with stat; birth time where the backing
 * file system keeps it; a symlink and a directory; AT_EMPTY_PATH. */
static void statx_fields(const char *dir)
{
	struct statx sx;
	struct stat st;
	unsigned char data[12345];
	pattern(data, sizeof data, 8);
	CHECK(mkdir(path(dir, "statx"), 0755) == 0, "mkdir statx");
	HELD_PATH(f, dir, "statx/f");
	int fd = open(f, O_CREAT | O_EXCL | O_RDWR, 0640);
	CHECK(fd >= 0 && write_all(fd, data, sizeof data, 0) == 0, "write statx/f");
	memset(&sx, 0, sizeof sx);
	int r = statx(AT_FDCWD, f, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC,
		      STATX_BASIC_STATS | STATX_BTIME, &sx);
	if (r < 0 && errno == ENOSYS) {
		skip("statx: not supported");
		close(fd);
		return;
	}
	CHECK(r == 0 && stat(f, &st) == 0, "statx statx/f");
	CHECK((sx.stx_mask & STATX_BASIC_STATS) == STATX_BASIC_STATS,
	      "statx: basic stats in the mask (%#x)", sx.stx_mask);
	CHECK(sx.stx_size == sizeof data && sx.stx_size == (uint64_t)st.st_size,
	      "statx: size %llu", (unsigned long long)sx.stx_size);
	CHECK(sx.stx_mode == (S_IFREG | 0640) && sx.stx_mode == st.st_mode,
	      "statx: mode %o", sx.stx_mode);
	CHECK(sx.stx_ino == st.st_ino && sx.stx_nlink == st.st_nlink &&
		      sx.stx_nlink == 1,
	      "statx: ino and nlink");
	CHECK(sx.stx_uid == st.st_uid && sx.stx_gid == st.st_gid &&
		      sx.stx_uid == geteuid(),
	      "statx: uid %u gid %u", sx.stx_uid, sx.stx_gid);
	CHECK(sx.stx_blocks == (uint64_t)st.st_blocks && sx.stx_blksize > 0,
	      "statx: blocks %llu, blksize %u",
	      (unsigned long long)sx.stx_blocks, sx.stx_blksize);
	CHECK(sx.stx_mtime.tv_sec == st.st_mtim.tv_sec &&
		      sx.stx_mtime.tv_nsec == (uint32_t)st.st_mtim.tv_nsec &&
		      sx.stx_ctime.tv_sec == st.st_ctim.tv_sec &&
		      sx.stx_atime.tv_sec == st.st_atim.tv_sec,
	      "statx: times agree with stat");
	if (sx.stx_mask & STATX_BTIME)
		CHECK(sx.stx_btime.tv_sec > 0 &&
			      sx.stx_btime.tv_sec <= sx.stx_mtime.tv_sec,
		      "statx: birth time %lld, mtime %lld",
		      (long long)sx.stx_btime.tv_sec,
		      (long long)sx.stx_mtime.tv_sec);
	else
		skip("statx: no birth time (the kernel or the backing file system "
		     "doesn't give it)");
	/* Times set through the mount come back exactly. */
	struct timespec times[2] = { { 1000000000, 111 }, { 1100000000, 222 } };
	CHECK(futimens(fd, times) == 0 &&
		      statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx) == 0 &&
		      sx.stx_atime.tv_sec == 1000000000 && sx.stx_atime.tv_nsec == 111 &&
		      sx.stx_mtime.tv_sec == 1100000000 && sx.stx_mtime.tv_nsec == 222,
	      "statx AT_EMPTY_PATH after futimens");
	close(fd);
	CHECK(symlink("f", path(dir, "statx/l")) == 0 &&
		      statx(AT_FDCWD, path(dir, "statx/l"), AT_SYMLINK_NOFOLLOW,
			    STATX_BASIC_STATS, &sx) == 0 &&
		      S_ISLNK(sx.stx_mode) && sx.stx_size == 1,
	      "statx of a symlink");
	CHECK(statx(AT_FDCWD, path(dir, "statx/l"), 0, STATX_BASIC_STATS, &sx) == 0 &&
		      S_ISREG(sx.stx_mode) && sx.stx_size == sizeof data,
	      "statx through a symlink");
	CHECK(statx(AT_FDCWD, path(dir, "statx"), 0, STATX_BASIC_STATS, &sx) == 0 &&
		      S_ISDIR(sx.stx_mode) && sx.stx_nlink >= 2,
	      "statx of a directory");
}

/* Creates `n` empty files `PREFIX%04d` in `sub`. */
static void make_files(const char *dir, const char *sub, const char *prefix, int n)
{
	char name[128];
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof name, "%s/%s%04d", sub, prefix, i);
		int fd = open(path(dir, name), O_CREAT | O_EXCL | O_WRONLY, 0644);
		CHECK(fd >= 0, "create %s", name);
		if (fd >= 0)
			close(fd);
	}
}

/* The index of "PREFIX%04d" in [0, n), or -1. */
static int index_of(const char *name, const char *prefix, int n)
{
	size_t len = strlen(prefix);
	if (strncmp(name, prefix, len) != 0 || strlen(name) != len + 4)
		return -1;
	int i = atoi(name + len);
	return i >= 0 && i < n ? i : -1;
}

/* telldir/seekdir resume exactly (the same entries follow), rewinddir
 * lists everything once; entries present throughout a listing that
 * changes (files created and removed meanwhile) are listed once each. */
static void readdir_positions(const char *dir)
{
	enum { N = 600, OLD = 1000 };
	static char after[200][256];
	CHECK(mkdir(path(dir, "seekdir"), 0755) == 0, "mkdir seekdir");
	make_files(dir, "seekdir", "f", N);
	DIR *d = opendir(path(dir, "seekdir"));
	CHECK(d != NULL, "opendir seekdir");
	if (d) {
		struct dirent *e = NULL;
		for (int i = 0; i < 250 && (e = readdir(d)); i++)
			;
		CHECK(e != NULL, "250 entries");
		long pos = telldir(d);
		int got = 0;
		for (; got < 200 && (e = readdir(d)); got++)
			snprintf(after[got], sizeof after[got], "%s", e->d_name);
		CHECK(got == 200, "200 entries after telldir (%d)", got);
		/* Elsewhere, then back. */
		rewinddir(d);
		CHECK(readdir(d) != NULL, "readdir after rewinddir");
		seekdir(d, pos);
		int same = 0;
		for (int i = 0; i < got && (e = readdir(d)); i++)
			same += !strcmp(e->d_name, after[i]);
		CHECK(same == got, "seekdir to telldir's position: %d of %d the same",
		      same, got);
		rewinddir(d);
		static unsigned char seen[N];
		memset(seen, 0, sizeof seen);
		int dots = 0, others = 0, twice = 0;
		while ((e = readdir(d))) {
			int i = index_of(e->d_name, "f", N);
			if (i >= 0)
				twice += seen[i]++ > 0;
			else if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				dots++;
			else
				others++;
		}
		int all = 0;
		for (int i = 0; i < N; i++)
			all += seen[i] == 1;
		CHECK(all == N && twice == 0 && dots == 2 && others == 0,
		      "after rewinddir: %d of %d once, %d twice, %d dots, %d others",
		      all, N, twice, dots, others);
		closedir(d);
	}

	/* A listing while the directory changes. */
	CHECK(mkdir(path(dir, "changing"), 0755) == 0, "mkdir changing");
	make_files(dir, "changing", "old", OLD);
	make_files(dir, "changing", "gone", 100);
	d = opendir(path(dir, "changing"));
	CHECK(d != NULL, "opendir changing");
	if (!d)
		return;
	static unsigned char seen[OLD];
	memset(seen, 0, sizeof seen);
	int k = 0, added = 0, removed = 0;
	char name[128];
	for (struct dirent *e; (e = readdir(d));) {
		int i = index_of(e->d_name, "old", OLD);
		if (i >= 0)
			seen[i]++;
		if (++k % 50 == 0) {
			snprintf(name, sizeof name, "changing/new%04d", added++);
			int fd = open(path(dir, name), O_CREAT | O_EXCL | O_WRONLY, 0644);
			CHECK(fd >= 0, "create %s while listing", name);
			if (fd >= 0)
				close(fd);
			if (removed < 100) {
				snprintf(name, sizeof name, "changing/gone%04d", removed++);
				CHECK(unlink(path(dir, name)) == 0,
				      "unlink %s while listing", name);
			}
		}
	}
	closedir(d);
	int once = 0, twice = 0;
	for (int i = 0; i < OLD; i++) {
		once += seen[i] == 1;
		twice += seen[i] > 1;
	}
	CHECK(once == OLD && twice == 0,
	      "a changing listing: %d of %d unchanged entries once, %d more than "
	      "once (%d created, %d removed meanwhile)",
	      once, OLD, twice, added, removed);
}

/* A shared writable mapping: stores through it reach the file (msync,
 * then read back with pread through another open file, and with O_DIRECT
 * from the backing file), and writes through the file show in it. */
static void mmap_shared(const char *dir)
{
	const size_t len = 256 << 10;
	unsigned char *want = malloc(len), *buf = NULL;
	pattern(want, len, 9);
	CHECK(mkdir(path(dir, "mmap"), 0755) == 0, "mkdir mmap");
	HELD_PATH(f, dir, "mmap/m");
	int fd = open(f, O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(fd >= 0 && write_all(fd, want, len, 0) == 0, "write mmap/m");
	unsigned char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		fail("mmap MAP_SHARED, PROT_WRITE");
		close(fd);
		free(want);
		return;
	}
	CHECK(!memcmp(map, want, len), "the mapping holds the file");
	for (size_t page = 0; page < len; page += 8192) {
		map[page + 7] = 0xA5;
		want[page + 7] = 0xA5;
	}
	map[len - 1] = 0xAB;
	want[len - 1] = 0xAB;
	CHECK(msync(map, len, MS_SYNC) == 0, "msync");
	int other = open(f, O_RDONLY);
	if (posix_memalign((void **)&buf, 4096, len)) {
		fail("posix_memalign");
		buf = NULL;
	}
	CHECK(other >= 0 && buf && read_all(other, buf, len, 0) == (ssize_t)len &&
		      !memcmp(buf, want, len),
	      "pread through another open file sees the stores");
	int direct = open(f, O_RDONLY | O_DIRECT);
	if (direct < 0 && errno == EINVAL) {
		skip("mmap: no O_DIRECT on this file system to read the file "
		     "past the cache");
	} else {
		CHECK(direct >= 0 && buf && read_all(direct, buf, len, 0) == (ssize_t)len &&
			      !memcmp(buf, want, len),
		      "O_DIRECT read (the backing file) sees the msync'ed stores");
	}
	/* The other way: writes through the file show in the mapping. */
	CHECK(pwrite(fd, "written", 7, 4096) == 7, "pwrite into the mapped range");
	memcpy(want + 4096, "written", 7);
	CHECK(!memcmp(map + 4096, "written", 7), "the mapping shows the pwrite");
	if (direct >= 0) {
		unsigned char *one = NULL;
		if (!posix_memalign((void **)&one, 4096, 4096)) {
			memcpy(one, want + 8192, 4096);
			memcpy(one + 100, "direct!", 7);
			memcpy(want + 8192 + 100, "direct!", 7);
			int dw = open(f, O_WRONLY | O_DIRECT);
			CHECK(dw >= 0 && pwrite(dw, one, 4096, 8192) == 4096,
			      "O_DIRECT write into the mapped range");
			if (dw >= 0)
				close(dw);
			CHECK(!memcmp(map + 8192 + 100, "direct!", 7),
			      "the mapping shows the O_DIRECT write");
			free(one);
		}
		close(direct);
	}
	CHECK(munmap(map, len) == 0, "munmap");
	close(fd);
	if (other >= 0)
		close(other);
	size_t n = 0;
	unsigned char *got = slurp(f, &n);
	CHECK(got && n == len && !memcmp(got, want, len), "mmap/m after munmap");
	free(got);
	free(buf);
	free(want);
}

/* The writers of concurrent_writers. */
enum { WRITERS = 4, REGION = 512 << 10, CHUNK = 16 << 10, RECORDS = 200 };
struct writer {
	const char *dir;
	int i;
};

static void record(char *rec, int i, int n)
{
	snprintf(rec, 59, "%02d:%05d:%048d\n", i, n, 0);
	memset(rec + 9, 'x', 48);
}

static void writer(int in, int out, void *arg)
{
	const struct writer *w = arg;
	unsigned char *data = malloc(REGION);
	char rec[64];
	pattern(data, REGION, 100 + (uint64_t)w->i);
	int f = open(path(w->dir, "writers/shared"), O_WRONLY);
	int a = open(path(w->dir, "writers/log"), O_WRONLY | O_APPEND);
	CHECK(f >= 0 && a >= 0, "writer %d: open", w->i);
	say(out, 'O');
	if (command(in) != 'G') {
		fail("writer %d: no go", w->i);
		return;
	}
	/* Its chunks, interleaved with the others' across the file, from
	 * the end (so the file grows under the others' writes). */
	for (int c = REGION / CHUNK - 1; f >= 0 && c >= 0; c--) {
		off_t off = ((off_t)c * WRITERS + w->i) * CHUNK;
		if (write_all(f, data + (size_t)c * CHUNK, CHUNK, off)) {
			fail("writer %d: write at %lld", w->i, (long long)off);
			break;
		}
	}
	for (int n = 0; a >= 0 && n < RECORDS; n++) {
		record(rec, w->i, n);
		if (write(a, rec, 58) != 58) {
			fail("writer %d: append record %d", w->i, n);
			break;
		}
	}
	CHECK(f >= 0 && fsync(f) == 0, "writer %d: fsync", w->i);
	if (f >= 0)
		close(f);
	if (a >= 0)
		close(a);
	free(data);
	say(out, 'D');
	command(in);
}

/* Processes writing disjoint ranges of one file (interleaved chunks) and
 * appending records to another, at once: the size and every byte, and
 * every record whole and once. */
static void concurrent_writers(const char *dir)
{
	struct child c[WRITERS];
	struct writer w[WRITERS];
	int started = 0;
	CHECK(mkdir(path(dir, "writers"), 0755) == 0, "mkdir writers");
	int fd = open(path(dir, "writers/shared"), O_CREAT | O_EXCL | O_WRONLY, 0644);
	CHECK(fd >= 0, "create writers/shared");
	if (fd >= 0)
		close(fd);
	fd = open(path(dir, "writers/log"), O_CREAT | O_EXCL | O_WRONLY, 0644);
	CHECK(fd >= 0, "create writers/log");
	if (fd >= 0)
		close(fd);
	for (int i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){ dir, i };
		if (spawn(&c[i], writer, &w[i]))
			break;
		started++;
	}
	for (int i = 0; i < started; i++)
		expect(&c[i], 'O', "writer opened its files");
	/* All open: go. */
	for (int i = 0; i < started; i++)
		tell(&c[i], 'G');
	for (int i = 0; i < started; i++)
		expect(&c[i], 'D', "writer done");
	for (int i = 0; i < started; i++)
		finish(&c[i]);
	if (stuck || started < WRITERS)
		return;
	size_t size = (size_t)WRITERS * REGION, n = 0;
	unsigned char *want = malloc(size), *data = malloc(REGION);
	for (int i = 0; i < WRITERS; i++) {
		pattern(data, REGION, 100 + (uint64_t)i);
		for (int k = 0; k < REGION / CHUNK; k++)
			memcpy(want + ((size_t)k * WRITERS + (size_t)i) * CHUNK,
			       data + (size_t)k * CHUNK, CHUNK);
	}
	struct stat st;
	CHECK(stat(path(dir, "writers/shared"), &st) == 0 &&
		      st.st_size == (off_t)size,
	      "writers/shared: size %lld, not %zu", (long long)st.st_size, size);
	unsigned char *got = slurp(path(dir, "writers/shared"), &n);
	size_t bad = 0;
	for (size_t off = 0; got && off < n && off < size; off += CHUNK)
		bad += memcmp(got + off, want + off, CHUNK) != 0;
	CHECK(got && n == size && bad == 0,
	      "writers/shared: %zu of %d chunks differ", bad,
	      (int)(size / CHUNK));
	free(got);
	free(want);
	free(data);
	/* The appended records: whole, each once. */
	got = slurp(path(dir, "writers/log"), &n);
	static unsigned char seen[WRITERS][RECORDS];
	memset(seen, 0, sizeof seen);
	int torn = 0, twice = 0, once = 0;
	char rec[64];
	for (size_t off = 0; got && off + 58 <= n; off += 58) {
		int i = atoi((char *)got + off), k = atoi((char *)got + off + 3);
		if (i < 0 || i >= WRITERS || k < 0 || k >= RECORDS) {
			torn++;
			continue;
		}
		record(rec, i, k);
		if (memcmp(got + off, rec, 58)) {
			torn++;
			continue;
		}
		twice += seen[i][k]++ > 0;
	}
	for (int i = 0; i < WRITERS; i++)
		for (int k = 0; k < RECORDS; k++)
			once += seen[i][k] == 1;
	CHECK(got && n == (size_t)WRITERS * RECORDS * 58 && torn == 0 &&
		      twice == 0 && once == WRITERS * RECORDS,
	      "writers/log: %zu bytes, %d torn, %d twice, %d of %d once", n, torn,
	      twice, once, WRITERS * RECORDS);
	free(got);
}

/* Lock waits. A holder (a child) takes a lock; a waiter (another child)
 * asks for a conflicting one and must be seen waiting in its system
 * call; the parent sets `released`, then has the holder let go; the
 * waiter must get the lock, and see `released` set when it does (so it
 * got it only after the release, whatever the speed). */
static volatile int *released;

enum lock_kind { POSIX, OFD, FLOCK };
static const char *const kind_name[] = { "fcntl F_SETLKW", "F_OFD_SETLKW",
					 "flock LOCK_EX" };

struct locker {
	const char *file;
	enum lock_kind kind;
	short type;
	off_t start, len;
};

static struct flock range(short type, off_t start, off_t len)
{
	struct flock fl;
	memset(&fl, 0, sizeof fl);
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = start;
	fl.l_len = len;
	return fl;
}

/* The holder: takes the lock without waiting ('L'), answers GETLK
 * queries ('Q': the parent's lock on [250, 251) must show, with the
 * parent's pid), lets go on 'R' ('U'). */
static void holder(int in, int out, void *arg)
{
	const struct locker *l = arg;
	int fd = open(l->file, O_RDWR);
	struct flock fl = range(l->type, l->start, l->len);
	int r = fd < 0		    ? -1
		: l->kind == FLOCK  ? flock(fd, LOCK_EX | LOCK_NB)
		: l->kind == OFD    ? fcntl(fd, F_OFD_SETLK, &fl)
				    : fcntl(fd, F_SETLK, &fl);
	CHECK(r == 0, "holder: %s", kind_name[l->kind]);
	say(out, r == 0 ? 'L' : 'F');
	for (int c; (c = command(in)) > 0 && c != 'X';) {
		if (c == 'Q') {
			struct flock q = range(F_WRLCK, 250, 1);
			CHECK(fcntl(fd, F_GETLK, &q) == 0 && q.l_type == F_WRLCK &&
				      q.l_start == 200 && q.l_len == 100 &&
				      q.l_pid == getppid(),
			      "holder: F_GETLK shows the parent's lock [200, 300) "
			      "(type %d, %lld+%lld, pid %d)",
			      q.l_type, (long long)q.l_start, (long long)q.l_len,
			      (int)q.l_pid);
			say(out, 'q');
		} else if (c == 'R') {
			struct flock u = range(F_UNLCK, l->start, l->len);
			r = l->kind == FLOCK ? flock(fd, LOCK_UN)
			    : l->kind == OFD ? close(fd)
					     : fcntl(fd, F_SETLK, &u);
			CHECK(r == 0, "holder: unlock");
			say(out, 'U');
		}
	}
}

/* The waiter: says 'S', waits for the lock, then answers 'A' (got it
 * after the release), 'E' (got it before) or 'F' (an error). */
static void waiter(int in, int out, void *arg)
{
	const struct locker *l = arg;
	int fd = open(l->file, O_RDWR);
	CHECK(fd >= 0, "waiter: open");
	struct flock fl = range(l->type, l->start, l->len);
	say(out, 'S');
	int r = fd < 0		    ? -1
		: l->kind == FLOCK  ? flock(fd, LOCK_EX)
		: l->kind == OFD    ? fcntl(fd, F_OFD_SETLKW, &fl)
				    : fcntl(fd, F_SETLKW, &fl);
	CHECK(r == 0, "waiter: %s", kind_name[l->kind]);
	say(out, r < 0 ? 'F' : __atomic_load_n(released, __ATOMIC_SEQ_CST) ? 'A' : 'E');
	command(in);
}

/* Runs the waiter against a lock held by `hold` (a child, or the parent
 * itself when `hold` is NULL: `release` then lets go). */
static void wait_for_lock(const struct locker *want, struct child *hold,
			  void (*release)(void *), void *release_arg)
{
	struct child w;
	const char *what = kind_name[want->kind];
	long nr = want->kind == FLOCK ? SYS_flock : SYS_fcntl;
	__atomic_store_n(released, 0, __ATOMIC_SEQ_CST);
	if (spawn(&w, waiter, (void *)want))
		return;
	if (!expect(&w, 'S', "waiter started")) {
		finish(&w);
		return;
	}
	int early = -1;
	int seen = wait_asleep_in(&w, nr, &early);
	if (seen == 0)
		fail("%s returned ('%c') while another process held the lock",
		     what, early);
	else if (seen == -1)
		fail("%s: the waiter wasn't seen waiting in " STR(PATIENCE_SECS)
		     " s",
		     what);
	else if (seen == -2)
		skip("%s: /proc/PID/syscall missing; the wait is checked by the "
		     "order only",
		     what);
	__atomic_store_n(released, 1, __ATOMIC_SEQ_CST);
	if (hold) {
		tell(hold, 'R');
		if (!expect(hold, 'U', "holder released the lock")) {
			fail("%s: the holder's unlock didn't return: the mount "
			     "stopped answering (a lock wait holding the "
			     "daemon's queue?)",
			     what);
			stuck = 1;
		}
	} else {
		release(release_arg);
	}
	if (seen != 0 && !stuck) {
		int got = answer_within(&w, PATIENCE_SECS);
		CHECK(got == 'A', "%s: the waiter answered %d%s", what, got,
		      got < 0 ? " (no lock " STR(PATIENCE_SECS) " s after the "
				"release)"
		      : got == 'E' ? " (the lock came before the release)"
				   : "");
		if (got < 0)
			stuck = 1;
		else if (got == 'A' && seen == 1)
			printf("locks: %s waited (seen asleep in it) and got the "
			       "lock after the release\n",
			       what);
	}
	finish(&w);
}

static void close_fd(void *arg)
{
	CHECK(close(*(int *)arg) == 0, "close the lock holder's file");
}

/* fcntl locks: F_GETLK names the holder and its range, F_SETLK conflicts,
 * F_SETLKW waits for another process's lock and gets it after the unlock;
 * closing any descriptor drops a process's locks. OFD locks: per open
 * file, kept by a duplicate's close, given up by the last close (which
 * a waiter's F_OFD_SETLKW sees). flock: LOCK_NB conflicts, LOCK_EX
 * waits. */
static void locks(const char *dir)
{
	struct flock q;
	CHECK(mkdir(path(dir, "locks"), 0755) == 0, "mkdir locks");
	HELD_PATH(f, dir, "locks/posix");
	int fd = open(f, O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(fd >= 0 && write_all(fd, "0123456789", 10, 990) == 0,
	      "create locks/posix");
	if (fd < 0)
		return;
	released = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (released == MAP_FAILED) {
		fail("mmap the shared flag");
		close(fd);
		return;
	}
	q = range(F_WRLCK, 0, 0);
	CHECK(fcntl(fd, F_GETLK, &q) == 0 && q.l_type == F_UNLCK,
	      "F_GETLK without locks: F_UNLCK (%d)", q.l_type);

	/* POSIX: a holder of [0, 100). */
	struct locker hl = { f, POSIX, F_WRLCK, 0, 100 };
	struct child h;
	if (spawn(&h, holder, &hl))
		goto ofd;
	if (!expect(&h, 'L', "the holder's lock")) {
		finish(&h);
		goto ofd;
	}
	q = range(F_RDLCK, 10, 5);
	CHECK(fcntl(fd, F_GETLK, &q) == 0 && q.l_type == F_WRLCK &&
		      q.l_start == 0 && q.l_len == 100 && q.l_pid == h.pid,
	      "F_GETLK names the holder: type %d, %lld+%lld, pid %d (holder %d)",
	      q.l_type, (long long)q.l_start, (long long)q.l_len, (int)q.l_pid,
	      (int)h.pid);
	q = range(F_WRLCK, 50, 10);
	CHECK(fcntl(fd, F_SETLK, &q) < 0 && (errno == EAGAIN || errno == EACCES),
	      "F_SETLK on the held range: EAGAIN");
	q = range(F_WRLCK, 200, 100);
	CHECK(fcntl(fd, F_SETLK, &q) == 0, "F_SETLK on a free range");
	tell(&h, 'Q');
	expect(&h, 'q', "the holder's F_GETLK");
	struct locker wl = { f, POSIX, F_WRLCK, 50, 10 };
	wait_for_lock(&wl, &h, NULL, NULL);
	finish(&h);
	if (stuck)
		goto out;
	/* The waiter is gone, and its lock with it; ours is left. */
	q = range(F_WRLCK, 0, 0);
	CHECK(fcntl(fd, F_GETLK, &q) == 0 && q.l_type == F_UNLCK,
	      "F_GETLK: our own lock doesn't conflict (%d)", q.l_type);
	/* Closing another descriptor of the file drops our locks: a new
	 * holder can take [200, 300). */
	int other = open(f, O_RDONLY);
	CHECK(other >= 0 && close(other) == 0, "open and close another descriptor");
	struct locker again = { f, POSIX, F_WRLCK, 200, 100 };
	if (!spawn(&h, holder, &again)) {
		expect(&h, 'L', "our locks dropped by closing another descriptor");
		finish(&h);
	}
	/* A read lock and a write lock of ours coexist with... ourselves. */
	q = range(F_RDLCK, 0, 0);
	CHECK(fcntl(fd, F_SETLK, &q) == 0, "F_SETLK F_RDLCK on the whole file");
	q = range(F_UNLCK, 0, 0);
	CHECK(fcntl(fd, F_SETLK, &q) == 0, "F_SETLK F_UNLCK");

ofd:
	if (stuck)
		goto out;
	/* OFD locks belong to the open file. */
	{
		int a = open(f, O_RDWR), b = open(f, O_RDWR);
		CHECK(a >= 0 && b >= 0, "open locks/posix twice");
		q = range(F_WRLCK, 0, 10);
		CHECK(fcntl(a, F_OFD_SETLK, &q) == 0, "F_OFD_SETLK on one open file");
		q = range(F_WRLCK, 0, 10);
		CHECK(fcntl(b, F_OFD_SETLK, &q) < 0 && errno == EAGAIN,
		      "F_OFD_SETLK on another open file: EAGAIN");
		q = range(F_WRLCK, 5, 1);
		CHECK(fcntl(b, F_OFD_GETLK, &q) == 0 && q.l_type == F_WRLCK &&
			      q.l_start == 0 && q.l_len == 10 && q.l_pid == -1,
		      "F_OFD_GETLK: type %d, %lld+%lld, pid %d", q.l_type,
		      (long long)q.l_start, (long long)q.l_len, (int)q.l_pid);
		int dup_a = dup(a);
		CHECK(dup_a >= 0 && close(dup_a) == 0, "close a duplicate");
		q = range(F_WRLCK, 0, 10);
		CHECK(fcntl(b, F_OFD_SETLK, &q) < 0 && errno == EAGAIN,
		      "the lock outlives a duplicate's close");
		close(b);
		/* The waiter gets it when the open file's last descriptor
		 * closes. */
		struct locker ow = { f, OFD, F_WRLCK, 0, 10 };
		wait_for_lock(&ow, NULL, close_fd, &a);
	}
	if (stuck)
		goto out;

	/* flock. */
	{
		HELD_PATH(g, dir, "locks/flock");
		int gfd = open(g, O_CREAT | O_EXCL | O_RDWR, 0644);
		CHECK(gfd >= 0, "create locks/flock");
		struct locker fh = { g, FLOCK, 0, 0, 0 };
		if (gfd < 0 || spawn(&h, holder, &fh)) {
			if (gfd >= 0)
				close(gfd);
			goto out;
		}
		if (expect(&h, 'L', "the flock holder")) {
			CHECK(flock(gfd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK,
			      "flock LOCK_SH|LOCK_NB against LOCK_EX: EWOULDBLOCK");
			wait_for_lock(&fh, &h, NULL, NULL);
		}
		finish(&h);
		if (!stuck) {
			CHECK(flock(gfd, LOCK_EX | LOCK_NB) == 0 &&
				      flock(gfd, LOCK_UN) == 0,
			      "flock free again after the waiter's exit");
		}
		if (!stuck)
			close(gfd);
	}
out:
	/* On a stuck mount a close would wait forever too (its FLUSH): left
	 * open, so that the run can still say how it went. */
	if (!stuck)
		close(fd);
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

/* The mount suite's operations, in the order `check` runs them (the lock
 * waits last: a mount they leave stuck stops the run there). */
static const struct {
	const char *name;
	void (*fn)(const char *dir);
} suite[] = {
	{ "xattrs", xattrs },
	{ "setattr", setattr },
	{ "rename flags", rename_flags },
	{ "hard links", hard_links },
	{ "O_APPEND", append },
	{ "fallocate and SEEK_DATA/SEEK_HOLE", fallocate_and_seek },
	{ "copy_file_range", copy_range },
	{ "O_TMPFILE", o_tmpfile },
	{ "special files", special_files },
	{ "statx", statx_fields },
	{ "readdir positions", readdir_positions },
	{ "shared writable mmap", mmap_shared },
	{ "concurrent writers", concurrent_writers },
	{ "lock waits", locks },
};

/* The file the host seeds (xtask/src/vm/virtiofs/mod.rs: FROM_HOST), for a
 * `check` off the VM. */
static void seed(const char *dir)
{
	size_t len = 5 * 1024 * 1024 + 77;
	unsigned char *buf = malloc(len);
	pattern(buf, len, 1);
	int fd = open(path(dir, "from-host.bin"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
	CHECK(fd >= 0 && write_all(fd, buf, len, 0) == 0 && close(fd) == 0,
	      "write from-host.bin");
	free(buf);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr,
			"usage: %s check|seed|reconnect|load|prepare DIR | "
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
		for (size_t i = 0; i < sizeof suite / sizeof suite[0]; i++) {
			if (stuck) {
				fail("%s not run: the mount stopped answering", suite[i].name);
				continue;
			}
			printf("check: %s\n", suite[i].name);
			suite[i].fn(dir);
		}
		printf("check: %d skip(s)\n", skips);
	} else if (!strcmp(argv[1], "seed")) {
		seed(dir);
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
