/*
 * cs_grid_io.cu -- the grid in and the result out (cs_grid_io.cuh).
 *
 * A folded 1D grid is read and written as two boxes: its full rows, seen
 * as {1, rows - 1, w} (a row is w points on), and its last row (the
 * tail).  A host grid goes through the lane's pinned staging into the
 * spare main grid, contiguous, and is repacked from there on the device.
 */
#include "grid_io.cuh"
#include "arena.cuh"
#include "direct.cuh"
#include "transfer.cuh"
#include "../host_copy.h"

#include <stdlib.h>

/*
 * A device array as the engine's boxes see it: the whole grid, or for a
 * fold its full rows ({1, rows - 1, w}: a row is w elements on) and its
 * last row (the tail) from element (rows - 1) * w on.
 */
static void
fold_views(const cs_darray *a, const cs_plan *f, cs_darray *rows,
           cs_darray *tail)
{
    *rows = *a;
    *tail = *a;
    if (f->fold) {
        const ptrdiff_t sx = a->strides[2];
        rows->strides[0] = 0;
        rows->strides[1] = f->fold_width * sx;
        tail->strides[0] = 0;
        tail->strides[1] = f->fold_width * sx;
        tail->data =
            (char *)a->data + (f->run_shape[1] - 1) * f->fold_width * sx;
    }
}

/* The boxes of a fold (full rows, then the tail) or the whole grid. */
static void
io_boxes(const cs_plan *f, const ptrdiff_t shape[3], ptrdiff_t box[3],
         ptrdiff_t tail_at[3], ptrdiff_t tail[3])
{
    for (int a = 0; a < 3; a++) {
        box[a] = shape[a];
        tail_at[a] = 0;
        tail[a] = 0;
    }
    if (f->fold) {
        box[1] = f->run_shape[1] - 1;
        tail_at[1] = f->run_shape[1] - 1;
        tail[0] = 1;
        tail[1] = 1;
        tail[2] = f->fold_points - (f->run_shape[1] - 1) * f->fold_width;
    }
}

/* The grid as a C-contiguous float64 array at `base` (for the
   transfers and the masked path). */
static cs_darray
contiguous_array(char *base, const ptrdiff_t shape[3])
{
    cs_darray a = {base, CS_DTYPE_FLOAT64,
                   {(ptrdiff_t)(shape[1] * shape[2] * sizeof(double)),
                    (ptrdiff_t)(shape[2] * sizeof(double)),
                    (ptrdiff_t)sizeof(double)}};
    return a;
}

size_t
cs_io_points(const cs_plan *plan)
{
    const ptrdiff_t *n = plan->run_shape;
    return (size_t)(plan->fold ? plan->fold_points : n[0] * n[1] * n[2]);
}

cs_status
cs_load_grid(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
             const cs_plan *plan, const cs_dgrid *g, char *spare)
{
    cs_darray host_copy;
    const cs_darray *src = io->dev_in;
    if (src == NULL) {
        const size_t count = cs_io_points(plan);
        CS_TRY(cs_cuda_upload_host(ctx, lane, spare,
                                   (const char *)io->host_in,
                                   count * sizeof(double)));
        host_copy = contiguous_array(spare, plan->run_shape);
        if (plan->fold) { /* the points one after another */
            host_copy.strides[1] = host_copy.strides[2];
        }
        src = &host_copy;
    }
    ptrdiff_t box[3], tail_at[3], tail[3];
    const ptrdiff_t zero[3] = {0, 0, 0};
    cs_darray rows, last;
    io_boxes(plan, plan->run_shape, box, tail_at, tail);
    fold_views(src, plan, &rows, &last);
    CS_TRY(cs_cuda_load_array(ctx, g, zero, &rows, box, lane->flags + 0));
    if (plan->fold) {
        CS_TRY(cs_cuda_load_array(ctx, g, tail_at, &last, tail,
                                  lane->flags + 0));
    }
    return CS_OK;
}

cs_status
cs_stage_result(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
                const cs_plan *plan, const cs_dgrid *g,
                char *spare, int *stored)
{
    ptrdiff_t box[3], tail_at[3], tail[3];
    const ptrdiff_t zero[3] = {0, 0, 0};
    io_boxes(plan, plan->run_shape, box, tail_at, tail);
    *stored = 0;
    if (io->dev_out != NULL && !io->out_reads_in) {
        cs_darray rows, last;
        fold_views(io->dev_out, plan, &rows, &last);
        CS_TRY(cs_cuda_store_array(ctx, &rows, g, zero, box,
                                   lane->flags + 1));
        if (plan->fold) {
            CS_TRY(cs_cuda_store_array(ctx, &last, g, tail_at, tail,
                                       lane->flags + 1));
        }
        *stored = 1;
        return CS_OK;
    }
    if (io->dev_out != NULL) {
        CS_TRY(cs_cuda_check_finite(ctx, g, zero, box, lane->flags + 1));
        if (plan->fold) {
            CS_TRY(cs_cuda_check_finite(ctx, g, tail_at, tail,
                                        lane->flags + 1));
        }
        return CS_OK;
    }
    cs_darray flat = contiguous_array(spare, plan->run_shape);
    if (plan->fold) {
        flat.strides[1] = flat.strides[2];
    }
    cs_darray rows, last;
    fold_views(&flat, plan, &rows, &last);
    CS_TRY(cs_cuda_store_array(ctx, &rows, g, zero, box, lane->flags + 1));
    if (plan->fold) {
        CS_TRY(cs_cuda_store_array(ctx, &last, g, tail_at, tail,
                                   lane->flags + 1));
    }
    return CS_OK;
}

cs_status
cs_store_grid(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
              const cs_plan *plan, const cs_dgrid *g, char *spare)
{
    if (io->dev_out != NULL) {
        ptrdiff_t box[3], tail_at[3], tail[3];
        const ptrdiff_t zero[3] = {0, 0, 0};
        cs_darray rows, last;
        io_boxes(plan, plan->run_shape, box, tail_at, tail);
        fold_views(io->dev_out, plan, &rows, &last);
        CS_TRY(cs_cuda_store_array(ctx, &rows, g, zero, box, NULL));
        if (plan->fold) {
            CS_TRY(cs_cuda_store_array(ctx, &last, g, tail_at, tail, NULL));
        }
        return CS_OK;
    }
    const size_t bytes = cs_io_points(plan) * sizeof(double);
    return cs_cuda_download_host(ctx, lane, (char *)io->host_out, spare,
                                 bytes);
}

cs_status
cs_read_flags(cs_cuda_ctx *ctx, cs_lane *lane, int flags[2])
{
    CS_CUDA_CHECK(ctx,
                  cudaMemcpyAsync(flags, lane->flags, 2 * sizeof(int),
                                  cudaMemcpyDeviceToHost, ctx->stream),
                  "cudaMemcpyAsync (non-finite flags)");
    /* an asynchronous kernel fault surfaces here too: run with
       CONVSTENCIL_CUDA_SYNC=1 to name the kernel */
    CS_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream),
                  "cudaStreamSynchronize (end of the step loop)");
    return CS_OK;
}

cs_status
cs_run_masked(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
              const ptrdiff_t user_shape[3], const cs_kernel *kernel,
              cs_mode mode, double cval, long steps, char *buf[2])
{
    const size_t bytes = cs_direct_taps_bytes(kernel);
    char *host_taps = (char *)malloc(bytes);
    if (host_taps == NULL) {
        cs_cuda_message(ctx, "out of host memory (taps)");
        return CS_ERR_NOMEM;
    }
    const int ntaps = cs_direct_taps(kernel, host_taps);
    char *taps = NULL;
    cs_status st = cs_lane_params(ctx, lane, host_taps, bytes, &taps);
    free(host_taps);
    CS_TRY(st);
    cs_darray a[2] = {contiguous_array(buf[0], user_shape),
                      contiguous_array(buf[1], user_shape)};
    const size_t count =
        (size_t)(user_shape[0] * user_shape[1] * user_shape[2]);
    const ptrdiff_t zero[3] = {0, 0, 0};
    const cs_darray *src = io->dev_in;
    int next = 0;
    if (src == NULL) {
        CS_TRY(cs_cuda_upload_host(ctx, lane, buf[1],
                                   (const char *)io->host_in,
                                   count * sizeof(double)));
        src = &a[1];
    } else if (steps == 0) {
        /* no step reads the caller's array (any dtype and strides) into
           a contiguous one, which the store below expects: a copy does */
        const cs_dgrid flat = cs_contiguous_view(user_shape, buf[1]);
        CS_TRY(cs_cuda_load_array(ctx, &flat, zero, src, user_shape, NULL));
        src = &a[1];
    }
    for (long t = 0; t < steps; t++) {
        CS_TRY(cs_cuda_check_interrupt(ctx, t));
        CS_TRY(cs_cuda_direct_step(ctx, src, &a[next], user_shape, kernel,
                                   taps, ntaps, mode, cval, NULL));
        src = &a[next];
        next = 1 - next;
    }
    if (io->dev_out != NULL) {
        const cs_dgrid flat =
            cs_contiguous_view(user_shape, (char *)src->data);
        return cs_cuda_store_array(ctx, io->dev_out, &flat, zero, user_shape,
                                   NULL);
    }
    cs_host_prefault(io->host_out, count * sizeof(double));
    return cs_cuda_download_host(ctx, lane, (char *)io->host_out,
                                 (const char *)src->data,
                                 count * sizeof(double));
}

