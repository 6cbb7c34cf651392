/*
 * msda checks -> the library's host build (dl_msda_*).
 * A library without deformable attention (no DL_HAS_MSDA) leaves the table
 * empty and the checks are not offered.
 */
#include <stddef.h>

#include "demolib.h"
#include "msda.h"

#ifdef DL_HAS_MSDA
static enum dl_dtype dl_dtype_of(enum nw_dtype d)
{
	return d == NW_F16 ? DL_F16 : d == NW_BF16 ? DL_BF16 : DL_F32;
}

static struct dl_msda_shape shape_of(const struct msda_dims *s)
{
	struct dl_msda_shape x = {0};
	int l;

	x.batch = s->batch;
	x.queries = s->queries;
	x.heads = s->heads;
	x.channels = s->channels;
	x.levels = s->levels;
	x.points = s->points;
	for (l = 0; l < MSDA_MAX_LEVELS && l < DL_MSDA_MAX_LEVELS; l++) {
		x.level_h[l] = s->level_h[l];
		x.level_w[l] = s->level_w[l];
	}
	x.padding = s->padding == MSDA_BORDER ? DL_MSDA_BORDER : DL_MSDA_ZEROS;
	x.align_corners = s->align_corners;
	return x;
}

static int fwd(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
	       const void *attn, void *out)
{
	struct dl_msda_shape x = shape_of(s);

	return dl_msda_fwd(dl_dtype_of(d), &x, value, loc, attn, out);
}

static int bwd(enum nw_dtype d, const struct msda_dims *s, const void *value, const void *loc,
	       const void *attn, const void *dout, void *dvalue, void *dloc, void *dattn)
{
	struct dl_msda_shape x = shape_of(s);

	return dl_msda_bwd(dl_dtype_of(d), &x, value, loc, attn, dout, dvalue, dloc, dattn);
}

const struct msda_kernels msda_kernels = {
    .fwd_name = "dl_msda_fwd",
    .bwd_name = "dl_msda_bwd",
    .fwd = fwd,
    .bwd = bwd,
};
#else
const struct msda_kernels msda_kernels = {NULL, NULL, NULL, NULL, NULL};
#endif
