/*
 * nw_device: the memory and timing a trial needs, on the runner's backend.
 * Two implementations, chosen when a runner is linked: device_host.c (plain
 * memory, monotonic clock) and device_cuda.c (CUDA runtime, cudaEvents).
 *
 * Every function returns 0 or a negative error and, on error, records a
 * message and whether the device context is unusable (a sticky CUDA error);
 * nw_dev_error() reads them back.
 */
#ifndef NW_DEVICE_H
#define NW_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nw_device_info {
	const char *backend; /* "host" or "cuda" */
	char name[128];
	char cc[16];      /* "9.0"; empty on the host */
	char driver[64];  /* empty when unknown */
	char toolkit[16]; /* CUDA runtime the runner was built with; empty on the host */
	bool available;   /* false: every trial answers a non-fatal error, 'name' says why */
};

/* Probes the device once; later calls return the cached answer. */
const struct nw_device_info *nw_dev_init(void);

int nw_dev_alloc(void **p, size_t bytes);
void nw_dev_free(void *p);
/* After launching kernels of one's own (a reference on the device): their launch errors. */
int nw_dev_launched(const char *what);
/*
 * Arms outputs before a launch: guard bytes of the canary pattern (NW_CANARY
 * repeated) at both ends of count elements of poison, at alloc. One queued
 * step for all of them (a kernel on the GPU).
 */
#define NW_CANARY "nwCANARY" /* recognisable in a hex dump of a corrupted buffer */
struct nw_arm {
	void *alloc; /* guard, count elements, guard */
	size_t count, guard_bytes;
	unsigned elem_size; /* 2 or 4 */
	uint32_t poison;    /* its low elem_size bytes, little endian */
};
int nw_dev_arm(const struct nw_arm *a, unsigned n);

/* Queued; src may be reused at once, unless it is nw_dev_pinned() memory: then not before nw_dev_sync(). */
int nw_dev_upload(void *dst, const void *src, size_t bytes);
int nw_dev_download(void *dst, const void *src, size_t bytes);

/*
 * Page-locked host memory (plain memory on the host backend), from a pool
 * kept for the runner's life: what the device copies to and from without
 * waiting. nw_dev_unpin() gives a block back to the pool.
 */
void *nw_dev_pinned(size_t bytes);
void nw_dev_unpin(void *p);
/* A queued copy that does not wait; dst must be nw_dev_pinned() memory, read only after nw_dev_sync(). */
int nw_dev_download_pinned(void *dst, const void *src, size_t bytes);
/* Waits for everything queued; an error is reported as what's ("kernel: an illegal memory access"). */
int nw_dev_sync(const char *what);

/*
 * Brackets one kernel launch with timer k (0 <= k < NW_DEV_TIMERS, so that
 * several repeats can be queued before one wait); nw_dev_timer_us() reads
 * timer k's time after an nw_dev_sync().
 */
#define NW_DEV_TIMERS 4
int nw_dev_timer_start(unsigned k);
int nw_dev_timer_stop(unsigned k);
int nw_dev_timer_us(unsigned k, double *us);

/*
 * Folds n comparisons whose references stayed where they were computed
 * (nw_compare_spec.ref_dev) into f[0..n): on the GPU, only the partial
 * results come back, with one wait for all (compare_cuda.cu); on the host
 * backend, device memory is host memory and the host's fold runs.
 */
struct nw_fold;
struct nw_fold_rule;
struct nw_compare_spec;
int nw_dev_compare(struct nw_fold *f, const struct nw_fold_rule *rule, const struct nw_compare_spec *s,
		   unsigned n);

/* The last error's message (borrowed), and whether it left the context unusable. */
const char *nw_dev_error(bool *fatal);

#endif
