/* bigbuf: anonymous mappings that a fork leaves out. */
#include "bigbuf.h"

#include <string.h>
#include <sys/mman.h>

void *bigbuf_alloc(size_t size)
{
	void *p;

	if (size == 0)
		size = 1;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* Without it the buffer still works: a fork then copies it as any other memory. */
	(void)madvise(p, size, MADV_DONTFORK);
	return p;
}

void *bigbuf_realloc(void *p, size_t old_size, size_t new_size)
{
	void *q;

	if (!p)
		return bigbuf_alloc(new_size);
	if (new_size == 0)
		new_size = 1;
	/* The mapping moves with its flags (MADV_DONTFORK included). */
	q = mremap(p, old_size ? old_size : 1, new_size, MREMAP_MAYMOVE);
	return q == MAP_FAILED ? NULL : q;
}

void bigbuf_free(void *p, size_t size)
{
	if (p)
		munmap(p, size ? size : 1);
}
