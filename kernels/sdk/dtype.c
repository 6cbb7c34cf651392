/*
 * dtype names and host-side conversions. Written independently of any
 * library's conversions so that a library bug in rounding is not mirrored in
 * the checks that judge it.
 */
#include <pthread.h>
#include <string.h>
/* F16C intrinsics with per-function targets: GCC 8 and clang have them. */
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_PATH 1
#endif

#include "numwatch_check.h"

static const char *const dtype_names[NW_DTYPE_COUNT] = {"f32", "f16", "bf16"};

const char *nw_dtype_name(enum nw_dtype d)
{
	return (unsigned)d < NW_DTYPE_COUNT ? dtype_names[d] : "?";
}

int nw_dtype_parse(const char *name)
{
	int d;

	for (d = 0; d < NW_DTYPE_COUNT; d++)
		if (name && strcmp(name, dtype_names[d]) == 0)
			return d;
	return -1;
}

size_t nw_dtype_size(enum nw_dtype d)
{
	return d == NW_F32 ? 4 : 2;
}

double nw_dtype_eps(enum nw_dtype d)
{
	switch (d) {
	case NW_F16:
		return 0x1p-10;
	case NW_BF16:
		return 0x1p-7;
	default:
		return 0x1p-23;
	}
}

double nw_dtype_tiny(enum nw_dtype d)
{
	return d == NW_F16 ? 0x1p-14 : 0x1p-126;
}

static uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* v / 2^s rounded to nearest, ties to even; 1 <= s <= 31. */
static uint32_t shift_rne(uint32_t v, unsigned s)
{
	uint32_t q = v >> s, r = v & ((1u << s) - 1), half = 1u << (s - 1);

	return q + (r > half || (r == half && (q & 1)));
}

uint16_t nw_f32_to_f16(float f)
{
	uint32_t u = bits_of(f), ax = u & 0x7fffffffu;
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t biased = ax >> 23, m, h;
	int e;

	if (ax > 0x7f800000u)
		return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff);
	if (ax == 0x7f800000u)
		return sign | 0x7c00;
	if (ax == 0)
		return sign;
	/* value = m * 2^e exactly, m < 2^24 */
	m = (ax & 0x7fffffu) | (biased ? 0x800000u : 0);
	e = biased ? (int)biased - 150 : -149;
	if (biased >= 113) {
		/* Normal in f16 unless it overflows: keep 11 significant bits. */
		h = ((biased - 127 + 14) << 10) + shift_rne(m, 13);
		return sign | (uint16_t)(h >= 0x7c00 ? 0x7c00 : h);
	}
	/* Subnormal (or zero) in f16: count units of 2^-24. */
	if (-(e + 24) >= 25)
		return sign;
	return sign | (uint16_t)shift_rne(m, (unsigned)(-(e + 24)));
}

float nw_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	float v;

	if (exp == 31)
		return float_of(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		v = (float)mant * 0x1p-24f;
		return sign ? -v : v;
	}
	return float_of(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t nw_f32_to_bf16(float f)
{
	uint32_t u = bits_of(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040);
	/* shift_rne would overflow 32 bits for values next to infinity: round by hand. */
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

float nw_bf16_to_f32(uint16_t b)
{
	return float_of((uint32_t)b << 16);
}

float nw_load(enum nw_dtype d, const void *buf, size_t i)
{
	switch (d) {
	case NW_F16:
		return nw_f16_to_f32(((const uint16_t *)buf)[i]);
	case NW_BF16:
		return nw_bf16_to_f32(((const uint16_t *)buf)[i]);
	default:
		return ((const float *)buf)[i];
	}
}

void nw_store(enum nw_dtype d, void *buf, size_t i, float v)
{
	switch (d) {
	case NW_F16:
		((uint16_t *)buf)[i] = nw_f32_to_f16(v);
		break;
	case NW_BF16:
		((uint16_t *)buf)[i] = nw_f32_to_bf16(v);
		break;
	default:
		((float *)buf)[i] = v;
		break;
	}
}

/*
 * Every f16 value as float, for loops over tens of thousands of elements:
 * nw_f16_to_f32's branches cost more than a table read (256 KiB, built once).
 */
static float f16_table[65536];
static pthread_once_t f16_table_once = PTHREAD_ONCE_INIT;

static void f16_table_fill(void)
{
	for (uint32_t h = 0; h < 65536; h++)
		f16_table[h] = nw_f16_to_f32((uint16_t)h);
}

const float *nw_f16_values(void)
{
	(void)pthread_once(&f16_table_once, f16_table_fill);
	return f16_table;
}

#ifdef HAVE_F16C_PATH
/*
 * x86's F16C converts eight floats to f16 at once, rounding to nearest even
 * exactly as nw_f32_to_f16 does (a NaN is quieted and keeps its top payload
 * bits there too); the doubles go to float first as (float)v does. Checked
 * over all 2^32 float bit patterns when written; test_sdk samples them.
 */
__attribute__((target("avx,f16c"))) static size_t f16_store_f16c(uint16_t *h, const double *v, size_t n)
{
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		__m128 lo = _mm256_cvtpd_ps(_mm256_loadu_pd(v + i));
		__m128 hi = _mm256_cvtpd_ps(_mm256_loadu_pd(v + i + 4));

		_mm_storeu_si128((__m128i *)(void *)(h + i),
				 _mm256_cvtps_ph(_mm256_set_m128(hi, lo), _MM_FROUND_TO_NEAREST_INT));
	}
	return i;
}
#endif

#ifdef HAVE_F16C_PATH
/* AVX usable (the OS saves its registers) and F16C: cpuid leaf 1, ECX bit 29 (clang's builtin lacks "f16c"). */
static bool cpu_has_f16c(void)
{
	unsigned a, b, c, d;

	return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

/* f16 stores of v[0..n): F16C where the CPU has it, then the portable conversion for the rest. */
static void f16_store(uint16_t *h, const double *v, size_t n)
{
	size_t i = 0;

#ifdef HAVE_F16C_PATH
	if (cpu_has_f16c())
		i = f16_store_f16c(h, v, n);
#endif
	for (; i < n; i++)
		h[i] = nw_f32_to_f16((float)v[i]);
}

void nw_store_n(enum nw_dtype d, void *buf, double *v, size_t n)
{
	uint16_t *h = buf;
	float *f = buf;
	const float *f16;
	size_t i;

	/* One loop per dtype, the conversions inlined: inputs are tens of thousands of elements. */
	switch (d) {
	case NW_F16:
		f16_store(h, v, n);
		f16 = nw_f16_values();
		for (i = 0; i < n; i++)
			v[i] = (double)f16[h[i]];
		break;
	case NW_BF16:
		for (i = 0; i < n; i++) {
			h[i] = nw_f32_to_bf16((float)v[i]);
			v[i] = (double)nw_bf16_to_f32(h[i]);
		}
		break;
	default:
		for (i = 0; i < n; i++) {
			f[i] = (float)v[i];
			v[i] = (double)f[i];
		}
		break;
	}
}

float nw_round(enum nw_dtype d, float v)
{
	switch (d) {
	case NW_F16:
		return nw_f16_to_f32(nw_f32_to_f16(v));
	case NW_BF16:
		return nw_bf16_to_f32(nw_f32_to_bf16(v));
	default:
		return v;
	}
}
