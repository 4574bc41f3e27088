/*
 * cuda_engine.h -- the GPU engine's plain C API (implemented in the .cu
 * files of this folder; compiled only when nvcc is found).
 *
 * Data flow of one cs_cuda_apply: one upload of the grid into a padded
 * device buffer, the whole step loop on the device with ping-pong
 * buffers (halo fill, fused tensor-core passes, band fix-up, unfused
 * remainder), one download.  Every CUDA call is checked; on any failure
 * all device memory is freed and a message naming the failing kernel or
 * call is written to `err`.
 */
#ifndef CS_CUDA_ENGINE_H
#define CS_CUDA_ENGINE_H

#include "../stencil.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cs_cuda_path {
    CS_CUDA_PATH_AUTO = 0,        /* tensor cores where they pay (2D and
                                     3D kernels up to 7 per axis) */
    CS_CUDA_PATH_TENSOR_CORE = 1, /* dual tessellation on FP64 MMA */
    CS_CUDA_PATH_CUDA_CORE = 2    /* shared-memory tiled direct stencil */
} cs_cuda_path;

/*
 * Number of visible CUDA devices (>= 0), or -1 when the runtime cannot
 * be queried; `msg` gets a one-line description ("NVIDIA H100 80GB HBM3,
 * sm_90" or why none is usable).
 */
int
cs_cuda_device_count(char *msg, size_t msg_len);

/*
 * cudaMemGetInfo of the current device: CS_OK, or CS_ERR_NO_DEVICE /
 * CS_ERR_CUDA with the reason in `msg`.
 */
cs_status
cs_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, char *msg,
                 size_t msg_len);

/*
 * Host arrays in, host array out, same contract as cs_cpu_apply.
 * `in` and `out` may alias.  `intr` (may be NULL) is polled before each
 * pass; when it asks to stop, `out` is left as it was.
 */
cs_status
cs_cuda_apply(const double *in, double *out, const ptrdiff_t shape[3],
              const cs_kernel *kernel, cs_mode mode, double cval,
              long steps, cs_cuda_path path, cs_run_info *info,
              const cs_interrupt *intr, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* CS_CUDA_ENGINE_H */
