/*
 * msda checks: msda.fwd (out) and msda.bwd (dvalue, dloc, dattn) of
 * Deformable DETR's multi-scale deformable attention with bilinear sampling,
 * zeros or border padding and align_corners off or on.
 */
#ifndef NW_CHECKS_MSDA_H
#define NW_CHECKS_MSDA_H

#include "numwatch_check.h"

#define MSDA_MAX_LEVELS 4

enum { MSDA_ZEROS = 0, MSDA_BORDER = 1 };

/* A case's sizes and sampling options. */
struct msda_dims {
	int batch, queries, heads, channels, levels, points;
	int level_h[MSDA_MAX_LEVELS], level_w[MSDA_MAX_LEVELS];
	int padding; /* MSDA_ZEROS or MSDA_BORDER */
	int align_corners;
};

/*
 * A trial's case and inputs, stored in the dtype (dout: the backward's
 * only), as host memory and as device memory of the runner's backend: each
 * reference reads its own side. Layouts as for the kernels below.
 */
struct msda_in {
	const struct msda_dims *s;
	const void *value, *loc, *attn, *dout;
	const void *value_dev, *loc_dev, *attn_dev, *dout_dev;
};

/*
 * What a reference fills, in arrays the caller allocates, per output (fwd:
 * out; bwd: dvalue, dloc, dattn): the float64 result, and each element's
 * largest plain error (nw_compare_spec.plain_err); the size of the terms
 * each output is made of, for the floor of its budget; and (bwd) the dloc
 * elements whose coordinate lies near a bilinear kink, left out of the
 * comparison (msda.c).
 */
struct msda_ref_out {
	double *ref[3], *plain_err[3];
	unsigned char *exclude;
	double terms[3];
};

/*
 * The references on the host (msda_ref.c) or on the GPU (msda_ref.cu, CUDA
 * builds only). Return 0, -ENOMEM, or -EIO after a device error
 * (nw_trial_device_error() records it).
 */
struct msda_refs {
	const char *where; /* "host" or "cuda" */
	int (*fwd)(enum nw_dtype d, const struct msda_in *in, struct msda_ref_out *out);
	int (*bwd)(enum nw_dtype d, const struct msda_in *in, struct msda_ref_out *out);
};

extern const struct msda_refs msda_refs_host;
extern const struct msda_refs msda_refs_cuda;

/*
 * The library's entry points on device pointers (NULL when the library has no
 * deformable attention). Layouts: value [batch, S, heads, channels]; loc
 * [batch, queries, heads, levels, points, 2] as (x, y); attn [batch, queries,
 * heads, levels, points]; out [batch, queries, heads, channels].
 * msda_host.c and msda_cuda.c each define msda_kernels; a runner links one
 * of them. Tests build their own tables to plant bugs.
 */
struct msda_kernels {
	const char *fwd_name;
	const char *bwd_name;
	int (*fwd)(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
		   const void *attn, void *out);
	int (*bwd)(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
		   const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn);
	const struct msda_refs *refs; /* where the references run; NULL: the host */
};

extern const struct msda_kernels msda_kernels;
extern const struct nw_check msda_fwd_check;
extern const struct nw_check msda_bwd_check;

enum msda_family {
	MSDA_UNIFORM,  /* sampling points uniform in [0, 1] */
	MSDA_BOUNDARY, /* points on pixel centres and edges, and a few ULP from them (bilinear kinks) */
	MSDA_OUTSIDE,  /* points outside [0, 1] as well: zeros read nothing, border lands on edge pixels */
	MSDA_CHANNELS, /* channel counts on both sides of the warp width: 1..3, 31..33, 63..65, 96, 127, 128 */
	MSDA_LEVELS,   /* four levels with 1-sized rows and columns next to larger ones */
	MSDA_TINY,     /* small sizes swept over consecutive trials, no queries included */
	MSDA_EXTREME,  /* peaked attention weights, value offsets and large values, dout scales */
	MSDA_FAMILIES,
};

/* The case of a trial: a function of (family, seed, index) only, shared by fwd and bwd. */
void msda_case(int family, uint64_t seed, uint64_t index, struct msda_dims *s);

#endif
