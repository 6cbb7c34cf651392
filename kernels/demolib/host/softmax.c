/*
 * Softmax forward and backward, host build. The structure follows the CUDA
 * build: one row at a time, a generic path, and a 4-wide path for long rows
 * whose four lanes stand for the four elements a CUDA thread loads at once.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "../demolib.h"
#include "convert.h"

static int check_args(enum dl_dtype dtype, int rows, int cols)
{
	if (dtype != DL_F32 && dtype != DL_F16 && dtype != DL_BF16)
		return -EINVAL;
	if (rows < 0 || cols < 0)
		return -EINVAL;
	return 0;
}

/* Rows longer than DL_SOFTMAX_VEC_MIN_COLS take the 4-wide path. */
static bool use_vec4(int cols)
{
	return cols > DL_SOFTMAX_VEC_MIN_COLS;
}

static void fwd_row(enum dl_dtype t, const void *x, void *y, long off, int cols)
{
	float m = -INFINITY, s = 0.0f, inv;
	int i;

	for (i = 0; i < cols; i++)
		m = fmaxf(m, load(t, x, off + i));
	for (i = 0; i < cols; i++)
		s += expf(load(t, x, off + i) - m);
	inv = 1.0f / s;
	for (i = 0; i < cols; i++)
		store(t, y, off + i, expf(load(t, x, off + i) - m) * inv);
}

/* Four lanes over whole quads, then the tail of cols % 4 elements into lane 0. */
static void fwd_row_vec4(enum dl_dtype t, const void *x, void *y, long off, int cols)
{
	float m4[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
	float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	int nq = cols / 4, q, l, i;
	float m, s, inv;

	for (q = 0; q < nq; q++)
		for (l = 0; l < 4; l++)
			m4[l] = fmaxf(m4[l], load(t, x, off + 4 * q + l));
	for (i = 4 * nq; i < cols; i++)
		m4[0] = fmaxf(m4[0], load(t, x, off + i));
	m = fmaxf(fmaxf(m4[0], m4[1]), fmaxf(m4[2], m4[3]));

	for (q = 0; q < nq; q++)
		for (l = 0; l < 4; l++)
			s4[l] += expf(load(t, x, off + 4 * q + l) - m);
	for (i = 4 * nq; i < cols; i++)
		s4[0] += expf(load(t, x, off + i) - m);
	s = (s4[0] + s4[1]) + (s4[2] + s4[3]);

	inv = 1.0f / s;
	for (q = 0; q < nq; q++)
		for (l = 0; l < 4; l++)
			store(t, y, off + 4 * q + l, expf(load(t, x, off + 4 * q + l) - m) * inv);
	for (i = 4 * nq; i < cols; i++)
		store(t, y, off + i, expf(load(t, x, off + i) - m) * inv);
}

int dl_softmax_fwd(enum dl_dtype dtype, const void *x, void *y, int rows, int cols)
{
	int r, rc;

	rc = check_args(dtype, rows, cols);
	if (rc)
		return rc;
	for (r = 0; r < rows; r++) {
		long off = (long)r * cols;

		if (use_vec4(cols))
			fwd_row_vec4(dtype, x, y, off, cols);
		else
			fwd_row(dtype, x, y, off, cols);
	}
	return 0;
}

static void bwd_row(enum dl_dtype t, const void *y, const void *dy, void *dx, long off, int cols)
{
	float dot = 0.0f;
	int i;

	for (i = 0; i < cols; i++)
		dot += load(t, dy, off + i) * load(t, y, off + i);
	for (i = 0; i < cols; i++)
		store(t, dx, off + i, load(t, y, off + i) * (load(t, dy, off + i) - dot));
}

static void bwd_row_vec4(enum dl_dtype t, const void *y, const void *dy, void *dx, long off, int cols)
{
	float d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	int nq = cols / 4, q, l, i;
	float dot;

	for (q = 0; q < nq; q++)
		for (l = 0; l < 4; l++) {
			long k = off + 4 * q + l;

			d4[l] += load(t, dy, k) * load(t, y, k);
		}
	for (i = 4 * nq; i < cols; i++)
		d4[0] += load(t, dy, off + i) * load(t, y, off + i);
	dot = (d4[0] + d4[1]) + (d4[2] + d4[3]);

	for (q = 0; q < nq; q++)
		for (l = 0; l < 4; l++) {
			long k = off + 4 * q + l;

			store(t, dx, k, load(t, y, k) * (load(t, dy, k) - dot));
		}
	for (i = 4 * nq; i < cols; i++)
		store(t, dx, off + i, load(t, y, off + i) * (load(t, dy, off + i) - dot));
}

int dl_softmax_bwd(enum dl_dtype dtype, const void *y, const void *dy, void *dx, int rows, int cols)
{
	int r, rc;

	rc = check_args(dtype, rows, cols);
	if (rc)
		return rc;
	for (r = 0; r < rows; r++) {
		long off = (long)r * cols;

		if (use_vec4(cols))
			bwd_row_vec4(dtype, y, dy, dx, off, cols);
		else
			bwd_row(dtype, y, dy, dx, off, cols);
	}
	return 0;
}
