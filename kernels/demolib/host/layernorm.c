/*
 * Layer normalisation forward and backward, host build. The structure
 * follows the CUDA build: a row is one block of DL_LN_THREADS threads, each
 * summing a strided share of the row, combined by the same butterfly the
 * CUDA block reduction does (block_sum below); dgamma and dbeta are column
 * sums over rows in LN_ROW_LANES interleaved lanes, added in lane order.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>

#include "../demolib.h"
#include "convert.h"

#define THREADS      128 /* per row, as the CUDA block */
#define WARP         32
#define LN_ROW_LANES 8 /* rows summed in parallel per column (the CUDA block's y extent) */

static int check_args(enum dl_dtype dtype, int rows, int cols)
{
	if (dtype != DL_F32 && dtype != DL_F16 && dtype != DL_BF16)
		return -EINVAL;
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return 0;
}

/* A warp's xor butterfly over 32 lanes; every lane ends with the same sum. */
static float warp_sum(float *lane)
{
	float tmp[WARP];
	int o, l;

	for (o = WARP / 2; o > 0; o /= 2) {
		for (l = 0; l < WARP; l++)
			tmp[l] = lane[l] + lane[l ^ o];
		for (l = 0; l < WARP; l++)
			lane[l] = tmp[l];
	}
	return lane[0];
}

/* The CUDA block reduction: butterfly per warp, one value per warp, butterfly again. */
static float block_sum(float *v)
{
	float part[WARP];
	int w, l;

	for (w = 0; w < THREADS / WARP; w++)
		part[w] = warp_sum(v + w * WARP);
	for (l = THREADS / WARP; l < WARP; l++)
		part[l] = 0.0f;
	return warp_sum(part);
}

static void fwd_row(enum dl_dtype t, const void *x, const void *gamma, const void *beta, void *y, float *mean,
		    float *rstd, long r, int cols, float eps)
{
	float part[THREADS], m, var, rs;
	long off = r * cols;
	int th, i;

	for (th = 0; th < THREADS; th++) {
		part[th] = 0.0f;
		for (i = th; i < cols; i += THREADS)
			part[th] += load(t, x, off + i);
	}
	m = block_sum(part) / (float)cols;
	for (th = 0; th < THREADS; th++) {
		part[th] = 0.0f;
		for (i = th; i < cols; i += THREADS) {
			float d = load(t, x, off + i) - m;

			part[th] += d * d;
		}
	}
	var = block_sum(part) / (float)cols;
	rs = 1.0f / sqrtf(var + eps);
	for (i = 0; i < cols; i++)
		store(t, y, off + i, (load(t, x, off + i) - m) * rs * load(t, gamma, i) + load(t, beta, i));
	mean[r] = m;
	rstd[r] = rs;
}

int dl_layernorm_fwd(enum dl_dtype dtype, const void *x, const void *gamma, const void *beta, void *y,
		     float *mean, float *rstd, int rows, int cols, float eps)
{
	int r, rc;

	rc = check_args(dtype, rows, cols);
	if (rc)
		return rc;
	/* An empty row still has statistics: mean and rstd are NaN (0 / 0). */
	for (r = 0; r < rows; r++)
		fwd_row(dtype, x, gamma, beta, y, mean, rstd, r, cols, eps);
	return 0;
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
static void bwd_row(enum dl_dtype t, const void *x, const void *gamma, float m, float rs, const void *dy,
		    void *dx, long off, int cols)
{
	float a[THREADS], b[THREADS], c1, c2;
	int th, i;

	for (th = 0; th < THREADS; th++) {
		a[th] = 0.0f;
		b[th] = 0.0f;
		for (i = th; i < cols; i += THREADS) {
			float xhat = (load(t, x, off + i) - m) * rs;
			float g = load(t, dy, off + i) * load(t, gamma, i);

			a[th] += g * xhat;
			b[th] += g;
		}
	}
	c1 = block_sum(a) / (float)cols;
	c2 = block_sum(b) / (float)cols;
	for (i = 0; i < cols; i++) {
		float xhat = (load(t, x, off + i) - m) * rs;
		float g = load(t, dy, off + i) * load(t, gamma, i);

		store(t, dx, off + i, rs * ((g - c2) - xhat * c1));
	}
}

/* dgamma and dbeta of one column: LN_ROW_LANES interleaved partial sums, added in lane order. */
static void bwd_col(enum dl_dtype t, const void *x, const float *mean, const float *rstd, const void *dy,
		    void *dgamma, void *dbeta, int rows, int cols, int j)
{
	float ag[LN_ROW_LANES], ab[LN_ROW_LANES], sg = 0.0f, sb = 0.0f;
	int k, r;

	for (k = 0; k < LN_ROW_LANES; k++) {
		ag[k] = 0.0f;
		ab[k] = 0.0f;
		for (r = k; r < rows; r += LN_ROW_LANES) {
			long i = (long)r * cols + j;
			float d = load(t, dy, i);

			ag[k] += d * ((load(t, x, i) - mean[r]) * rstd[r]);
			ab[k] += d;
		}
	}
	for (k = 0; k < LN_ROW_LANES; k++) {
		sg += ag[k];
		sb += ab[k];
	}
	store(t, dgamma, j, sg);
	store(t, dbeta, j, sb);
}

int dl_layernorm_bwd(enum dl_dtype dtype, const void *x, const void *gamma, const float *mean,
		     const float *rstd, const void *dy, void *dx, void *dgamma, void *dbeta, int rows,
		     int cols)
{
	int r, j, rc;

	rc = check_args(dtype, rows, cols);
	if (rc)
		return rc;
	for (r = 0; r < rows && cols > 0; r++)
		bwd_row(dtype, x, gamma, mean[r], rstd[r], dy, dx, (long)r * cols, cols);
	for (j = 0; j < cols; j++)
		bwd_col(dtype, x, mean, rstd, dy, dgamma, dbeta, rows, cols, j);
	return 0;
}
