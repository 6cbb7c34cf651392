/*
 * The reduction orders of the plain same-dtype programs (numwatch_check.h,
 * NW_ORDERS), in one place for host C and CUDA device code: a reference
 * computed on the GPU must sum in exactly the orders the host build does.
 */
#ifndef NW_ORDER_H
#define NW_ORDER_H

#ifdef __CUDACC__
#define NW_HOST_DEVICE __host__ __device__
#else
#define NW_HOST_DEVICE
#endif

/*
 * The stride of order o: 1 first to last, -1 last to first, then 2, 3, 5,
 * 7, 11 and 13: every stride-th element, from each residue in turn
 * (residue 0 ascending, then residue 1, ...). Over n <= stride elements
 * that is first to last.
 */
static inline NW_HOST_DEVICE long nw_order_stride(int order)
{
	switch (order % 8) {
	case 0:
		return 1;
	case 1:
		return -1;
	case 2:
		return 2;
	case 3:
		return 3;
	case 4:
		return 5;
	case 5:
		return 7;
	case 6:
		return 11;
	default:
		return 13;
	}
}

/* Step j of order o over n elements (a loop over residues walks it faster: see nw_order_stride). */
static inline NW_HOST_DEVICE long nw_order_at(int order, long j, long n)
{
	long k = nw_order_stride(order), per, r;

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

#endif
