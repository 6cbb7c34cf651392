/*
 * Arming outputs on the GPU (nw_dev_arm): every output of a launch gets its
 * guards and poison from one kernel, not a copy per guard and body.
 */
#include <errno.h>
#include <stdint.h>

extern "C" {
#include "numwatch_check.h"
#include "nw_device.h"
}

#define THREADS               256
#define BLOCKS_PER_OUTPUT_MAX 64

struct arm_list {
	struct nw_arm a[NW_TENSORS_MAX];
};

/* blockIdx.y picks the output; its blocks stride over the guard and element bytes. */
__global__ static void arm_outputs(struct arm_list l)
{
	const struct nw_arm *a = &l.a[blockIdx.y];
	unsigned char *p = (unsigned char *)a->alloc;
	size_t body = a->count * a->elem_size, i, stride = (size_t)gridDim.x * THREADS;
	size_t first = (size_t)blockIdx.x * THREADS + threadIdx.x;

	for (i = first; i < a->guard_bytes; i += stride) {
		p[i] = NW_CANARY[i % 8];
		p[a->guard_bytes + body + i] = NW_CANARY[i % 8];
	}
	for (i = first; i < a->count; i += stride) {
		if (a->elem_size == 4)
			((uint32_t *)(p + a->guard_bytes))[i] = a->poison;
		else
			((uint16_t *)(p + a->guard_bytes))[i] = (uint16_t)a->poison;
	}
}

extern "C" int nw_dev_arm(const struct nw_arm *a, unsigned n)
{
	struct arm_list l;
	size_t most = 0;
	unsigned k, blocks;

	if (n == 0)
		return 0;
	if (n > NW_TENSORS_MAX)
		return -EINVAL;
	for (k = 0; k < n; k++) {
		l.a[k] = a[k];
		most = a[k].count > most ? a[k].count : most;
		most = a[k].guard_bytes > most ? a[k].guard_bytes : most;
	}
	blocks = (unsigned)((most + THREADS - 1) / THREADS);
	blocks = blocks < 1 ? 1 : blocks > BLOCKS_PER_OUTPUT_MAX ? BLOCKS_PER_OUTPUT_MAX : blocks;
	arm_outputs<<<dim3(blocks, n), THREADS>>>(l);
	return nw_dev_launched("arming the outputs");
}
