/*
 * direct.cuh -- one step from a caller's device array straight into a
 * float64 device array (direct.cu).
 */
#ifndef CS_CUDA_DIRECT_CUH
#define CS_CUDA_DIRECT_CUH

#include "check.cuh"
#include "cuda_engine.h"

/* Bytes of the tap block cs_direct_taps fills for kernel k. */
size_t
cs_direct_taps_bytes(const cs_kernel *k);

/*
 * The nonzero weights of k and their offsets from the centre, into
 * `block` (cs_direct_taps_bytes of it: weights, then 3 ints per tap);
 * returns the number of taps.
 */
int
cs_direct_taps(const cs_kernel *k, void *block);

/*
 * out = one step of k applied to in (extents `shape`), on ctx->stream;
 * `dev_taps` is the block of cs_direct_taps in device memory.  `out`
 * must not overlap `in`.  `nonfinite` (device memory, may be NULL) is
 * set to 1 where a result is NaN or infinite.
 */
cs_status
cs_cuda_direct_step(cs_cuda_ctx *ctx, const cs_darray *in,
                    const cs_darray *out, const ptrdiff_t shape[3],
                    const cs_kernel *k, const void *dev_taps, int ntaps,
                    cs_mode mode, double cval, int *nonfinite);

#endif /* CS_CUDA_DIRECT_CUH */
