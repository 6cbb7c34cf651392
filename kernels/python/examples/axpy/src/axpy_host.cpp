// The host path: four elements per step, as the GPU kernel's vector loads, then the tail.
#include "axpy.h"

int axpy_cuda(float *out, const float *x, const float *y, float a, float b, long n);

extern "C" int axpy_f32(float *out, const float *x, const float *y, float a, float b, long n, int on_device)
{
	if (on_device) {
#ifdef AXPY_CUDA
		return axpy_cuda(out, x, y, a, b, n);
#else
		return -1;
#endif
	}
	long i = 0;
	for (; i + 4 <= n; i += 4)
		for (int k = 0; k < 4; k++)
			out[i + k] = a * x[i + k] + b * y[i + k];
	for (; i < n; i++)
		out[i] = a * x[i] + b * y[i];
	return 0;
}
