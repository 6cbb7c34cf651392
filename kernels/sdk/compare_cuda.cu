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

#define THREADS       128
#define BLOCKS_MAX    128
#define PER_BLOCK_MIN 512 /* elements a block is given before another is worth launching */

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

/* Where the comparison's blocks are: how many, and their place in the one copy back. */
struct launch {
	unsigned blocks, first;
	void *copy; /* the first repeat's data uploaded again, or NULL */
};

static unsigned blocks_for(const struct nw_compare_spec *s)
{
	int64_t n = (int64_t)s->out->count, nscales = s->floor_scale_dev ? (int64_t)s->floor_scale_count : 0;
	int64_t work = n > nscales ? n : nscales, b = (work + PER_BLOCK_MIN - 1) / PER_BLOCK_MIN;

	return (unsigned)(b < 1 ? 1 : b > BLOCKS_MAX ? BLOCKS_MAX : b);
}

static int launch_one(const struct nw_compare_spec *s, const struct nw_fold_rule *rule, struct launch *l,
		      struct nw_fold *partial)
{
	const struct nw_output *o = s->out;
	size_t bytes = o->count * nw_dtype_size(o->dtype);
	const void *data = o->dev;
	int rc;

	if (s->exclude || s->nplain || (rule->budgeted && !s->plain_err_dev))
		return -EINVAL; /* host arrays: not a device comparison */
	if (!o->dev_is_first) {
		/* Later repeats overwrote the device's copy: the first repeat's data goes back up. */
		rc = nw_dev_alloc(&l->copy, bytes);
		if (!rc)
			rc = nw_dev_upload(l->copy, o->host, bytes);
		if (rc)
			return rc;
		data = l->copy;
	}
	fold_blocks<<<l->blocks, THREADS>>>((int)o->dtype, data, nw_poison_bits(o->dtype), (int64_t)o->count,
					     s->ref_dev, s->plain_err_dev, *rule, s->floor_scale_dev,
					     s->floor_scale_dev ? (int64_t)s->floor_scale_count : 0, partial);
	return nw_dev_launched("comparison");
}

extern "C" int nw_dev_compare(struct nw_fold *f, const struct nw_fold_rule *rule, const struct nw_compare_spec *s,
			      unsigned n)
{
	struct launch l[NW_TENSORS_MAX] = {};
	struct nw_fold *dev = NULL, *host = NULL;
	unsigned k, b, total = 0;
	int rc = 0;

	if (n > NW_TENSORS_MAX)
		return -EINVAL;
	for (k = 0; k < n; k++) {
		l[k].blocks = blocks_for(&s[k]);
		l[k].first = total;
		total += l[k].blocks;
	}
	host = (struct nw_fold *)nw_dev_pinned(total * sizeof(*host));
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&dev, total * sizeof(*dev));
	for (k = 0; !rc && k < n; k++)
		rc = launch_one(&s[k], &rule[k], &l[k], dev + l[k].first);
	if (!rc)
		rc = nw_dev_download_pinned(host, dev, total * sizeof(*host));
	/* One wait for the kernel's last repeat (if still pending) and all of this. */
	if (!rc)
		rc = nw_run_settle();
	if (!rc)
		rc = nw_dev_sync("comparison");
	for (k = 0; !rc && k < n; k++) {
		for (b = 0; b < l[k].blocks; b++)
			nw_fold_merge(&f[k], &host[l[k].first + b], &rule[k]);
		if (!s[k].floor_scale_dev)
			f[k].floor_scale = s[k].floor_scale;
	}
	for (k = 0; k < n; k++)
		nw_dev_free(l[k].copy);
	nw_dev_free(dev);
	nw_dev_unpin(host);
	return rc;
}
