/*
 * transfer.cu -- moving a grid in and out of the engine's padded device
 * grids:
 *
 * - from a caller's device array of any real dtype and any strides into
 *   a box of a padded grid, converting to float64 on the way (one read
 *   of the array, no copy of it), and from a box back into a float64
 *   device array of any strides;
 * - between host memory and device memory through the lane's pinned
 *   staging buffers: chunks of CS_STAGE_BYTES copied by every core into
 *   one buffer while the copy engine moves another (pageable memory
 *   moves at about a fifth of pinned memory's rate on the H100's host).
 */
#include "kernels.cuh"
#include "resources.cuh"
#include "transfer.cuh"
#include "convert.cuh"
#include "../host_copy.h"

#include <stdint.h>
#include <string.h>

/* Transfers of at most this many bytes go straight from pageable
   memory: the runtime stages small copies itself, without a wait. */
#define DIRECT_BYTES ((size_t)1 << 20)

/* ------------------------------------------------------------------------
 * kernels
 * --------------------------------------------------------------------- */

typedef struct array_params {
    double *grid;        /* box corner in the padded grid */
    ptrdiff_t pitch, plane;
    char *array;         /* element (0, 0, 0) of the array's box */
    ptrdiff_t sz, sy, sx; /* the array's strides, bytes */
    ptrdiff_t ey, ex;    /* box extents in y and x */
    ptrdiff_t rows;      /* ez * ey */
    int row_threads;     /* threads per row of a block: a power of two */
    int *nonfinite;      /* NULL, or set to 1 where a value is not finite */
} array_params;

/*
 * Rows a thread copies per trip, and about how many in all: a trip
 * issues all its loads before its stores, so that each thread keeps
 * several in flight.  One element per thread and block (a block per
 * 256 elements) left the copy at 58% of the H100's DRAM rate, 86%
 * after (h100_ncu_copy1d.md): a 100-step heat1d call on a CuPy array of
 * 2^27 points ran at 78% of its step loop before, 85% after (h100_e2e.md
 * at 6991c80 and 84a1a5e).
 */
#define COPY_BATCH 4
#define COPY_ROWS_PER_THREAD 8

/*
 * store(z, y, x, load(z, y, x)) for each element of p's box this thread
 * visits: blocks of rows as in halo.cu's copy_box_kernel (grid.x covers
 * a row, grid.y strides over the rows (z, y)), COPY_BATCH rows a trip;
 * threads past a row's end visit none.
 */
template <class Load, class Store>
static __device__ __forceinline__ void
copy_box_elements(const array_params &p, Load load, Store store)
{
    const int tx = threadIdx.x & (p.row_threads - 1);
    const int ty = threadIdx.x / p.row_threads;
    const int block_rows = blockDim.x / p.row_threads;
    const ptrdiff_t x = (ptrdiff_t)blockIdx.x * p.row_threads + tx;
    if (x >= p.ex) {
        return;
    }
    const ptrdiff_t step = (ptrdiff_t)gridDim.y * block_rows;
    for (ptrdiff_t r = (ptrdiff_t)blockIdx.y * block_rows + ty; r < p.rows;
         r += COPY_BATCH * step) {
        double v[COPY_BATCH];
        ptrdiff_t z[COPY_BATCH], y[COPY_BATCH];
#pragma unroll
        for (int u = 0; u < COPY_BATCH; u++) {
            const ptrdiff_t ru = r + u * step;
            if (ru < p.rows) {
                z[u] = cs_plane_of_row(ru, p.ey, p.rows);
                y[u] = ru - z[u] * p.ey;
                v[u] = load(z[u], y[u], x);
            }
        }
#pragma unroll
        for (int u = 0; u < COPY_BATCH; u++) {
            if (r + u * step < p.rows) {
                store(z[u], y[u], x, v[u]);
            }
        }
    }
}

/* Any writer of the flag will do: its value is all that counts. */
static __device__ __forceinline__ void
note_nonfinite(const array_params &p, int bad)
{
    if (bad && p.nonfinite != NULL) {
        *p.nonfinite = 1;
    }
}

template <class T>
__global__ void
load_array_kernel(const array_params p)
{
    int bad = 0;
    copy_box_elements(
        p,
        [&](ptrdiff_t z, ptrdiff_t y, ptrdiff_t x) {
            return to_double(
                *(const T *)(p.array + z * p.sz + y * p.sy + x * p.sx));
        },
        [&](ptrdiff_t z, ptrdiff_t y, ptrdiff_t x, double v) {
            p.grid[z * p.plane + y * p.pitch + x] = v;
            bad |= !isfinite(v);
        });
    note_nonfinite(p, bad);
}

__global__ void
store_array_kernel(const array_params p)
{
    int bad = 0;
    copy_box_elements(
        p,
        [&](ptrdiff_t z, ptrdiff_t y, ptrdiff_t x) {
            return p.grid[z * p.plane + y * p.pitch + x];
        },
        [&](ptrdiff_t z, ptrdiff_t y, ptrdiff_t x, double v) {
            *(double *)(p.array + z * p.sz + y * p.sy + x * p.sx) = v;
            bad |= !isfinite(v);
        });
    note_nonfinite(p, bad);
}

/* Only the check: is any value of the box not finite? */
__global__ void
check_finite_kernel(const array_params p)
{
    int bad = 0;
    copy_box_elements(
        p,
        [&](ptrdiff_t z, ptrdiff_t y, ptrdiff_t x) {
            return p.grid[z * p.plane + y * p.pitch + x];
        },
        [&](ptrdiff_t, ptrdiff_t, ptrdiff_t, double v) {
            bad |= !isfinite(v);
        });
    note_nonfinite(p, bad);
}

/* ------------------------------------------------------------------------
 * launchers: device arrays
 * --------------------------------------------------------------------- */

size_t
cs_dtype_size(cs_dtype t)
{
    switch (t) {
    case CS_DTYPE_FLOAT64:
    case CS_DTYPE_INT64:
    case CS_DTYPE_UINT64:
        return 8;
    case CS_DTYPE_FLOAT32:
    case CS_DTYPE_INT32:
    case CS_DTYPE_UINT32:
        return 4;
    case CS_DTYPE_FLOAT16:
    case CS_DTYPE_BFLOAT16:
    case CS_DTYPE_INT16:
    case CS_DTYPE_UINT16:
        return 2;
    case CS_DTYPE_INT8:
    case CS_DTYPE_UINT8:
    case CS_DTYPE_BOOL:
        return 1;
    default:
        return 0;
    }
}

/* The launch shape and box fields shared by both directions. */
static cs_status
array_launch_shape(cs_cuda_ctx *ctx, const cs_dgrid *g,
                   const ptrdiff_t at[3], const cs_darray *a,
                   const ptrdiff_t ext[3], array_params *p, dim3 *grid)
{
    for (int k = 0; k < 3; k++) {
        if (at[k] < 0 || ext[k] < 0 || at[k] + ext[k] > g->n[k]) {
            cs_cuda_message(ctx, "device array copy: box outside the grid");
            return CS_ERR_INVALID;
        }
    }
    p->grid = g->origin + at[0] * g->plane + at[1] * g->pitch + at[2];
    p->pitch = g->pitch;
    p->plane = g->plane;
    p->array = (char *)a->data;
    p->sz = a->strides[0];
    p->sy = a->strides[1];
    p->sx = a->strides[2];
    p->ey = ext[1];
    p->ex = ext[2];
    p->rows = ext[0] * ext[1];
    if (!cs_row_blocks(p->ex, p->rows, 256, &p->row_threads, grid)) {
        cs_cuda_message(ctx, "device array copy: rows too long");
        return CS_ERR_UNSUPPORTED;
    }
    grid->y = CEIL_DIV(grid->y, COPY_ROWS_PER_THREAD);
    return CS_OK;
}

template <class T>
static cs_status
launch_load(cs_cuda_ctx *ctx, const array_params *p, dim3 grid)
{
    load_array_kernel<T><<<grid, 256, 0, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "load_array_kernel");
}

cs_status
cs_cuda_load_array(cs_cuda_ctx *ctx, const cs_dgrid *dst,
                   const ptrdiff_t dst_at[3], const cs_darray *src,
                   const ptrdiff_t ext[3], int *nonfinite)
{
    array_params p;
    dim3 grid;
    CS_TRY(array_launch_shape(ctx, dst, dst_at, src, ext, &p, &grid));
    p.nonfinite = nonfinite;
    if (ext[0] == 0 || ext[1] == 0 || ext[2] == 0) {
        return CS_OK;
    }
    const cs_status st = cs_dtype_dispatch(src->dtype, [&](auto element) {
        return launch_load<decltype(element)>(ctx, &p, grid);
    });
    if (st == CS_ERR_INVALID) {
        cs_cuda_message(ctx, "device array: unknown dtype code %d",
                        (int)src->dtype);
    }
    return st;
}

cs_status
cs_cuda_store_array(cs_cuda_ctx *ctx, const cs_darray *dst,
                    const cs_dgrid *src, const ptrdiff_t src_at[3],
                    const ptrdiff_t ext[3], int *nonfinite)
{
    if (dst->dtype != CS_DTYPE_FLOAT64) {
        cs_cuda_message(ctx, "device array out: float64 only");
        return CS_ERR_INVALID;
    }
    array_params p;
    dim3 grid;
    CS_TRY(array_launch_shape(ctx, src, src_at, dst, ext, &p, &grid));
    p.nonfinite = nonfinite;
    if (ext[0] == 0 || ext[1] == 0 || ext[2] == 0) {
        return CS_OK;
    }
    store_array_kernel<<<grid, 256, 0, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "store_array_kernel");
}

cs_status
cs_cuda_check_finite(cs_cuda_ctx *ctx, const cs_dgrid *g,
                     const ptrdiff_t at[3], const ptrdiff_t ext[3],
                     int *nonfinite)
{
    const cs_darray none = {g->origin, CS_DTYPE_FLOAT64, {0, 0, 0}};
    array_params p;
    dim3 grid;
    CS_TRY(array_launch_shape(ctx, g, at, &none, ext, &p, &grid));
    p.nonfinite = nonfinite;
    if (ext[0] == 0 || ext[1] == 0 || ext[2] == 0) {
        return CS_OK;
    }
    check_finite_kernel<<<grid, 256, 0, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "check_finite_kernel");
}

/* ------------------------------------------------------------------------
 * host <-> device through the lane's pinned staging
 * --------------------------------------------------------------------- */

cs_status
cs_cuda_upload_host(cs_cuda_ctx *ctx, cs_lane *lane, char *dst,
                    const char *src, size_t bytes)
{
    if (bytes <= DIRECT_BYTES || !cs_lane_has_stage(lane)) {
        CS_CUDA_CHECK(ctx,
                      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                      ctx->stream),
                      "cudaMemcpyAsync (upload grid)");
        return CS_OK;
    }
    /* chunk i goes through buffer i % CS_STAGE_COUNT once its last DMA
       is over; the cores fill one buffer while the copy engine empties
       another */
    size_t i = 0;
    for (size_t off = 0; off < bytes; off += CS_STAGE_BYTES, i++) {
        const int k = (int)(i % CS_STAGE_COUNT);
        const size_t n =
            bytes - off < CS_STAGE_BYTES ? bytes - off : CS_STAGE_BYTES;
        CS_CUDA_CHECK(ctx, cudaEventSynchronize(lane->stage_idle[k]),
                      "cudaEventSynchronize (staging buffer)");
        cs_host_copy(lane->stage[k], src + off, n);
        CS_CUDA_CHECK(ctx,
                      cudaMemcpyAsync(dst + off, lane->stage[k], n,
                                      cudaMemcpyHostToDevice, ctx->stream),
                      "cudaMemcpyAsync (upload grid)");
        CS_CUDA_CHECK(ctx, cudaEventRecord(lane->stage_idle[k], ctx->stream),
                      "cudaEventRecord (staging buffer)");
    }
    return CS_OK;
}

cs_status
cs_cuda_download_host(cs_cuda_ctx *ctx, cs_lane *lane, char *dst,
                      const char *src, size_t bytes)
{
    if (bytes <= DIRECT_BYTES || !cs_lane_has_stage(lane)) {
        CS_CUDA_CHECK(ctx,
                      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                      ctx->stream),
                      "cudaMemcpyAsync (download grid)");
        CS_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream),
                      "cudaMemcpyAsync (download grid)");
        return CS_OK;
    }
    const size_t chunks = (bytes + CS_STAGE_BYTES - 1) / CS_STAGE_BYTES;
    /* keep CS_STAGE_COUNT chunks in flight; copy out the oldest */
    size_t queued = 0;
    for (size_t i = 0; i < chunks; i++) {
        while (queued < chunks && queued < i + CS_STAGE_COUNT) {
            const int k = (int)(queued % CS_STAGE_COUNT);
            const size_t off = queued * CS_STAGE_BYTES;
            const size_t n = bytes - off < CS_STAGE_BYTES ? bytes - off
                                                          : CS_STAGE_BYTES;
            CS_CUDA_CHECK(ctx,
                          cudaMemcpyAsync(lane->stage[k], src + off, n,
                                          cudaMemcpyDeviceToHost,
                                          ctx->stream),
                          "cudaMemcpyAsync (download grid)");
            CS_CUDA_CHECK(ctx,
                          cudaEventRecord(lane->stage_idle[k], ctx->stream),
                          "cudaEventRecord (staging buffer)");
            queued++;
        }
        const int k = (int)(i % CS_STAGE_COUNT);
        const size_t off = i * CS_STAGE_BYTES;
        const size_t n =
            bytes - off < CS_STAGE_BYTES ? bytes - off : CS_STAGE_BYTES;
        /* an asynchronous kernel fault surfaces here too: run with
           CONVSTENCIL_CUDA_SYNC=1 to name the kernel */
        CS_CUDA_CHECK(ctx, cudaEventSynchronize(lane->stage_idle[k]),
                      "cudaMemcpyAsync (download grid)");
        cs_host_copy(dst + off, lane->stage[k], n);
    }
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * plain copies and allocations for the Python layer
 * --------------------------------------------------------------------- */

static void
ctx_for_copy(cs_cuda_ctx *ctx, char *err, size_t err_len)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->err = err;
    ctx->err_len = err_len;
    if (err != NULL && err_len > 0) {
        err[0] = '\0';
    }
}

static cs_status
copy_through_lane(void *dst, const void *src, size_t bytes, int to_device,
                  char *err, size_t err_len)
{
    cs_cuda_ctx ctx;
    ctx_for_copy(&ctx, err, err_len);
    CS_TRY(cs_cuda_device_facts(&ctx));
    cs_lane *lane = NULL;
    CS_TRY(cs_lane_take(&ctx, &lane));
    ctx.stream = lane->stream;
    cs_status st = cs_lane_wait_done(&ctx, lane, lane->stream);
    if (st == CS_OK && to_device) {
        st = cs_cuda_upload_host(&ctx, lane, (char *)dst, (const char *)src,
                                 bytes);
        if (st == CS_OK) {
            cudaError_t e = cudaStreamSynchronize(lane->stream);
            st = e == cudaSuccess
                     ? CS_OK
                     : cs_cuda_fail(&ctx, e, "cudaMemcpyAsync (upload)");
        }
    } else if (st == CS_OK) {
        st = cs_cuda_download_host(&ctx, lane, (char *)dst,
                                   (const char *)src, bytes);
    }
    cs_lane_give(lane, lane->stream);
    return st;
}

cs_status
cs_cuda_copy_to_device(void *dst, const void *src, size_t bytes, char *err,
                       size_t err_len)
{
    return copy_through_lane(dst, src, bytes, 1, err, err_len);
}

cs_status
cs_cuda_copy_to_host(void *dst, const void *src, size_t bytes, char *err,
                     size_t err_len)
{
    return copy_through_lane(dst, src, bytes, 0, err, err_len);
}

cs_status
cs_cuda_malloc(void **ptr, size_t bytes, int *device, char *err,
               size_t err_len)
{
    cs_cuda_ctx ctx;
    ctx_for_copy(&ctx, err, err_len);
    *ptr = NULL;
    CS_TRY(cs_cuda_device_facts(&ctx));
    *device = ctx.device;
    size_t free_bytes = 0, total_bytes = 0;
    CS_CUDA_CHECK(&ctx, cudaMemGetInfo(&free_bytes, &total_bytes),
                  "cudaMemGetInfo");
    if (bytes > free_bytes) {
        /* idle cached blocks may be what is in the way */
        (void)cs_cuda_clear_cache();
        CS_CUDA_CHECK(&ctx, cudaMemGetInfo(&free_bytes, &total_bytes),
                      "cudaMemGetInfo");
    }
    if (bytes > free_bytes) {
        cs_cuda_message(&ctx, "an array needs %.1f MiB of device memory; "
                              "the device has %.1f MiB free of %.1f MiB",
                        (double)bytes / 1048576.0,
                        (double)free_bytes / 1048576.0,
                        (double)total_bytes / 1048576.0);
        return CS_ERR_DEVICE_NOMEM;
    }
    cudaError_t e = cudaMalloc(ptr, bytes > 0 ? bytes : 1);
    if (e != cudaSuccess) {
        *ptr = NULL;
        (void)cudaGetLastError();
        cs_cuda_message(&ctx, "cudaMalloc of %zu bytes failed: %s", bytes,
                        cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? CS_ERR_DEVICE_NOMEM
                                              : CS_ERR_CUDA;
    }
    return CS_OK;
}

void
cs_cuda_free(void *ptr)
{
    if (ptr != NULL) {
        /* cudaFree waits for the device; work on the array is over */
        (void)cudaFree(ptr);
        (void)cudaGetLastError();
    }
}
