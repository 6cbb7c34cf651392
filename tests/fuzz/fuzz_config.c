/*
 * fuzz_config: a configuration file through config_load(), as an operator
 * (or a SIGHUP after a bad edit) may hand it over. The file is the input,
 * written to a memfd that config_load opens by its /proc path, so nothing
 * touches the disk. Checked besides the sanitizers' findings (leaks
 * included): a refused file says "path:line: what" and leaves nothing
 * allocated; an accepted one gives a shared-settings text that compares
 * equal to itself.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fd = memfd_create("numwatch.conf", MFD_CLOEXEC);
	if (fd < 0) {
		perror("memfd_create");
		abort();
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return 0;
}

static void write_file(const uint8_t *data, size_t size)
{
	size_t done = 0;

	if (ftruncate(fd, 0) < 0)
		abort();
	while (done < size) {
		ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);

		if (n <= 0)
			abort();
		done += (size_t)n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char shared[64 * 1024], diff[256];
	char err[1024], digest[17];
	struct config cfg;
	int r;

	write_file(data, size);
	r = config_load(&cfg, path, err, sizeof(err));
	if (r < 0) {
		if (strncmp(err, path, strlen(path)) != 0 && strncmp(err, "cannot ", 7) != 0 &&
		    strcmp(err, "out of memory") != 0)
			fuzz_fail("refused (%d) without saying where: '%s'", r, err);
		return 0;
	}
	if (r != 0)
		fuzz_fail("config_load returned %d", r);
	if (!cfg.repo_url || !cfg.build_command || !cfg.public_url || cfg.nslots > NW_CONFIG_SLOTS_MAX)
		fuzz_fail("accepted without a repository url, build command or public url, or with %u slots",
			  cfg.nslots);
	r = config_shared(&cfg, shared, sizeof(shared));
	if (r == 0) {
		config_digest(shared, digest);
		config_shared_diff(shared, shared, diff, sizeof(diff));
		if (diff[0] || strlen(digest) != 16)
			fuzz_fail("shared settings differ from themselves: '%s'", diff);
	} else if (r != -ENOSPC) {
		fuzz_fail("config_shared returned %d", r);
	}
	config_release(&cfg);
	return 0;
}
