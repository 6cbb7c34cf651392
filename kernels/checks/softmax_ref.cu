/*
 * softmax references on the GPU: the same float64 result and plain-program
 * errors as softmax_ref.c, so that a GPU runner's trial is not bound by the
 * host CPU. Reductions in float64 may sum in any order (they are exact to
 * far below any dtype's rounding); the plain programs sum in exactly the
 * orders of nw_order.h, one warp per (row, order), as the host does.
 * One launch and a few copies per trial: at these sizes a trial's cost is
 * launches and synchronisations, not arithmetic.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

extern "C" {
#include "nw_device.h"
#include "softmax.h"
}
#include "nw_device_math.cuh"
#include "nw_order.h"

#define THREADS 256
static_assert(THREADS % 32 == 0 && THREADS / 32 >= NW_ORDERS, "a warp per reduction order (order_of_thread)");

/*
 * s + v[j] + v[j + step] + ... over the m = count elements from j, in that
 * order. Loads go eight at a time ahead of the adds: the adds form one
 * dependent chain, and each would otherwise wait for its load.
 */
__device__ static float chain(float s, const float *v, long j, long step, long m)
{
	long i;

	for (i = 0; i + 8 <= m; i += 8, j += 8 * step) {
		float a[8];
		int u;

		for (u = 0; u < 8; u++)
			a[u] = v[j + u * step];
		for (u = 0; u < 8; u++)
			s += a[u];
	}
	for (; i < m; i++, j += step)
		s += v[j];
	return s;
}

/*
 * A float sum of v[0..n) in reduction order o, rounded to the dtype: the
 * residue loops of nw_order_stride() visit exactly nw_order_at()'s sequence.
 */
__device__ static float ordered_sum(int d, const float *v, long n, int o)
{
	long k = nw_order_stride(o), r;
	float s = 0.0f;

	if (k < 0)
		s = chain(s, v, n - 1, -1, n);
	else if (k == 1 || n <= k)
		s = chain(s, v, 0, 1, n);
	else
		for (r = 0; r < k; r++)
			s = chain(s, v, r, k, (n - r + k - 1) / k);
	return round_to(d, s);
}

/*
 * The ordered sums are sequential chains, one thread each: from global
 * memory every step would wait out a memory latency. Rows that fit are
 * staged in shared memory first (dynamic, ROW_SHARED_MAX floats).
 */
#define ROW_SHARED_MAX 8192
extern __shared__ float row_shared[];

__device__ static const float *stage_row(const float *row, long cols)
{
	return cols <= ROW_SHARED_MAX ? row_shared : row;
}

__device__ static void fill_row(const float *row, long cols)
{
	long j;

	if (cols <= ROW_SHARED_MAX)
		for (j = threadIdx.x; j < cols; j += THREADS)
			row_shared[j] = row[j];
}

static size_t row_shared_bytes(long cols)
{
	return cols <= ROW_SHARED_MAX ? (size_t)cols * sizeof(float) : 0;
}

/*
 * One block per row, everything in one launch: the float64 softmax, the
 * plain program's exp'd values (its max is a float max: exact in any
 * order), its row sum in each order (one warp per order), and each
 * element's largest plain error. out holds ref[n] then plain_err[n].
 */
__global__ static void fwd_refs(int d, const void *x, long n, long cols, float *e, double *out)
{
	__shared__ float sums[NW_ORDERS];
	long off = (long)blockIdx.x * cols, j;
	double m = -INFINITY, s = 0.0, *ref = out, *plain_err = out + n;
	float mf;
	int o;

	for (j = threadIdx.x; j < cols; j += THREADS)
		m = fmax(m, (double)load(d, x, off + j));
	m = block_reduce<double, true>(m);
	for (j = threadIdx.x; j < cols; j += THREADS)
		s += exp((double)load(d, x, off + j) - m);
	s = block_reduce<double, false>(s);
	mf = (float)m;
	for (j = threadIdx.x; j < cols; j += THREADS) {
		ref[off + j] = exp((double)load(d, x, off + j) - m) / s;
		e[off + j] = round_to(d, expf(round_to(d, load(d, x, off + j) - mf)));
	}
	__syncthreads();
	fill_row(e + off, cols);
	__syncthreads();
	o = order_of_thread(NW_ORDERS);
	if (o >= 0)
		sums[o] = ordered_sum(d, stage_row(e + off, cols), cols, o);
	__syncthreads();
	for (j = threadIdx.x; j < cols; j += THREADS) {
		double err = 0.0;

		for (o = 0; o < NW_ORDERS; o++)
			note_err(&err, round_to(d, e[off + j] / sums[o]), ref[off + j]);
		plain_err[off + j] = err;
	}
}

static int cuda_fwd(enum nw_dtype d, const void *x_dev, long rows, long cols, double **out)
{
	long n = rows * cols;
	float *e = NULL;
	int rc;

	*out = NULL;
	/* Never empty: an empty output still has a reference, and so a budget. */
	rc = nw_dev_alloc((void **)out, 2 * (size_t)(n ? n : 1) * sizeof(double));
	if (!rc && n > 0)
		rc = nw_dev_alloc((void **)&e, (size_t)n * sizeof(float));
	if (!rc && n > 0) {
		fwd_refs<<<(unsigned)rows, THREADS, row_shared_bytes(cols)>>>(d, x_dev, n, cols, e, *out);
		rc = nw_dev_launched("softmax reference");
	}
	nw_dev_free(e);
	return rc ? -EIO : 0;
}

/*
 * One block per row, in one launch: the float64 backward and the row's size
 * of terms, the plain program's rounded products dy * y, their sum in each
 * order (one warp per order), and each element's largest plain error.
 * out holds ref[n], plain_err[n], then one size of terms per row.
 */
__global__ static void bwd_refs(int d, const void *y, const void *dy, long n, long cols, float *prod,
				double *out)
{
	__shared__ float dots[NW_ORDERS];
	long off = (long)blockIdx.x * cols, j;
	double dot = 0.0, mag = 0.0, scale = 0.0, *ref = out, *plain_err = out + n;
	int o;

	for (j = threadIdx.x; j < cols; j += THREADS) {
		double t = (double)load(d, dy, off + j) * (double)load(d, y, off + j);

		dot += t;
		mag += fabs(t);
		prod[off + j] = round_to(d, load(d, dy, off + j) * load(d, y, off + j));
	}
	dot = block_reduce<double, false>(dot);
	mag = block_reduce<double, false>(mag);
	for (j = threadIdx.x; j < cols; j += THREADS) {
		double yj = (double)load(d, y, off + j), dyj = (double)load(d, dy, off + j);

		ref[off + j] = yj * (dyj - dot);
		scale = fmax(scale, fabs(yj) * (fabs(dyj) + mag));
	}
	scale = block_reduce<double, true>(scale);
	if (threadIdx.x == 0)
		out[2 * n + blockIdx.x] = scale;
	__syncthreads();
	fill_row(prod + off, cols);
	__syncthreads();
	o = order_of_thread(NW_ORDERS);
	if (o >= 0)
		dots[o] = ordered_sum(d, stage_row(prod + off, cols), cols, o);
	__syncthreads();
	for (j = threadIdx.x; j < cols; j += THREADS) {
		double err = 0.0;

		for (o = 0; o < NW_ORDERS; o++)
			note_err(
			    &err,
			    round_to(d, load(d, y, off + j) * round_to(d, load(d, dy, off + j) - dots[o])),
			    ref[off + j]);
		plain_err[off + j] = err;
	}
}

static int cuda_bwd(enum nw_dtype d, const void *y_dev, const void *dy_dev, long rows, long cols,
		    double **out)
{
	long n = rows * cols;
	float *prod = NULL;
	int rc;

	*out = NULL;
	rc = nw_dev_alloc((void **)out, (2 * (size_t)(n ? n : 1) + (size_t)rows) * sizeof(double));
	if (!rc && n > 0)
		rc = nw_dev_alloc((void **)&prod, (size_t)n * sizeof(float));
	if (!rc && n > 0) {
		bwd_refs<<<(unsigned)rows, THREADS, row_shared_bytes(cols)>>>(d, y_dev, dy_dev, n, cols, prod,
									      *out);
		rc = nw_dev_launched("softmax reference");
	}
	nw_dev_free(prod);
	return rc ? -EIO : 0;
}

const struct softmax_refs softmax_refs_cuda = {
    "cuda", NULL, NULL, cuda_fwd, cuda_bwd,
};
