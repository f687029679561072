/*
 * FUSE INIT probe for `cargo xtask test-in-vm` (compiled by the xtask with
 * `gcc -static` into target/vm/; never committed as a binary).
 *
 * Opens /dev/fuse, mounts a FUSE file system on a fresh directory under
 * $TMPDIR (or /tmp) with mount(2), reads the kernel's FUSE_INIT request and
 * prints one line:
 *
 *   XTASK-PROBE: kernel FUSE 7.46, over_io_uring=1, bufpool=1 (flags=0x..., ...)
 *
 * then answers INIT with an error (so the kernel gives up on the mount),
 * unmounts and exits. Exit status: 0 if the INIT request was read and
 * parsed, 1 otherwise. Whether the offered flags are the ones wanted is the
 * host's decision, not the probe's.
 *
 * The kernel's structures are declared here rather than taken from
 * <linux/fuse.h>: the build machine's headers may be older than the kernel
 * probed. Layouts are those of Linux 7.3's uapi fuse.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#define FUSE_INIT 26
#define FUSE_OVER_IO_URING_BIT 41
#define FUSE_HAS_IO_URING_BUFPOOL_BIT 43

struct fuse_in_header {
	uint32_t len;
	uint32_t opcode;
	uint64_t unique;
	uint64_t nodeid;
	uint32_t uid;
	uint32_t gid;
	uint32_t pid;
	uint16_t total_extlen;
	uint16_t padding;
};

struct fuse_init_in {
	uint32_t major;
	uint32_t minor;
	uint32_t max_readahead;
	uint32_t flags;
	uint32_t flags2; /* since 7.36: bits 32..63 of the flags */
	uint32_t unused[11];
};

struct fuse_out_header {
	uint32_t len;
	int32_t error;
	uint64_t unique;
};

static void fail(const char *what)
{
	printf("XTASK-PROBE: FAILED: %s: %s\n", what, strerror(errno));
	fflush(stdout);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	char mnt[4096];
	char opts[128];
	/* The kernel wants at least FUSE_MIN_READ_BUFFER (8192) bytes. */
	static unsigned char buf[1 << 17];
	struct utsname uts;
	int fd, status = 1;
	ssize_t n;

	if (!tmp || !*tmp)
		tmp = "/tmp";
	snprintf(mnt, sizeof mnt, "%s/xtask-fuse-probe.XXXXXX", tmp);
	if (!mkdtemp(mnt)) {
		fail("mkdtemp");
		return 1;
	}
	fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fail("open /dev/fuse");
		rmdir(mnt);
		return 1;
	}
	snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
	if (mount("xtask-probe", mnt, "fuse.xtask-probe", MS_NOSUID | MS_NODEV, opts) < 0) {
		fail("mount");
		close(fd);
		rmdir(mnt);
		return 1;
	}
	/* mount(2) returns once the INIT request is queued; read it. */
	n = read(fd, buf, sizeof buf);
	if (n < 0) {
		fail("read /dev/fuse");
	} else if ((size_t)n < sizeof(struct fuse_in_header) + 8) {
		errno = EPROTO;
		fail("short INIT request");
	} else {
		struct fuse_in_header in;
		struct fuse_init_in init;
		size_t body = (size_t)n - sizeof in;

		memcpy(&in, buf, sizeof in);
		memset(&init, 0, sizeof init);
		memcpy(&init, buf + sizeof in, body < sizeof init ? body : sizeof init);
		if (in.opcode != FUSE_INIT) {
			printf("XTASK-PROBE: FAILED: first request has opcode %u, not FUSE_INIT\n",
			       in.opcode);
		} else {
			uint64_t flags = init.flags;
			struct fuse_out_header out = {
				.len = sizeof out,
				.error = -EPROTO,
				.unique = in.unique,
			};

			/* flags2 exists from 7.36 on (and only if the request is long enough). */
			if (init.minor >= 36 && body >= 20)
				flags |= (uint64_t)init.flags2 << 32;
			if (uname(&uts) < 0)
				strcpy(uts.release, "?");
			printf("XTASK-PROBE: kernel FUSE %u.%u, over_io_uring=%d, bufpool=%d "
			       "(flags=0x%016llx, max_readahead=%u, release %s)\n",
			       init.major, init.minor,
			       (int)((flags >> FUSE_OVER_IO_URING_BIT) & 1),
			       (int)((flags >> FUSE_HAS_IO_URING_BUFPOOL_BIT) & 1),
			       (unsigned long long)flags, init.max_readahead, uts.release);
			status = 0;
			/* Refuse INIT: the connection ends and the mount goes dead. */
			if (write(fd, &out, sizeof out) < 0 && errno != ENOENT)
				fail("write INIT reply");
		}
	}
	fflush(stdout);
	if (umount2(mnt, MNT_DETACH) < 0)
		fail("umount2");
	close(fd);
	rmdir(mnt);
	return status;
}
