/*
 * bigbuf: large buffers kept out of the daemon's children (issue 17). Each is
 * an anonymous mapping of its own marked MADV_DONTFORK, so that a fork (every
 * runner start goes through one) neither copies its page table entries nor
 * write-protects its pages: the daemon pays for neither at every start, nor
 * for the copy-on-write faults its next writes to them would take. A child
 * never touches them: it execs at once (proc.c).
 */
#ifndef NW_BIGBUF_H
#define NW_BIGBUF_H

#include <stddef.h>

/* A buffer of 'size' bytes (zeroed), or NULL when out of memory. Freed with bigbuf_free(p, size). */
void *bigbuf_alloc(size_t size);
/* Grows (or shrinks) 'p' from 'old_size' to 'new_size', keeping its bytes; NULL and 'p' untouched on failure. */
void *bigbuf_realloc(void *p, size_t old_size, size_t new_size);
/* Frees a buffer of 'size' bytes (NULL: nothing). */
void bigbuf_free(void *p, size_t size);

#endif
