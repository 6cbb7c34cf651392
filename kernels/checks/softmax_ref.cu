/*
 * softmax references on the GPU: the same float64 result and plain-program
 * errors as softmax_ref.c, so that a GPU runner's trial is not bound by the
 * host CPU. Reductions in float64 may sum in any order (they are exact to
 * far below any dtype's rounding); the plain programs sum in exactly the
 * orders of nw_order.h, one thread per (row, order), as the host does.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <errno.h>
#include <math.h>

extern "C" {
#include "nw_device.h"
#include "softmax.h"
}
#include "nw_order.h"

#define THREADS 256

/* Element i of a stored buffer, as float. */
__device__ static float load(int d, const void *buf, long i)
{
	if (d == NW_F16)
		return __half2float(((const __half *)buf)[i]);
	if (d == NW_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)buf)[i]);
	return ((const float *)buf)[i];
}

/* One rounding step of a same-dtype program (round to nearest even, like nw_round). */
__device__ static float round_to(int d, float v)
{
	if (d == NW_F16)
		return __half2float(__float2half_rn(v));
	if (d == NW_BF16)
		return __bfloat162float(__float2bfloat16_rn(v));
	return v;
}

/* Block-wide reduction of one double (max or sum) into every thread's return value. */
__device__ static double block_reduce(double v, bool take_max)
{
	__shared__ double part[THREADS / 32];
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, w;

	for (w = 16; w > 0; w /= 2) {
		double o = __shfl_down_sync(0xffffffffu, v, w);

		v = take_max ? fmax(v, o) : v + o;
	}
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = part[0];
	for (w = 1; w < THREADS / 32; w++)
		v = take_max ? fmax(v, part[w]) : v + part[w];
	return v;
}

/* One block per row: float64 softmax; the row's float max and exp'd values for the plain programs. */
__global__ static void fwd_ref(int d, const void *x, long cols, double *ref, float *e, float *row_max)
{
	long off = (long)blockIdx.x * cols, j;
	double m = -INFINITY, s = 0.0;
	float mf = -INFINITY;

	for (j = threadIdx.x; j < cols; j += THREADS)
		m = fmax(m, (double)load(d, x, off + j));
	m = block_reduce(m, true);
	for (j = threadIdx.x; j < cols; j += THREADS)
		s += exp((double)load(d, x, off + j) - m);
	s = block_reduce(s, false);
	for (j = threadIdx.x; j < cols; j += THREADS)
		ref[off + j] = exp((double)load(d, x, off + j) - m) / s;
	/* The plain program's max is a float max: exact, any order. */
	mf = (float)m;
	for (j = threadIdx.x; j < cols; j += THREADS)
		e[off + j] = round_to(d, expf(round_to(d, load(d, x, off + j) - mf)));
	if (threadIdx.x == 0)
		row_max[blockIdx.x] = mf;
}

/* One thread per (row, order): the plain row sum in that order, rounded. */
__global__ static void fwd_sums(int d, const float *e, long rows, long cols, float *sums)
{
	long t = (long)blockIdx.x * blockDim.x + threadIdx.x, i = t / NW_ORDERS, j;
	int o = (int)(t % NW_ORDERS);
	float s = 0.0f;

	if (i >= rows)
		return;
	for (j = 0; j < cols; j++)
		s += e[i * cols + nw_order_at(o, j, cols)];
	sums[t] = round_to(d, s);
}

__device__ static void note_err(double *err, float p, double ref)
{
	if (isfinite(p) && fabs((double)p - ref) > *err)
		*err = fabs((double)p - ref);
}

/* One thread per element: the plain results of every order against the reference. */
__global__ static void fwd_err(int d, const float *e, const float *sums, const double *ref, long n, long cols,
			       double *plain_err)
{
	long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
	double err = 0.0;
	int o;

	if (i >= n)
		return;
	for (o = 0; o < NW_ORDERS; o++)
		note_err(&err, round_to(d, e[i] / sums[i / cols * NW_ORDERS + o]), ref[i]);
	plain_err[i] = err;
}

static unsigned blocks_for(long n)
{
	return (unsigned)((n + THREADS - 1) / THREADS);
}

/* Device scratch for one call: freed together. */
struct scratch {
	void *p[4];
	int n;
};

static void *scratch_get(struct scratch *s, size_t bytes, int *rc)
{
	void *p = NULL;

	if (*rc == 0 && (*rc = nw_dev_alloc(&p, bytes)) == 0)
		s->p[s->n++] = p;
	return p;
}

static void scratch_free(struct scratch *s)
{
	while (s->n > 0)
		nw_dev_free(s->p[--s->n]);
}

static int cuda_fwd(enum nw_dtype d, const void *x, const void *x_dev, long rows, long cols, double *ref,
		    double *plain_err)
{
	struct scratch s = {{0}, 0};
	long n = rows * cols;
	double *ref_d, *err_d;
	float *e, *mx, *sums;
	int rc = 0;

	(void)x;
	if (n == 0)
		return 0;
	ref_d = (double *)scratch_get(&s, (size_t)n * sizeof(double), &rc);
	err_d = (double *)scratch_get(&s, (size_t)n * sizeof(double), &rc);
	e = (float *)scratch_get(&s, (size_t)n * sizeof(float) + (size_t)rows * sizeof(float), &rc);
	sums = (float *)scratch_get(&s, (size_t)rows * NW_ORDERS * sizeof(float), &rc);
	if (rc)
		goto out;
	mx = e + n;
	fwd_ref<<<(unsigned)rows, THREADS>>>(d, x_dev, cols, ref_d, e, mx);
	fwd_sums<<<blocks_for(rows * NW_ORDERS), THREADS>>>(d, e, rows, cols, sums);
	fwd_err<<<blocks_for(n), THREADS>>>(d, e, sums, ref_d, n, cols, err_d);
	rc = nw_dev_launched("softmax reference");
	if (!rc)
		rc = nw_dev_download(ref, ref_d, (size_t)n * sizeof(double));
	if (!rc)
		rc = nw_dev_download(plain_err, err_d, (size_t)n * sizeof(double));
out:
	scratch_free(&s);
	return rc ? -EIO : 0;
}

/*
 * One block per row: float64 backward, the row's size of terms, and the
 * rounded products dy * y of the plain program.
 */
__global__ static void bwd_ref(int d, const void *y, const void *dy, long cols, double *ref, float *prod,
			       double *row_scale)
{
	long off = (long)blockIdx.x * cols, j;
	double dot = 0.0, mag = 0.0, scale = 0.0;

	for (j = threadIdx.x; j < cols; j += THREADS) {
		double t = (double)load(d, dy, off + j) * (double)load(d, y, off + j);

		dot += t;
		mag += fabs(t);
		prod[off + j] = round_to(d, load(d, dy, off + j) * load(d, y, off + j));
	}
	dot = block_reduce(dot, false);
	mag = block_reduce(mag, false);
	for (j = threadIdx.x; j < cols; j += THREADS) {
		double yj = (double)load(d, y, off + j), dyj = (double)load(d, dy, off + j);

		ref[off + j] = yj * (dyj - dot);
		scale = fmax(scale, fabs(yj) * (fabs(dyj) + mag));
	}
	scale = block_reduce(scale, true);
	if (threadIdx.x == 0)
		row_scale[blockIdx.x] = scale;
}

/* One thread per (row, order): the plain dot product in that order, rounded. */
__global__ static void bwd_dots(int d, const float *prod, long rows, long cols, float *dots)
{
	long t = (long)blockIdx.x * blockDim.x + threadIdx.x, i = t / NW_ORDERS, j;
	int o = (int)(t % NW_ORDERS);
	float s = 0.0f;

	if (i >= rows)
		return;
	for (j = 0; j < cols; j++)
		s += prod[i * cols + nw_order_at(o, j, cols)];
	dots[t] = round_to(d, s);
}

__global__ static void bwd_err(int d, const void *y, const void *dy, const float *dots, const double *ref, long n,
			       long cols, double *plain_err)
{
	long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
	double err = 0.0;
	int o;

	if (i >= n)
		return;
	for (o = 0; o < NW_ORDERS; o++)
		note_err(&err,
			 round_to(d, load(d, y, i) * round_to(d, load(d, dy, i) - dots[i / cols * NW_ORDERS + o])),
			 ref[i]);
	plain_err[i] = err;
}

static int cuda_bwd(enum nw_dtype d, const void *y, const void *dy, const void *y_dev, const void *dy_dev,
		    long rows, long cols, double *ref, double *plain_err, double *scale)
{
	struct scratch s = {{0}, 0};
	long n = rows * cols, i;
	double *ref_d, *err_d, *row_scale_d, *row_scale = NULL;
	float *prod, *dots;
	int rc = 0;

	(void)y;
	(void)dy;
	*scale = 0.0;
	if (n == 0)
		return 0;
	row_scale = (double *)malloc((size_t)rows * sizeof(double));
	if (!row_scale)
		return -ENOMEM;
	ref_d = (double *)scratch_get(&s, (size_t)n * sizeof(double), &rc);
	err_d = (double *)scratch_get(&s, (size_t)n * sizeof(double), &rc);
	prod = (float *)scratch_get(&s, (size_t)n * sizeof(float) + (size_t)rows * NW_ORDERS * sizeof(float), &rc);
	row_scale_d = (double *)scratch_get(&s, (size_t)rows * sizeof(double), &rc);
	if (rc)
		goto out;
	dots = prod + n;
	bwd_ref<<<(unsigned)rows, THREADS>>>(d, y_dev, dy_dev, cols, ref_d, prod, row_scale_d);
	bwd_dots<<<blocks_for(rows * NW_ORDERS), THREADS>>>(d, prod, rows, cols, dots);
	bwd_err<<<blocks_for(n), THREADS>>>(d, y_dev, dy_dev, dots, ref_d, n, cols, err_d);
	rc = nw_dev_launched("softmax reference");
	if (!rc)
		rc = nw_dev_download(ref, ref_d, (size_t)n * sizeof(double));
	if (!rc)
		rc = nw_dev_download(plain_err, err_d, (size_t)n * sizeof(double));
	if (!rc)
		rc = nw_dev_download(row_scale, row_scale_d, (size_t)rows * sizeof(double));
	for (i = 0; !rc && i < rows; i++)
		*scale = fmax(*scale, row_scale[i]);
out:
	scratch_free(&s);
	free(row_scale);
	return rc ? -EIO : 0;
}

const struct softmax_refs softmax_refs_cuda = {
    "cuda",
    cuda_fwd,
    cuda_bwd,
};
