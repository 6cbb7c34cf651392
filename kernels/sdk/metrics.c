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

static int compare(struct nw_tensor_result *r, const char *name, const struct nw_compare_spec *s)
{
	const struct nw_output *out = s->out;
	double eps = nw_dtype_eps(out->dtype), max_ref = 0.0, max_tol_ratio = 0.0;
	size_t i, worst = 0, hard = 0;
	bool have_worst = false, have_hard = false, budgeted = s->nplain > 0 || s->plain_err;

	memset(r, 0, sizeof(*r));
	strncpy(r->name, name, sizeof(r->name) - 1);
	r->has_ulp = out->dtype == NW_F32;
	r->canary = out->canary;

	for (i = 0; i < out->count; i++) {
		double k, ref = s->ref[i], err;
		bool kfin, rfin;
		unsigned p;

		if (nw_is_poison(out->dtype, out->host, i)) {
			r->unwritten++;
			if (!have_hard)
				hard = i;
			have_hard = true;
			continue;
		}
		k = nw_load(out->dtype, out->host, i);
		kfin = isfinite(k);
		rfin = isfinite(ref);
		r->nonfinite += !kfin;
		r->ref_nonfinite += !rfin;
		if (kfin != rfin || (!kfin && !same_class(k, ref))) {
			r->mismatch++;
			if (!have_hard)
				hard = i;
			have_hard = true;
			continue;
		}
		/* A kink excuses a value, not a NaN: the hard checks above apply to excluded elements too. */
		if (s->exclude && s->exclude[i]) {
			r->excluded++;
			continue;
		}
		if (!rfin)
			continue;

		if (fabs(ref) > max_ref)
			max_ref = fabs(ref);
		err = fabs(k - ref);
		for (p = 0; p < s->nplain; p++)
			if (isfinite(s->plain[p][i]) && fabs(s->plain[p][i] - ref) > r->plain_max_abs)
				r->plain_max_abs = fabs(s->plain[p][i] - ref);
		if (s->plain_err && s->plain_err[i] > r->plain_max_abs)
			r->plain_max_abs = s->plain_err[i];
		if (ref != 0.0 && err / fabs(ref) > r->max_rel)
			r->max_rel = err / fabs(ref);
		if (r->has_ulp && isfinite((float)ref)) {
			double ulp = (double)labs(ordered_f32((float)k) - ordered_f32((float)ref));

			if (ulp > r->max_ulp)
				r->max_ulp = ulp;
		}
		if (budgeted) {
			if (err > r->max_abs) {
				r->max_abs = err;
				worst = i;
				have_worst = true;
			}
		} else {
			double q = err / (s->atol + s->rtol * fabs(ref));

			if (err > r->max_abs)
				r->max_abs = err;
			if (q > max_tol_ratio) {
				max_tol_ratio = q;
				worst = i;
				have_worst = true;
			}
		}
	}

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
