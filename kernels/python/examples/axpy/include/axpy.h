/* axpy: out = a * x + b * y over n floats. */
#ifndef AXPY_H
#define AXPY_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * out, x and y hold n floats, in host memory (on_device 0) or in the current CUDA
 * device's memory (on_device 1, CUDA builds only). Returns 0, or -1 when the
 * device path is not built or the kernel failed.
 */
int axpy_f32(float *out, const float *x, const float *y, float a, float b, long n, int on_device);

#ifdef __cplusplus
}
#endif

#endif
