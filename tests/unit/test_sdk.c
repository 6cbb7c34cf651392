/*
 * Unit tests of the check SDK (kernels/sdk): conversions, the generator,
 * the metrics and their hard failures, canaries, repeats and the runner's
 * protocol answers. The softmax checks are tested in test_sdk_softmax.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "numwatch_check.h"
#include "nw_compare_fold.h"
#include "nw_device.h"
#include "runner.h"

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static void test_f16_known_values(void **state)
{
	(void)state;
	assert_int_equal(nw_f32_to_f16(1.0f), 0x3c00);
	assert_int_equal(nw_f32_to_f16(-2.0f), 0xc000);
	assert_int_equal(nw_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(nw_f32_to_f16(65519.0f), 0x7bff); /* below the midpoint to 65536 */
	assert_int_equal(nw_f32_to_f16(65520.0f), 0x7c00); /* the midpoint rounds to even: infinity */
	assert_int_equal(nw_f32_to_f16(INFINITY), 0x7c00);
	assert_int_equal(nw_f32_to_f16(-0.0f), 0x8000);
	assert_int_equal(nw_f32_to_f16(0x1p-14f), 0x0400);        /* smallest normal */
	assert_int_equal(nw_f32_to_f16(0x1p-24f), 0x0001);        /* smallest subnormal */
	assert_int_equal(nw_f32_to_f16(0x1p-25f), 0x0000);        /* tie to even: zero */
	assert_int_equal(nw_f32_to_f16(0x1.8p-25f), 0x0001);      /* above the tie */
	assert_int_equal(nw_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even, down */
	assert_int_equal(nw_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); /* tie to even, up */
	assert_true(isnan(nw_f16_to_f32(nw_f32_to_f16(NAN))));
	assert_true(nw_f16_to_f32(0x0001) == 0x1p-24f);
	assert_true(nw_f16_to_f32(0xfbff) == -65504.0f);
}

static void test_f16_round_trip_and_oracle(void **state)
{
	struct nw_rng r;
	uint32_t h;
	int i;

	(void)state;
	/* Every non-NaN half survives the trip through float unchanged. */
	for (h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue;
		assert_int_equal(nw_f32_to_f16(nw_f16_to_f32((uint16_t)h)), h);
	}
#ifdef __FLT16_MANT_DIG__
	/* The compiler's own conversion is an independent oracle. */
	nw_rng_init(&r, "test", 1, 0);
	for (i = 0; i < 200000; i++) {
		float f = from_bits((uint32_t)nw_rng_u64(&r));
		_Float16 g = (_Float16)f;
		uint16_t want;

		if (isnan(f))
			continue;
		memcpy(&want, &g, sizeof(want));
		if (nw_f32_to_f16(f) != want)
			fail_msg("f16(%a): got 0x%04x, want 0x%04x", (double)f, nw_f32_to_f16(f), want);
	}
#else
	(void)r;
	(void)i;
#endif
}

static void test_bf16_known_values(void **state)
{
	(void)state;
	assert_int_equal(nw_f32_to_bf16(1.0f), 0x3f80);
	assert_int_equal(nw_f32_to_bf16(from_bits(0x3f808000)), 0x3f80); /* tie to even, down */
	assert_int_equal(nw_f32_to_bf16(from_bits(0x3f818000)), 0x3f82); /* tie to even, up */
	assert_int_equal(nw_f32_to_bf16(from_bits(0x3f808001)), 0x3f81);
	assert_int_equal(nw_f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80); /* rounds to infinity */
	assert_int_equal(nw_f32_to_bf16(-INFINITY), 0xff80);
	assert_true(isnan(nw_bf16_to_f32(nw_f32_to_bf16(NAN))));
	assert_int_equal(bits(nw_bf16_to_f32(0x4049)), 0x40490000);
	assert_true(nw_round(NW_BF16, 1.0f + 0x1p-9f) == 1.0f);
	assert_true(nw_round(NW_F32, 1.0f + 0x1p-20f) == 1.0f + 0x1p-20f);
}

/*
 * The bulk f16 store (F16C where the CPU has it) rounds as nw_f32_to_f16 and
 * reads back as nw_f16_to_f32: over a spread of float bit patterns (all 2^32
 * of them agreed when this was written), and the f16 table over all halves.
 */
static void test_f16_bulk_store_equals_the_scalar_one(void **state)
{
	enum { N = 65536 + 7 };
	static double v[N], w[N];
	static uint16_t h[N];
	const float *table = nw_f16_values();
	uint32_t k;
	size_t i;

	(void)state;
	for (k = 0; k < 65536; k++) {
		float want = nw_f16_to_f32((uint16_t)k);

		assert_memory_equal(&table[k], &want, sizeof(want));
	}
	for (i = 0; i < N; i++) {
		uint32_t u = (uint32_t)(i * 65537u + (uint32_t)(i % 3) * 0x1000u);
		float f;

		memcpy(&f, &u, sizeof(f));
		v[i] = w[i] = (double)f;
	}
	nw_store_n(NW_F16, h, v, N);
	for (i = 0; i < N; i++) {
		uint16_t want = nw_f32_to_f16((float)w[i]);

		assert_int_equal(h[i], want);
		if (w[i] == w[i]) /* not NaN */
			assert_true(v[i] == (double)nw_f16_to_f32(want));
	}
}

static void test_dtype_names(void **state)
{
	(void)state;
	assert_int_equal(nw_dtype_parse("f32"), NW_F32);
	assert_int_equal(nw_dtype_parse("bf16"), NW_BF16);
	assert_int_equal(nw_dtype_parse("f64"), -1);
	assert_int_equal(nw_dtype_parse(NULL), -1);
	assert_string_equal(nw_dtype_name(NW_F16), "f16");
}

static void test_rng_is_a_function_of_its_key(void **state)
{
	struct nw_rng a, b, c;
	int i, seen_lo = 0, seen_hi = 0;

	(void)state;
	nw_rng_init(&a, "softmax.fwd", 42, 1);
	nw_rng_init(&b, "softmax.fwd", 42, 1);
	nw_rng_init(&c, "softmax.fwd", 43, 1);
	for (i = 0; i < 1000; i++) {
		uint64_t x = nw_rng_u64(&a);

		assert_true(x == nw_rng_u64(&b));
		assert_true(x != nw_rng_u64(&c));
	}
	/* Another stream or name gives other values. */
	nw_rng_init(&a, "softmax.fwd", 42, 1);
	nw_rng_init(&b, "softmax.fwd", 42, 2);
	nw_rng_init(&c, "softmax.bwd", 42, 1);
	i = nw_rng_u64(&a) == nw_rng_u64(&b) || nw_rng_u64(&a) == nw_rng_u64(&c);
	assert_false(i);

	for (i = 0; i < 10000; i++) {
		long v = nw_rng_range(&a, 3, 7);
		double u = nw_rng_uniform(&a), n = nw_rng_normal(&a);

		assert_true(v >= 3 && v <= 7);
		seen_lo |= v == 3;
		seen_hi |= v == 7;
		assert_true(u >= 0.0 && u < 1.0);
		assert_true(fabs(n) < 3.47);
	}
	assert_true(seen_lo && seen_hi);
}

/* Whole tensors drawn at once (threads or not) are the values of the one-at-a-time loop. */
static void test_rng_fill_normals_matches_the_loop(void **state)
{
	enum { BIG = 50003, SMALL = 100 }; /* not multiples of a vector's lanes */
	static double big[3][BIG], small[SMALL];
	struct nw_normals jobs[] = {
	    {"attention.fwd", 7, 1, 0, big[0], BIG, 2.0, 0.0},
	    {"attention.fwd", 7, 2, 0, big[1], BIG, 1.0, 50.0},
	    {"attention.fwd", 7, 3, 1, big[2], BIG, 1e-3, 0.0}, /* after one draw of its stream */
	};
	struct nw_normals one = {"softmax.fwd", 3, 1, 0, small, SMALL, 1.0, -4.0};
	unsigned j;
	long i;

	(void)state;
	nw_rng_fill_normals(jobs, 3); /* 150009 draws: in threads */
	nw_rng_fill_normals(&one, 1); /* too few to pay for a thread */
	for (j = 0; j < 3; j++) {
		struct nw_rng r;

		nw_rng_init(&r, jobs[j].name, jobs[j].seed, jobs[j].stream);
		if (jobs[j].skip)
			(void)nw_rng_u64(&r);
		for (i = 0; i < BIG; i++)
			assert_true(big[j][i] == jobs[j].offset + jobs[j].scale * nw_rng_normal(&r));
	}
	{
		struct nw_rng r;

		nw_rng_init(&r, "softmax.fwd", 3, 1);
		for (i = 0; i < SMALL; i++)
			assert_true(small[i] == -4.0 + nw_rng_normal(&r));
	}
}

/* Every single-bit change of the bytes, the length or the start value changes the digest. */
static void test_digest_sees_every_bit(void **state)
{
	unsigned char buf[77] = {0}; /* 9 words: two rounds of 4 lanes, one word left, 5 bytes */
	uint64_t base, seen;
	size_t i;
	int b;

	(void)state;
	for (i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 37 + 11);
	base = nw_digest(NW_FNV_OFFSET, buf, sizeof(buf));
	assert_true(nw_digest(NW_FNV_OFFSET, buf, sizeof(buf)) == base);
	for (i = 0; i < sizeof(buf); i++)
		for (b = 0; b < 8; b++) {
			buf[i] ^= (unsigned char)(1u << b);
			seen = nw_digest(NW_FNV_OFFSET, buf, sizeof(buf));
			buf[i] ^= (unsigned char)(1u << b);
			assert_true(seen != base);
		}
	/* Two flipped sign bits in one lane (negated floats 1 and 9, and 1 and 5 of a short buffer) do not cancel. */
	{
		float x[16], y[16];
		int e;

		for (e = 0; e < 16; e++)
			x[e] = y[e] = (float)(e + 1);
		y[1] = -y[1];
		y[9] = -y[9];
		assert_true(nw_digest(NW_FNV_OFFSET, x, sizeof(x)) != nw_digest(NW_FNV_OFFSET, y, sizeof(y)));
		y[9] = -y[9];
		y[5] = -y[5];
		assert_true(nw_digest(NW_FNV_OFFSET, x, 24) != nw_digest(NW_FNV_OFFSET, y, 24));
	}
	/* Another word, a shorter buffer and another start value differ too. */
	memcpy(buf, buf + 8, 8);
	assert_true(nw_digest(NW_FNV_OFFSET, buf, sizeof(buf)) != base);
	assert_true(nw_digest(NW_FNV_OFFSET, buf, sizeof(buf) - 1) !=
		    nw_digest(NW_FNV_OFFSET, buf, sizeof(buf)));
	assert_true(nw_digest(NW_FNV_OFFSET + 1, buf, sizeof(buf)) !=
		    nw_digest(NW_FNV_OFFSET, buf, sizeof(buf)));
}

/* ---- metrics ------------------------------------------------------------- */

#define N 64

struct fixture {
	struct nw_trial t;
	struct nw_output out;
	double ref[N], plain[N];
	long dims[2];
};

/*
 * An f32 output of 2 x 32 around 1e-3 whose kernel values equal the reference
 * rounded to f32, and a plain program 3e-8 off: the budget is about 6e-8
 * (2 * 3e-8 plus a floor of 4 eps * 2e-3).
 */
static int setup_f32(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int i;

	if (!f || nw_output_init(&f->t, &f->out, "y", NW_F32, N))
		return -1;
	f->dims[0] = 2;
	f->dims[1] = 32;
	for (i = 0; i < N; i++) {
		f->ref[i] = (1.0 + i / 64.0) * 1e-3 + 1e-12 * (i % 7);
		f->plain[i] = (double)(float)f->ref[i] + 3e-8; /* a plain program a little off */
		nw_store(NW_F32, f->out.host, i, (float)f->ref[i]);
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	nw_output_release(&f->out);
	free(f);
	return 0;
}

static struct nw_compare_spec spec_of(struct fixture *f)
{
	struct nw_compare_spec s = {.out = &f->out,
				    .ref = f->ref,
				    .nplain = 1,
				    .factor = 2.0,
				    .dims = f->dims,
				    .ndim = 2,
				    .tail_width = 4};

	s.plain[0] = f->plain;
	return s;
}

static void test_metrics_correct_output_passes(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;

	nw_compare(&r, "y", &s);
	assert_string_equal(r.name, "y");
	assert_true(r.ratio < 1.0);
	assert_true(r.has_ulp && r.max_ulp <= 0.5);
	assert_int_equal(r.nonfinite + r.ref_nonfinite + r.mismatch + r.unwritten + r.canary, 0);
	assert_false(nw_tensor_failed(&r));
}

static void test_metrics_wrong_value_fails_with_its_index(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;

	/* 1e-5 is far above the budget: ratio well over 1, worst at [1, 30]. */
	nw_store(NW_F32, f->out.host, 62, (float)(f->ref[62] + 1e-5));
	nw_compare(&r, "y", &s);
	assert_true(r.ratio > 1.0);
	assert_true(nw_tensor_failed(&r));
	assert_int_equal(r.worst_ndim, 2);
	assert_int_equal(r.worst[0], 1);
	assert_int_equal(r.worst[1], 30);
	assert_true(r.tail == false); /* 32 columns: no tail tile */

	/* With 31 columns, column 30 lies in the tail [28, 31). */
	f->dims[0] = 1;
	f->dims[1] = 31;
	f->out.count = 31;
	nw_store(NW_F32, f->out.host, 30, (float)(f->ref[30] + 1e-5));
	nw_compare(&r, "y", &s);
	assert_int_equal(r.worst[1], 30);
	assert_true(r.tail);
}

static void test_metrics_error_within_budget_passes(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;

	/* Twice the plain program's error is the budget: 1.5 times that error passes. */
	nw_store(NW_F32, f->out.host, 5, (float)(f->ref[5] + 4.5e-8));
	nw_compare(&r, "y", &s);
	assert_true(r.ratio > 0.1 && r.ratio < 1.0);
	assert_false(nw_tensor_failed(&r));
}

/* A plain error reduced per element (what a GPU reference copies back) gives the same result as the orders. */
static void test_metrics_plain_err_equals_plain_orders(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec by_orders = spec_of(f), reduced = spec_of(f);
	struct nw_tensor_result a, b;
	double second[N], err[N];
	int i;

	for (i = 0; i < N; i++) {
		second[i] = i % 5 ? f->ref[i] - 5e-8 : NAN; /* a non-finite plain value counts for nothing */
		err[i] = fmax(fabs(f->plain[i] - f->ref[i]),
			      isfinite(second[i]) ? fabs(second[i] - f->ref[i]) : 0.0);
	}
	by_orders.plain[1] = second;
	by_orders.nplain = 2;
	reduced.nplain = 0;
	reduced.plain_err = err;
	nw_store(NW_F32, f->out.host, 5, (float)(f->ref[5] + 9e-8));
	nw_compare(&a, "y", &by_orders);
	nw_compare(&b, "y", &reduced);
	assert_true(a.plain_max_abs == b.plain_max_abs);
	assert_true(a.plain_max_abs > 4.9e-8); /* the second order's error counts */
	assert_true(a.budget == b.budget && a.ratio == b.ratio && a.max_abs == b.max_abs);
	assert_int_equal(nw_tensor_failed(&a), nw_tensor_failed(&b));
}

static void test_metrics_nan_where_reference_is_finite_fails(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;

	nw_store(NW_F32, f->out.host, 7, NAN);
	nw_compare(&r, "y", &s);
	assert_int_equal(r.nonfinite, 1);
	assert_int_equal(r.ref_nonfinite, 0);
	assert_int_equal(r.mismatch, 1);
	assert_true(r.ratio < 1.0);        /* the error metrics stay finite... */
	assert_true(nw_tensor_failed(&r)); /* ...and the tensor fails anyway */
	assert_int_equal(r.worst[1], 7);

	nw_store(NW_F32, f->out.host, 7, (float)f->ref[7]);
	nw_store(NW_F32, f->out.host, 9, INFINITY);
	nw_compare(&r, "y", &s);
	assert_int_equal(r.mismatch, 1);
	assert_true(nw_tensor_failed(&r));
}

static void test_metrics_nonfinite_reference_must_be_matched(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;

	/* NaN where the reference is NaN is right (a row of -inf has no softmax). */
	f->ref[3] = NAN;
	f->plain[3] = NAN;
	nw_store(NW_F32, f->out.host, 3, NAN);
	nw_compare(&r, "y", &s);
	assert_int_equal(r.ref_nonfinite, 1);
	assert_int_equal(r.nonfinite, 1);
	assert_int_equal(r.mismatch, 0);
	assert_false(nw_tensor_failed(&r));

	/* A finite value, or Inf, where the reference is NaN is wrong. */
	nw_store(NW_F32, f->out.host, 3, 0.25f);
	nw_compare(&r, "y", &s);
	assert_int_equal(r.mismatch, 1);
	assert_true(nw_tensor_failed(&r));
	nw_store(NW_F32, f->out.host, 3, -INFINITY);
	nw_compare(&r, "y", &s);
	assert_int_equal(r.mismatch, 1);
}

static void test_metrics_unwritten_element_fails(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;
	uint32_t poison = nw_poison_bits(NW_F32);
	volatile float zero;
	float nan;

	memcpy((char *)f->out.host + 4 * 40, &poison, 4);
	assert_true(nw_is_poison(NW_F32, f->out.host, 40));
	nw_compare(&r, "y", &s);
	assert_int_equal(r.unwritten, 1);
	assert_int_equal(r.nonfinite, 0); /* counted as unwritten, not as a computed NaN */
	assert_true(nw_tensor_failed(&r));
	assert_int_equal(r.worst[0], 1);
	assert_int_equal(r.worst[1], 8);

	/* A NaN computed by arithmetic is not mistaken for the poison. */
	zero = 0.0f;
	nan = zero / zero;
	assert_false(nw_is_poison(NW_F32, &nan, 0));
	nan = nw_f16_to_f32(nw_f32_to_f16(nan));
	assert_false(nw_is_poison(NW_F32, &nan, 0));
}

static void test_metrics_excluded_elements_are_counted(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;
	unsigned char ex[N] = {0};

	nw_store(NW_F32, f->out.host, 11, 100.0f);
	ex[11] = 1;
	s.exclude = ex;
	nw_compare(&r, "y", &s);
	assert_int_equal(r.excluded, 1);
	assert_false(nw_tensor_failed(&r));
}

static void test_metrics_fixed_tolerance(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;

	s.nplain = 0;
	s.atol = 1e-3;
	s.rtol = 0.0;
	nw_store(NW_F32, f->out.host, 20, (float)(f->ref[20] + 5e-4));
	nw_compare(&r, "y", &s);
	assert_true(r.ratio > 0.4 && r.ratio < 0.6);
	nw_store(NW_F32, f->out.host, 21, (float)(f->ref[21] - 2e-3));
	nw_compare(&r, "y", &s);
	assert_true(r.ratio > 1.0);
	assert_int_equal(r.worst[1], 21);
}

static void test_metrics_plain_exact_uses_floor(void **state)
{
	struct fixture *f = *state;
	struct nw_compare_spec s = spec_of(f);
	struct nw_tensor_result r;
	int i;

	/* The plain program is exact and the kernel 1 ulp off: the floor keeps it a pass. */
	for (i = 0; i < N; i++) {
		f->ref[i] = (double)(float)f->ref[i];
		f->plain[i] = f->ref[i];
	}
	nw_store(NW_F32, f->out.host, 0, nextafterf((float)f->ref[0], 2.0f));
	nw_compare(&r, "y", &s);
	assert_true(r.ratio > 0.0 && r.ratio < 1.0);
	assert_true(r.max_ulp == 1.0);
}

/*
 * The GPU's comparison folds the elements in strided parts and merges the
 * partial results (sdk/compare_cuda.cu); the host folds them first to last.
 * Every split, merged in any order, must give the host's fold bit for bit:
 * ties of the largest error (the first element wins), hard failures, NaN
 * and infinite references, zero references (no relative error), poison.
 */
#define FOLD_N 997

static void fold_fixture(struct nw_output *o, double *ref, double *plain_err)
{
	uint32_t poison = nw_poison_bits(NW_F32);
	long i;

	for (i = 0; i < FOLD_N; i++) {
		float k;

		ref[i] = (i % 13 == 0) ? 0.0 : sin((double)i) * (1.0 + (double)(i % 5));
		k = (float)ref[i];
		if (i % 17 == 3)
			k = nextafterf(k, 10.0f); /* one ulp off */
		if (i == 100 || i == 700) {
			ref[i] = 0.5; /* two equal largest errors: 100 is the worst */
			k = 0.75f;
		}
		if (i == 50 || i == 51) {
			ref[i] = NAN;
			k = i == 50 ? NAN : 1.0f; /* matched, then a mismatch */
		}
		if (i == 60) {
			ref[i] = INFINITY;
			k = INFINITY;
		}
		plain_err[i] = 1e-7 * (double)(i % 11);
		nw_store(NW_F32, o->host, (size_t)i, k);
		if (i == 900)
			memcpy((unsigned char *)o->host + 4 * i, &poison, 4);
	}
}

static void test_fold_any_split_merges_to_the_sequential_pass(void **state)
{
	struct nw_trial t = {0};
	struct nw_output o;
	double ref[FOLD_N], plain_err[FOLD_N];
	long dims[1] = {FOLD_N};
	int budgeted, parts;

	(void)state;
	assert_int_equal(nw_output_init(&t, &o, "y", NW_F32, FOLD_N), 0);
	fold_fixture(&o, ref, plain_err);
	for (budgeted = 0; budgeted < 2; budgeted++) {
		struct nw_compare_spec s = {.out = &o,
					    .ref = ref,
					    .plain_err = budgeted ? plain_err : NULL,
					    .atol = 1e-6,
					    .rtol = 1e-5,
					    .dims = dims,
					    .ndim = 1};
		struct nw_fold_rule rule = {
		    .budgeted = budgeted, .has_ulp = true, .atol = 1e-6, .rtol = 1e-5};
		struct nw_fold whole;

		nw_fold_init(&whole);
		nw_fold_host(&whole, &rule, &s);
		assert_int_equal(whole.worst, 100);
		assert_int_equal(whole.hard, 51);
		assert_int_equal(whole.unwritten, 1);
		assert_int_equal(whole.mismatch, 1);
		for (parts = 1; parts <= 9; parts++) {
			struct nw_fold part[9], merged;
			uint32_t poison = nw_poison_bits(NW_F32);
			int p, q;
			long i;

			for (p = 0; p < parts; p++) {
				nw_fold_init(&part[p]);
				for (i = p; i < FOLD_N; i += parts) {
					uint32_t u;
					float k;

					memcpy(&u, (unsigned char *)o.host + 4 * i, 4);
					memcpy(&k, &u, 4);
					nw_fold_elem(&part[p], &rule, i, (double)k, u == poison, ref[i],
						     budgeted && u != poison ? plain_err[i] : 0.0, false);
				}
			}
			/* Merged last part first, as a tree would in any order. */
			nw_fold_init(&merged);
			for (q = parts - 1; q >= 0; q--)
				nw_fold_merge(&merged, &part[q], &rule);
			merged.floor_scale = whole.floor_scale;
			assert_memory_equal(&merged, &whole, sizeof(whole));
		}
	}
	nw_output_release(&o);
}

/* nw_compare_spec.ref_dev on the host backend: the same answer as the host arrays, floor scale included. */
static void test_compare_on_the_device_equals_the_host(void **state)
{
	struct nw_trial t = {0};
	struct nw_output o;
	double ref[FOLD_N], plain_err[FOLD_N], scales[3] = {0.5, 7.0, 2.0};
	long dims[1] = {FOLD_N};
	struct nw_tensor_result host, dev;

	(void)state;
	assert_int_equal(nw_output_init(&t, &o, "y", NW_F32, FOLD_N), 0);
	fold_fixture(&o, ref, plain_err);
	o.dev_is_first = true;
	{
		struct nw_compare_spec h = {.out = &o,
					    .ref = ref,
					    .plain_err = plain_err,
					    .factor = 2.0,
					    .floor_scale = 7.0,
					    .dims = dims,
					    .ndim = 1};
		struct nw_compare_spec d = {.out = &o,
					    .ref_dev = ref,
					    .plain_err_dev = plain_err,
					    .factor = 2.0,
					    .floor_scale_dev = scales,
					    .floor_scale_count = 3,
					    .dims = dims,
					    .ndim = 1};

		assert_int_equal(nw_compare(&host, "y", &h), 0);
		assert_int_equal(nw_compare(&dev, "y", &d), 0);
	}
	assert_memory_equal(&host, &dev, sizeof(host));
	assert_int_equal(host.worst[0], 51);
	nw_output_release(&o);
}

/* ---- outputs: canaries, repeats, digests ----------------------------------- */

struct writer {
	struct nw_output *out;
	long skip;  /* element left unwritten, or -1 */
	long extra; /* element index written outside [0, count), or 0 */
	int calls;
	int flaky_on; /* the call that writes a different value, or 0 */
	int rc;
};

static int write_ones(void *arg)
{
	struct writer *w = arg;
	float *y = w->out->dev;
	long i;

	w->calls++;
	for (i = 0; i < (long)w->out->count; i++)
		if (i != w->skip)
			y[i] = w->calls == w->flaky_on ? 2.0f : 1.0f;
	if (w->extra)
		y[w->extra] = 1.0f;
	return w->rc;
}

static void test_run_kernel_digest_and_repeats(void **state)
{
	struct nw_trial t = {.repeats = 3};
	struct nw_output o;
	struct writer w = {.out = &o, .skip = -1};
	uint64_t want;
	float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};

	(void)state;
	assert_int_equal(nw_output_init(&t, &o, "y", NW_F32, 8), 0);
	assert_int_equal(nw_run_kernel(&t, &o, 1, "write_ones", write_ones, &w), 0);
	assert_int_equal(nw_run_settle(), 0);
	want = nw_digest(NW_FNV_OFFSET, ones, sizeof(ones));
	assert_int_equal(w.calls, 3);
	assert_true(t.digest == want);
	assert_int_equal(t.digests_differ, 0);
	assert_int_equal(o.canary, 0);
	assert_true(t.kernel_us >= 0.0);

	/* A kernel that answers differently on one repeat is caught by the digests. */
	w = (struct writer){.out = &o, .skip = -1, .flaky_on = 2};
	t.digests_differ = 0;
	assert_int_equal(nw_run_kernel(&t, &o, 1, "write_ones", write_ones, &w), 0);
	assert_int_equal(nw_run_settle(), 0);
	assert_int_equal(t.digests_differ, 1);
	assert_true(t.digest == want);

	/*
	 * More repeats than are queued at once: each lands in its own copy,
	 * reused only after a wait, whichever repeat is the odd one.
	 */
	t.repeats = 3 * NW_DEV_TIMERS + 1;
	for (w.flaky_on = 1; w.flaky_on <= (int)t.repeats; w.flaky_on++) {
		w.calls = 0;
		t.digests_differ = 0;
		assert_int_equal(nw_run_kernel(&t, &o, 1, "write_ones", write_ones, &w), 0);
		assert_int_equal(nw_run_settle(), 0);
		assert_int_equal(w.calls, t.repeats);
		assert_int_equal(t.digests_differ, w.flaky_on == 1 ? t.repeats - 1 : 1);
		assert_true((t.digest == want) == (w.flaky_on != 1));
	}
	nw_output_release(&o);
}

static void test_run_kernel_rearms_poison_and_counts_canaries(void **state)
{
	struct nw_trial t = {.repeats = 2};
	struct nw_output o;
	struct writer w = {.out = &o, .skip = 5, .extra = 8};

	(void)state;
	assert_int_equal(nw_output_init(&t, &o, "y", NW_F32, 8), 0);
	assert_int_equal(nw_run_kernel(&t, &o, 1, "write_ones", write_ones, &w), 0);
	assert_int_equal(nw_run_settle(), 0);
	assert_true(nw_is_poison(NW_F32, o.host, 5));
	assert_false(nw_is_poison(NW_F32, o.host, 4));
	assert_int_equal(o.canary, 1);

	/* Writing just before the buffer breaks the leading canary too. */
	nw_output_release(&o);
	assert_int_equal(nw_output_init(&t, &o, "y", NW_F32, 8), 0);
	w = (struct writer){.out = &o, .skip = -1, .extra = -1};
	assert_int_equal(nw_run_kernel(&t, &o, 1, "write_ones", write_ones, &w), 0);
	assert_int_equal(nw_run_settle(), 0);
	assert_int_equal(o.canary, 1);
	nw_output_release(&o);
}

static void test_run_kernel_library_error_is_an_error_answer(void **state)
{
	struct nw_trial t = {.repeats = 1};
	struct nw_output o;
	struct writer w = {.out = &o, .skip = -1, .rc = -22};

	(void)state;
	assert_int_equal(nw_output_init(&t, &o, "y", NW_F32, 8), 0);
	assert_true(nw_run_kernel(&t, &o, 1, "dl_thing", write_ones, &w) < 0);
	assert_true(t.error);
	assert_false(t.fatal);
	assert_string_equal(t.errmsg, "dl_thing returned -22");
	nw_output_release(&o);
}

/* ---- case digest -------------------------------------------------------------- */

/*
 * A check of the tests' own, to change its generator at will: 64 normals of
 * the stream (check, seed), uploaded as one input. 'toy_variant' changes
 * one thing about the case at a time.
 */
enum toy_variant {
	TOY_AS_SHIPPED,
	TOY_ONE_BIT,     /* one value drawn differently, in its last bit */
	TOY_PARAM,       /* a param the shape does not show */
	TOY_SHAPE,       /* the same bytes under another shape */
	TOY_SPLIT,       /* the same bytes, uploaded as two inputs */
	TOY_LATE_CHANGE, /* the data changed after its upload: not what the kernel saw, not in the digest */
};
static enum toy_variant toy_variant;

static int toy_run(const struct nw_check *c, struct nw_trial *t)
{
	float x[64];
	void *dev = NULL, *dev2 = NULL;
	struct nw_rng r;
	unsigned i;
	int rc;

	nw_rng_init(&r, c->name, t->seed, 0);
	for (i = 0; i < 64; i++)
		x[i] = (float)nw_rng_normal(&r);
	if (toy_variant == TOY_ONE_BIT)
		x[63] = from_bits(bits(x[63]) ^ 1u);
	t->ndim = 2;
	t->shape[0] = toy_variant == TOY_SHAPE ? 4 : 8;
	t->shape[1] = toy_variant == TOY_SHAPE ? 16 : 8;
	nw_trial_param_int(t, "causal", toy_variant == TOY_PARAM);
	if (toy_variant == TOY_SPLIT) {
		rc = nw_input_upload(t, &dev, x, 32 * sizeof(float));
		if (!rc)
			rc = nw_input_upload(t, &dev2, x + 32, 32 * sizeof(float));
	} else {
		rc = nw_input_upload(t, &dev, x, sizeof(x));
	}
	if (toy_variant == TOY_LATE_CHANGE)
		x[0] += 1.0f;
	nw_input_release(dev);
	nw_input_release(dev2);
	return rc;
}

static const char *const toy_families[] = {"plain", "other"};
static const struct nw_check toy_check = {
    .name = "toy.fwd",
    .op = "toy",
    .pass = "fwd",
    .dtypes = NW_DTYPE_BIT(NW_F32),
    .families = toy_families,
    .nfamilies = 2,
    .deterministic = true,
    .run = toy_run,
};

static uint64_t case_digest_of(const struct nw_check *c, enum nw_dtype d, uint64_t seed, int family)
{
	struct nw_trial t = {.dtype = d, .seed = seed, .family = family, .repeats = 1};

	if (nw_trial_run(c, &t) != 0)
		fail_msg("%s %s seed %llu: error answer '%s'", c->name, nw_dtype_name(d),
			 (unsigned long long)seed, t.errmsg);
	return t.case_digest;
}

static void test_case_digest_sees_the_generator(void **state)
{
	static const struct {
		enum toy_variant v;
		const char *what;
	} changes[] = {
	    {TOY_ONE_BIT, "one bit of one input value"},
	    {TOY_PARAM, "a param"},
	    {TOY_SHAPE, "the shape"},
	    {TOY_SPLIT, "how the bytes are split into inputs"},
	};
	uint64_t base;
	size_t i;

	(void)state;
	toy_variant = TOY_AS_SHIPPED;
	base = case_digest_of(&toy_check, NW_F32, 0, -1);
	/*
	 * The same inputs give the same digest in every run, at every commit and
	 * on every machine: the daemon pairs a seed's results across commits by
	 * it. A change of this value changes every case for the daemon; if it
	 * is meant (the digest's definition changed), update it here.
	 */
	if (base != UINT64_C(0xd6a263d58ee6c0cd))
		fail_msg("toy.fwd seed 0: case digest %016llx, pinned d6a263d58ee6c0cd",
			 (unsigned long long)base);
	assert_true(case_digest_of(&toy_check, NW_F32, 0, -1) == base);
	/* Other inputs (another seed), or the same inputs in another family: another case. */
	assert_true(case_digest_of(&toy_check, NW_F32, 2, -1) != base);
	assert_true(case_digest_of(&toy_check, NW_F32, 0, 1) != base);
	/* A changed generator: each change alone gives another digest. */
	for (i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
		toy_variant = changes[i].v;
		if (case_digest_of(&toy_check, NW_F32, 0, -1) == base)
			fail_msg("changing %s left the case digest as it was", changes[i].what);
	}
	/* What the check does with its host copy after the upload is not the kernel's input. */
	toy_variant = TOY_LATE_CHANGE;
	assert_true(case_digest_of(&toy_check, NW_F32, 0, -1) == base);
	toy_variant = TOY_AS_SHIPPED;
}

/* A case seen: its digest, and what it was. */
struct seen_case {
	uint64_t digest;
	const struct nw_check *check;
	int dtype, family;
	unsigned ndim;
	long shape[NW_SHAPE_MAX];
};

static bool shape_is_empty(const struct nw_trial *t)
{
	unsigned i;

	for (i = 0; i < t->ndim; i++)
		if (t->shape[i] == 0)
			return true;
	return false;
}

/*
 * Every check of the suite: a seed's case digest is the same in every run,
 * and differs between seeds, families and dtypes. Two cases share one only
 * where they are the same case: empty tensors of one shape (a "tiny" family's
 * zero-length sequence), whatever seed drew them.
 */
static void test_case_digest_of_every_check(void **state)
{
	const struct nw_check *const *all;
	struct seen_case *seen;
	size_t nseen = 0, cap = 4096, k, same = 0;
	unsigned n, i;
	int d;

	(void)state;
	seen = calloc(cap, sizeof(*seen));
	assert_non_null(seen);
	all = nw_checks(&n);
	for (i = 0; i < n; i++) {
		const struct nw_check *c = all[i];

		for (d = 0; d < NW_DTYPE_COUNT; d++) {
			uint64_t seed;

			if (!(c->dtypes & NW_DTYPE_BIT(d)))
				continue;
			/* Every family from the seed (seeds 0..n-1), then seed 0 named in each other family. */
			for (seed = 0; seed < 2 * (uint64_t)c->nfamilies; seed++) {
				bool named = seed >= c->nfamilies;
				struct nw_trial t = {.dtype = (enum nw_dtype)d,
						     .seed = named ? 0 : seed,
						     .family = named ? (int)(seed - c->nfamilies) : -1,
						     .repeats = 1};
				struct seen_case *sc;

				if (named && t.family == 0)
					continue; /* seed 0's own family: done */
				if (nw_trial_run(c, &t) != 0)
					fail_msg("%s %s seed %llu: error answer '%s'", c->name,
						 nw_dtype_name(t.dtype), (unsigned long long)t.seed,
						 t.errmsg);
				if (case_digest_of(c, t.dtype, t.seed, named ? t.family : -1) !=
				    t.case_digest)
					fail_msg("%s %s seed %llu family %s: two runs, two case digests",
						 c->name, nw_dtype_name(t.dtype), (unsigned long long)t.seed,
						 c->families[t.family]);
				for (k = 0; k < nseen; k++) {
					sc = &seen[k];
					if (sc->digest != t.case_digest)
						continue;
					if (sc->check == c && sc->dtype == d && sc->family == t.family &&
					    sc->ndim == t.ndim &&
					    memcmp(sc->shape, t.shape, sizeof(sc->shape)) == 0 &&
					    shape_is_empty(&t)) {
						same++;
						continue;
					}
					fail_msg(
					    "%s %s seed %llu family %s: case digest %016llx, as %s %s family "
					    "%s",
					    c->name, nw_dtype_name(t.dtype), (unsigned long long)t.seed,
					    c->families[t.family], (unsigned long long)t.case_digest,
					    sc->check->name, nw_dtype_name((enum nw_dtype)sc->dtype),
					    sc->check->families[sc->family]);
				}
				assert_true(nseen < cap);
				sc = &seen[nseen++];
				*sc = (struct seen_case){.digest = t.case_digest,
							 .check = c,
							 .dtype = d,
							 .family = t.family,
							 .ndim = t.ndim};
				memcpy(sc->shape, t.shape, sizeof(sc->shape));
			}
		}
	}
	print_message("%zu cases, %zu of them empty ones seen before\n", nseen, same);
	free(seen);
}

/* ---- runner protocol ------------------------------------------------------ */

static json_t *answer(const char *line, bool *quit)
{
	json_t *a = nw_runner_answer(line, strlen(line), quit);

	assert_non_null(a);
	return a;
}

static void test_runner_hello(void **state)
{
	bool quit;
	json_t *a = answer("{\"op\":\"hello\",\"protocol\":1}", &quit), *checks, *c;
	size_t i;
	bool found = false;

	(void)state;
	assert_false(quit);
	assert_string_equal(json_string_value(json_object_get(a, "op")), "hello");
	assert_int_equal(json_integer_value(json_object_get(a, "protocol")), 1);
	/* The next request may wait in its pipe while a trial runs (issue 18). */
	assert_int_equal(json_integer_value(json_object_get(a, "pipeline")), NW_RUNNER_PIPELINE);
	assert_string_equal(json_string_value(json_object_get(json_object_get(a, "device"), "backend")),
			    "host");
	assert_true(json_is_string(json_object_get(a, "runner")));
	checks = json_object_get(a, "checks");
	json_array_foreach(checks, i, c)
	{
		if (strcmp(json_string_value(json_object_get(c, "check")), "softmax.fwd") != 0)
			continue;
		found = true;
		assert_string_equal(json_string_value(json_object_get(c, "op")), "softmax");
		assert_string_equal(json_string_value(json_object_get(c, "pass")), "fwd");
		assert_int_equal(json_array_size(json_object_get(c, "dtypes")), 3);
		assert_int_equal(json_array_size(json_object_get(c, "families")), 5);
		assert_true(json_is_true(json_object_get(c, "deterministic")));
	}
	assert_true(found);
	json_decref(a);
}

static void test_runner_unknown_op_and_bad_lines(void **state)
{
	bool quit;
	json_t *a;
	char *line;

	(void)state;
	a = answer("{\"op\":\"frobnicate\",\"x\":1}", &quit);
	line = nw_runner_dump(a);
	assert_string_equal(line, "{\"op\":\"frobnicate\",\"error\":\"unknown op\"}");
	free(line);
	json_decref(a);

	a = answer("{\"op\":", &quit);
	assert_true(json_is_null(json_object_get(a, "op")));
	assert_non_null(strstr(json_string_value(json_object_get(a, "error")), "not json"));
	json_decref(a);

	a = answer("[1,2]", &quit);
	assert_true(json_is_string(json_object_get(a, "error")));
	assert_false(quit);
	json_decref(a);
}

static void test_runner_trial_answer(void **state)
{
	bool quit;
	json_t *a, *tensor, *c;
	const char *digest;

	(void)state;
	a = answer("{\"op\":\"trial\",\"id\":17,\"check\":\"softmax.bwd\",\"dtype\":\"bf16\",\"seed\":42,"
		   "\"repeats\":3,\"family\":null,\"future_field\":true}",
		   &quit);
	assert_false(quit);
	assert_string_equal(json_string_value(json_object_get(a, "op")), "trial");
	assert_int_equal(json_integer_value(json_object_get(a, "id")), 17);
	assert_string_equal(json_string_value(json_object_get(a, "verdict")), "pass");
	c = json_object_get(a, "case");
	assert_int_equal(json_integer_value(json_object_get(c, "gen")), NW_GEN_VERSION);
	assert_string_equal(json_string_value(json_object_get(c, "family")), "threshold"); /* 42 % 5 */
	assert_int_equal(json_array_size(json_object_get(c, "shape")), 2);
	/* case.digest: the inputs' hash, 16 hex digits, not the outputs' digest. */
	digest = json_string_value(json_object_get(c, "digest"));
	assert_non_null(digest);
	assert_int_equal(strlen(digest), 16);
	assert_int_equal(strspn(digest, "0123456789abcdef"), 16);
	assert_string_not_equal(digest, json_string_value(json_object_get(a, "digest")));
	assert_true(json_is_real(json_object_get(a, "ratio")));
	tensor = json_array_get(json_object_get(a, "tensors"), 0);
	assert_string_equal(json_string_value(json_object_get(tensor, "name")), "dx");
	assert_true(json_is_null(json_object_get(tensor, "max_ulp"))); /* bf16 */
	assert_int_equal(json_integer_value(json_object_get(tensor, "unwritten")), 0);
	assert_int_equal(json_integer_value(json_object_get(tensor, "canary")), 0);
	assert_true(json_is_boolean(json_object_get(tensor, "tail")));
	digest = json_string_value(json_object_get(a, "digest"));
	assert_int_equal(strlen(digest), 16);
	assert_int_equal(strspn(digest, "0123456789abcdef"), 16);
	assert_int_equal(json_integer_value(json_object_get(a, "digests_differ")), 0);
	assert_true(json_is_number(json_object_get(a, "kernel_us")));
	json_decref(a);

	/* A named family overrides the seed's; string ids are echoed as given. */
	a = answer("{\"op\":\"trial\",\"id\":\"x-1\",\"check\":\"softmax.fwd\",\"dtype\":\"f32\",\"seed\":42,"
		   "\"family\":\"tiny\"}",
		   &quit);
	assert_string_equal(json_string_value(json_object_get(a, "id")), "x-1");
	assert_string_equal(json_string_value(json_object_get(json_object_get(a, "case"), "family")), "tiny");
	json_decref(a);
}

static void test_runner_trial_is_reproducible(void **state)
{
	const char *req =
	    "{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f16\",\"seed\":7}";
	bool quit;
	json_t *a = answer(req, &quit), *b = answer(req, &quit);

	(void)state;
	assert_string_equal(json_string_value(json_object_get(a, "digest")),
			    json_string_value(json_object_get(b, "digest")));
	/* The case, its digest included. */
	assert_non_null(json_object_get(json_object_get(a, "case"), "digest"));
	assert_true(json_equal(json_object_get(a, "case"), json_object_get(b, "case")));
	json_decref(a);
	json_decref(b);
	/* The next seed generates other inputs. */
	a = answer(req, &quit);
	b = answer("{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f16\",\"seed\":8}",
		   &quit);
	assert_string_not_equal(json_string_value(json_object_get(json_object_get(a, "case"), "digest")),
				json_string_value(json_object_get(json_object_get(b, "case"), "digest")));
	json_decref(a);
	json_decref(b);
}

static void assert_error_answer(const char *req, const char *want)
{
	bool quit;
	json_t *a = answer(req, &quit);

	assert_string_equal(json_string_value(json_object_get(a, "op")), "trial");
	assert_string_equal(json_string_value(json_object_get(a, "verdict")), "error");
	assert_true(json_is_false(json_object_get(a, "fatal")));
	assert_string_equal(json_string_value(json_object_get(a, "error")), want);
	assert_false(quit);
	json_decref(a);
}

static void test_runner_trial_errors(void **state)
{
	(void)state;
	assert_error_answer("{\"op\":\"trial\",\"id\":1,\"check\":\"nope.fwd\",\"dtype\":\"f32\",\"seed\":1}",
			    "unknown check 'nope.fwd'");
	assert_error_answer(
	    "{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f64\",\"seed\":1}",
	    "unknown dtype 'f64'");
	assert_error_answer("{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f32\"}",
			    "missing field 'seed'");
	assert_error_answer(
	    "{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f32\",\"seed\":-1}",
	    "field 'seed' is negative");
	assert_error_answer(
	    "{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f32\",\"seed\":\"1\"}",
	    "field 'seed' has the wrong type");
	assert_error_answer("{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f32\",\"seed\":"
			    "1,\"repeats\":0}",
			    "field 'repeats' must be 1..1000");
	assert_error_answer("{\"op\":\"trial\",\"id\":1,\"check\":\"softmax.fwd\",\"dtype\":\"f32\",\"seed\":"
			    "1,\"family\":\"huge\"}",
			    "unknown family 'huge' for check 'softmax.fwd'");
}

static void test_runner_bye(void **state)
{
	bool quit = false;
	json_t *a = answer("{\"op\":\"bye\"}", &quit);
	char *line = nw_runner_dump(a);

	(void)state;
	assert_true(quit);
	assert_string_equal(line, "{\"op\":\"bye\"}");
	free(line);
	json_decref(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_f16_known_values),
	    cmocka_unit_test(test_f16_round_trip_and_oracle),
	    cmocka_unit_test(test_bf16_known_values),
	    cmocka_unit_test(test_dtype_names),
	    cmocka_unit_test(test_f16_bulk_store_equals_the_scalar_one),
	    cmocka_unit_test(test_rng_is_a_function_of_its_key),
	    cmocka_unit_test(test_rng_fill_normals_matches_the_loop),
	    cmocka_unit_test(test_digest_sees_every_bit),
	    cmocka_unit_test(test_fold_any_split_merges_to_the_sequential_pass),
	    cmocka_unit_test(test_compare_on_the_device_equals_the_host),
	    cmocka_unit_test_setup_teardown(test_metrics_correct_output_passes, setup_f32, teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_wrong_value_fails_with_its_index, setup_f32,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_error_within_budget_passes, setup_f32, teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_plain_err_equals_plain_orders, setup_f32, teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_nan_where_reference_is_finite_fails, setup_f32,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_nonfinite_reference_must_be_matched, setup_f32,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_unwritten_element_fails, setup_f32, teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_excluded_elements_are_counted, setup_f32, teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_fixed_tolerance, setup_f32, teardown),
	    cmocka_unit_test_setup_teardown(test_metrics_plain_exact_uses_floor, setup_f32, teardown),
	    cmocka_unit_test(test_run_kernel_digest_and_repeats),
	    cmocka_unit_test(test_run_kernel_rearms_poison_and_counts_canaries),
	    cmocka_unit_test(test_run_kernel_library_error_is_an_error_answer),
	    cmocka_unit_test(test_case_digest_sees_the_generator),
	    cmocka_unit_test(test_case_digest_of_every_check),
	    cmocka_unit_test(test_runner_hello),
	    cmocka_unit_test(test_runner_unknown_op_and_bad_lines),
	    cmocka_unit_test(test_runner_trial_answer),
	    cmocka_unit_test(test_runner_trial_is_reproducible),
	    cmocka_unit_test(test_runner_trial_errors),
	    cmocka_unit_test(test_runner_bye),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
