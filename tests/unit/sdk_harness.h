/*
 * What the per-op SDK tests (test_sdk_<op>.c) share: running one trial that
 * must not be an error answer, a check with planted kernels, and the ways a
 * planted bug must show in a tensor's metrics. Include after <cmocka.h>.
 */
#ifndef NW_TEST_SDK_HARNESS_H
#define NW_TEST_SDK_HARNESS_H

#include "numwatch_check.h"

static const enum nw_dtype all_dtypes[] = {NW_F32, NW_F16, NW_BF16};

/* One trial of c; an error answer fails the test. */
static inline struct nw_trial run(const struct nw_check *c, enum nw_dtype d, uint64_t seed, int family)
{
	struct nw_trial t = {.dtype = d, .seed = seed, .family = family, .repeats = 1};

	nw_trial_run(c, &t);
	if (t.error)
		fail_msg("%s %s seed %llu: error answer '%s'", c->name, nw_dtype_name(d),
			 (unsigned long long)seed, t.errmsg);
	return t;
}

/* c with the op's kernel table k (struct <op>_kernels, planted bugs and all). */
static inline struct nw_check with_kernels(const struct nw_check *c, const void *k)
{
	struct nw_check p = *c;

	p.kernels = k;
	return p;
}

/* A planted wrong value: over budget, and nothing harder. */
static inline bool ratio_over_one(const struct nw_tensor_result *r)
{
	return r->ratio > 1.0 && r->mismatch == 0 && r->unwritten == 0;
}

/* A planted NaN where the reference is finite. */
static inline bool nonfinite_mismatch(const struct nw_tensor_result *r)
{
	return r->mismatch == 1 && r->nonfinite == r->ref_nonfinite + 1;
}

static inline bool one_unwritten(const struct nw_tensor_result *r)
{
	return r->unwritten == 1;
}

/* A write past the end: the guard, not the data. */
static inline bool canary_broken(const struct nw_tensor_result *r)
{
	return r->canary >= 1 && r->unwritten == 0 && r->mismatch == 0;
}

#endif
