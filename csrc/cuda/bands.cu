/*
 * bands.cu -- halo refresh, and the band fix-up of fused passes.
 *
 * Band fix-up of a tensor-core pass, per banded axis: the two edge
 * strips of width strip = (2*depth-1)*r of the pass's input are stacked
 * into one scratch grid (near edge strip, then far edge strip), which
 * runs `depth` steps of the unfused kernel as a grid of its own with the
 * real boundary mode:
 * its two outer edges are the grid's real edges, so their halo fill is
 * exact (nearest/reflect/mirror reflect within the strip; constant is
 * cval); the seam between the strips is artificial and corrupts only
 * rows within depth*r of it, and the outer band = (depth-1)*r rows of
 * each strip, which are copied into the pass's output, stay exact.  The
 * strips span the other axes whole, so corners are exact too.  Along z
 * (3D kernels) the strips are stacks of whole planes, the same way.
 * The gather and the strips' steps read only the pass's input, so they
 * run on a second, high-priority stream beside the pass's main kernel
 * (about 20 small launches per pass for a 2D kernel fused 3 deep); the
 * main stream waits for them only to scatter the bands into the output.
 *
 * The fix-up needs every strip to lie inside the grid: the plan fuses
 * only where shape >= 2 * strip on every banded axis (plan.c).
 */
#include "bands.cuh"

cs_status
cs_refresh_halo(cs_cuda_ctx *ctx, const cs_dgrid *g, ptrdiff_t fold_points,
                cs_mode mode, double cval, int *filled)
{
    if (fold_points > 0) {
        return cs_cuda_fold1d_fill_halo(ctx, g, fold_points, mode, cval);
    }
    if (mode == CS_MODE_CONSTANT && *filled) {
        return CS_OK;
    }
    CS_TRY(cs_cuda_fill_halo(ctx, g, mode, cval));
    *filled = 1;
    return CS_OK;
}

/*
 * Copy two boxes `width` thick along axis a, spanning the other axes of
 * dst whole: the near one at 0 in both grids, the far one from src_far in
 * src to dst_far in dst.  The strips' gather and the bands' scatter.
 */
static cs_status
copy_edges(cs_cuda_ctx *ctx, const cs_dgrid *dst, ptrdiff_t dst_far,
           const cs_dgrid *src, ptrdiff_t src_far, int a, ptrdiff_t width)
{
    ptrdiff_t ext[3] = {dst->n[0], dst->n[1], dst->n[2]};
    const ptrdiff_t origin[3] = {0, 0, 0};
    ptrdiff_t to[3] = {0, 0, 0}, from[3] = {0, 0, 0};
    ext[a] = width;
    to[a] = dst_far;
    from[a] = src_far;
    CS_TRY(cs_cuda_copy_box(ctx, dst, origin, src, origin, ext));
    return cs_cuda_copy_box(ctx, dst, to, src, from, ext);
}

/*
 * The first half of the band fix-up of the pass src -> dst along axis a
 * (see the top comment), on ctx's stream: gather both edge strips of src
 * into job->buf[0] and run plan->depth unfused steps on them.  It reads
 * only src, so it runs beside the pass's main kernel.
 */
static cs_status
band_compute(cs_cuda_ctx *ctx, cs_band_job *job, int a, const cs_dgrid *src,
             const cs_fusion_plan *plan, const cs_dkernel *k, cs_mode mode,
             double cval)
{
    const ptrdiff_t s = plan->strip[a];
    CS_TRY(copy_edges(ctx, &job->buf[0], s, src, src->n[a] - s, a, s));
    int c = 0;
    for (int t = 0; t < plan->depth; t++) {
        CS_TRY(cs_refresh_halo(ctx, &job->buf[c], 0, mode, cval,
                               &job->filled[c]));
        CS_TRY(cs_cuda_core_step(ctx, &job->buf[c], &job->buf[1 - c], k));
        c = 1 - c;
    }
    return CS_OK;
}

/* The second half, after the pass's main kernel: scatter the outer bands
   of the strips' result (buffer depth % 2) into dst. */
static cs_status
band_scatter(cs_cuda_ctx *ctx, const cs_band_job *job, int a,
             const cs_dgrid *dst, const cs_fusion_plan *plan)
{
    const ptrdiff_t s = plan->strip[a];
    const ptrdiff_t b = plan->band[a];
    return copy_edges(ctx, dst, dst->n[a] - b, &job->buf[plan->depth % 2],
                      2 * s - b, a, b);
}

cs_status
cs_bands_start(cs_cuda_ctx *ctx, const cs_lane *l, cs_band_job jobs[3],
               const cs_dgrid *src, const cs_fusion_plan *plan,
               const cs_dkernel *k, cs_mode mode, double cval)
{
    CS_CUDA_CHECK(ctx, cudaEventRecord(l->src_ready, ctx->stream),
                  "cudaEventRecord (band source ready)");
    CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(l->band_stream, l->src_ready, 0),
                  "cudaStreamWaitEvent (band stream)");
    cs_cuda_ctx side = *ctx;
    side.stream = l->band_stream;
    for (int a = 0; a < 3; a++) {
        if (jobs[a].active) {
            CS_TRY(band_compute(&side, &jobs[a], a, src, plan, k, mode, cval));
        }
    }
    CS_CUDA_CHECK(ctx, cudaEventRecord(l->band_done, l->band_stream),
                  "cudaEventRecord (bands done)");
    return CS_OK;
}

cs_status
cs_bands_finish(cs_cuda_ctx *ctx, const cs_lane *l,
                const cs_band_job jobs[3], const cs_dgrid *dst,
                const cs_fusion_plan *plan)
{
    CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(ctx->stream, l->band_done, 0),
                  "cudaStreamWaitEvent (main stream)");
    for (int a = 0; a < 3; a++) {
        if (jobs[a].active) {
            CS_TRY(band_scatter(ctx, &jobs[a], a, dst, plan));
        }
    }
    return CS_OK;
}

