/*
 * Reduction orders for the plain same-dtype programs (numwatch_check.h).
 */
#include "numwatch_check.h"
#include "nw_order.h"

long nw_order_index(int order, long j, long n)
{
	return nw_order_at(order, j, n);
}

void nw_order_fill(int order, long n, long *idx)
{
	long j;

	for (j = 0; j < n; j++)
		idx[j] = nw_order_at(order, j, n);
}
