/*
 * attention references on the GPU: the same float64 results and plain-program
 * errors as attention_ref.c, so that a GPU runner's trial is not bound by the
 * host CPU. A few launches and one copy back per call.
 *
 * The float64 reference sums in the host's orders too and rounds each
 * product and sum on its own (__dadd_rn, __dmul_rn, ...), one thread per
 * output element: but for CUDA's exp and log it is the host's bit for bit,
 * so that a kernel that matches the host's reference exactly still does
 * here (only the sizes of terms behind the budgets' floors sum in any
 * order). The plain programs reproduce attention_ref.c operation by
 * operation: every float operation rounded on its own (__fadd_rn,
 * __fmul_rn, ...; nvcc would otherwise contract a product and a sum into an
 * FMA), every sequential sum in exactly the order the host's runs
 * (nw_order.h), one thread per chain. Only expf and logf are CUDA's, not
 * glibc's: a plain value may differ from the host's by a rounding now and
 * then, as in the other ops.
 *
 * The launches, per (batch, head) of Q [sq][D], K, V [sk][D]:
 *   scores:  16 x 16 tiles of (query, key): S = Q K^T in float64 and the plain
 *            scores round(round(Q K^T) * scale); the backward adds dP = dO V^T
 *            (float64, and plain rounded).
 *   rows:    a block per query row: the float64 softmax (P, LSE) or, in the
 *            backward, P = exp(scale S - LSE) and dS; the plain softmax (its
 *            row sums in each order, order_of_thread()) and, in the
 *            backward, its softmax backward.
 *   outputs: a block per output row (query rows for O and dQ, key rows for dK
 *            and dV), threads over (head_dim, order and one more): each
 *            thread one plain product chain in its order, the last one the
 *            float64 sum; each element's largest plain error.
 *
 * The backward's inputs O and LSE are case data (the float64 forward rounded
 * to the dtype and to float): a trial must see the same ones whichever runner
 * runs it. The GPU computes the forward's scores S, scale * S and their
 * differences to the row's max exactly as the host does, bit for bit; from
 * there exp and log may differ by an ulp, and the roundings after them with
 * them. So each row also gets a bound on the distance between the two
 * sides' O and LSE (a forward error analysis of both, with a margin:
 * fwd_rows), and where the rounding of a
 * value to the dtype or to float could change within it, the host
 * recomputes the row exactly as attention_ref.c does
 * (attention_ref_fwd_row). That is a row or two in a thousand at f32,
 * fewer at f16 and bf16.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "attention.h"
#include "common.h"
#include "nw_device.h"
}
#include "nw_device_math.cuh"
#include "nw_order.h"

#define TILE   16  /* scores: TILE x TILE (query, key) per block */
#define TILE_X 32  /* scores: head_dim chunk staged in shared memory */
#define ROW_T  128 /* rows: threads per block */
static_assert(ROW_T % 32 == 0 && ROW_T >= 8, "order_of_thread: whole warps, a thread per order");
#define OUT_T     512   /* outputs: threads per block at most */
#define STAGE_MAX 32768 /* bytes of a row (or column) staged in shared memory, at most */

/* Unit roundoff of float64, 2^-53. */
#define U_D 1.1102230246251565e-16

/* ---- device helpers ------------------------------------------------------------------------ */

/* The bits a double stores as in dtype d (ck_store_all: to float, then to the dtype). */
__device__ static unsigned stored_bits(int d, double v)
{
	float f = __double2float_rn(v);

	if (d == NW_F16)
		return __half_as_ushort(__float2half_rn(f));
	if (d == NW_BF16)
		return __bfloat16_as_ushort(__float2bfloat16_rn(f));
	return __float_as_uint(f);
}

/* Number of keys query row i sees (attention.h: causal masks aligned to the bottom right). */
__device__ static long visible(const struct attn_dims &s, long i)
{
	long l = s.causal ? i + s.seqlen_k - s.seqlen_q + 1 : (long)s.seqlen_k;

	return l < 0 ? 0 : l > s.seqlen_k ? s.seqlen_k : l;
}

/* The plain product chain of mm_ordered(): acc += a * b in order, zero a skipped, rounded once. */
#define CHAIN(acc, a, b)                                                                                     \
	do {                                                                                                 \
		float a_ = (a);                                                                              \
		if (a_ != 0.0f)                                                                              \
			acc = fadd(acc, fmul(a_, (b)));                                                      \
	} while (0)

/* ---- scores --------------------------------------------------------------------------------- */

/*
 * One block per 16 x 16 (query, key) tile of one (batch, head), blockIdx.z:
 * S = Q K^T (float64) into S, the plain scores into Sf. BWD: dP = dO V^T
 * into dP and its plain product, rounded, into dPf. S is summed over
 * head_dim in order, as attention_ref.c's mm_nt_d() does: the same value
 * bit for bit (the products of float values are exact in float64), which
 * the backward's inputs rely on (cuda_bwd_inputs).
 */
template <bool PLAIN, bool BWD>
__global__ static void scores(int d, struct attn_dims s, const void *q, const void *k, const void *dout,
			      const void *v, double *S, float *Sf, double *dP, float *dPf)
{
	__shared__ float qs[TILE][TILE_X + 1], ks[TILE][TILE_X + 1];
	__shared__ float ds[BWD ? TILE : 1][TILE_X + 1], vs[BWD ? TILE : 1][TILE_X + 1];
	long sq = s.seqlen_q, sk = s.seqlen_k, D = s.head_dim, bh = blockIdx.z;
	long i0 = (long)blockIdx.y * TILE, j0 = (long)blockIdx.x * TILE;
	long i = i0 + threadIdx.y, j = j0 + threadIdx.x, x0, c, t;
	double sd = 0.0, dpd = 0.0;
	float sf = 0.0f, dpf = 0.0f;

	for (x0 = 0; x0 < D; x0 += TILE_X) {
		long w = D - x0 < TILE_X ? D - x0 : TILE_X;

		for (t = threadIdx.y * TILE + threadIdx.x; t < TILE * TILE_X; t += TILE * TILE) {
			long r = t / TILE_X, x = t % TILE_X;
			bool qin = i0 + r < sq && x < w, kin = j0 + r < sk && x < w;

			qs[r][x] = qin ? load(d, q, (bh * sq + i0 + r) * D + x0 + x) : 0.0f;
			ks[r][x] = kin ? load(d, k, (bh * sk + j0 + r) * D + x0 + x) : 0.0f;
			if (BWD) {
				ds[r][x] = qin ? load(d, dout, (bh * sq + i0 + r) * D + x0 + x) : 0.0f;
				vs[r][x] = kin ? load(d, v, (bh * sk + j0 + r) * D + x0 + x) : 0.0f;
			}
		}
		__syncthreads();
		for (c = 0; c < w; c++) {
			float a = qs[threadIdx.y][c], b = ks[threadIdx.x][c];

			sd = __dadd_rn(sd, __dmul_rn((double)a, (double)b));
			if (PLAIN)
				sf = fadd(sf, fmul(a, b));
			if (BWD) {
				float a2 = ds[threadIdx.y][c], b2 = vs[threadIdx.x][c];

				dpd = __dadd_rn(dpd, __dmul_rn((double)a2, (double)b2));
				dpf = fadd(dpf, fmul(a2, b2));
			}
		}
		__syncthreads();
	}
	if (i < sq && j < sk) {
		long at = (bh * sq + i) * sk + j;

		S[at] = sd;
		if (PLAIN)
			Sf[at] = round_to(d, fmul(round_to(d, sf), s.scale));
		if (BWD) {
			dP[at] = dpd;
			dPf[at] = round_to(d, dpf);
		}
	}
}

/* ---- the forward ------------------------------------------------------------------------------ */

/*
 * Per query row of the forward, what the outputs need besides the matrices,
 * and what comes back per row.
 */
struct fwd_row_out {
	double *lse, *lse_err; /* [nlse] each (lse_err: not in BOUND) */
	double *flag;          /* BOUND: 1 where the host must recompute the row */
	double *coef;          /* BOUND: per row, the factor of O's bound (times sum_j P_j |v_jx|) */
};

/*
 * One block per query row (blockIdx.x) of one (batch, head) (blockIdx.y):
 * the float64 softmax (P into P, 0 where masked) and LSE; the plain softmax
 * of each order (its P into Pf + o * n2) and the plain LSE's error. Sf is
 * overwritten with the plain exp'd values. BOUND (no plain programs): the
 * bound of the distance of the row's LSE and O to the host's.
 */
template <bool BOUND>
__global__ static void fwd_rows(int d, struct attn_dims s, int orders, bool stage, const double *S, float *Sf,
				double *P, float *Pf, struct fwd_row_out out)
{
	extern __shared__ double row_p[];
	__shared__ float sums[NW_PLAIN_MAX];
	__shared__ double l_shared;
	long sq = s.seqlen_q, sk = s.seqlen_k, i = blockIdx.x, bh = blockIdx.y;
	long row = bh * sq + i, off = row * sk, n2 = (long)gridDim.y * sq * sk, nv = visible(s, i), j;
	double sc = (double)s.scale, m = -INFINITY, l = 0.0, lse, *p = stage ? row_p : P + off;
	float mf = -INFINITY, *e_stage = (float *)(row_p + sk);
	int tied = 1; /* every y_j 0 and its p_j exactly 1 */

	/*
	 * As the host's ref_fwd_row(): t_j = scale * S_j and t_j - m rounded on
	 * their own (with S the same, so are they and the max), l summed in
	 * order, each P_j = p_j / l.
	 */
	for (j = threadIdx.x; j < nv; j += blockDim.x)
		m = fmax(m, __dmul_rn(sc, S[off + j]));
	m = block_reduce<double, true>(m);
	for (j = threadIdx.x; j < sk; j += blockDim.x) {
		double y = j < nv ? __dsub_rn(__dmul_rn(sc, S[off + j]), m) : 0.0;

		p[j] = j < nv ? exp(y) : 0.0;
		tied &= j >= nv || (y == 0.0 && p[j] == 1.0);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		for (j = 0; j < nv; j++)
			l = __dadd_rn(l, p[j]);
		l_shared = l;
	}
	__syncthreads();
	l = l_shared;
	for (j = threadIdx.x; j < sk; j += blockDim.x)
		P[off + j] = j < nv ? __ddiv_rn(p[j], l) : 0.0;
	lse = nv ? __dadd_rn(m, log(l)) : -INFINITY;

	if constexpr (BOUND) {
		/*
		 * The host computes the same y_j = t_j - m; from there each side
		 * errs, against exact arithmetic on those y_j (u = 2^-53; exp and
		 * log within an ulp, 2u): exp by 2u, the sum l by 2u + gamma_nv
		 * relatively, P_j = p_j / l by 5u + gamma_nv, and O_x = sum_j P_j
		 * v_jx by (5u + 2 gamma_nv) sum_j P_j |v_jx|; LSE = m + log(l) by
		 * 2u + gamma_nv + 2u log(l) + u |LSE|. The two sides differ by at
		 * most twice that: the margins are 2.5 times it (the rest covers
		 * second order and the rounding of the bounds themselves). Where
		 * every y_j is 0 (tied scores: zero queries, equal keys) and every
		 * p_j = exp(0) exactly 1 (so on the host too), O comes out the same
		 * bit for bit: no margin (O is then often a tie of the dtype's
		 * rounding).
		 */
		double gn = nv * U_D / (1.0 - nv * U_D), coef, blse;

		tied = __syncthreads_and(tied);
		coef = tied ? 0.0 : 2.5 * (5.0 * U_D + 2.0 * gn);
		blse = 2.5 * (2.0 * U_D + gn + 2.0 * U_D * log(l) + U_D * fabs(lse)) + 1e-300;

		if (threadIdx.x == 0) {
			bool redo = false;

			if (nv > 0)
				/* not finite: let the host do it */
				redo = !isfinite(lse) ||
				       stored_bits(NW_F32, lse - blse) != stored_bits(NW_F32, lse + blse);
			out.lse[row] = lse;
			out.flag[row] = redo ? 1.0 : 0.0;
			out.coef[row] = nv > 0 ? coef : 0.0;
		}
	} else {
		/* The plain softmax: float max (exact in any order), exp'd values, a row sum per order. */
		for (j = threadIdx.x; j < nv; j += blockDim.x)
			mf = fmaxf(mf, Sf[off + j]);
		mf = block_reduce<float, true>(mf);
		{
			float *e = stage ? e_stage : Sf + off;
			int o;

			for (j = threadIdx.x; j < nv; j += blockDim.x)
				e[j] = expf(fsub(Sf[off + j], mf));
			__syncthreads();
			o = order_of_thread(orders);
			if (o >= 0) {
				float sum = 0.0f;

				walk(o, nv, [&](long jj) { sum = fadd(sum, e[jj]); });
				sums[o] = sum;
			}
			__syncthreads();
			for (o = 0; o < orders; o++)
				for (j = threadIdx.x; j < sk; j += blockDim.x)
					Pf[o * n2 + off + j] =
					    j < nv ? round_to(d, fdiv(e[j], sums[o])) : 0.0f;
			if (threadIdx.x == 0) {
				double err = 0.0;

				/* softmax of nothing is NaN in the plain program: left out of the budget */
				for (o = 0; nv > 0 && o < orders; o++) {
					double p = (double)fadd(mf, logf(sums[o]));

					if (isfinite(p) && fabs(p - lse) > err)
						err = fabs(p - lse);
				}
				out.lse[row] = lse;
				out.lse_err[row] = err;
			}
		}
	}
}

/*
 * One block per query row (blockIdx.x) of one (batch, head) (blockIdx.y),
 * threads (x over head_dim, y over the orders and one more): thread y <
 * orders the plain O of order y, the last one O = P V in float64, summed as
 * the host does; each element's largest plain error. BOUND (no plain
 * programs): O, and whether its rounding to the dtype may differ on the
 * host (flag).
 */
template <bool BOUND>
__global__ static void __launch_bounds__(OUT_T)
    fwd_out(int d, struct attn_dims s, int orders, bool stage, const double *P, const float *Pf,
	    const void *v, double *o_ref, double *o_err, struct fwd_row_out rows)
{
	extern __shared__ double smem[];
	long sq = s.seqlen_q, sk = s.seqlen_k, D = s.head_dim, i = blockIdx.x, bh = blockIdx.y;
	long row = bh * sq + i, off = row * sk, n2 = (long)gridDim.y * sq * sk, nv = visible(s, i), x0, j;
	int tx = threadIdx.x, ty = threadIdx.y, DX = blockDim.x, OY = blockDim.y, t = ty * DX + tx, o;
	const double *p = P + off;
	const float *pf = BOUND ? NULL : Pf + off;
	double *st = smem;
	float *redp = (float *)(st + (stage ? sk : 0)), *stf = redp + orders * DX;
	int redo = 0;

	if (stage) {
		for (j = t; j < sk; j += OY * DX)
			st[j] = P[off + j];
		for (o = 0; o < orders; o++)
			for (j = t; j < sk; j += OY * DX)
				stf[o * sk + j] = Pf[o * n2 + off + j];
		__syncthreads();
		p = st;
		pf = stf;
	}
	for (x0 = 0; x0 < D; x0 += DX) {
		long x = x0 + tx, vo = bh * sk * D + x;
		double ref = 0.0, w = 0.0;
		float accf = 0.0f;

		if (x < D && ty < orders) {
			const float *pr = stage ? pf + ty * sk : pf + ty * n2;

			walk(ty, sk, [&](long jj) { CHAIN(accf, pr[jj], load(d, v, vo + jj * D)); });
			redp[ty * DX + tx] = round_to(d, accf);
		} else if (x < D) {
			for (j = 0; j < nv; j++) {
				double vj = (double)load(d, v, vo + j * D);

				ref = __dadd_rn(ref, __dmul_rn(p[j], vj));
				if (BOUND)
					w += p[j] * fabs(vj);
			}
		}
		__syncthreads();
		if (ty == OY - 1 && x < D) {
			double err = 0.0;
			int y;

			if (BOUND) {
				/* 1e-300: underflowed terms; a row that sees nothing is 0 on both sides */
				double margin = nv > 0 ? rows.coef[row] * w + 1e-300 : 0.0;

				redo |= stored_bits(d, ref - margin) != stored_bits(d, ref + margin);
			} else {
				/* the plain O of a row that sees nothing is NaN: left out of the budget */
				for (y = 0; nv > 0 && y < orders; y++) {
					double pl = (double)redp[y * DX + tx];

					if (isfinite(pl) && fabs(pl - ref) > err)
						err = fabs(pl - ref);
				}
				o_err[row * D + x] = err;
			}
			o_ref[row * D + x] = ref;
		}
		__syncthreads();
	}
	if (BOUND) {
		redo = __syncthreads_or(redo);
		if (t == 0 && redo)
			rows.flag[row] = 1.0;
	}
}

/* ---- host side -------------------------------------------------------------------------------- */

/* The scores' grid: a block per 16 x 16 tile of each (batch, head). */
static dim3 tiles(long sq, long sk, long nbh)
{
	return dim3((unsigned)((sk + TILE - 1) / TILE), (unsigned)((sq + TILE - 1) / TILE), (unsigned)nbh);
}

static int orders_of(const struct attn_ref_in *in)
{
	return in->orders < 1 ? 1 : in->orders > NW_PLAIN_MAX ? NW_PLAIN_MAX : in->orders;
}

/* Threads of an output block: x over head_dim (all of it if it fits), y over the orders and one more. */
static dim3 out_block(long D, int orders)
{
	long dx = OUT_T / (orders + 1);

	return dim3((unsigned)(D < dx ? D : dx), (unsigned)(orders + 1));
}

/* Shared memory of a row kernel: its row staged (doubles and floats), if it fits. */
static size_t row_smem(long sk, size_t per_elem, bool *stage)
{
	*stage = (size_t)sk * per_elem <= STAGE_MAX;
	return *stage ? (size_t)sk * per_elem : 0;
}

/* Shared memory of fwd_out: the plain results, and the staged row (P, each order's Pf) if it fits. */
static size_t fwd_out_smem(dim3 b, long sk, int orders, bool *stage)
{
	size_t red = (size_t)b.x * orders * sizeof(float);
	size_t row = (size_t)sk * (sizeof(double) + sizeof(float) * orders);

	*stage = red + row <= STAGE_MAX;
	return red + (*stage ? row : 0);
}

static int cuda_fwd(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in, double **res)
{
	long nbh = (long)s->batch * s->heads, sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim;
	long nq = nbh * sq * D, nl = nbh * sq, n2 = nbh * sq * sk;
	int orders = orders_of(in), rc;
	double *dbuf = NULL, *S, *P, *out;
	float *fbuf = NULL, *Sf, *Pf;
	struct fwd_row_out rows;
	bool stage_r, stage_o;
	size_t rsmem = row_smem(sk, sizeof(double) + sizeof(float), &stage_r);
	dim3 ob = out_block(D, orders);
	size_t osmem = fwd_out_smem(ob, sk, orders, &stage_o);

	/* o[nq], o_err[nq], lse[nl], lse_err[nl], left here to be compared; never empty (a budget still). */
	*res = NULL;
	rc = nw_dev_alloc((void **)res, (size_t)(2 * nq + 2 * nl + 1) * sizeof(double));
	if (rc || nl == 0)
		return rc ? -EIO : 0;
	rc = nw_dev_alloc((void **)&dbuf, (size_t)(2 * n2 + 1) * sizeof(double));
	if (!rc)
		rc = nw_dev_alloc((void **)&fbuf, (size_t)n2 * (1 + orders) * sizeof(float));
	if (rc)
		goto out;
	S = dbuf;
	P = S + n2;
	out = *res;
	Sf = fbuf;
	Pf = Sf + n2;
	rows.lse = out + 2 * nq;
	rows.lse_err = rows.lse + nl;
	rows.flag = rows.coef = NULL;
	if (sk > 0)
		scores<true, false><<<tiles(sq, sk, nbh), dim3(TILE, TILE)>>>(d, *s, in->q_dev, in->k_dev,
									      NULL, NULL, S, Sf, NULL, NULL);
	fwd_rows<false>
	    <<<dim3((unsigned)sq, (unsigned)nbh), ROW_T, rsmem>>>(d, *s, orders, stage_r, S, Sf, P, Pf, rows);
	if (D > 0)
		fwd_out<false><<<dim3((unsigned)sq, (unsigned)nbh), ob, osmem>>>(
		    d, *s, orders, stage_o, P, Pf, in->v_dev, out, out + nq, rows);
	rc = nw_dev_launched("attention reference");
out:
	nw_dev_free(fbuf);
	nw_dev_free(dbuf);
	return rc ? -EIO : 0;
}

/*
 * The backward's inputs: the float64 forward on the GPU with, per row, a
 * bound of its distance to the host's; rows whose rounding that distance
 * could change are recomputed on the host. Then stored as the host stores
 * them.
 */
static int cuda_bwd_inputs(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in,
			   void *o_s, double *o, float *lse)
{
	long nbh = (long)s->batch * s->heads, sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim;
	long nq = nbh * sq * D, nl = nbh * sq, n2 = nbh * sq * sk, r;
	double *dbuf = NULL, *host = NULL, *scratch = NULL, *S, *P, *out;
	struct fwd_row_out rows;
	dim3 ob = out_block(D, 0);
	bool stage_r, stage_o;
	size_t rsmem = row_smem(sk, sizeof(double), &stage_r), osmem = fwd_out_smem(ob, sk, 0, &stage_o);
	int rc;

	if (nl == 0)
		return 0;
	host = (double *)malloc((size_t)(nq + 3 * nl) * sizeof(double));
	scratch = (double *)malloc((size_t)(D + 2) * (sk > 0 ? sk : 1) * sizeof(double));
	if (!host || !scratch) {
		free(host);
		free(scratch);
		return -ENOMEM;
	}
	rc = nw_dev_alloc((void **)&dbuf, (size_t)(2 * n2 + nq + 3 * nl) * sizeof(double));
	if (rc)
		goto out;
	S = dbuf;
	P = S + n2;
	out = P + n2; /* o[nq], lse[nl], flag[nl]: copied back; coef[nl] */
	rows.lse = out + nq;
	rows.lse_err = NULL;
	rows.flag = rows.lse + nl;
	rows.coef = rows.flag + nl;
	if (sk > 0)
		scores<false, false><<<tiles(sq, sk, nbh), dim3(TILE, TILE)>>>(
		    d, *s, in->q_dev, in->k_dev, NULL, NULL, S, NULL, NULL, NULL);
	fwd_rows<true>
	    <<<dim3((unsigned)sq, (unsigned)nbh), ROW_T, rsmem>>>(d, *s, 0, stage_r, S, NULL, P, NULL, rows);
	if (D > 0)
		fwd_out<true><<<dim3((unsigned)sq, (unsigned)nbh), ob, osmem>>>(d, *s, 0, stage_o, P, NULL,
										in->v_dev, out, NULL, rows);
	rc = nw_dev_launched("attention reference");
	if (!rc)
		rc = nw_dev_download(host, out, (size_t)(nq + 2 * nl) * sizeof(double));
	if (rc)
		goto out;
	memcpy(o, host, (size_t)nq * sizeof(double));
	for (r = 0; r < nl; r++) {
		double l = host[nq + r];

		if (host[nq + nl + r] != 0.0) {
			long bh = r / sq, i = r % sq;

			attention_ref_fwd_row(s, in->q + bh * sq * D, in->k + bh * sk * D,
					      in->v + bh * sk * D, i, scratch, o + r * D, &l);
		}
		lse[r] = (float)l;
	}
	ck_store_all(d, o_s, o, nq);
out:
	nw_dev_free(dbuf);
	free(host);
	free(scratch);
	return rc ? -EIO : 0;
}

/* ---- the backward ----------------------------------------------------------------------------- */

/*
 * One block per query row (blockIdx.x) of one (batch, head) (blockIdx.y).
 * Float64: P = exp(scale S - LSE) over S (0 where masked), dS = P (dP -
 * delta) over dP, and for the floors of the budgets each term's size
 * (DSA) and P's (PG), and the row's sum of DSA. Plain: the forward's P of
 * order 0 (Pf; Sf is overwritten with its exp'd values), the softmax
 * backward, times scale, over dPf.
 */
__global__ static void bwd_rows(int d, struct attn_dims s, bool stage, double *S, double *dP,
				const void *dout, const void *o, const float *lse, double *DSA, double *PG,
				float *Sf, float *dPf, float *Pf, double *rowabs)
{
	extern __shared__ float row_stage[];
	__shared__ float sum_dot;
	__shared__ double delta_shared;
	long sq = s.seqlen_q, sk = s.seqlen_k, D = s.head_dim, i = blockIdx.x, bh = blockIdx.y;
	long row = bh * sq + i, off = row * sk, nv = visible(s, i), j, x;
	double sc = (double)s.scale, L = (double)lse[row], delta = 0.0, ra = 0.0;
	float mf = -INFINITY, *e = stage ? row_stage : Sf + off, *dpf = stage ? row_stage + sk : dPf + off;

	/* delta, p and dS as the host's ref_bwd_bh() computes them (delta summed in order). */
	if (threadIdx.x == 0) {
		for (x = 0; x < D; x++)
			delta = __dadd_rn(delta, __dmul_rn((double)load(d, dout, row * D + x),
							   (double)load(d, o, row * D + x)));
		delta_shared = delta;
	}
	__syncthreads();
	delta = delta_shared;
	for (j = threadIdx.x; j < sk; j += blockDim.x) {
		double p = 0.0, ds = 0.0, dsa = 0.0, pg = 0.0;

		if (j < nv) {
			double t = __dmul_rn(sc, S[off + j]), dp = dP[off + j],
			       grow = 1.0 + fabs(t) + fabs(L);

			p = exp(__dsub_rn(t, L));
			ds = __dmul_rn(p, __dsub_rn(dp, delta));
			dsa = p * (fabs(dp) + fabs(delta)) * grow;
			pg = p * grow;
		}
		S[off + j] = p;
		dP[off + j] = ds;
		DSA[off + j] = dsa;
		PG[off + j] = pg;
		ra += dsa;
	}
	ra = block_reduce<double, false>(ra);
	if (threadIdx.x == 0)
		rowabs[row] = ra;

	/* The plain forward's P (order 0), then its softmax backward. */
	for (j = threadIdx.x; j < nv; j += blockDim.x)
		mf = fmaxf(mf, Sf[off + j]);
	mf = block_reduce<float, true>(mf);
	for (j = threadIdx.x; j < sk; j += blockDim.x) {
		if (j < nv)
			e[j] = expf(fsub(Sf[off + j], mf));
		if (stage)
			dpf[j] = dPf[off + j];
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		float sum = 0.0f;

		for (j = 0; j < nv; j++)
			sum = fadd(sum, e[j]);
		sum_dot = sum;
	}
	__syncthreads();
	for (j = threadIdx.x; j < sk; j += blockDim.x) {
		float pf = j < nv ? round_to(d, fdiv(e[j], sum_dot)) : 0.0f;

		e[j] = pf;
		Pf[off + j] = pf;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		float dot = 0.0f;

		for (j = 0; j < sk; j++)
			dot = fadd(dot, fmul(e[j], dpf[j]));
		sum_dot = dot;
	}
	__syncthreads();
	for (j = threadIdx.x; j < sk; j += blockDim.x) {
		float ds = round_to(d, fmul(e[j], fsub(dpf[j], sum_dot)));

		dPf[off + j] = round_to(d, fmul(ds, s.scale));
	}
}

/*
 * One block per query row (blockIdx.x) of one (batch, head) (blockIdx.y),
 * threads (x over head_dim, y over the orders and one more): thread y <
 * orders the plain dQ of order y, from dSf, the last one dQ = scale dS K in
 * float64, summed as the host does; each element's largest plain error.
 */
__global__ static void __launch_bounds__(OUT_T)
    bwd_dq(int d, struct attn_dims s, int orders, bool stage, const double *dS, const float *dSf,
	   const void *k, double *dq_ref, double *dq_err)
{
	extern __shared__ double smem[];
	long sq = s.seqlen_q, sk = s.seqlen_k, D = s.head_dim, i = blockIdx.x, bh = blockIdx.y;
	long row = bh * sq + i, off = row * sk, nv = visible(s, i), x0, j;
	int tx = threadIdx.x, ty = threadIdx.y, DX = blockDim.x, OY = blockDim.y, t = ty * DX + tx;
	double *st = smem;
	float *redp = (float *)(st + (stage ? sk : 0)), *stf = redp + orders * DX;
	const double *ds = dS + off;
	const float *dsf = dSf + off;

	if (stage) {
		for (j = t; j < sk; j += OY * DX) {
			st[j] = dS[off + j];
			stf[j] = dSf[off + j];
		}
		__syncthreads();
		ds = st;
		dsf = stf;
	}
	for (x0 = 0; x0 < D; x0 += DX) {
		long x = x0 + tx, ko = bh * sk * D + x;
		double ref = 0.0;
		float accf = 0.0f;

		if (x < D && ty < orders) {
			walk(ty, sk, [&](long jj) { CHAIN(accf, dsf[jj], load(d, k, ko + jj * D)); });
			redp[ty * DX + tx] = round_to(d, accf);
		} else if (x < D) {
			for (j = 0; j < nv; j++)
				ref = __dadd_rn(ref, __dmul_rn(ds[j], (double)load(d, k, ko + j * D)));
			ref = __dmul_rn(ref, (double)s.scale);
		}
		__syncthreads();
		if (ty == OY - 1 && x < D) {
			double err = 0.0;
			int y;

			/* the plain dQ of a row that sees nothing is NaN: left out of the budget */
			for (y = 0; nv > 0 && y < orders; y++) {
				double pl = (double)redp[y * DX + tx];

				if (isfinite(pl) && fabs(pl - ref) > err)
					err = fabs(pl - ref);
			}
			dq_ref[row * D + x] = ref;
			dq_err[row * D + x] = err;
		}
		__syncthreads();
	}
}

/*
 * One block per key row (blockIdx.x) of one (batch, head) (blockIdx.y),
 * threads (x over head_dim, y over the orders and one more): thread y <
 * orders the plain dK, dV of order y, the last one dK = scale dS^T Q and
 * dV = P^T dO in float64, summed as the host does; each element's largest
 * plain error; the key's column sums of DSA and PG.
 */
__global__ static void __launch_bounds__(OUT_T)
    bwd_dkdv(int d, struct attn_dims s, int orders, bool stage, const double *P, const double *dS,
	     const double *DSA, const double *PG, const float *Pf, const float *dSf, const void *q,
	     const void *dout, double *out, double *col)
{
	extern __shared__ double smem[];
	long sq = s.seqlen_q, sk = s.seqlen_k, D = s.head_dim, j = blockIdx.x, bh = blockIdx.y;
	long nk = (long)gridDim.y * sk * D, key = bh * sk + j, base = bh * sq * sk + j, x0, i;
	int tx = threadIdx.x, ty = threadIdx.y, DX = blockDim.x, OY = blockDim.y, t = ty * DX + tx;
	double *red = smem, *st = red + 2 * OY * DX, ca = 0.0, cp = 0.0;
	float *redp = (float *)(st + (stage ? 2 * sq : 0)), *stf = redp + 2 * orders * DX;
	/* column j of the [sq][sk] matrices: element i at i * cs */
	const double *p = P + base, *ds = dS + base;
	const float *pf = Pf + base, *dsf = dSf + base;
	long cs = sk;

	/* The column sums (any order: float64 sizes of terms). */
	for (i = t; i < sq; i += OY * DX) {
		ca += DSA[base + i * sk];
		cp += PG[base + i * sk];
	}
	red[t] = ca;
	red[OY * DX + t] = cp;
	__syncthreads();
	if (t == 0) {
		for (i = 1; i < OY * DX; i++) {
			ca += red[i];
			cp += red[OY * DX + i];
		}
		col[key] = ca;
		col[gridDim.y * sk + key] = cp;
	}
	if (stage) {
		for (i = t; i < sq; i += OY * DX) {
			st[i] = P[base + i * sk];
			st[sq + i] = dS[base + i * sk];
			stf[i] = Pf[base + i * sk];
			stf[sq + i] = dSf[base + i * sk];
		}
		p = st;
		ds = st + sq;
		pf = stf;
		dsf = stf + sq;
		cs = 1;
	}
	__syncthreads();
	for (x0 = 0; x0 < D; x0 += DX) {
		long x = x0 + tx, qo = bh * sq * D + x;
		double rk = 0.0, rv = 0.0;
		float accvf = 0.0f, acckf = 0.0f;

		if (x < D && ty < orders) {
			walk(ty, sq, [&](long ii) {
				CHAIN(accvf, pf[ii * cs], load(d, dout, qo + ii * D));
				CHAIN(acckf, dsf[ii * cs], load(d, q, qo + ii * D));
			});
			redp[ty * DX + tx] = round_to(d, acckf);
			redp[(orders + ty) * DX + tx] = round_to(d, accvf);
		} else if (x < D) {
			/* the rows that see key j, in order */
			for (i = 0; i < sq; i++)
				if (j < visible(s, i)) {
					rk = __dadd_rn(rk,
						       __dmul_rn(ds[i * cs], (double)load(d, q, qo + i * D)));
					rv = __dadd_rn(
					    rv, __dmul_rn(p[i * cs], (double)load(d, dout, qo + i * D)));
				}
			rk = __dmul_rn(rk, (double)s.scale);
		}
		__syncthreads();
		if (ty == OY - 1 && x < D) {
			int y, g;

			for (g = 0; g < 2; g++) {
				double ref = g ? rv : rk, err = 0.0;

				for (y = 0; y < orders; y++) {
					double pl = (double)redp[(g * orders + y) * DX + tx];

					if (isfinite(pl) && fabs(pl - ref) > err)
						err = fabs(pl - ref);
				}
				/* out: dk[nk], dv[nk], dk_err[nk], dv_err[nk] */
				out[g * nk + key * D + x] = ref;
				out[(2 + g) * nk + key * D + x] = err;
			}
		}
		__syncthreads();
	}
}

static double host_max_abs(const double *x, long n)
{
	double m = 0.0;
	long i;

	for (i = 0; i < n; i++)
		m = fmax(m, fabs(x[i]));
	return m;
}

static int cuda_bwd(enum nw_dtype d, const struct attn_dims *s, const struct attn_ref_in *in,
		    double *const ref[3], double *const err[3], double mag[3])
{
	long nbh = (long)s->batch * s->heads, sq = s->seqlen_q, sk = s->seqlen_k, D = s->head_dim;
	long nq = nbh * sq * D, nk = nbh * sk * D, nl = nbh * sq, n2 = nbh * sq * sk, nc = nbh * sk, bh, r;
	long nout = 2 * nq + 4 * nk + nl + 2 * nc;
	int orders = orders_of(in), rc;
	double *dbuf = NULL, *host = NULL, *S, *dP, *DSA, *PG, *out, *rowabs, *col, sc = (double)s->scale;
	float *fbuf = NULL, *Sf, *dPf, *Pf;
	bool stage_r, stage_q, stage_k;
	size_t rsmem = row_smem(sk, 2 * sizeof(float), &stage_r);
	dim3 ob = out_block(D, orders);
	/* bwd_dq: the plain results and the staged row (dS, dSf) */
	size_t qred = (size_t)ob.x * orders * sizeof(float),
	       qrow = (size_t)sk * (sizeof(double) + sizeof(float));
	/* bwd_dkdv: the column sums, the plain results and the staged column (P, dS, Pf, dSf) */
	size_t krd = (size_t)ob.x * ob.y * 2 * sizeof(double) + 2 * qred,
	       kcol = 2 * (size_t)sq * (sizeof(double) + sizeof(float));

	mag[0] = mag[1] = mag[2] = 0.0;
	if (nout == 0)
		return 0;
	stage_q = qred + qrow <= STAGE_MAX;
	stage_k = krd + kcol <= STAGE_MAX;
	host = (double *)malloc((size_t)nout * sizeof(double));
	if (!host)
		return -ENOMEM;
	rc = nw_dev_alloc((void **)&dbuf, (size_t)(4 * n2 + nout) * sizeof(double));
	if (!rc)
		rc = nw_dev_alloc((void **)&fbuf, (size_t)(3 * n2) * sizeof(float));
	if (rc)
		goto out;
	S = dbuf;    /* P after bwd_rows */
	dP = S + n2; /* dS after bwd_rows */
	DSA = dP + n2;
	PG = DSA + n2;
	out = PG + n2; /* dq[nq], dk[nk], dv[nk], dk_err[nk], dv_err[nk], dq_err[nq], rowabs[nl], col[2 nc] */
	rowabs = out + 2 * nq + 4 * nk;
	col = rowabs + nl;
	Sf = fbuf;
	dPf = Sf + n2; /* dSf after bwd_rows */
	Pf = dPf + n2;
	if (sq > 0 && sk > 0)
		scores<true, true><<<tiles(sq, sk, nbh), dim3(TILE, TILE)>>>(
		    d, *s, in->q_dev, in->k_dev, in->dout_dev, in->v_dev, S, Sf, dP, dPf);
	if (sq > 0)
		bwd_rows<<<dim3((unsigned)sq, (unsigned)nbh), ROW_T, rsmem>>>(
		    d, *s, stage_r, S, dP, in->dout_dev, in->o_dev, in->lse_dev, DSA, PG, Sf, dPf, Pf,
		    rowabs);
	if (sq > 0 && D > 0)
		bwd_dq<<<dim3((unsigned)sq, (unsigned)nbh), ob, qred + (stage_q ? qrow : 0)>>>(
		    d, *s, orders, stage_q, dP, dPf, in->k_dev, out, out + nq + 4 * nk);
	if (sk > 0 && D > 0)
		bwd_dkdv<<<dim3((unsigned)sk, (unsigned)nbh), ob, krd + (stage_k ? kcol : 0)>>>(
		    d, *s, orders, stage_k, S, dP, DSA, PG, Pf, dPf, in->q_dev, in->dout_dev, out + nq, col);
	rc = nw_dev_launched("attention reference");
	if (!rc)
		rc = nw_dev_download(host, out, (size_t)nout * sizeof(double));
	if (rc)
		goto out;
	memcpy(ref[0], host, (size_t)nq * sizeof(double));
	memcpy(ref[1], host + nq, (size_t)nk * sizeof(double));
	memcpy(ref[2], host + nq + nk, (size_t)nk * sizeof(double));
	memcpy(err[1], host + nq + 2 * nk, (size_t)nk * sizeof(double));
	memcpy(err[2], host + nq + 3 * nk, (size_t)nk * sizeof(double));
	memcpy(err[0], host + nq + 4 * nk, (size_t)nq * sizeof(double));
	/* The sizes of the terms, as ref_bwd_bh takes them. */
	rowabs = host + 2 * nq + 4 * nk;
	col = rowabs + nl;
	for (bh = 0; bh < nbh; bh++) {
		double mq = host_max_abs(in->q + bh * sq * D, sq * D),
		       mk = host_max_abs(in->k + bh * sk * D, sk * D),
		       mdo = host_max_abs(in->dout + bh * sq * D, sq * D);

		for (r = 0; r < sq; r++)
			mag[0] = fmax(mag[0], sc * rowabs[bh * sq + r] * mk);
		for (r = 0; r < sk; r++) {
			mag[1] = fmax(mag[1], sc * col[bh * sk + r] * mq);
			mag[2] = fmax(mag[2], col[nc + bh * sk + r] * mdo);
		}
	}
out:
	nw_dev_free(fbuf);
	nw_dev_free(dbuf);
	free(host);
	return rc ? -EIO : 0;
}

const struct attention_refs attention_refs_cuda = {
    .where = "cuda",
    .bwd_inputs = cuda_bwd_inputs,
    .bwd = cuda_bwd,
    .fwd_dev = cuda_fwd,
};
