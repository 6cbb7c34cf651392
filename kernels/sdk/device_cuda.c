/*
 * CUDA backend, written against the CUDA runtime's C API. Every return code
 * is checked. After an error, a non-sticky one is cleared and the context is
 * probed with cudaDeviceSynchronize(): if that fails too, the error is sticky
 * (illegal address, launch failure, ...), the context is unusable, and the
 * error is fatal; every later call fails at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "nw_device.h"

static struct nw_device_info info;
static bool probed, broken;
static char last_error[256];
static bool last_fatal;
static cudaEvent_t ev_start[NW_DEV_TIMERS], ev_stop[NW_DEV_TIMERS];
static bool timers_create(void);

static int fail(cudaError_t e, const char *what)
{
	if (!broken) {
		(void)cudaGetLastError();
		broken = cudaDeviceSynchronize() != cudaSuccess;
	}
	snprintf(last_error, sizeof(last_error), "%s: %s", what, cudaGetErrorString(e));
	last_fatal = broken;
	return -EIO;
}

static int refuse(void)
{
	if (!info.available)
		snprintf(last_error, sizeof(last_error), "%s", info.name);
	last_fatal = broken;
	return -EIO;
}

/*
 * The kernel module's version ("580.159.04"): cudart only knows the CUDA
 * version the driver supports. The line reads "NVRM version: NVIDIA UNIX
 * [Open ]Kernel Module [for x86_64]  580.159.04  Release Build ...": take the
 * first word made of digits and dots.
 */
static void driver_version(char *buf, size_t len)
{
	char line[512], *tok, *save = NULL;
	int v = 0;
	FILE *f = fopen("/proc/driver/nvidia/version", "r");

	if (f) {
		if (fgets(line, sizeof(line), f)) {
			for (tok = strtok_r(line, " \t\n", &save); tok;
			     tok = strtok_r(NULL, " \t\n", &save)) {
				if (tok[0] >= '0' && tok[0] <= '9' && strchr(tok, '.') &&
				    strspn(tok, "0123456789.") == strlen(tok)) {
					snprintf(buf, len, "%s", tok);
					break;
				}
			}
		}
		fclose(f);
		if (buf[0])
			return;
	}
	if (cudaDriverGetVersion(&v) == cudaSuccess)
		snprintf(buf, len, "cuda %d.%d", v / 1000, v % 1000 / 10);
}

/*
 * Trials allocate and free their buffers every time; cudaMalloc/cudaFree cost
 * tens of microseconds each and cudaFree waits for the device. The runtime's
 * stream-ordered pool (cudaMallocAsync) reuses freed memory instead: keep all
 * of it (release threshold unlimited). Blocks keep their exact sizes, so
 * compute-sanitizer's memcheck still sees an access past a buffer's end.
 */
static void pool_keep(void)
{
	cudaMemPool_t pool;
	uint64_t keep = UINT64_MAX;

	if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess)
		(void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
	(void)cudaGetLastError();
}

const struct nw_device_info *nw_dev_init(void)
{
	struct cudaDeviceProp prop;
	int n = 0;

	if (probed)
		return &info;
	probed = true;
	info.backend = "cuda";
	snprintf(info.toolkit, sizeof(info.toolkit), "%d.%d", CUDART_VERSION / 1000,
		 CUDART_VERSION % 1000 / 10);
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		(void)cudaGetLastError();
		snprintf(info.name, sizeof(info.name), "no CUDA device");
		return &info;
	}
	if (cudaSetDevice(0) != cudaSuccess || cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
	    cudaFree(NULL) != cudaSuccess || !timers_create()) {
		snprintf(info.name, sizeof(info.name), "cannot initialise CUDA device 0: %s",
			 cudaGetErrorString(cudaGetLastError()));
		return &info;
	}
	pool_keep();
	snprintf(info.name, sizeof(info.name), "%.127s", prop.name);
	snprintf(info.cc, sizeof(info.cc), "%d.%d", prop.major, prop.minor);
	driver_version(info.driver, sizeof(info.driver));
	info.available = true;
	return &info;
}

static bool timers_create(void)
{
	unsigned k;

	for (k = 0; k < NW_DEV_TIMERS; k++)
		if (cudaEventCreate(&ev_start[k]) != cudaSuccess ||
		    cudaEventCreate(&ev_stop[k]) != cudaSuccess)
			return false;
	return true;
}

int nw_dev_alloc(void **p, size_t bytes)
{
	cudaError_t e;

	*p = NULL;
	if (!info.available || broken)
		return refuse();
	e = cudaMallocAsync(p, bytes ? bytes : 1, NULL);
	return e == cudaSuccess ? 0 : fail(e, "cudaMallocAsync");
}

void nw_dev_free(void *p)
{
	/* After a sticky error the context is gone; the process exits anyway. */
	if (p && !broken)
		(void)cudaFreeAsync(p, NULL);
}

int nw_dev_launched(const char *what)
{
	cudaError_t e;

	if (!info.available || broken)
		return refuse();
	e = cudaGetLastError();
	return e == cudaSuccess ? 0 : fail(e, what);
}

/*
 * Uploads do not wait. Their bytes go into a page-locked arena and the copy
 * is queued on the default stream, ahead of the kernels that read them (a
 * synchronous copy from pageable memory would first wait for the stream).
 * A region of the arena is reused only once the stream has drained past its
 * copy: a download or a timer stop waits for the stream, which frees the
 * whole arena; an upload that does not fit waits for it first. Like the
 * kernel timer, this takes the library's kernels to run on the default
 * stream (or streams that synchronise with it). Bytes already in the pool's
 * page-locked blocks (a trial's prepared inputs) are copied from where they
 * are, without the arena's copy.
 */
static bool is_pinned(const void *p, size_t bytes);
static int queue_copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, const char *what);

#define ARENA_MIN   (1u << 20)
#define ARENA_ALIGN 256

static unsigned char *arena;
static size_t arena_size, arena_used;

static int arena_wait(void)
{
	cudaError_t e = cudaStreamSynchronize(NULL);

	if (e != cudaSuccess)
		return fail(e, "cudaMemcpy to device");
	arena_used = 0;
	return 0;
}

int nw_dev_upload(void *dst, const void *src, size_t bytes)
{
	size_t need = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN, want = ARENA_MIN;
	cudaError_t e;

	if (!info.available || broken)
		return refuse();
	if (is_pinned(src, bytes))
		return queue_copy(dst, src, bytes, cudaMemcpyHostToDevice, "cudaMemcpyAsync to device");
	if (arena_used + need > arena_size) {
		if (arena_wait())
			return -EIO;
		if (need > arena_size) {
			while (want < need)
				want *= 2;
			if (arena)
				(void)cudaFreeHost(arena);
			arena = NULL;
			arena_size = 0;
			if (cudaMallocHost((void **)&arena, want) != cudaSuccess) {
				/* No page-locked memory: copy from pageable memory, waiting, as without it. */
				(void)cudaGetLastError();
				arena = NULL;
				e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
				return e == cudaSuccess ? 0 : fail(e, "cudaMemcpy to device");
			}
			arena_size = want;
		}
	}
	memcpy(arena + arena_used, src, bytes);
	e = cudaMemcpyAsync(dst, arena + arena_used, bytes, cudaMemcpyHostToDevice, NULL);
	if (e != cudaSuccess)
		return fail(e, "cudaMemcpy to device");
	arena_used += need;
	return 0;
}

/*
 * Copies to pageable memory go through the driver's own staging in small
 * pieces, at a fraction of the link's speed. Larger copies go through one
 * page-locked buffer of ours instead (grown to the largest copy, kept for
 * the runner's life): a memcpy on the host side is cheaper than the
 * difference.
 */
#define STAGE_MIN 4096

static void *stage;
static size_t stage_size;

static void *staging(size_t bytes)
{
	size_t want = STAGE_MIN;

	if (bytes < STAGE_MIN)
		return NULL;
	if (bytes <= stage_size)
		return stage;
	while (want < bytes)
		want *= 2;
	if (stage)
		(void)cudaFreeHost(stage);
	stage = NULL;
	stage_size = 0;
	if (cudaMallocHost(&stage, want) != cudaSuccess) {
		(void)cudaGetLastError();
		stage = NULL;
		return NULL; /* copy to pageable memory, as without it */
	}
	stage_size = want;
	return stage;
}

/* A synchronous copy on the default stream: every upload before it is done, the arena free. */
int nw_dev_download(void *dst, const void *src, size_t bytes)
{
	void *via;
	cudaError_t e;

	if (!info.available || broken)
		return refuse();
	via = staging(bytes);
	e = cudaMemcpy(via ? via : dst, src, bytes, cudaMemcpyDeviceToHost);
	if (e != cudaSuccess)
		return fail(e, "cudaMemcpy from device");
	if (bytes > 0) /* a copy of nothing need not wait for the stream */
		arena_used = 0;
	if (via)
		memcpy(dst, via, bytes);
	return 0;
}

/*
 * Page-locked blocks: cudaMallocHost costs milliseconds, so blocks are kept
 * and reused (sizes in powers of two from 64 KiB; a handful are in use at
 * once: a trial's outputs and the arming images).
 */
#define PINNED_MIN   (64u << 10)
#define PINNED_SLOTS 64

/* Locked: a trial prepared ahead (sdk/prepare.c) takes blocks on the worker thread. */
static pthread_mutex_t pinned_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *p;
	size_t size;
	bool used;
} pinned[PINNED_SLOTS];

static void *pinned_take(size_t bytes)
{
	size_t want = PINNED_MIN;
	unsigned i, spare = PINNED_SLOTS;
	void *p;

	while (want < bytes)
		want *= 2;
	for (i = 0; i < PINNED_SLOTS; i++) {
		if (pinned[i].p && !pinned[i].used && pinned[i].size == want) {
			pinned[i].used = true;
			return pinned[i].p;
		}
		if (!pinned[i].p && spare == PINNED_SLOTS)
			spare = i;
	}
	/* Every slot taken: give back an unused block of another size. */
	for (i = 0; spare == PINNED_SLOTS && i < PINNED_SLOTS; i++)
		if (!pinned[i].used && cudaFreeHost(pinned[i].p) == cudaSuccess) {
			pinned[i].p = NULL;
			spare = i;
		}
	if (spare == PINNED_SLOTS || cudaMallocHost(&p, want) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	pinned[spare].p = p;
	pinned[spare].size = want;
	pinned[spare].used = true;
	return p;
}

void *nw_dev_pinned(size_t bytes)
{
	void *p;

	if (!info.available || broken)
		return NULL;
	pthread_mutex_lock(&pinned_mu);
	p = pinned_take(bytes);
	pthread_mutex_unlock(&pinned_mu);
	return p;
}

void nw_dev_unpin(void *p)
{
	unsigned i;

	pthread_mutex_lock(&pinned_mu);
	for (i = 0; p && i < PINNED_SLOTS; i++)
		if (pinned[i].p == p)
			pinned[i].used = false;
	pthread_mutex_unlock(&pinned_mu);
}

/* Whether [p, p + bytes) lies in a block of the pool. */
static bool is_pinned(const void *p, size_t bytes)
{
	const unsigned char *c = p;
	bool in = false;
	unsigned i;

	pthread_mutex_lock(&pinned_mu);
	for (i = 0; !in && i < PINNED_SLOTS; i++)
		in = pinned[i].p && c >= (const unsigned char *)pinned[i].p &&
		     c + bytes <= (const unsigned char *)pinned[i].p + pinned[i].size;
	pthread_mutex_unlock(&pinned_mu);
	return in;
}

/* A copy queued on the default stream that does not wait: the host side is page-locked. */
static int queue_copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, const char *what)
{
	cudaError_t e;

	if (!info.available || broken)
		return refuse();
	e = cudaMemcpyAsync(dst, src, bytes, kind, NULL);
	return e == cudaSuccess ? 0 : fail(e, what);
}

int nw_dev_download_pinned(void *dst, const void *src, size_t bytes)
{
	return queue_copy(dst, src, bytes, cudaMemcpyDeviceToHost, "cudaMemcpyAsync from device");
}

int nw_dev_sync(const char *what)
{
	cudaError_t e;

	if (!info.available || broken)
		return refuse();
	e = cudaStreamSynchronize(NULL);
	if (e != cudaSuccess)
		return fail(e, what);
	arena_used = 0; /* the stream has run past every queued upload */
	return 0;
}

int nw_dev_timer_start(unsigned k)
{
	cudaError_t e;

	if (!info.available || broken)
		return refuse();
	e = cudaEventRecord(ev_start[k % NW_DEV_TIMERS], NULL);
	return e == cudaSuccess ? 0 : fail(e, "cudaEventRecord");
}

int nw_dev_timer_stop(unsigned k)
{
	cudaError_t e;

	if (!info.available || broken)
		return refuse();
	e = cudaEventRecord(ev_stop[k % NW_DEV_TIMERS], NULL);
	return e == cudaSuccess ? 0 : fail(e, "cudaEventRecord");
}

/* After nw_dev_sync(): errors raised while the kernel ran surfaced there. */
int nw_dev_timer_us(unsigned k, double *us)
{
	cudaError_t e;
	float ms = 0.0f;

	*us = 0.0;
	if (!info.available || broken)
		return refuse();
	e = cudaEventElapsedTime(&ms, ev_start[k % NW_DEV_TIMERS], ev_stop[k % NW_DEV_TIMERS]);
	if (e != cudaSuccess)
		return fail(e, "cudaEventElapsedTime");
	*us = (double)ms * 1e3;
	return 0;
}

const char *nw_dev_error(bool *fatal)
{
	if (fatal)
		*fatal = last_fatal;
	return last_error;
}
