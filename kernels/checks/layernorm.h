/*
 * layernorm checks: layernorm.fwd (y, mean, rstd of y = (x - mean) * rstd *
 * gamma + beta along rows) and layernorm.bwd (dx, dgamma, dbeta) on
 * [rows, cols] tensors.
 */
#ifndef NW_CHECKS_LAYERNORM_H
#define NW_CHECKS_LAYERNORM_H

#include "numwatch_check.h"

/*
 * The library's entry points on device pointers (NULL when the library has
 * no layer norm: the checks are then not offered). mean and rstd are float.
 */
struct layernorm_kernels {
	const char *fwd_name;
	const char *bwd_name;
	int (*fwd)(enum nw_dtype d, const void *x, const void *gamma, const void *beta, void *y, float *mean,
		   float *rstd, int rows, int cols, float eps);
	int (*bwd)(enum nw_dtype d, const void *x, const void *gamma, const float *mean, const float *rstd,
		   const void *dy, void *dx, void *dgamma, void *dbeta, int rows, int cols);
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
