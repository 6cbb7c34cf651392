/*
 * Scanning text eight bytes at a time (the answers' decoder, the store's COPY
 * text): a run of plain bytes is skipped a 64-bit word at a time, and the
 * byte-at-a-time code takes over at the first byte that needs a look.
 */
#ifndef NW_SCAN8_H
#define NW_SCAN8_H

#include <stdint.h>
#include <string.h>

/*
 * The bytes of 'w' below 0x20 or from 0x80, or equal to a, b or c (0 for
 * none: a NUL is below 0x20 anyway), as their high bits. The lowest byte
 * flagged is exact (what a borrow flags wrongly lies above a byte flagged
 * rightly), which is all scan8_skip() uses.
 */
static inline uint64_t scan8_stops(uint64_t w, unsigned char a, unsigned char b, unsigned char c)
{
	const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
	uint64_t xa = w ^ (ones * a), xb = w ^ (ones * b), xc = w ^ (ones * c);

	return (((w - ones * 0x20) & ~w) | w | ((xa - ones) & ~xa) | ((xb - ones) & ~xb) |
		((xc - ones) & ~xc)) &
	       highs;
}

/* p moved past whole words with no byte flagged: to the first flagged byte, or where fewer than eight are left. */
static inline const char *scan8_skip(const char *p, const char *end, unsigned char a, unsigned char b,
				     unsigned char c)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	while (end - p >= 8) {
		uint64_t w, stops;

		memcpy(&w, p, sizeof(w));
		stops = scan8_stops(w, a, b, c);
		if (stops)
			return p + __builtin_ctzll(stops) / 8;
		p += 8;
	}
#else
	(void)end, (void)a, (void)b, (void)c;
#endif
	return p;
}

#endif
