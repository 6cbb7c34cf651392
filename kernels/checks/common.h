/*
 * Helpers shared by the checks of layernorm, msda and attention: buffers,
 * stored inputs read back as doubles, and one call per compared tensor.
 */
#ifndef NW_CHECKS_COMMON_H
#define NW_CHECKS_COMMON_H

#include "numwatch_check.h"

/* malloc of n elements (at least one), NULL when out of memory. */
double *ck_doubles(long n);
float *ck_floats(long n);
void *ck_buffer(enum nw_dtype d, long n);

/* The plain program's results, one array per reduction order. */
struct ck_plain {
	double *p[NW_PLAIN_MAX];
	unsigned n;
};

int ck_plain_alloc(struct ck_plain *pl, unsigned orders, long count);
void ck_plain_free(struct ck_plain *pl);

/*
 * Stores v[i] (double) in buf of dtype d, and reads the stored value back
 * into v (so that references see exactly what the kernel sees).
 */
void ck_store_all(enum nw_dtype d, void *buf, double *v, long n);
/* The stored values of n elements of dtype d, as doubles (malloc'd; NULL when out of memory). */
double *ck_loaded(enum nw_dtype d, const void *buf, long n);
/* Rounds v to dtype d and back, in double: one rounding of a same-dtype program. */
static inline double ck_round(enum nw_dtype d, double v)
{
	return (double)nw_round(d, (float)v);
}

/*
 * Outputs a check may ask for stay well inside the dtype's range: a case
 * whose float64 result would overflow (dy 1e3 times rstd 300 in f16) has no
 * right answer in that dtype. ck_shrink() gives the power of two (2^-k, k >= 0)
 * that brings a result of size maxabs under 1/16 of the dtype's largest
 * value; gradients are linear in the incoming gradient, which a check scales
 * by it (exactly, being a power of two).
 */
double ck_shrink(enum nw_dtype d, double maxabs);
double ck_max_abs(const double *x, long n);

/*
 * The floor of a budget (sdk/metrics.c: floor_eps * eps(dtype) * scale) for
 * an output of dtype d computed in float and rounded once: a few roundings
 * of the dtype at the output's size (maxref), plus a few roundings of float
 * at the size of the terms it is made of (terms: a sum of magnitudes, or the
 * size of the two sides of a difference). Returns the scale to pass.
 */
double ck_floor_scale(enum nw_dtype d, double maxref, double terms);

/* A normal draw scaled and offset. */
static inline double ck_normal(struct nw_rng *r, double mu, double sigma)
{
	return mu + sigma * nw_rng_normal(r);
}

/* What one compared tensor needs besides the kernel's output. */
struct ck_tensor {
	const char *name;
	const struct nw_output *out;
	const double *ref;
	const struct ck_plain *plain;          /* NULL: fixed atol / rtol */
	const double *plain_err;               /* or already reduced (nw_compare_spec.plain_err) */
	const double *ref_dev, *plain_err_dev; /* or on the device (nw_compare_spec.ref_dev) */
	double factor;
	double floor_scale; /* 0: max|ref| */
	const unsigned char *exclude;
	const long *dims;
	unsigned ndim;
	unsigned tail_width, tail_axis;
	double atol, rtol;
};

/* nw_compare() into t->tensors[t->ntensors++]; a device error is recorded in t and returned. */
int ck_compare(struct nw_trial *t, const struct ck_tensor *c);
/* n tensors at once: those compared on the device share one wait (nw_compare_n). */
int ck_compare_n(struct nw_trial *t, const struct ck_tensor *c, unsigned n);

/*
 * The permutation of reduction order o over n elements (nw_order_index for
 * j = 0..n-1), malloc'd; NULL when out of memory, where ck_at() falls back
 * to computing each index.
 */
long *ck_perm(int order, long n);
static inline long ck_at(const long *perm, int order, long j, long n)
{
	return perm ? perm[j] : nw_order_index(order, j, n);
}

/* Sets t->shape from n dims. */
void ck_set_shape(struct nw_trial *t, const long *dims, unsigned n);

#endif
