/*
 * The GPUs a host has, as the NVIDIA driver lists them, against the GPU
 * indexes its slots name: a slot on a GPU that does not exist would start a
 * runner that fails every trial, so the daemon refuses to start instead.
 * The daemon never links CUDA; the driver's /proc directory tells.
 */
#ifndef NW_GPUS_H
#define NW_GPUS_H

#include <stddef.h>

#include "config.h"

/* Where the NVIDIA driver lists one directory per GPU. */
#define GPUS_PROC_DIR "/proc/driver/nvidia/gpus"

/* The number of entries (GPUs) in 'dir' into '*count': 0, or a negative errno (-ENOENT: no driver). */
int gpus_count(const char *dir, unsigned *count);

/*
 * 0 where every GPU slot of 'cfg' names a GPU the host has ([slots] gpus,
 * or the count under 'dir' where that is 'auto'); else -EINVAL with a
 * message for the operator in 'err'.
 */
int gpus_check_slots(const struct config *cfg, const char *dir, char *err, size_t errlen);

#endif
