/*
 * One element of a comparison (metrics.c), written once for the host and the
 * GPU (compare_cuda.cu): fold an element into a partial result, merge two
 * partial results. Every field is a maximum, a count or the first index of
 * something, so partial results over any split of the elements merge into
 * exactly what one pass from first to last gives: a GPU comparison answers
 * bit for bit what the host's does. Built without FMA contraction on both
 * sides (-ffp-contract=off, -fmad=false).
 */
#ifndef NW_COMPARE_FOLD_H
#define NW_COMPARE_FOLD_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define NW_HD __host__ __device__
#else
#define NW_HD
#endif

#define NW_NO_INDEX INT64_MAX

struct nw_fold {
	double max_ref, max_abs, max_rel, plain_max, max_tol_ratio;
	int64_t max_ulp;    /* an integer until the end: no conversion a step */
	double floor_scale; /* the largest of the spec's floor_scale_dev values */
	int64_t unwritten, nonfinite, ref_nonfinite, mismatch, excluded;
	int64_t worst; /* first element of the largest error (or tolerance ratio); NW_NO_INDEX: none */
	int64_t hard;  /* first unwritten or mismatching element; NW_NO_INDEX: none */
};

/* What every element of one comparison shares. */
struct nw_fold_rule {
	bool budgeted; /* plain errors given: the budget rule; else atol/rtol */
	bool has_ulp;  /* f32 outputs */
	double atol, rtol;
};

NW_HD static inline void nw_fold_init(struct nw_fold *f)
{
	memset(f, 0, sizeof(*f));
	f->worst = NW_NO_INDEX;
	f->hard = NW_NO_INDEX;
}

NW_HD static inline int64_t nw_ordered_f32(float v)
{
	int32_t i;

	memcpy(&i, &v, sizeof(i));
	return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}

NW_HD static inline bool nw_same_class(double a, double b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b; /* both infinite here */
}

/*
 * Element i: the kernel's value k (poisoned: never written), the reference,
 * the plain programs' largest error there (0 if none) and whether the
 * element is excluded as non-smooth. Elements must come in increasing order
 * within one partial result.
 */
NW_HD static inline void nw_fold_elem(struct nw_fold *f, const struct nw_fold_rule *r, int64_t i, double k,
				      bool poisoned, double ref, double plain_err, bool excluded)
{
	double err, aref;
	bool kfin, rfin;

	if (poisoned) {
		f->unwritten++;
		if (f->hard == NW_NO_INDEX)
			f->hard = i;
		return;
	}
	kfin = isfinite(k);
	rfin = isfinite(ref);
	f->nonfinite += !kfin;
	f->ref_nonfinite += !rfin;
	if (kfin != rfin || (!kfin && !nw_same_class(k, ref))) {
		f->mismatch++;
		if (f->hard == NW_NO_INDEX)
			f->hard = i;
		return;
	}
	/* A kink excuses a value, not a NaN: the hard checks above apply to excluded elements too. */
	if (excluded) {
		f->excluded++;
		return;
	}
	if (!rfin)
		return;
	aref = fabs(ref);
	if (aref > f->max_ref)
		f->max_ref = aref;
	err = fabs(k - ref);
	if (plain_err > f->plain_max)
		f->plain_max = plain_err;
	/*
	 * err / aref > max_rel, dividing only where it may be: the product is
	 * shrunk by 2^-50 so that rounding never turns away a larger quotient,
	 * and not trusted near the subnormals (the maximum is then the same in
	 * any order).
	 */
	if (ref != 0.0) {
		double p = f->max_rel * aref;

		if ((p < 0x1p-1000 || err > p * 0x1.ffffffffffffcp-1) && err / aref > f->max_rel)
			f->max_rel = err / aref;
	}
	if (r->has_ulp && isfinite((float)ref)) {
		int64_t d = nw_ordered_f32((float)k) - nw_ordered_f32((float)ref);

		d = d < 0 ? -d : d;
		if (d > f->max_ulp)
			f->max_ulp = d;
	}
	if (r->budgeted) {
		if (err > f->max_abs) {
			f->max_abs = err;
			f->worst = i;
		}
	} else {
		double q = err / (r->atol + r->rtol * aref);

		if (err > f->max_abs)
			f->max_abs = err;
		if (q > f->max_tol_ratio) {
			f->max_tol_ratio = q;
			f->worst = i;
		}
	}
}

/* The larger of two maxima, and of equal ones the first element. */
NW_HD static inline void nw_fold_pick(double *m, int64_t *at, double m2, int64_t at2)
{
	if (m2 > *m || (m2 == *m && at2 < *at)) {
		*m = m2;
		*at = at2;
	}
}

/* a += b: a partial result of any other elements. */
NW_HD static inline void nw_fold_merge(struct nw_fold *a, const struct nw_fold *b,
				       const struct nw_fold_rule *r)
{
	a->max_ref = fmax(a->max_ref, b->max_ref);
	a->max_rel = fmax(a->max_rel, b->max_rel);
	a->max_ulp = a->max_ulp > b->max_ulp ? a->max_ulp : b->max_ulp;
	a->plain_max = fmax(a->plain_max, b->plain_max);
	a->floor_scale = fmax(a->floor_scale, b->floor_scale);
	if (r->budgeted) {
		nw_fold_pick(&a->max_abs, &a->worst, b->max_abs, b->worst);
	} else {
		a->max_abs = fmax(a->max_abs, b->max_abs);
		nw_fold_pick(&a->max_tol_ratio, &a->worst, b->max_tol_ratio, b->worst);
	}
	a->unwritten += b->unwritten;
	a->nonfinite += b->nonfinite;
	a->ref_nonfinite += b->ref_nonfinite;
	a->mismatch += b->mismatch;
	a->excluded += b->excluded;
	if (b->hard < a->hard)
		a->hard = b->hard;
}

#ifndef __CUDACC__
struct nw_compare_spec;
/* The host's pass over s's host arrays (ref, plain, plain_err, exclude, out->host), first to last. */
void nw_fold_host(struct nw_fold *f, const struct nw_fold_rule *rule, const struct nw_compare_spec *s);
#endif

#endif
