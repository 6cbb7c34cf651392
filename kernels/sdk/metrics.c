/*
 * Per-tensor metrics of a kernel's output against the float64 reference.
 *
 * The tolerance rule (PRODUCT.md, "The check contract"):
 *
 *   ratio = max_abs(kernel - ref) / (factor * max_abs(plain - ref) + floor)
 *   floor = floor_eps * eps(dtype) * scale   (NW_FLOOR_EPS = 4 by default)
 *
 * where "plain" is a straightforward program in the same dtype (the largest
 * error over its reduction orders) and scale is max|ref| unless the check
 * names the size of the terms its output is a difference of. The floor keeps
 * the budget from collapsing when the plain program happens to be exact
 * (one-element rows, exact ties), while staying a few units of rounding at
 * the tensor's own scale. A check may instead give a fixed atol/rtol.
 *
 * Hard failures do not go through the ratio: an element still holding the
 * poison, a canary overwritten, or a NaN/Inf where the reference is finite
 * (or of a different class than the reference's NaN/Inf) fails the tensor
 * whatever its error.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numwatch_check.h"
#include "nw_compare_fold.h"
#include "nw_device.h"

/*
 * Element i of an output as float, and whether it still holds the poison
 * (never written): nw_load and nw_is_poison in one inlined step, since this
 * runs for every element of every trial. f16 reads go through the table of
 * nw_f16_values().
 */
static inline float element(enum nw_dtype d, const unsigned char *buf, size_t i, uint32_t poison,
			    const float *f16, bool *unwritten)
{
	uint32_t u32;
	uint16_t u16;
	float f;

	if (d == NW_F32) {
		memcpy(&u32, buf + 4 * i, 4);
		*unwritten = u32 == poison;
		memcpy(&f, &u32, 4);
		return f;
	}
	memcpy(&u16, buf + 2 * i, 2);
	*unwritten = u16 == (uint16_t)poison;
	if (d != NW_BF16)
		return f16[u16];
	u32 = (uint32_t)u16 << 16; /* bf16 is the top half of a float */
	memcpy(&f, &u32, 4);
	return f;
}

static void unravel(size_t i, const long *dims, unsigned ndim, long *idx)
{
	unsigned k;

	for (k = ndim; k-- > 0;) {
		long d = dims[k] > 0 ? dims[k] : 1;

		idx[k] = (long)(i % (size_t)d);
		i /= (size_t)d;
	}
}

/*
 * One pass over the host's copies, from first to last element
 * (nw_compare_fold.h): the fold is inlined, and the dtype's branch is the
 * same for every element. This is host time on every trial of a host runner.
 */
void nw_fold_host(struct nw_fold *f, const struct nw_fold_rule *rule, const struct nw_compare_spec *s)
{
	const struct nw_output *out = s->out;
	uint32_t poison = nw_poison_bits(out->dtype);
	const float *f16 = out->dtype == NW_F16 ? nw_f16_values() : NULL;
	/* A local copy: f may alias the inputs for all the compiler knows, a local lives in registers. */
	struct nw_fold acc = *f;
	struct nw_fold_rule r = *rule;
	size_t i;

	for (i = 0; i < out->count; i++) {
		double ref = s->ref[i], pe = 0.0;
		bool poisoned;
		float k = element(out->dtype, out->host, i, poison, f16, &poisoned);
		unsigned p;

		if (!poisoned) {
			for (p = 0; p < s->nplain; p++)
				if (isfinite(s->plain[p][i]) && fabs(s->plain[p][i] - ref) > pe)
					pe = fabs(s->plain[p][i] - ref);
			if (s->plain_err && s->plain_err[i] > pe)
				pe = s->plain_err[i];
		}
		nw_fold_elem(&acc, &r, (int64_t)i, (double)k, poisoned, ref, pe, s->exclude && s->exclude[i]);
	}
	acc.floor_scale = s->floor_scale;
	*f = acc;
}

/* The tensor's result from its merged fold: the budget, the ratio, the worst element. */
static void finish(struct nw_tensor_result *r, const char *name, const struct nw_compare_spec *s,
		   const struct nw_fold *f, bool budgeted)
{
	double eps = nw_dtype_eps(s->out->dtype);
	int64_t at = f->hard != NW_NO_INDEX ? f->hard : f->worst;

	memset(r, 0, sizeof(*r));
	strncpy(r->name, name, sizeof(r->name) - 1);
	r->has_ulp = s->out->dtype == NW_F32;
	r->canary = s->out->canary;
	r->max_abs = f->max_abs;
	r->max_rel = f->max_rel;
	r->max_ulp = (double)f->max_ulp;
	r->plain_max_abs = f->plain_max;
	r->unwritten = f->unwritten;
	r->nonfinite = f->nonfinite;
	r->ref_nonfinite = f->ref_nonfinite;
	r->mismatch = f->mismatch;
	r->excluded = f->excluded;

	if (budgeted) {
		double floor_eps = s->floor_eps > 0 ? s->floor_eps : NW_FLOOR_EPS;
		double scale = f->floor_scale > 0 ? f->floor_scale : f->max_ref;

		r->budget = s->factor * r->plain_max_abs + floor_eps * eps * scale;
		if (r->budget <= 0.0)
			r->budget = nw_dtype_tiny(s->out->dtype);
		r->ratio = r->max_abs / r->budget;
	} else {
		r->budget = s->atol;
		r->ratio = f->max_tol_ratio;
	}

	if (at != NW_NO_INDEX) {
		long *idx = r->worst;

		unravel((size_t)at, s->dims, s->ndim, idx);
		r->worst_ndim = s->ndim;
		if (s->tail_width > 1 && s->tail_axis < s->ndim) {
			unsigned ax = s->ndim - 1 - s->tail_axis;
			long d = s->dims[ax];

			r->tail = idx[ax] >= d - d % (long)s->tail_width;
		}
	}
}

static struct nw_fold_rule rule_of(const struct nw_compare_spec *s)
{
	return (struct nw_fold_rule){.budgeted = s->nplain > 0 || s->plain_err || s->plain_err_dev,
				     .has_ulp = s->out->dtype == NW_F32,
				     .atol = s->atol,
				     .rtol = s->rtol};
}

/* Tensors whose reference stayed on the device go there together, to share one wait. */
#define COMPARE_MAX NW_TENSORS_MAX

static int compare(struct nw_tensor_result *r, const char *const *names, const struct nw_compare_spec *s,
		   unsigned n)
{
	struct nw_fold f[COMPARE_MAX], dev_f[COMPARE_MAX];
	struct nw_fold_rule rule[COMPARE_MAX], dev_rule[COMPARE_MAX];
	struct nw_compare_spec dev_s[COMPARE_MAX];
	unsigned i, ndev = 0;

	if (n > COMPARE_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		rule[i] = rule_of(&s[i]);
		nw_fold_init(&f[i]);
		if (s[i].ref_dev) {
			dev_s[ndev] = s[i];
			dev_rule[ndev] = rule[i];
			nw_fold_init(&dev_f[ndev++]);
		}
	}
	/* Where the reference was left: the device compares, only the folds come back. */
	if (ndev && nw_dev_compare(dev_f, dev_rule, dev_s, ndev))
		return -EIO;
	if (ndev < n && nw_run_settle())
		return -EIO;
	for (i = 0, ndev = 0; i < n; i++) {
		if (s[i].ref_dev)
			f[i] = dev_f[ndev++];
		else
			nw_fold_host(&f[i], &rule[i], &s[i]);
		finish(&r[i], names[i], &s[i], &f[i], rule[i].budgeted);
	}
	return 0;
}

int nw_compare_n(struct nw_tensor_result *r, const char *const *names, const struct nw_compare_spec *s,
		 unsigned n)
{
	double t0 = nw_now();
	int rc = compare(r, names, s, n);

	nw_phase_add(NW_PHASE_COMPARE, t0);
	return rc;
}

int nw_compare(struct nw_tensor_result *r, const char *name, const struct nw_compare_spec *s)
{
	return nw_compare_n(r, &name, s, 1);
}

bool nw_tensor_failed(const struct nw_tensor_result *r)
{
	return r->ratio > 1.0 || r->mismatch > 0 || r->unwritten > 0 || r->canary > 0;
}
