/*
 * The seeded generator (version NW_GEN_VERSION). Every draw is a pure
 * function of (name, seed, stream, counter) computed with integer operations
 * and exact floating-point steps, so a trial replays bit for bit anywhere.
 */
#include <pthread.h>
#include <stdbool.h>

#include "numwatch_check.h"

/* Tensors one nw_rng_fill_normals() call fills in parallel. */
#define NW_FILL_JOBS_MAX 8

#define GOLDEN 0x9e3779b97f4a7c15ull

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

	/* Sum of 4 uniforms has variance 1/3: rescale by sqrt(3). */
	for (i = 0; i < 4; i++)
		s += nw_rng_uniform(r);
	return (s - 2.0) * 1.7320508075688772;
}

static void fill_one(const struct nw_normals *j)
{
	struct nw_rng r;
	long i;

	nw_rng_init(&r, j->name, j->seed, j->stream);
	r.ctr = j->skip;
	for (i = 0; i < j->n; i++)
		j->out[i] = j->offset + j->scale * nw_rng_normal(&r);
}

static void *fill_thread(void *arg)
{
	fill_one(arg);
	return NULL;
}

/* Below this many draws in all, a thread costs more than it saves. */
#define FILL_THREADED_MIN 32768

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
