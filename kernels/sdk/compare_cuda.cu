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

/* One tensor's comparison: where its data is and where its blocks' partial results go. */
struct fold_job {
	int dtype;
	uint32_t poison;
	const void *out;
	const double *ref, *plain_err, *scales;
	int64_t n, nscales;
	struct nw_fold_rule rule;
	unsigned blocks, first; /* its blocks, and the first one's place in partial[] */
};

struct fold_jobs {
	struct fold_job j[NW_TENSORS_MAX];
};

/* blockIdx.y picks the tensor: every tensor of a trial in one launch. */
__global__ static void fold_blocks(struct fold_jobs jobs, struct nw_fold *partial)
{
	__shared__ struct nw_fold part[THREADS];
	const struct fold_job *j = &jobs.j[blockIdx.y];
	struct nw_fold f;
	int64_t i, stride = (int64_t)j->blocks * THREADS, first = (int64_t)blockIdx.x * THREADS + threadIdx.x;
	unsigned s;

	if (blockIdx.x >= j->blocks)
		return; /* the whole block: a tensor with fewer blocks than the launch */
	nw_fold_init(&f);
	for (i = first; i < j->n; i += stride) {
		bool poisoned;
		float k;

		if (j->dtype == NW_F32) {
			uint32_t u = ((const uint32_t *)j->out)[i];

			poisoned = u == j->poison;
			k = __uint_as_float(u);
		} else {
			unsigned short u = ((const unsigned short *)j->out)[i];

			poisoned = u == (unsigned short)j->poison;
			k = j->dtype == NW_BF16 ? __uint_as_float((uint32_t)u << 16)
						: __half2float(__ushort_as_half(u));
		}
		nw_fold_elem(&f, &j->rule, i, (double)k, poisoned, j->ref[i],
			     j->plain_err && !poisoned ? j->plain_err[i] : 0.0, false);
	}
	for (i = first; i < j->nscales; i += stride)
		f.floor_scale = fmax(f.floor_scale, j->scales[i]);
	part[threadIdx.x] = f;
	__syncthreads();
	for (s = THREADS / 2; s > 0; s /= 2) {
		if (threadIdx.x < s)
			nw_fold_merge(&part[threadIdx.x], &part[threadIdx.x + s], &j->rule);
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partial[j->first + blockIdx.x] = part[0];
}

static unsigned blocks_for(const struct nw_compare_spec *s)
{
	int64_t n = (int64_t)s->out->count, nscales = s->floor_scale_dev ? (int64_t)s->floor_scale_count : 0;
	int64_t work = n > nscales ? n : nscales, b = (work + PER_BLOCK_MIN - 1) / PER_BLOCK_MIN;

	return (unsigned)(b < 1 ? 1 : b > BLOCKS_MAX ? BLOCKS_MAX : b);
}

/* The job of s; copy: the first repeat's data uploaded again where later repeats overwrote it. */
static int job_of(const struct nw_compare_spec *s, const struct nw_fold_rule *rule, struct fold_job *j,
		  void **copy)
{
	const struct nw_output *o = s->out;
	size_t bytes = o->count * nw_dtype_size(o->dtype);
	int rc;

	if (s->exclude || s->nplain || (rule->budgeted && !s->plain_err_dev))
		return -EINVAL; /* host arrays: not a device comparison */
	j->dtype = (int)o->dtype;
	j->poison = nw_poison_bits(o->dtype);
	j->out = o->dev;
	j->ref = s->ref_dev;
	j->plain_err = s->plain_err_dev;
	j->scales = s->floor_scale_dev;
	j->n = (int64_t)o->count;
	j->nscales = s->floor_scale_dev ? (int64_t)s->floor_scale_count : 0;
	j->rule = *rule;
	if (!o->dev_is_first) {
		rc = nw_dev_alloc(copy, bytes);
		if (!rc)
			rc = nw_dev_upload(*copy, o->host, bytes);
		if (rc)
			return rc;
		j->out = *copy;
	}
	return 0;
}

extern "C" int nw_dev_compare(struct nw_fold *f, const struct nw_fold_rule *rule,
			      const struct nw_compare_spec *s, unsigned n)
{
	struct fold_jobs jobs;
	void *copy[NW_TENSORS_MAX] = {};
	struct nw_fold *dev = NULL, *host = NULL;
	unsigned k, b, total = 0, most = 0;
	int rc = 0;

	if (n == 0)
		return 0;
	if (n > NW_TENSORS_MAX)
		return -EINVAL;
	for (k = 0; k < n; k++) {
		jobs.j[k].blocks = blocks_for(&s[k]);
		jobs.j[k].first = total;
		total += jobs.j[k].blocks;
		most = jobs.j[k].blocks > most ? jobs.j[k].blocks : most;
	}
	host = (struct nw_fold *)nw_dev_pinned(total * sizeof(*host));
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&dev, total * sizeof(*dev));
	for (k = 0; !rc && k < n; k++)
		rc = job_of(&s[k], &rule[k], &jobs.j[k], &copy[k]);
	if (!rc) {
		fold_blocks<<<dim3(most, n), THREADS>>>(jobs, dev);
		rc = nw_dev_launched("comparison");
	}
	if (!rc)
		rc = nw_dev_download_pinned(host, dev, total * sizeof(*host));
	/* One wait for the kernel's last repeat (if still pending) and all of this. */
	if (!rc)
		rc = nw_run_settle();
	if (!rc)
		rc = nw_dev_sync("comparison");
	for (k = 0; !rc && k < n; k++) {
		for (b = 0; b < jobs.j[k].blocks; b++)
			nw_fold_merge(&f[k], &host[jobs.j[k].first + b], &rule[k]);
		if (!s[k].floor_scale_dev)
			f[k].floor_scale = s[k].floor_scale;
	}
	for (k = 0; k < n; k++)
		nw_dev_free(copy[k]);
	nw_dev_free(dev);
	nw_dev_unpin(host);
	return rc;
}
