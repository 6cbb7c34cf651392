/*
 * layernorm checks: layernorm.fwd (y, mean, rstd of y = (x - mean) * rstd *
 * gamma + beta along rows) and layernorm.bwd (dx, dgamma, dbeta) on
 * [rows, cols] tensors.
 */
#ifndef NW_CHECKS_LAYERNORM_H
#define NW_CHECKS_LAYERNORM_H

#include "numwatch_check.h"

/*
 * A trial's inputs, stored in the dtype (mean and rstd: float, the forward's
 * statistics; they and dy are the backward's only), as host memory and as
 * device memory of the runner's backend: each reference reads its own side.
 */
struct layernorm_in {
	const void *x, *gamma, *beta, *dy;
	const float *mean, *rstd;
	const void *x_dev, *gamma_dev, *beta_dev, *dy_dev;
	const float *mean_dev, *rstd_dev;
	long rows, cols;
};

/*
 * What a reference fills, per output (fwd: y, mean, rstd; bwd: dx, dgamma,
 * dbeta), in arrays the caller allocates: the float64 result, and each
 * element's largest plain error (nw_compare_spec.plain_err); and the size of
 * the terms the output is made of, for the floor of its budget (fwd: y's
 * only, max over elements of (|x| + |mean|) * rstd * |gamma| + |beta|).
 */
struct layernorm_ref_out {
	double *ref[3], *plain_err[3];
	double terms[3];
};

/*
 * The references on the host (layernorm_ref.c) or on the GPU
 * (layernorm_ref.cu, CUDA builds only). Return 0, -ENOMEM, or -EIO after a
 * device error (nw_trial_device_error() records it).
 */
struct layernorm_refs {
	const char *where; /* "host" or "cuda" */
	int (*fwd)(enum nw_dtype d, const struct layernorm_in *in, struct layernorm_ref_out *out);
	int (*bwd)(enum nw_dtype d, const struct layernorm_in *in, struct layernorm_ref_out *out);
};

extern const struct layernorm_refs layernorm_refs_host;
extern const struct layernorm_refs layernorm_refs_cuda;

/* Float64 statistics of stored rows: mean, and rstd = 1 / sqrt(var + eps) (two passes). */
void layernorm_stats(const double *x, long rows, long cols, double *mean, double *rstd);

/*
 * The library's entry points on device pointers (NULL when the library has
 * no layer norm: the checks are then not offered). mean and rstd are float.
 * layernorm_host.c and layernorm_cuda.c each define layernorm_kernels; a
 * runner links one of them. Tests build their own tables to plant bugs.
 */
struct layernorm_kernels {
	const char *fwd_name;
	const char *bwd_name;
	int (*fwd)(enum nw_dtype d, const void *x, const void *gamma, const void *beta, void *y, float *mean,
		   float *rstd, int rows, int cols, float eps);
	int (*bwd)(enum nw_dtype d, const void *x, const void *gamma, const float *mean, const float *rstd,
		   const void *dy, void *dx, void *dgamma, void *dbeta, int rows, int cols);
	const struct layernorm_refs *refs; /* where the references run; NULL: the host */
};

extern const struct layernorm_kernels layernorm_kernels;
extern const struct nw_check layernorm_fwd_check;
extern const struct nw_check layernorm_bwd_check;

enum layernorm_family {
	LN_ALIGNED,   /* cols % 4 == 0 */
	LN_TAIL,      /* cols % 4 != 0 */
	LN_THRESHOLD, /* both sides of multiples of the block (128) and tile sizes */
	LN_TINY,      /* cols 0..16 swept over consecutive trials; rows 0..8 */
	LN_EXTREME,   /* large offsets, constant rows, tiny and huge spreads, dy scales */
	LN_FAMILIES,
};

#define LAYERNORM_MAX_ELEMS 16384
#define LAYERNORM_EPS       1e-5f

void layernorm_shape(int family, uint64_t seed, uint64_t index, long *rows, long *cols);

#endif
