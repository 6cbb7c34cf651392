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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numwatch_check.h"

static long ordered_f32(float f)
{
	int32_t i;

	memcpy(&i, &f, sizeof(i));
	return i < 0 ? -(long)(i & 0x7fffffff) : (long)i;
}

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

static bool same_class(double a, double b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b; /* both infinite here */
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
 * One pass over the elements. The running maxima live in locals, not in *r
 * (which the compiler must assume the inputs may alias), and a relative
 * error is divided out only when it may be a new maximum: a trial compares
 * tens of thousands of elements, and this is host time on every trial.
 */
static int compare(struct nw_tensor_result *r, const char *name, const struct nw_compare_spec *s)
{
	const struct nw_output *out = s->out;
	double eps = nw_dtype_eps(out->dtype), max_ref = 0.0, max_tol_ratio = 0.0;
	double max_abs = 0.0, max_rel = 0.0, max_ulp = 0.0, plain_max = 0.0;
	long unwritten = 0, nonfinite = 0, ref_nonfinite = 0, mismatch = 0, excluded = 0;
	size_t i, worst = 0, hard = 0;
	bool have_worst = false, have_hard = false, budgeted = s->nplain > 0 || s->plain_err;
	bool has_ulp = out->dtype == NW_F32, poisoned;
	uint32_t poison = nw_poison_bits(out->dtype);
	const float *f16 = out->dtype == NW_F16 ? nw_f16_values() : NULL;

	memset(r, 0, sizeof(*r));
	strncpy(r->name, name, sizeof(r->name) - 1);
	r->has_ulp = has_ulp;
	r->canary = out->canary;

	for (i = 0; i < out->count; i++) {
		double k, ref = s->ref[i], err, aref;
		bool kfin, rfin;
		unsigned p;

		k = element(out->dtype, out->host, i, poison, f16, &poisoned);
		if (poisoned) {
			unwritten++;
			if (!have_hard)
				hard = i;
			have_hard = true;
			continue;
		}
		kfin = isfinite(k);
		rfin = isfinite(ref);
		nonfinite += !kfin;
		ref_nonfinite += !rfin;
		if (kfin != rfin || (!kfin && !same_class(k, ref))) {
			mismatch++;
			if (!have_hard)
				hard = i;
			have_hard = true;
			continue;
		}
		/* A kink excuses a value, not a NaN: the hard checks above apply to excluded elements too. */
		if (s->exclude && s->exclude[i]) {
			excluded++;
			continue;
		}
		if (!rfin)
			continue;

		aref = fabs(ref);
		if (aref > max_ref)
			max_ref = aref;
		err = fabs(k - ref);
		for (p = 0; p < s->nplain; p++)
			if (isfinite(s->plain[p][i]) && fabs(s->plain[p][i] - ref) > plain_max)
				plain_max = fabs(s->plain[p][i] - ref);
		if (s->plain_err && s->plain_err[i] > plain_max)
			plain_max = s->plain_err[i];
		/* err / aref > max_rel, without a division for every element */
		if (ref != 0.0 && err > max_rel * aref && err / aref > max_rel)
			max_rel = err / aref;
		if (has_ulp && isfinite((float)ref)) {
			double ulp = (double)labs(ordered_f32((float)k) - ordered_f32((float)ref));

			if (ulp > max_ulp)
				max_ulp = ulp;
		}
		if (budgeted) {
			if (err > max_abs) {
				max_abs = err;
				worst = i;
				have_worst = true;
			}
		} else {
			double q = err / (s->atol + s->rtol * aref);

			if (err > max_abs)
				max_abs = err;
			if (q > max_tol_ratio) {
				max_tol_ratio = q;
				worst = i;
				have_worst = true;
			}
		}
	}
	r->max_abs = max_abs;
	r->max_rel = max_rel;
	r->max_ulp = max_ulp;
	r->plain_max_abs = plain_max;
	r->unwritten = unwritten;
	r->nonfinite = nonfinite;
	r->ref_nonfinite = ref_nonfinite;
	r->mismatch = mismatch;
	r->excluded = excluded;

	if (budgeted) {
		double floor_eps = s->floor_eps > 0 ? s->floor_eps : NW_FLOOR_EPS;
		double scale = s->floor_scale > 0 ? s->floor_scale : max_ref;

		r->budget = s->factor * r->plain_max_abs + floor_eps * eps * scale;
		if (r->budget <= 0.0)
			r->budget = nw_dtype_tiny(out->dtype);
		r->ratio = r->max_abs / r->budget;
	} else {
		r->budget = s->atol;
		r->ratio = max_tol_ratio;
	}

	if (have_hard || have_worst) {
		long *idx = r->worst;

		unravel(have_hard ? hard : worst, s->dims, s->ndim, idx);
		r->worst_ndim = s->ndim;
		if (s->tail_width > 1 && s->tail_axis < s->ndim) {
			unsigned ax = s->ndim - 1 - s->tail_axis;
			long d = s->dims[ax];

			r->tail = idx[ax] >= d - d % (long)s->tail_width;
		}
	}
	return 0;
}

int nw_compare(struct nw_tensor_result *r, const char *name, const struct nw_compare_spec *s)
{
	double t0 = nw_now();
	int rc = compare(r, name, s);

	nw_phase_add(NW_PHASE_COMPARE, t0);
	return rc;
}

bool nw_tensor_failed(const struct nw_tensor_result *r)
{
	return r->ratio > 1.0 || r->mismatch > 0 || r->unwritten > 0 || r->canary > 0;
}
