/*
 * Comparisons on the GPU (nw_compare_spec.ref_dev): the reference stays
 * where it was computed, blocks fold the elements with the host's own code
 * (nw_compare_fold.h), and only their partial results come back, to be
 * merged on the host. Built with -fmad=false, like the host without FMA
 * contraction: every element's arithmetic rounds as the host's does.
 */
#include <cuda_fp16.h>
#include <errno.h>
#include <stdint.h>

extern "C" {
#include "numwatch_check.h"
#include "nw_device.h"
}
#include "nw_compare_fold.h"

#define THREADS 256
#define BLOCKS_MAX 64
#define PER_BLOCK_MIN 4096 /* elements a block is given before another is worth launching */

__global__ static void fold_blocks(int d, const void *out, uint32_t poison, int64_t n, const double *ref,
				   const double *plain_err, struct nw_fold_rule rule, const double *scales,
				   int64_t nscales, struct nw_fold *partial)
{
	__shared__ struct nw_fold part[THREADS];
	struct nw_fold f;
	int64_t i, stride = (int64_t)gridDim.x * THREADS, first = (int64_t)blockIdx.x * THREADS + threadIdx.x;
	unsigned s;

	nw_fold_init(&f);
	for (i = first; i < n; i += stride) {
		bool poisoned;
		float k;

		if (d == NW_F32) {
			uint32_t u = ((const uint32_t *)out)[i];

			poisoned = u == poison;
			k = __uint_as_float(u);
		} else {
			unsigned short u = ((const unsigned short *)out)[i];

			poisoned = u == (unsigned short)poison;
			k = d == NW_BF16 ? __uint_as_float((uint32_t)u << 16) : __half2float(__ushort_as_half(u));
		}
		nw_fold_elem(&f, &rule, i, (double)k, poisoned, ref[i], plain_err && !poisoned ? plain_err[i] : 0.0,
			     false);
	}
	for (i = first; i < nscales; i += stride)
		f.floor_scale = fmax(f.floor_scale, scales[i]);
	part[threadIdx.x] = f;
	__syncthreads();
	for (s = THREADS / 2; s > 0; s /= 2) {
		if (threadIdx.x < s)
			nw_fold_merge(&part[threadIdx.x], &part[threadIdx.x + s], &rule);
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partial[blockIdx.x] = part[0];
}

extern "C" int nw_dev_compare(struct nw_fold *f, const struct nw_fold_rule *rule, const struct nw_compare_spec *s)
{
	const struct nw_output *o = s->out;
	int64_t n = (int64_t)o->count, nscales = s->floor_scale_dev ? (int64_t)s->floor_scale_count : 0;
	int64_t work = n > nscales ? n : nscales;
	unsigned blocks = (unsigned)((work + PER_BLOCK_MIN - 1) / PER_BLOCK_MIN), b;
	size_t bytes = o->count * nw_dtype_size(o->dtype);
	const void *data = o->dev;
	void *copy = NULL;
	struct nw_fold *dev = NULL, *host = NULL;
	int rc;

	if (blocks < 1)
		blocks = 1;
	if (blocks > BLOCKS_MAX)
		blocks = BLOCKS_MAX;
	if (s->exclude || s->nplain || (rule->budgeted && !s->plain_err_dev))
		return -EINVAL; /* host arrays: not a device comparison */
	host = (struct nw_fold *)nw_dev_pinned(blocks * sizeof(*host));
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&dev, blocks * sizeof(*dev));
	if (!rc && !o->dev_is_first) {
		/* Later repeats overwrote the device's copy: the first repeat's data goes back up. */
		rc = nw_dev_alloc(&copy, bytes);
		if (!rc)
			rc = nw_dev_upload(copy, o->host, bytes);
		data = copy;
	}
	if (!rc) {
		fold_blocks<<<blocks, THREADS>>>((int)o->dtype, data, nw_poison_bits(o->dtype), n, s->ref_dev,
						  s->plain_err_dev, *rule, s->floor_scale_dev, nscales, dev);
		rc = nw_dev_launched("comparison");
	}
	if (!rc)
		rc = nw_dev_download_pinned(host, dev, blocks * sizeof(*host));
	/* One wait for the kernel's last repeat (if still pending) and this. */
	if (!rc)
		rc = nw_run_settle();
	if (!rc)
		rc = nw_dev_sync("comparison");
	for (b = 0; !rc && b < blocks; b++)
		nw_fold_merge(f, &host[b], rule);
	if (!rc && !s->floor_scale_dev)
		f->floor_scale = s->floor_scale;
	nw_dev_free(copy);
	nw_dev_free(dev);
	nw_dev_unpin(host);
	return rc;
}
