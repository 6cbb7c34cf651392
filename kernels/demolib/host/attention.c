/*
 * Tiled attention forward and backward, host build. The structure follows
 * the CUDA build block for block: a block owns a tile of DL_ATTN_TILE query
 * rows (forward, dQ) or key rows (dK and dV), one "thread" per row; tiles of
 * the other side are loaded into the block's scratch (the CUDA build's shared
 * memory) as float, and each row accumulates in the same order as its CUDA
 * thread. The loops are arranged so that the compiler can run many rows at
 * once, without changing any row's order of operations.
 *
 * Like CUDA shared memory, the scratch holds garbage until written: it is
 * filled with NaN at the start of every block, so that a read before a write
 * shows in the results as it would on the GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../demolib.h"
#include "convert.h"

#define T DL_ATTN_TILE

struct scratch {
	float *q, *dout, *acc, *acc2; /* [T][D]: the block's own rows */
	float *k, *v;                 /* [T][D]: a key tile */
	float *kt, *vt;               /* [D][T]: the same, transposed */
	float *m, *l, *lse, *delta;   /* [T] */
	float *s, *p, *dp;            /* [T] per row */
	size_t floats;
	float *base;
};

static int scratch_init(struct scratch *w, int D)
{
	size_t td = (size_t)T * (size_t)D, n = 8 * td + 7 * T;
	float *b = malloc(n * sizeof(float));

	if (!b)
		return -ENOMEM;
	w->base = b;
	w->floats = n;
	w->q = b;
	w->dout = b + td;
	w->acc = b + 2 * td;
	w->acc2 = b + 3 * td;
	w->k = b + 4 * td;
	w->v = b + 5 * td;
	w->kt = b + 6 * td;
	w->vt = b + 7 * td;
	b += 8 * td;
	w->m = b;
	w->l = b + T;
	w->lse = b + 2 * T;
	w->delta = b + 3 * T;
	w->s = b + 4 * T;
	w->p = b + 5 * T;
	w->dp = b + 6 * T;
	return 0;
}

/* What a block finds in shared memory before writing it: here, NaN. */
static void scratch_poison(struct scratch *w)
{
	size_t i;

	for (i = 0; i < w->floats; i++)
		w->base[i] = NAN;
}

static int check_args(enum dl_dtype dtype, const struct dl_attn_shape *s)
{
	if (dtype != DL_F32 && dtype != DL_F16 && dtype != DL_BF16)
		return -EINVAL;
	if (s->batch < 0 || s->heads < 0 || s->seqlen_q < 0 || s->seqlen_k < 0 || s->head_dim < 1 ||
	    s->head_dim > DL_ATTN_MAX_HEAD_DIM)
		return -EINVAL;
	return 0;
}

/* The last key row i may see (keys are visible up to it, and below seqlen_k). */
static long last_key(const struct dl_attn_shape *s, long i)
{
	if (!s->causal)
		return (long)s->seqlen_k - 1;
	return i + s->seqlen_k - s->seqlen_q;
}

/* Key tiles a query tile [q0, q0 + nq) needs: keys up to the last row's last key. */
static int key_tiles(const struct dl_attn_shape *s, int q0, int nq)
{
	int n = (s->seqlen_k + T - 1) / T;
	long last = last_key(s, q0 + nq - 1);

	if (last < 0)
		return 0;
	return (int)(last / T + 1 < n ? last / T + 1 : n);
}

/* Rows [r0, r0 + T) of a [rows, D] tensor as float, zeros beyond 'rows': row-major and transposed. */
static void load_rows(enum dl_dtype t, const void *src, long base, int r0, int rows, int D, float *dst,
		      float *dst_t)
{
	int r, d;

	for (r = 0; r < T; r++)
		for (d = 0; d < D; d++) {
			float v = r0 + r < rows ? load(t, src, base + (long)(r0 + r) * D + d) : 0.0f;

			if (dst)
				dst[r * D + d] = v;
			if (dst_t)
				dst_t[d * T + r] = v;
		}
}

/* s[c] = dot(a, bt[:, c]) for the T columns of a transposed tile, each summed over d in order. */
static void dots(const float *a, const float *bt, int D, float *s)
{
	int c, d;

	for (c = 0; c < T; c++)
		s[c] = 0.0f;
	for (d = 0; d < D; d++) {
		float x = a[d];
		const float *b = bt + d * T;

		for (c = 0; c < T; c++)
			s[c] += x * b[c];
	}
}

/* ---- forward ------------------------------------------------------------------------ */

static void fwd_block(enum dl_dtype t, const struct dl_attn_shape *s, struct scratch *w, long bh, int qt,
		      const void *q, const void *k, const void *v, void *o, float *lse)
{
	int D = s->head_dim, q0 = qt * T, nq = s->seqlen_q - q0 < T ? s->seqlen_q - q0 : T;
	long qbase = bh * s->seqlen_q * D, kbase = bh * s->seqlen_k * D;
	int nkt = key_tiles(s, q0, nq), kt, r, c, d;

	scratch_poison(w);
	load_rows(t, q, qbase, q0, s->seqlen_q, D, w->q, NULL);
	for (r = 0; r < T; r++) {
		w->m[r] = -INFINITY;
		w->l[r] = 0.0f;
		for (d = 0; d < D; d++)
			w->acc[r * D + d] = 0.0f;
	}
	for (kt = 0; kt < nkt; kt++) {
		int k0 = kt * T;

		load_rows(t, k, kbase, k0, s->seqlen_k, D, NULL, w->kt);
		load_rows(t, v, kbase, k0, s->seqlen_k, D, w->v, NULL);
		for (r = 0; r < nq; r++) {
			long lim = last_key(s, q0 + r);
			float *acc = w->acc + r * D, mt = -INFINITY, mnew, alpha, psum = 0.0f;

			dots(w->q + r * D, w->kt, D, w->s);
			for (c = 0; c < T; c++) {
				w->s[c] =
				    k0 + c < s->seqlen_k && k0 + c <= lim ? w->s[c] * s->scale : -INFINITY;
				mt = fmaxf(mt, w->s[c]);
			}
			mnew = fmaxf(w->m[r], mt);
			if (mnew == -INFINITY)
				continue; /* nothing visible yet */
			alpha = expf(w->m[r] - mnew);
			for (c = 0; c < T; c++) {
				w->p[c] = w->s[c] == -INFINITY ? 0.0f : expf(w->s[c] - mnew);
				psum += w->p[c];
			}
			w->l[r] = w->l[r] * alpha + psum;
			for (d = 0; d < D; d++)
				acc[d] *= alpha;
			for (c = 0; c < T; c++) {
				float pc = w->p[c];
				const float *vc = w->v + c * D;

				for (d = 0; d < D; d++)
					acc[d] += pc * vc[d];
			}
			w->m[r] = mnew;
		}
	}
	for (r = 0; r < nq; r++) {
		long row = bh * s->seqlen_q + q0 + r;

		if (w->l[r] == 0.0f) {
			for (d = 0; d < D; d++)
				store(t, o, row * D + d, 0.0f);
			lse[row] = -INFINITY;
		} else {
			float inv = 1.0f / w->l[r];

			for (d = 0; d < D; d++)
				store(t, o, row * D + d, w->acc[r * D + d] * inv);
			lse[row] = w->m[r] + logf(w->l[r]);
		}
	}
}

int dl_attention_fwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q, const void *k,
		     const void *v, void *o, float *lse)
{
	struct scratch w;
	long bh, nbh;
	int qt, rc;

	rc = check_args(dtype, s);
	if (rc)
		return rc;
	nbh = (long)s->batch * s->heads;
	if (nbh == 0 || s->seqlen_q == 0)
		return 0;
	if (scratch_init(&w, s->head_dim))
		return -ENOMEM;
	for (bh = 0; bh < nbh; bh++)
		for (qt = 0; qt * T < s->seqlen_q; qt++)
			fwd_block(dtype, s, &w, bh, qt, q, k, v, o, lse);
	free(w.base);
	return 0;
}

/* ---- backward ----------------------------------------------------------------------- */

/* delta_i = dot(dO_i, O_i), in float, over d in order. */
static float row_delta(enum dl_dtype t, const void *dout, const void *o, long row, int D)
{
	float sum = 0.0f;
	int d;

	for (d = 0; d < D; d++)
		sum += load(t, dout, row * D + d) * load(t, o, row * D + d);
	return sum;
}

/* dQ for one query tile: one thread per query row, over the key tiles it sees. */
static void dq_block(enum dl_dtype t, const struct dl_attn_shape *s, struct scratch *w, long bh, int qt,
		     const void *q, const void *k, const void *v, const void *o, const float *lse,
		     const void *dout, void *dq)
{
	int D = s->head_dim, q0 = qt * T, nq = s->seqlen_q - q0 < T ? s->seqlen_q - q0 : T;
	long qbase = bh * s->seqlen_q * D, kbase = bh * s->seqlen_k * D;
	int nkt = key_tiles(s, q0, nq), kt, r, c, d;

	scratch_poison(w);
	load_rows(t, q, qbase, q0, s->seqlen_q, D, w->q, NULL);
	load_rows(t, dout, qbase, q0, s->seqlen_q, D, w->dout, NULL);
	for (r = 0; r < nq; r++) {
		long row = bh * s->seqlen_q + q0 + r;

		w->lse[r] = lse[row];
		w->delta[r] = row_delta(t, dout, o, row, D);
		for (d = 0; d < D; d++)
			w->acc[r * D + d] = 0.0f;
	}
	for (kt = 0; kt < nkt; kt++) {
		int k0 = kt * T;

		load_rows(t, k, kbase, k0, s->seqlen_k, D, w->k, w->kt);
		load_rows(t, v, kbase, k0, s->seqlen_k, D, NULL, w->vt);
		for (r = 0; r < nq; r++) {
			long lim = last_key(s, q0 + r);
			float *acc = w->acc + r * D;

			dots(w->q + r * D, w->kt, D, w->s);
			dots(w->dout + r * D, w->vt, D, w->dp);
			for (c = 0; c < T; c++) {
				const float *kc = w->k + c * D;
				float p, ds;

				if (!(k0 + c < s->seqlen_k && k0 + c <= lim))
					continue;
				p = expf(w->s[c] * s->scale - w->lse[r]);
				ds = p * (w->dp[c] - w->delta[r]);
				for (d = 0; d < D; d++)
					acc[d] += ds * kc[d];
			}
		}
	}
	for (r = 0; r < nq; r++) {
		long row = bh * s->seqlen_q + q0 + r;

		for (d = 0; d < D; d++)
			store(t, dq, row * D + d, w->acc[r * D + d] * s->scale);
	}
}

/*
 * Loads a key tile for dK and dV: K and V rows (zeros beyond seqlen_k, row-major
 * and transposed) and clears the tile's dK and dV accumulators.
 */
static void load_kv(enum dl_dtype t, const struct dl_attn_shape *s, struct scratch *w, long kbase, int k0,
		    const void *k, const void *v)
{
	int D = s->head_dim, r, d;

	for (r = 0; r < T; r++)
		for (d = 0; d < D; d++) {
			bool in = k0 + r < s->seqlen_k;
			float kv = in ? load(t, k, kbase + (long)(k0 + r) * D + d) : 0.0f;
			float vv = in ? load(t, v, kbase + (long)(k0 + r) * D + d) : 0.0f;

			w->k[r * D + d] = kv;
			w->kt[d * T + r] = kv;
			w->v[r * D + d] = vv;
			w->vt[d * T + r] = vv;
			w->acc[r * D + d] = 0.0f;  /* dK */
			w->acc2[r * D + d] = 0.0f; /* dV */
		}
}

/* bf16: a full tile is loaded without bounds checks; the last, partial one with them. */
static void load_kv_bf16(const struct dl_attn_shape *s, struct scratch *w, long kbase, int k0, const void *k,
			 const void *v)
{
	int D = s->head_dim, r, d;

	if (k0 + T <= s->seqlen_k) {
		for (r = 0; r < T; r++)
			for (d = 0; d < D; d++) {
				float kv = load(DL_BF16, k, kbase + (long)(k0 + r) * D + d);
				float vv = load(DL_BF16, v, kbase + (long)(k0 + r) * D + d);

				w->k[r * D + d] = kv;
				w->kt[d * T + r] = kv;
				w->v[r * D + d] = vv;
				w->vt[d * T + r] = vv;
				w->acc[r * D + d] = 0.0f;
				w->acc2[r * D + d] = 0.0f;
			}
	} else {
		for (r = 0; r < T; r++)
			for (d = 0; d < D; d++) {
				bool in = k0 + r < s->seqlen_k;
				float kv = in ? load(DL_BF16, k, kbase + (long)(k0 + r) * D + d) : 0.0f;
				float vv = in ? load(DL_BF16, v, kbase + (long)(k0 + r) * D + d) : 0.0f;

				w->k[r * D + d] = kv;
				w->kt[d * T + r] = kv;
				w->v[r * D + d] = vv;
				w->vt[d * T + r] = vv;
				w->acc[r * D + d] = 0.0f;
				w->acc2[r * D + d] = 0.0f;
			}
	}
}

/* dK and dV for one key tile: one thread per key row, over the query tiles that see it. */
static void dkdv_block(enum dl_dtype t, const struct dl_attn_shape *s, struct scratch *w, long bh, int kt,
		       const void *q, const void *k, const void *v, const void *o, const float *lse,
		       const void *dout, void *dk, void *dv)
{
	int D = s->head_dim, k0 = kt * T, nk = s->seqlen_k - k0 < T ? s->seqlen_k - k0 : T;
	long qbase = bh * s->seqlen_q * D, kbase = bh * s->seqlen_k * D, first = 0;
	int qt, r, c, d;

	scratch_poison(w);
	/* Clears the accumulators too: dK in acc, dV in acc2. */
	if (t == DL_BF16)
		load_kv_bf16(s, w, kbase, k0, k, v);
	else
		load_kv(t, s, w, kbase, k0, k, v);
	/* The first query row that sees key k0. */
	if (s->causal && k0 - (s->seqlen_k - s->seqlen_q) > 0)
		first = k0 - (s->seqlen_k - s->seqlen_q);
	for (qt = (int)(first / T); qt * T < s->seqlen_q; qt++) {
		int q0 = qt * T, nq = s->seqlen_q - q0 < T ? s->seqlen_q - q0 : T;

		load_rows(t, q, qbase, q0, s->seqlen_q, D, w->q, NULL);
		load_rows(t, dout, qbase, q0, s->seqlen_q, D, w->dout, NULL);
		for (r = 0; r < nq; r++) {
			long row = bh * s->seqlen_q + q0 + r;

			w->lse[r] = lse[row];
			w->delta[r] = row_delta(t, dout, o, row, D);
		}
		/* Each key thread runs over the tile's rows in order; here row by row, all keys at once. */
		for (r = 0; r < nq; r++) {
			long lim = last_key(s, q0 + r);
			const float *qr = w->q + r * D, *dor = w->dout + r * D;

			dots(qr, w->kt, D, w->s);
			dots(dor, w->vt, D, w->dp);
			for (c = 0; c < nk; c++) {
				float *gk = w->acc + c * D, *gv = w->acc2 + c * D, pc, dsc;

				if (k0 + c > lim)
					continue; /* key c is not visible from this row */
				pc = expf(w->s[c] * s->scale - w->lse[r]);
				dsc = pc * (w->dp[c] - w->delta[r]);
				for (d = 0; d < D; d++) {
					gv[d] += pc * dor[d];
					gk[d] += dsc * qr[d];
				}
			}
		}
	}
	for (c = 0; c < nk; c++) {
		long row = bh * s->seqlen_k + k0 + c;

		for (d = 0; d < D; d++) {
			store(t, dk, row * D + d, w->acc[c * D + d] * s->scale);
			store(t, dv, row * D + d, w->acc2[c * D + d]);
		}
	}
}

int dl_attention_bwd(enum dl_dtype dtype, const struct dl_attn_shape *s, const void *q, const void *k,
		     const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
		     void *dv)
{
	struct scratch w;
	long bh, nbh;
	int tile, rc;

	rc = check_args(dtype, s);
	if (rc)
		return rc;
	nbh = (long)s->batch * s->heads;
	if (nbh == 0)
		return 0;
	if (scratch_init(&w, s->head_dim))
		return -ENOMEM;
	for (bh = 0; bh < nbh; bh++) {
		for (tile = 0; tile * T < s->seqlen_q; tile++)
			dq_block(dtype, s, &w, bh, tile, q, k, v, o, lse, dout, dq);
		for (tile = 0; tile * T < s->seqlen_k; tile++)
			dkdv_block(dtype, s, &w, bh, tile, q, k, v, o, lse, dout, dk, dv);
	}
	free(w.base);
	return 0;
}
