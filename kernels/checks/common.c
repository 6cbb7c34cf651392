/*
 * Helpers shared by the checks (common.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

double *ck_doubles(long n)
{
	return malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
}

float *ck_floats(long n)
{
	return malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
}

void *ck_buffer(enum nw_dtype d, long n)
{
	return malloc((size_t)(n > 0 ? n : 1) * nw_dtype_size(d));
}

int ck_plain_alloc(struct ck_plain *pl, unsigned orders, long count)
{
	unsigned o;

	memset(pl, 0, sizeof(*pl));
	if (orders > NW_PLAIN_MAX)
		orders = NW_PLAIN_MAX;
	for (o = 0; o < orders; o++) {
		pl->p[o] = ck_doubles(count);
		if (!pl->p[o]) {
			ck_plain_free(pl);
			return -1;
		}
		pl->n = o + 1;
	}
	return 0;
}

void ck_plain_free(struct ck_plain *pl)
{
	unsigned o;

	for (o = 0; o < NW_PLAIN_MAX; o++)
		free(pl->p[o]);
	memset(pl, 0, sizeof(*pl));
}

double *ck_loaded(enum nw_dtype d, const void *buf, long n)
{
	double *v = ck_doubles(n);
	long i;

	for (i = 0; v && i < n; i++)
		v[i] = (double)nw_load(d, buf, (size_t)i);
	return v;
}

void ck_store_all(enum nw_dtype d, void *buf, double *v, long n)
{
	if (n > 0)
		nw_store_n(d, buf, v, (size_t)n);
}

static struct nw_compare_spec spec_of(const struct ck_tensor *c)
{
	struct nw_compare_spec spec = {0};
	unsigned o;

	spec.out = c->out;
	spec.ref = c->ref;
	if (c->plain) {
		for (o = 0; o < c->plain->n; o++)
			spec.plain[o] = c->plain->p[o];
		spec.nplain = c->plain->n;
	}
	spec.plain_err = c->plain_err;
	spec.ref_dev = c->ref_dev;
	spec.plain_err_dev = c->plain_err_dev;
	spec.factor = c->factor;
	spec.floor_scale = c->floor_scale;
	spec.atol = c->atol;
	spec.rtol = c->rtol;
	spec.exclude = c->exclude;
	spec.dims = c->dims;
	spec.ndim = c->ndim;
	spec.tail_width = c->tail_width;
	spec.tail_axis = c->tail_axis;
	return spec;
}

int ck_compare_n(struct nw_trial *t, const struct ck_tensor *c, unsigned n)
{
	struct nw_compare_spec spec[NW_TENSORS_MAX];
	const char *names[NW_TENSORS_MAX];
	unsigned i;

	if (t->ntensors + n > NW_TENSORS_MAX)
		return nw_trial_error(t, false, "more than %d tensors", NW_TENSORS_MAX);
	for (i = 0; i < n; i++) {
		spec[i] = spec_of(&c[i]);
		names[i] = c[i].name;
	}
	if (nw_compare_n(&t->tensors[t->ntensors], names, spec, n))
		return nw_trial_device_error(t);
	t->ntensors += n;
	return 0;
}

int ck_compare(struct nw_trial *t, const struct ck_tensor *c)
{
	return ck_compare_n(t, c, 1);
}

void ck_set_shape(struct nw_trial *t, const long *dims, unsigned n)
{
	unsigned i;

	for (i = 0; i < n && i < NW_SHAPE_MAX; i++)
		t->shape[i] = dims[i];
	t->ndim = i;
}

double ck_shrink(enum nw_dtype d, double maxabs)
{
	double limit = (d == NW_F16 ? 65504.0 : 3.4e38) / 16.0, f = 1.0;

	while (maxabs * f > limit)
		f *= 0.5;
	return f;
}

double ck_max_abs(const double *x, long n)
{
	double m = 0.0;
	long i;

	for (i = 0; i < n; i++)
		if (isfinite(x[i]))
			m = fmax(m, fabs(x[i]));
	return m;
}

double ck_floor_scale(enum nw_dtype d, double maxref, double terms)
{
	return maxref + nw_dtype_eps(NW_F32) / nw_dtype_eps(d) * terms;
}

long *ck_perm(int order, long n)
{
	long *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(long));

	if (p)
		nw_order_fill(order, n, p);
	return p;
}
