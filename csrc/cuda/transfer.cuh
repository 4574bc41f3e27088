/*
 * transfer.cuh -- moving grids between a caller's memory and the
 * engine's padded device grids (transfer.cu).
 */
#ifndef CS_CUDA_TRANSFER_CUH
#define CS_CUDA_TRANSFER_CUH

#include "kernels.cuh"
#include "resources.cuh"

/* Bytes of one element of `t` (0 for an unknown code). */
size_t
cs_dtype_size(cs_dtype t);

/*
 * Read the box of extents ext at element (0, 0, 0) of `src` into the
 * box at dst_at of the padded grid dst, as float64; on ctx->stream.
 * `nonfinite` (device memory, may be NULL) is set to 1 where a value is
 * NaN or infinite (and left as it is elsewhere).
 */
cs_status
cs_cuda_load_array(cs_cuda_ctx *ctx, const cs_dgrid *dst,
                   const ptrdiff_t dst_at[3], const cs_darray *src,
                   const ptrdiff_t ext[3], int *nonfinite);

/* Write the box of extents ext at src_at of src into the float64
   array dst from its element (0, 0, 0); on ctx->stream; `nonfinite` as
   for the load. */
cs_status
cs_cuda_store_array(cs_cuda_ctx *ctx, const cs_darray *dst,
                    const cs_dgrid *src, const ptrdiff_t src_at[3],
                    const ptrdiff_t ext[3], int *nonfinite);

/* Set *nonfinite (device memory) to 1 if the box of g holds a NaN or
   an infinity. */
cs_status
cs_cuda_check_finite(cs_cuda_ctx *ctx, const cs_dgrid *g,
                     const ptrdiff_t at[3], const ptrdiff_t ext[3],
                     int *nonfinite);

/*
 * `bytes` from host memory to device memory, on ctx->stream, through
 * the lane's pinned staging (chunked and overlapped).  On return the
 * host memory has been read; the device copy completes in stream order.
 */
cs_status
cs_cuda_upload_host(cs_cuda_ctx *ctx, cs_lane *lane, char *dst,
                    const char *src, size_t bytes);

/* `bytes` from device memory, after the work queued on ctx->stream, to
   host memory; complete on return. */
cs_status
cs_cuda_download_host(cs_cuda_ctx *ctx, cs_lane *lane, char *dst,
                      const char *src, size_t bytes);

#endif /* CS_CUDA_TRANSFER_CUH */
