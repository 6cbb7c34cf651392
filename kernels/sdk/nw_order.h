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
 * Step j of order o over n elements: order 0 is first to last, 1 last to
 * first, 2..7 interleave with strides 2, 3, 5, 7, 11 and 13 (every
 * stride-th element, from each residue in turn).
 */
static inline NW_HOST_DEVICE long nw_order_at(int order, long j, long n)
{
	long k, per, r;

	switch (order % 8) {
	case 0:
		return j;
	case 1:
		return n - 1 - j;
	case 2:
		k = 2;
		break;
	case 3:
		k = 3;
		break;
	case 4:
		k = 5;
		break;
	case 5:
		k = 7;
		break;
	case 6:
		k = 11;
		break;
	default:
		k = 13;
		break;
	}
	if (n <= k)
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
