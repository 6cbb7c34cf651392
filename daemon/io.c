/* io: blocking file-descriptor helpers. */
#include "io.h"

#include <errno.h>
#include <unistd.h>

int io_write_full(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}
