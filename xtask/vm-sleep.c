/*
 * `sleep` for the virtio-fs guest (`cargo xtask test-in-vm --virtiofs`).
 *
 * The guest's other commands are busybox applets, which find what to do
 * from the name they run under. pjdfstest's ETXTBSY tests copy `sleep`
 * under a random name, run the copy and expect it to keep running while
 * they truncate, write or unlink it: busybox under that name says
 * "applet not found" and exits at once, so those tests could only pass by
 * luck. This one sleeps whatever its name.
 *
 * Usage: sleep SECONDS (a whole or decimal number).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	char *end;
	double secs;
	struct timespec left;

	if (argc != 2) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	errno = 0;
	secs = strtod(argv[1], &end);
	if (errno != 0 || end == argv[1] || *end != '\0' || !(secs >= 0) || secs > 1e9) {
		fprintf(stderr, "%s: not a number of seconds: %s\n", argv[0], argv[1]);
		return 2;
	}
	left.tv_sec = (time_t)secs;
	left.tv_nsec = (long)((secs - (double)left.tv_sec) * 1e9);
	while (nanosleep(&left, &left) != 0) {
		if (errno != EINTR) {
			perror("nanosleep");
			return 1;
		}
	}
	return 0;
}
