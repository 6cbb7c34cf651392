/*
 * softmax checks: softmax.fwd (y = softmax(x) along rows) and softmax.bwd
 * (dx = y * (dy - sum(dy * y)) along rows) on [rows, cols] tensors.
 */
#ifndef NW_CHECKS_SOFTMAX_H
#define NW_CHECKS_SOFTMAX_H

#include "numwatch_check.h"

/*
 * The float64 reference and, per element, the plain programs' largest error
 * (nw_compare_spec.plain_err), on the host (softmax_ref.c) or on the GPU
 * (softmax_ref.cu, CUDA builds only). Each gets the inputs as host memory
 * and as device memory of the runner's backend and reads its own side.
 * bwd also gives the size of the terms each dx is a difference of, max y_i *
 * (|dy_i| + sum_j |dy_j * y_j|): rounding errors of any float program scale
 * with it, not with dx itself. Return 0, -ENOMEM, or -EIO after a device
 * error (nw_trial_device_error() records it).
 */
struct softmax_refs {
	const char *where; /* "host" or "cuda" */
	int (*fwd)(enum nw_dtype d, const void *x, const void *x_dev, long rows, long cols, double *ref,
		   double *plain_err);
	int (*bwd)(enum nw_dtype d, const void *y, const void *dy, const void *y_dev, const void *dy_dev,
		   long rows, long cols, double *ref, double *plain_err, double *scale);
	/*
	 * Or the same left on the device, to be compared there
	 * (nw_compare_spec.ref_dev): *out is ref, then plain_err (n each), then
	 * for bwd each row's scale; the caller's to nw_dev_free(). A backend
	 * gives these or the two above.
	 */
	int (*fwd_dev)(enum nw_dtype d, const void *x_dev, long rows, long cols, double **out);
	int (*bwd_dev)(enum nw_dtype d, const void *y_dev, const void *dy_dev, long rows, long cols,
		       double **out);
};

extern const struct softmax_refs softmax_refs_host;
extern const struct softmax_refs softmax_refs_cuda;

/*
 * The library's entry points, on device pointers of the runner's backend.
 * softmax_host.c and softmax_cuda.c each define softmax_kernels; a runner
 * links one of them. Tests build their own tables to plant bugs.
 */
struct softmax_kernels {
	const char *fwd_name; /* for error answers: "dl_softmax_fwd returned -22" */
	const char *bwd_name;
	int (*fwd)(enum nw_dtype d, const void *x, void *y, int rows, int cols);
	int (*bwd)(enum nw_dtype d, const void *y, const void *dy, void *dx, int rows, int cols);
	const struct softmax_refs *refs; /* where the references run; NULL: the host */
};

extern const struct softmax_kernels softmax_kernels;
extern const struct nw_check softmax_fwd_check;
extern const struct nw_check softmax_bwd_check;

enum softmax_family {
	SOFTMAX_ALIGNED,   /* cols % 4 == 0, 4..4800 */
	SOFTMAX_TAIL,      /* cols % 4 != 0, 1..4803 */
	SOFTMAX_THRESHOLD, /* both sides of dispatch thresholds and tile sizes */
	SOFTMAX_TINY,      /* a sweep of cols 0..16 over consecutive trials */
	SOFTMAX_EXTREME,   /* rows of -inf, one-hot rows, +-1e4 offsets, wide spreads, constant rows */
	SOFTMAX_FAMILIES,
};

/* Elements per trial are capped so one host trial stays within a few milliseconds. */
#define SOFTMAX_MAX_ELEMS 16384

/* The shape of a case: a function of (family, seed, index) only, shared by fwd and bwd. */
void softmax_shape(int family, uint64_t seed, uint64_t index, long *rows, long *cols);

#endif
