/* Unit tests of daemon/bigbuf.c: buffers that keep their bytes as they grow, and that a fork leaves out. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bigbuf.h"

static void grows_keeping_bytes(void **state)
{
	size_t size = 64 * 1024;
	unsigned char *p = bigbuf_alloc(size);

	(void)state;
	assert_non_null(p);
	for (size_t i = 0; i < size; i++)
		assert_int_equal(p[i], 0); /* zeroed, as calloc */
	for (size_t i = 0; i < size; i++)
		p[i] = (unsigned char)(i * 7);
	/* Doubling as the store's batch does, up to 8 MiB. */
	for (size_t next = size * 2; next <= 8 * 1024 * 1024; next *= 2) {
		unsigned char *q = bigbuf_realloc(p, size, next);

		assert_non_null(q);
		for (size_t i = 0; i < 64 * 1024; i++)
			assert_int_equal(q[i], (unsigned char)(i * 7));
		memset(q + size, 0xab, next - size); /* the new part is writable */
		p = q;
		size = next;
	}
	bigbuf_free(p, size);
	bigbuf_free(NULL, 0);
	p = bigbuf_realloc(NULL, 0, 100);
	assert_non_null(p);
	p[99] = 1;
	bigbuf_free(p, 100);
}

/* What the daemon relies on: a child forked while a buffer exists does not have it (no copy, no COW). */
static void left_out_of_forks(void **state)
{
	size_t size = 4 * 1024 * 1024;
	unsigned char *p = bigbuf_alloc(size), *q;
	unsigned char *plain = malloc(size);
	int status;
	pid_t pid;

	(void)state;
	assert_non_null(p);
	assert_non_null(plain);
	memset(p, 1, size);
	memset(plain, 1, size);
	/* Grown after its first pages were written: the grown mapping is left out too. */
	q = bigbuf_realloc(p, size, size * 2);
	assert_non_null(q);
	p = q;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		unsigned char vec[1];
		long page = sysconf(_SC_PAGESIZE);

		/* mincore() fails with ENOMEM on an address that is not mapped. */
		if (mincore(p, (size_t)page, vec) == 0 || errno != ENOMEM)
			_exit(1);
		if (mincore(p + size, (size_t)page, vec) == 0 || errno != ENOMEM)
			_exit(2);
		/* Plain memory is there, as before. */
		if (mincore((void *)((uintptr_t)plain & ~(uintptr_t)(page - 1)), (size_t)page, vec) != 0 ||
		    plain[size - 1] != 1)
			_exit(3);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* The parent keeps its bytes. */
	assert_int_equal(p[0], 1);
	assert_int_equal(p[size - 1], 1);
	bigbuf_free(p, size * 2);
	free(plain);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(grows_keeping_bytes),
	    cmocka_unit_test(left_out_of_forks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
