/*
 * Reduction orders for the plain same-dtype programs (numwatch_check.h).
 */
#include "numwatch_check.h"

long nw_order_index(int order, long j, long n)
{
	static const long strides[NW_ORDERS] = {1, -1, 2, 3, 5, 7, 11, 13};
	long k = strides[order % NW_ORDERS], per, r;

	if (k < 0)
		return n - 1 - j;
	if (k == 1 || n <= k)
		return j;
	/* Residue r holds ceil((n - r) / k) elements: walk the residues in turn. */
	for (r = 0; r < k; r++) {
		per = (n - r + k - 1) / k;
		if (j < per)
			return r + j * k;
		j -= per;
	}
	return 0; /* not reached: j < n */
}

void nw_order_fill(int order, long n, long *idx)
{
	long j;

	for (j = 0; j < n; j++)
		idx[j] = nw_order_index(order, j, n);
}
