/*
 * Loads and stores of one tensor element as float, for the host build.
 * Conversions round to nearest even, as the CUDA intrinsics do, so the two
 * builds store the same bits for the same float result.
 */
#ifndef DEMOLIB_HOST_CONVERT_H
#define DEMOLIB_HOST_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "../demolib.h"

static inline float f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ff;

	if (exp == 0) {
		/* Zero or subnormal: mant * 2^-24 is exact in float. */
		float v = (float)mant * 0x1p-24f;

		return sign ? -v : v;
	}
	if (exp == 31)
		return f32_from_bits(sign | 0x7f800000u | (mant << 13));
	return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t f32_to_f16(float f)
{
	uint32_t x = f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffffu;
	uint32_t mant, round, h;

	if (ax > 0x7f800000u)
		return sign | 0x7e00;
	if (ax >= 0x477ff000u) /* 65520 and above round to infinity */
		return sign | 0x7c00;
	if (ax <= 0x33000000u) /* 2^-25 and below round to zero (ties to even) */
		return sign;
	if (ax < 0x38800000u) {
		/* Subnormal result: round the 24-bit significand to units of 2^-24. */
		uint32_t shift = 126 - (ax >> 23);
		uint32_t m = (ax & 0x7fffffu) | 0x800000u;
		uint32_t q = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1);
		uint32_t half = 1u << (shift - 1);

		if (rem > half || (rem == half && (q & 1)))
			q++;
		return sign | (uint16_t)q;
	}
	mant = ax & 0x7fffffu;
	h = (((ax >> 23) - 112) << 10) | (mant >> 13);
	round = mant & 0x1fff;
	if (round > 0x1000 || (round == 0x1000 && (h & 1)))
		h++; /* a carry into the exponent is the correct result */
	return sign | (uint16_t)h;
}

static inline float bf16_to_f32(uint16_t b)
{
	return f32_from_bits((uint32_t)b << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fffu + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

static inline float load(enum dl_dtype t, const void *p, long i)
{
	switch (t) {
	case DL_F16:
		return f16_to_f32(((const uint16_t *)p)[i]);
	case DL_BF16:
		return bf16_to_f32(((const uint16_t *)p)[i]);
	default:
		return ((const float *)p)[i];
	}
}

static inline void store(enum dl_dtype t, void *p, long i, float v)
{
	switch (t) {
	case DL_F16:
		((uint16_t *)p)[i] = f32_to_f16(v);
		break;
	case DL_BF16:
		((uint16_t *)p)[i] = f32_to_bf16(v);
		break;
	default:
		((float *)p)[i] = v;
		break;
	}
}

#endif
