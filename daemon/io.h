/*
 * io: blocking file-descriptor helpers for code off the event loop (the
 * mailer's thread pool, the command-line client).
 */
#ifndef NW_IO_H
#define NW_IO_H

#include <stddef.h>

/* Writes all 'n' bytes of 'p' to 'fd', again after a short write or EINTR. 0, or -errno (-EIO: nothing written). */
int io_write_full(int fd, const char *p, size_t n);

#endif
