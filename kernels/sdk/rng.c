/*
 * The seeded generator (version NW_GEN_VERSION). Every draw is a pure
 * function of (name, seed, stream, counter) computed with integer operations
 * and exact floating-point steps, so a trial replays bit for bit anywhere.
 */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "numwatch_check.h"

/* Tensors one nw_rng_fill_normals() call fills in parallel. */
#define NW_FILL_JOBS_MAX 8

#define GOLDEN 0x9e3779b97f4a7c15ull
/* A sum of 4 uniforms has variance 1/3: normals are rescaled by sqrt(3). */
#define SQRT3 1.7320508075688772

uint64_t nw_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t nw_fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/*
 * Four lanes of 8-byte words, each lane an xxHash64-style round: acc =
 * rotl(acc + w * P2, 31) * P1. A round is a bijection of acc for each w and
 * the rotation carries every bit of w into the multiply's low bits, so
 * differences do not cancel the way a plain (acc ^ w) * prime lets two
 * flipped top bits do (two negated floats). The lanes and the length are then
 * mixed into one value. Byte-wise FNV-1a waits out a multiply per byte
 * (about 1 ns): this does four words in about that time.
 */
#define DIGEST_P1 0x9e3779b185ebca87ull
#define DIGEST_P2 0xc2b2ae3d27d4eb4full

static inline uint64_t digest_round(uint64_t acc, uint64_t w)
{
	acc += w * DIGEST_P2;
	acc = (acc << 31) | (acc >> 33);
	return acc * DIGEST_P1;
}

uint64_t nw_digest(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t lane[4], w;
	size_t i, words = len / 8;
	int k;

	for (k = 0; k < 4; k++)
		lane[k] = nw_mix64(h + (uint64_t)k * GOLDEN);
	for (i = 0; i + 4 <= words; i += 4)
		for (k = 0; k < 4; k++) {
			memcpy(&w, p + 8 * (i + (size_t)k), 8);
			lane[k] = digest_round(lane[k], w);
		}
	for (; i < words; i++) {
		memcpy(&w, p + 8 * i, 8);
		lane[0] = digest_round(lane[0], w);
	}
	h = nw_fnv1a(len, p + 8 * words, len % 8);
	for (k = 0; k < 4; k++)
		h = nw_mix64(h ^ lane[k]) + GOLDEN;
	return h;
}

uint64_t nw_hash_str(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return nw_fnv1a(NW_FNV_OFFSET, s, n);
}

void nw_rng_init(struct nw_rng *r, const char *name, uint64_t seed, uint64_t stream)
{
	r->key = nw_mix64(nw_hash_str(name) ^ nw_mix64(seed ^ nw_mix64(stream + GOLDEN)));
	r->ctr = 0;
}

uint64_t nw_rng_u64(struct nw_rng *r)
{
	r->ctr++;
	return nw_mix64(r->key + r->ctr * GOLDEN);
}

long nw_rng_range(struct nw_rng *r, long lo, long hi)
{
	uint64_t span = (uint64_t)(hi - lo) + 1;

	/* The modulo bias is below 2^-40 for the spans checks use. */
	return lo + (long)(span ? nw_rng_u64(r) % span : nw_rng_u64(r));
}

double nw_rng_uniform(struct nw_rng *r)
{
	return (double)(nw_rng_u64(r) >> 11) * 0x1p-53;
}

double nw_rng_normal(struct nw_rng *r)
{
	double s = 0.0;
	int i;

	for (i = 0; i < 4; i++)
		s += nw_rng_uniform(r);
	return (s - 2.0) * SQRT3;
}

/* Draw number ctr of the stream keyed 'key', as a uniform in [0, 1): nw_rng_uniform's value. */
static inline double uniform_at(uint64_t key, uint64_t ctr)
{
	return (double)(nw_mix64(key + ctr * GOLDEN) >> 11) * 0x1p-53;
}

/*
 * nw_rng_normal's loop, element by element: normal i is draws ctr + 4i + 1
 * .. ctr + 4i + 4, so every element is a pure function of its index and the
 * loop vectorises. On x86-64 it is built for AVX-512 and AVX2 beside the
 * baseline and the loader picks the best the CPU has: the same integer steps
 * and the same double adds in the same order in every lane, so the values
 * are bit-identical whichever runs (the build turns off FMA contraction).
 */
/* GCC 11 named the x86-64-v3/v4 levels; the watched library's own compiler may be older. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("O3")))
#endif
static void
normals_at(uint64_t key, uint64_t ctr, double *out, long n)
{
	long i;

	for (i = 0; i < n; i++) {
		uint64_t c = ctr + 4 * (uint64_t)i;
		double s = uniform_at(key, c + 1);

		s += uniform_at(key, c + 2);
		s += uniform_at(key, c + 3);
		s += uniform_at(key, c + 4);
		out[i] = (s - 2.0) * SQRT3;
	}
}

void nw_rng_normals(struct nw_rng *r, double *out, long n)
{
	if (n <= 0)
		return;
	normals_at(r->key, r->ctr, out, n);
	r->ctr += 4 * (uint64_t)n;
}

static void fill_one(const struct nw_normals *j)
{
	struct nw_rng r;
	long i;

	nw_rng_init(&r, j->name, j->seed, j->stream);
	r.ctr = j->skip;
	nw_rng_normals(&r, j->out, j->n);
	for (i = 0; i < j->n; i++)
		j->out[i] = j->offset + j->scale * j->out[i];
}

static void *fill_thread(void *arg)
{
	fill_one(arg);
	return NULL;
}

/*
 * Below this many draws in all, starting threads costs more than it saves:
 * a vectorised thread draws about 1e6 normals in 2 ms, a thread starts in
 * 10-30 us.
 */
#define FILL_THREADED_MIN 131072

void nw_rng_fill_normals(const struct nw_normals *jobs, unsigned njobs)
{
	pthread_t th[NW_FILL_JOBS_MAX];
	bool started[NW_FILL_JOBS_MAX] = {false};
	long total = 0;
	unsigned i;

	for (i = 0; i < njobs; i++)
		total += jobs[i].n;
	/* Job 0 runs here; the others in threads if worth it (else, or if a thread fails, here too). */
	for (i = 1; i < njobs; i++)
		if (total >= FILL_THREADED_MIN && i < NW_FILL_JOBS_MAX && jobs[i].n > 0)
			started[i] = pthread_create(&th[i], NULL, fill_thread, (void *)&jobs[i]) == 0;
	if (njobs > 0)
		fill_one(&jobs[0]);
	for (i = 1; i < njobs; i++) {
		if (i < NW_FILL_JOBS_MAX && started[i])
			pthread_join(th[i], NULL);
		else
			fill_one(&jobs[i]);
	}
}
