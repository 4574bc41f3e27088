/*
 * engine.cu -- cs_cuda_apply: the GPU engine's orchestration.
 *
 * Data flow: one device arena (one cudaMalloc) holds two padded
 * ping-pong grids, the band fix-up's strip buffers and the parameters
 * (weights, stencil2row tables).  The grid is uploaded once (contiguous,
 * into the spare grid, then repacked into the padded one on the device),
 * the whole step loop runs on one stream (with a second one for the band
 * fix-ups, below), and the result is repacked and downloaded once.  Every
 * exit frees everything.
 *
 * Step loop, tensor-core path (kernels up to 7 per axis, 1D kernels up
 * to 31 points, on sm_90):
 *   cs_fusion_plan_make with max side {7, 7, 7} ({1, 1, 31} for 1D)
 *   fuses `depth` steps into one pass of the composed kernel (at most
 *   CONVSTENCIL_CUDA_MAX_DEPTH steps, when that is set: see
 *   fusion_max_side); each pass refreshes the input's halo (constant
 *   mode: once per buffer, nothing else writes it), runs tc2d (a planar
 *   composed kernel, on every plane), tc1d (a 1D one of 9 to 31 points)
 *   or tc3d (several z-planes), then, unless the mode is wrap or depth
 *   is 1, recomputes the band of width (depth-1)*r along each edge of
 *   each axis step by step on CUDA cores;
 *   `remainder` unfused steps follow on CUDA cores.
 * CUDA-core path: every step is halo refresh + one direct stencil step,
 * but for a 7-point 3D star, two steps per pass of its square (cc3d),
 * whose band fused_band.cu then recomputes in place (plan_cuda_core).
 * CS_CUDA_PATH_AUTO takes the tensor-core path wherever it runs the
 * kernel (choose_path).
 *
 * 1D grids with 1D kernels run folded into rows of FOLD_WIDTH points
 * (fold1d.cu), so that the 2D kernels get whole tiles of rows: the
 * halo refresh becomes the fold's (x-halos copied from the neighbouring
 * rows, the mode past the ends, before every pass), the band fix-up
 * replays the two ends of the 1D grid, and the upload and download
 * repack the points into and out of the rows.
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
 */
#include "cuda_engine.h"
#include "kernels.cuh"
#include "../layout.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 256 /* bytes: every piece of the arena starts aligned */
#define BAND_SPARE_SMS 4 /* SMs a banded tc2d pass leaves free: on the H100,
                            heat2d fused 3 deep ran fastest with 4 of 1, 2, 4 */
#define FOLD_WIDTH 4096 /* points per row of a folded 1D grid: a multiple of
                           tc2d's 128-column tile */

/* ------------------------------------------------------------------------
 * padded grid geometry and the device arena
 * --------------------------------------------------------------------- */

/*
 * A padded grid of extents n with halo h: planes of rows of `pitch`
 * doubles; the interior starts `lead` doubles into its row, lead >= h[2]
 * and a multiple of 8, pitch a multiple of 8, so that interior rows start
 * 64-byte aligned (the arena is 256-byte aligned).
 */
typedef struct grid_geom {
    ptrdiff_t n[3], halo[3];
    ptrdiff_t lead, pitch, plane;
    size_t bytes;
} grid_geom;

static ptrdiff_t
round_up(ptrdiff_t v, ptrdiff_t m)
{
    return (v + m - 1) / m * m;
}

/* a * b into *out unless it overflows size_t */
static int
mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) {
        return 0;
    }
    *out = a * b;
    return 1;
}

/* 0 when the sizes overflow. */
static int
geom_make(const ptrdiff_t n[3], const ptrdiff_t h[3], grid_geom *g)
{
    for (int a = 0; a < 3; a++) {
        if (n[a] > PTRDIFF_MAX / 4 || h[a] > PTRDIFF_MAX / 4) {
            return 0;
        }
        g->n[a] = n[a];
        g->halo[a] = h[a];
    }
    g->lead = round_up(h[2], 8);
    g->pitch = round_up(g->lead + n[2] + h[2], 8);
    size_t rows = (size_t)(n[1] + 2 * h[1]);
    size_t planes = (size_t)(n[0] + 2 * h[0]);
    size_t plane, total, bytes;
    if (!mul_ok((size_t)g->pitch, rows, &plane) || plane > PTRDIFF_MAX
        || !mul_ok(plane, planes, &total)
        || !mul_ok(total, sizeof(double), &bytes)) {
        return 0;
    }
    g->plane = (ptrdiff_t)plane;
    g->bytes = bytes;
    return 1;
}

static cs_dgrid
geom_view(const grid_geom *g, char *base)
{
    cs_dgrid v;
    v.origin = (double *)base + g->halo[0] * g->plane + g->halo[1] * g->pitch
               + g->lead;
    for (int a = 0; a < 3; a++) {
        v.n[a] = g->n[a];
        v.halo[a] = g->halo[a];
    }
    v.pitch = g->pitch;
    v.plane = g->plane;
    return v;
}

/* The grid n as a C-contiguous array at `base` (no halo). */
static cs_dgrid
contiguous_view(const ptrdiff_t n[3], char *base)
{
    cs_dgrid v;
    v.origin = (double *)base;
    for (int a = 0; a < 3; a++) {
        v.n[a] = n[a];
        v.halo[a] = 0;
    }
    v.pitch = n[2];
    v.plane = n[1] * n[2];
    return v;
}

/*
 * A 1D problem (the user's 1D kernel {1, 1, kx} on a grid {1, 1, n})
 * folded into rows of `w` points; active == 0 for every other problem.
 */
typedef struct fold1d {
    int active;
    ptrdiff_t n, w, rows;
} fold1d;

static fold1d
fold1d_plan(const ptrdiff_t shape[3], const cs_kernel *kernel)
{
    fold1d f;
    memset(&f, 0, sizeof(f));
    f.active = kernel->ndim == 1 && shape[0] == 1 && shape[1] == 1
               && shape[2] >= 1 && kernel->size[0] == 1
               && kernel->size[1] == 1;
    if (f.active) {
        f.n = shape[2];
        f.w = f.n < FOLD_WIDTH ? round_up(f.n, 128) : FOLD_WIDTH;
        f.rows = CEIL_DIV(f.n, f.w);
    }
    return f;
}

/*
 * Repack between the grid as the caller holds it, contiguous at `flat`,
 * and the padded device grid g of extents `shape`: one box, or for a
 * fold its full rows, then the last row's n - (rows-1)*w points.
 */
static cs_status
repack(cs_cuda_ctx *ctx, const fold1d *f, const cs_dgrid *g,
       const ptrdiff_t shape[3], char *flat, int to_device)
{
    const cs_dgrid c = contiguous_view(shape, flat);
    const ptrdiff_t zero[3] = {0, 0, 0};
    ptrdiff_t box[3] = {shape[0], shape[1], shape[2]};
    if (f->active) {
        box[1] = f->rows - 1; /* the full rows */
    }
    CS_TRY(to_device ? cs_cuda_copy_box(ctx, g, zero, &c, zero, box)
                     : cs_cuda_copy_box(ctx, &c, zero, g, zero, box));
    if (!f->active) {
        return CS_OK;
    }
    const ptrdiff_t last[3] = {0, f->rows - 1, 0};
    const ptrdiff_t tail[3] = {1, 1, f->n - (f->rows - 1) * f->w};
    return to_device ? cs_cuda_copy_box(ctx, g, last, &c, last, tail)
                     : cs_cuda_copy_box(ctx, &c, last, g, last, tail);
}

/* Reserve `bytes` at the end of an arena plan; 0 on overflow. */
static int
arena_take(size_t *top, size_t bytes, size_t *offset)
{
    size_t at = (*top + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (at < *top || bytes > SIZE_MAX - at) {
        return 0;
    }
    *offset = at;
    *top = at + bytes;
    return 1;
}

/* ------------------------------------------------------------------------
 * steps
 * --------------------------------------------------------------------- */

/*
 * Halo refresh; constant halos are filled once per buffer (`*filled`),
 * except a fold's, whose cells copy neighbouring rows.
 */
static cs_status
refresh_halo(cs_cuda_ctx *ctx, const cs_dgrid *g, const fold1d *fold,
             cs_mode mode, double cval, int *filled)
{
    if (fold != NULL && fold->active) {
        return cs_cuda_fold1d_fill_halo(ctx, g, fold->n, mode, cval);
    }
    if (mode == CS_MODE_CONSTANT && *filled) {
        return CS_OK;
    }
    CS_TRY(cs_cuda_fill_halo(ctx, g, mode, cval));
    *filled = 1;
    return CS_OK;
}

/* A scratch pair for the band fix-up along one axis. */
typedef struct band_job {
    int active;
    cs_dgrid buf[2];
    int filled[2];
} band_job;

/*
 * The first half of the band fix-up of the pass src -> dst along axis a
 * (see the top comment), on ctx's stream: gather both edge strips of src
 * into job->buf[0] and run plan->depth unfused steps on them.  It reads
 * only src, so it runs beside the pass's main kernel.
 */
static cs_status
band_compute(cs_cuda_ctx *ctx, band_job *job, int a, const cs_dgrid *src,
             const cs_fusion_plan *plan, const cs_dkernel *k, cs_mode mode,
             double cval)
{
    const ptrdiff_t s = plan->strip[a];
    ptrdiff_t ext[3] = {src->n[0], src->n[1], src->n[2]};
    ptrdiff_t origin[3] = {0, 0, 0};
    ptrdiff_t far_src[3] = {0, 0, 0};
    ptrdiff_t far_buf[3] = {0, 0, 0};

    ext[a] = s;
    far_src[a] = src->n[a] - s;
    far_buf[a] = s;
    CS_TRY(cs_cuda_copy_box(ctx, &job->buf[0], origin, src, origin, ext));
    CS_TRY(cs_cuda_copy_box(ctx, &job->buf[0], far_buf, src, far_src, ext));
    int c = 0;
    for (int t = 0; t < plan->depth; t++) {
        CS_TRY(refresh_halo(ctx, &job->buf[c], NULL, mode, cval,
                            &job->filled[c]));
        CS_TRY(cs_cuda_core_step(ctx, &job->buf[c], &job->buf[1 - c], k));
        c = 1 - c;
    }
    return CS_OK;
}

/* The second half, after the pass's main kernel: scatter the outer bands
   of the strips' result (buffer depth % 2) into dst. */
static cs_status
band_scatter(cs_cuda_ctx *ctx, const band_job *job, int a,
             const cs_dgrid *dst, const cs_fusion_plan *plan)
{
    const ptrdiff_t s = plan->strip[a];
    const ptrdiff_t b = plan->band[a];
    const cs_dgrid *res = &job->buf[plan->depth % 2];
    ptrdiff_t ext[3] = {dst->n[0], dst->n[1], dst->n[2]};
    ptrdiff_t origin[3] = {0, 0, 0};
    ptrdiff_t far_dst[3] = {0, 0, 0};
    ptrdiff_t far_buf[3] = {0, 0, 0};

    ext[a] = b;
    far_dst[a] = dst->n[a] - b;
    far_buf[a] = 2 * s - b;
    CS_TRY(cs_cuda_copy_box(ctx, dst, origin, res, origin, ext));
    CS_TRY(cs_cuda_copy_box(ctx, dst, far_dst, res, far_buf, ext));
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * cs_cuda_apply
 * --------------------------------------------------------------------- */

/* What one apply owns; released by release_state on every path. */
typedef struct apply_state {
    cs_kernel composed;    /* the fused kernel (tensor-core path) */
    cs_layout2d layout;    /* its stencil2row layout (one z-plane's) */
    int layout_built;
    int use_tc3d;          /* composed has several z-planes: tc3d */
    cs_tc3d_plan planes;   /* tc3d: which planes are dense, point, zero */
    double *plane_w;       /* tc3d: the dense planes' WA, then their WB */
    const double *wa_host; /* weight matrices to upload: the layout's, */
    const double *wb_host; /* or plane_w's two halves */
    size_t w_count;        /* doubles in each of them */
    char *arena;           /* device memory */
    cudaStream_t stream;
    cudaEvent_t loop_start, loop_stop; /* time the step loop */
    /* band fix-ups: their strips' steps run on band_stream, beside each
       pass's main kernel, between the events src_ready and band_done */
    cudaStream_t band_stream;
    cudaEvent_t src_ready, band_done;
} apply_state;

static void
release_state(apply_state *s)
{
    if (s->band_stream != NULL) {
        (void)cudaStreamSynchronize(s->band_stream);
        (void)cudaStreamDestroy(s->band_stream);
    }
    if (s->src_ready != NULL) {
        (void)cudaEventDestroy(s->src_ready);
    }
    if (s->band_done != NULL) {
        (void)cudaEventDestroy(s->band_done);
    }
    if (s->stream != NULL) {
        (void)cudaStreamSynchronize(s->stream);
        (void)cudaStreamDestroy(s->stream);
    }
    if (s->loop_start != NULL) {
        (void)cudaEventDestroy(s->loop_start);
    }
    if (s->loop_stop != NULL) {
        (void)cudaEventDestroy(s->loop_stop);
    }
    if (s->arena != NULL) {
        (void)cudaFree(s->arena);
    }
    if (s->layout_built) {
        cs_layout2d_free(&s->layout);
    }
    free(s->plane_w);
    cs_kernel_free(&s->composed);
}

/*
 * The band fix-ups' stream and events.  The stream has the highest
 * priority, so that its small kernels take SMs as the pass's main kernel
 * frees them rather than after its last block.
 */
static cs_status
band_stream_create(cs_cuda_ctx *ctx, apply_state *s)
{
    int least = 0, greatest = 0;
    CS_CUDA_CHECK(ctx, cudaDeviceGetStreamPriorityRange(&least, &greatest),
                  "cudaDeviceGetStreamPriorityRange");
    cudaError_t e = cudaStreamCreateWithPriority(
        &s->band_stream, cudaStreamNonBlocking, greatest);
    if (e != cudaSuccess) {
        s->band_stream = NULL;
        return cs_cuda_fail(ctx, e, "cudaStreamCreateWithPriority (bands)");
    }
    e = cudaEventCreateWithFlags(&s->src_ready, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        s->src_ready = NULL;
        return cs_cuda_fail(ctx, e, "cudaEventCreateWithFlags (bands)");
    }
    e = cudaEventCreateWithFlags(&s->band_done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        s->band_done = NULL;
        return cs_cuda_fail(ctx, e, "cudaEventCreateWithFlags (bands)");
    }
    return CS_OK;
}

/* Start the band fix-ups of the pass reading src: once src is ready on
   the main stream, the band stream gathers and steps every banded axis's
   strips. */
static cs_status
bands_start(cs_cuda_ctx *ctx, const apply_state *s, band_job jobs[3],
            const cs_dgrid *src, const cs_fusion_plan *plan,
            const cs_dkernel *k, cs_mode mode, double cval)
{
    CS_CUDA_CHECK(ctx, cudaEventRecord(s->src_ready, ctx->stream),
                  "cudaEventRecord (band source ready)");
    CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(s->band_stream, s->src_ready, 0),
                  "cudaStreamWaitEvent (band stream)");
    cs_cuda_ctx side = *ctx;
    side.stream = s->band_stream;
    for (int a = 0; a < 3; a++) {
        if (jobs[a].active) {
            CS_TRY(band_compute(&side, &jobs[a], a, src, plan, k, mode, cval));
        }
    }
    CS_CUDA_CHECK(ctx, cudaEventRecord(s->band_done, s->band_stream),
                  "cudaEventRecord (bands done)");
    return CS_OK;
}

/* Finish them after the pass's main kernel: the main stream waits for the
   band stream, then scatters the bands into dst. */
static cs_status
bands_finish(cs_cuda_ctx *ctx, const apply_state *s, const band_job jobs[3],
             const cs_dgrid *dst, const cs_fusion_plan *plan)
{
    CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(ctx->stream, s->band_done, 0),
                  "cudaStreamWaitEvent (main stream)");
    for (int a = 0; a < 3; a++) {
        if (jobs[a].active) {
            CS_TRY(band_scatter(ctx, &jobs[a], a, dst, plan));
        }
    }
    return CS_OK;
}

/*
 * Before each pass: has the caller asked to stop?  Polled on the host
 * while it queues launches; once the launch queue is full each launch
 * waits for an earlier one to finish, so a request is seen within that
 * queue's worth of passes.  The caller's `out` is written only by the
 * download after the last pass, so it is left as it was.
 */
static cs_status
check_interrupt(cs_cuda_ctx *ctx)
{
    if (cs_interrupt_requested(ctx->intr)) {
        cs_cuda_message(ctx, "interrupted before the last pass");
        return CS_ERR_INTERRUPTED;
    }
    return CS_OK;
}

/* Argument checks: CS_OK or CS_ERR_INVALID with a message. */
static cs_status
check_args(cs_cuda_ctx *ctx, const double *in, const double *out,
           const ptrdiff_t shape[3], const cs_kernel *kernel, cs_mode mode,
           long steps, cs_cuda_path path)
{
    if (in == NULL || out == NULL || shape == NULL || kernel == NULL
        || kernel->weights == NULL) {
        cs_cuda_message(ctx, "cs_cuda_apply: NULL argument");
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < 3; a++) {
        if (shape[a] < 0) {
            cs_cuda_message(ctx, "cs_cuda_apply: negative grid extent");
            return CS_ERR_INVALID;
        }
        if (kernel->size[a] < 1 || kernel->size[a] % 2 == 0
            || kernel->size[a] > INT_MAX) {
            cs_cuda_message(ctx, "cs_cuda_apply: kernel extents must be odd");
            return CS_ERR_INVALID;
        }
    }
    if (cs_kernel_count(kernel) > INT_MAX) {
        cs_cuda_message(ctx, "cs_cuda_apply: kernel too large");
        return CS_ERR_INVALID;
    }
    if (shape[0] > 0 && shape[1] > 0 && shape[2] > 0
        && (shape[1] > PTRDIFF_MAX / 8 / shape[2]
            || shape[0] > PTRDIFF_MAX / 8 / (shape[1] * shape[2]))) {
        cs_cuda_message(ctx, "cs_cuda_apply: grid too large");
        return CS_ERR_INVALID;
    }
    if (steps < 0 || (int)mode < 0 || (int)mode >= CS_MODE_COUNT
        || (int)path < CS_CUDA_PATH_AUTO
        || (int)path > CS_CUDA_PATH_CUDA_CORE) {
        cs_cuda_message(ctx, "cs_cuda_apply: invalid steps, mode or path");
        return CS_ERR_INVALID;
    }
    return CS_OK;
}

/* cc3d's tap set for this kernel, -1 when cc3d does not run it (every
   kernel but a 3D one of several planes that cs_cuda_cc3d_shape takes). */
static int
cc3d_shape_of(const cs_kernel *kernel)
{
    const int size[3] = {(int)kernel->size[0], (int)kernel->size[1],
                         (int)kernel->size[2]};
    return kernel->size[0] > 1 ? cs_cuda_cc3d_shape(size, kernel->weights)
                               : -1;
}

/* Whether cc2d runs `kernel` and tensor cores would not fuse it: a
   planar square of side 5 or 7, a box or a plus. */
static int
cc2d_runs_better(const cs_kernel *kernel)
{
    const int size[3] = {(int)kernel->size[0], (int)kernel->size[1],
                         (int)kernel->size[2]};
    return size[1] >= 5 && cs_cuda_cc2d_shape(size, kernel->weights) >= 0;
}

/*
 * Is there a device, and may `path` run `kernel` on it?  Sets *use_tc and
 * the device's facts in ctx (SM count, shared memory a block may opt
 * into), which the launchers use.
 */
static cs_status
choose_path(cs_cuda_ctx *ctx, const cs_kernel *kernel, const fold1d *fold,
            cs_cuda_path path, int *use_tc)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cs_cuda_message(ctx, "no usable CUDA device: %s",
                        e != cudaSuccess ? cudaGetErrorString(e)
                                         : "none is visible");
        (void)cudaGetLastError();
        return CS_ERR_NO_DEVICE;
    }
    int dev = 0, major = 0;
    e = cudaGetDevice(&dev);
    if (e == cudaSuccess) {
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                   dev);
    }
    if (e == cudaSuccess) {
        e = cudaDeviceGetAttribute(&ctx->smem_optin,
                                   cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                   dev);
    }
    if (e == cudaSuccess) {
        e = cudaDeviceGetAttribute(&ctx->sms,
                                   cudaDevAttrMultiProcessorCount, dev);
    }
    if (e != cudaSuccess) {
        return cs_cuda_fail(ctx, e, "cudaDeviceGetAttribute");
    }
    /* 7 rows and columns: one stencil2row tile (tc2d, tc3d); 7 planes:
       tc3d's plane tables; a folded 1D grid: tc1d, up to 31 points */
    const int tc_fits =
        fold->active ? kernel->size[2] <= 31
                     : kernel->size[0] <= CS_TC3D_MAX_KZ
                           && kernel->size[1] <= 7 && kernel->size[2] <= 7;
    const int tc_hw = major >= 9; /* FP64 m16n8k4 MMA: sm_90 */
    if (path == CS_CUDA_PATH_TENSOR_CORE && !tc_fits
        && kernel->ndim == 1) {
        cs_cuda_message(ctx,
                        "the tensor-core path runs 1D kernels up to 31 "
                        "points; this one has %td (use the CUDA-core path)",
                        kernel->size[2]);
        return CS_ERR_UNSUPPORTED;
    }
    if (path == CS_CUDA_PATH_TENSOR_CORE && !tc_fits) {
        cs_cuda_message(ctx,
                        "the tensor-core path runs kernels up to 7 per axis "
                        "(7 x 7 x 7); this one is %td x %td x %td",
                        kernel->size[0], kernel->size[1], kernel->size[2]);
        return CS_ERR_UNSUPPORTED;
    }
    if (path == CS_CUDA_PATH_TENSOR_CORE && !tc_hw) {
        cs_cuda_message(ctx, "the tensor-core path needs sm_90 or newer "
                             "(FP64 m16n8k4 MMA); this device is sm_%d0",
                        major);
        return CS_ERR_UNSUPPORTED;
    }
    /* AUTO: tensor cores wherever they run the kernel, measured faster
       than CUDA cores for every 1D preset and for the 2D kernels they
       fuse (side 3: three steps per pass); planar squares of side 5 and
       7 that cc2d runs (boxes, a plus such as star2d13p, outer products
       such as box2d49p), which tensor cores cannot fuse, and the 3D
       kernels that cc3d streams
       along z (cubes of side 3 and 5, 7-point stars and their powers)
       go to CUDA cores (benchmarks/results/h100_1d.md, h100_2d.md,
       h100_3d.md, h100_3d_paths.md) */
    *use_tc = path == CS_CUDA_PATH_TENSOR_CORE
              || (path == CS_CUDA_PATH_AUTO && tc_fits && tc_hw
                  && cc3d_shape_of(kernel) < 0 && !cc2d_runs_better(kernel));
    return CS_OK;
}

/* CONVSTENCIL_CUDA_MAX_DEPTH into *cap (0 when it is not set). */
static cs_status
env_max_depth(cs_cuda_ctx *ctx, long *cap)
{
    *cap = 0;
    const char *env = getenv("CONVSTENCIL_CUDA_MAX_DEPTH");
    if (env == NULL || env[0] == '\0') {
        return CS_OK;
    }
    char *end = NULL;
    errno = 0;
    const long v = strtol(env, &end, 10);
    if (errno != 0 || end == env || *end != '\0' || v < 1) {
        cs_cuda_message(ctx, "CONVSTENCIL_CUDA_MAX_DEPTH must be an integer "
                             ">= 1, not \"%s\"",
                        env);
        return CS_ERR_INVALID;
    }
    *cap = v;
    return CS_OK;
}

/*
 * The fused kernel's largest side per axis: 7 (one tile; 7 planes for
 * tc3d), or 31 points for a folded 1D grid (tc1d).  Kernels of several
 * z-planes are not fused by default: on the H100 a fused 3D pass costs
 * more than the steps it saves (benchmarks/results/h100_3d_depth.md).
 * CONVSTENCIL_CUDA_MAX_DEPTH (an integer >= 1; for measuring what fusion
 * buys) sets the fused depth's limit instead, in every dimension: a side
 * of cap*(k-1)+1 admits at most cap steps of a kernel of side k > 1.
 */
static cs_status
fusion_max_side(cs_cuda_ctx *ctx, const cs_kernel *kernel,
                const fold1d *fold, ptrdiff_t max_side[3])
{
    for (int a = 0; a < 3; a++) {
        max_side[a] = fold->active ? (a == 2 ? 31 : 1) : 7;
    }
    long cap = 0;
    CS_TRY(env_max_depth(ctx, &cap));
    if (cap == 0) {
        if (kernel->size[0] > 1) {
            for (int a = 0; a < 3; a++) {
                max_side[a] = kernel->size[a]; /* depth 1 */
            }
        }
        return CS_OK;
    }
    for (int a = 0; a < 3; a++) {
        if (kernel->size[a] > 1 && cap < max_side[a]) {
            const ptrdiff_t side = cap * (kernel->size[a] - 1) + 1;
            max_side[a] = side < max_side[a] ? side : max_side[a];
        }
    }
    return CS_OK;
}

/*
 * tc3d: classify the composed kernel's z-planes and build each dense
 * plane's weight matrices for the shared layout (s->plane_w).
 */
static cs_status
plan_planes(cs_cuda_ctx *ctx, apply_state *s)
{
    CS_TRY(cs_cuda_tc3d_classify(ctx, &s->composed, &s->planes));
    const size_t count = (size_t)s->layout.kpad * (size_t)s->layout.group;
    const size_t dense = (size_t)s->planes.dense;
    const size_t plane = (size_t)(s->composed.size[1] * s->composed.size[2]);
    s->w_count = dense * count;
    if (dense == 0) {
        return CS_OK; /* point planes only: no weight matrices */
    }
    s->plane_w = (double *)malloc(2 * dense * count * sizeof(double));
    if (s->plane_w == NULL) {
        cs_cuda_message(ctx, "tensor-core plan: out of host memory");
        return CS_ERR_NOMEM;
    }
    size_t d = 0;
    for (int dz = 0; dz < s->planes.kz; dz++) {
        if ((s->planes.dense_mask >> dz) & 1u) {
            cs_status st = cs_layout2d_weights(
                &s->layout, s->composed.weights + (size_t)dz * plane,
                s->plane_w + d * count, s->plane_w + (dense + d) * count);
            if (st != CS_OK) {
                cs_cuda_message(ctx, "tensor-core plan: plane weights: %s",
                                cs_status_string(st));
                return st;
            }
            d++;
        }
    }
    s->wa_host = s->plane_w;
    s->wb_host = s->plane_w + dense * count;
    return CS_OK;
}

/* Fusion plan, composed kernel and checked layout of the tensor-core path
   (and tc3d's planes). */
static cs_status
plan_tensor_core(cs_cuda_ctx *ctx, apply_state *s, const cs_kernel *kernel,
                 long steps, cs_mode mode, const ptrdiff_t shape[3],
                 const fold1d *fold, cs_fusion_plan *plan)
{
    ptrdiff_t max_side[3];
    CS_TRY(fusion_max_side(ctx, kernel, fold, max_side));
    cs_status st =
        cs_fusion_plan_make(kernel, steps, mode, shape, max_side, plan);
    if (st == CS_OK) {
        st = cs_kernel_compose(kernel, plan->depth, &s->composed);
    }
    /* composed kernels past 7 columns (1D only) take tc1d's P = 15, 31 */
    const int wide = s->composed.weights != NULL && s->composed.size[2] > 7;
    if (st == CS_OK) {
        /* every z-plane has this layout; the first plane's weights fill
           the layout's own matrices, which tc2d uses (one plane) */
        s->layout_built = 1;
        st = cs_layout2d_build(s->composed.weights, (int)s->composed.size[1],
                               (int)s->composed.size[2], CS_TC2D_GROUPS,
                               wide ? cs_cuda_tc1d_tile_rows(
                                          (int)s->composed.size[2])
                                    : CS_TC2D_TILE_ROWS,
                               &s->layout);
    }
    if (st != CS_OK) {
        cs_cuda_message(ctx, "tensor-core plan (depth %d): %s", plan->depth,
                        cs_status_string(st));
        return st;
    }
    if (wide) {
        CS_TRY(cs_cuda_tc1d_check_layout(ctx, &s->layout,
                                         (size_t)ctx->smem_optin));
    } else {
        CS_TRY(cs_cuda_tc2d_check_layout(ctx, &s->layout,
                                         (size_t)ctx->smem_optin));
    }
    s->use_tc3d = s->composed.size[0] > 1;
    if (s->use_tc3d) {
        return plan_planes(ctx, s);
    }
    s->wa_host = s->layout.weight_a;
    s->wb_host = s->layout.weight_b;
    s->w_count = (size_t)s->layout.kpad * (size_t)s->layout.group;
    return CS_OK;
}

/*
 * Fusion plan of the CUDA-core path: a 7-point star in 3D (cc3d's
 * diamond of side 3) fuses two steps into one cc3d pass of its square,
 * a diamond of side 5, whose pass alone advances time 1.9 times as fast
 * as single steps (1.6 times with its band recomputed); three steps
 * (side 7) and fused boxes run slower than they save
 * (benchmarks/results/h100_3d_depth_cuda_core.md).  Every other kernel
 * runs step by step.  CONVSTENCIL_CUDA_MAX_DEPTH caps the depth here
 * too.  The depth stays at most 2: fused_band.cu recomputes the band of
 * two steps.
 */
static cs_status
plan_cuda_core(cs_cuda_ctx *ctx, apply_state *s, const cs_kernel *kernel,
               long steps, cs_mode mode, const ptrdiff_t shape[3],
               const fold1d *fold, cs_fusion_plan *plan)
{
    long cap = 0;
    CS_TRY(env_max_depth(ctx, &cap));
    const long depth = cap == 0 || cap > 2 ? 2 : cap;
    if (fold->active || kernel->size[0] != 3 || depth < 2
        || cc3d_shape_of(kernel) != CS_CC3D_DIAMOND) {
        return CS_OK; /* step by step: the plan as it is */
    }
    const ptrdiff_t max_side[3] = {2 * depth + 1, 2 * depth + 1,
                                   2 * depth + 1};
    cs_status st =
        cs_fusion_plan_make(kernel, steps, mode, shape, max_side, plan);
    if (st == CS_OK && plan->depth == 1) {
        /* no fused pass after all (one step, or a grid narrower than the
           band's strips): every step is a single CUDA-core step */
        plan->passes = 0;
        plan->remainder = steps;
    } else if (st == CS_OK) {
        st = cs_kernel_compose(kernel, plan->depth, &s->composed);
    }
    if (st != CS_OK) {
        cs_cuda_message(ctx, "CUDA-core plan (depth %d): %s", plan->depth,
                        cs_status_string(st));
    }
    return st;
}

static cs_status
upload(cs_cuda_ctx *ctx, char *dst, const void *src, size_t bytes,
       const char *what)
{
    if (bytes > 0) {
        CS_CUDA_CHECK(ctx,
                      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                      ctx->stream),
                      what);
    }
    return CS_OK;
}

/*
 * Allocate, upload, run the step loop of `plan`, download.  The step
 * loop's device time (no transfers) goes to *loop_seconds.  `user_shape`
 * is the caller's grid; a fold runs it as {1, rows, w}.
 */
static cs_status
run_on_device(cs_cuda_ctx *ctx, apply_state *s, const double *in,
              double *out, const ptrdiff_t user_shape[3],
              const cs_kernel *kernel, cs_mode mode, double cval, int use_tc,
              const cs_fusion_plan *plan, const fold1d *fold,
              double *loop_seconds)
{
    const size_t count =
        (size_t)(user_shape[0] * user_shape[1] * user_shape[2]);
    ptrdiff_t shape[3] = {user_shape[0], user_shape[1], user_shape[2]};
    if (fold->active) {
        shape[1] = fold->rows;
        shape[2] = fold->w;
    }

    /* ---- geometry: main grids, band strips (both edge strips stacked
       along their axis), parameters; one arena ---- */
    ptrdiff_t r[3], halo[3], n_strip[3][3];
    for (int a = 0; a < 3; a++) {
        r[a] = cs_kernel_radius(kernel, a);
        halo[a] = r[a];
        for (int b = 0; b < 3; b++) {
            n_strip[a][b] = shape[b];
        }
        /* axis a's strip grid: both edge strips stacked along a */
        n_strip[a][a] = 2 * plan->strip[a];
    }
    /* a fused CUDA-core pass (cc3d) runs the composed kernel */
    const int cc_fused = !use_tc && plan->depth > 1;
    if (cc_fused) {
        for (int a = 0; a < 3; a++) {
            halo[a] = (s->composed.size[a] - 1) / 2;
        }
    }
    if (use_tc) {
        /* the fused kernel's reach in z and y, and the 3 columns of X */
        halo[0] = (s->composed.size[0] - 1) / 2;
        halo[1] = (s->composed.size[1] - 1) / 2;
        halo[2] = s->layout.halo_x; /* (P - 1) / 2: 3, or 7, 15 for tc1d */
    }
    band_job jobs[3];
    memset(jobs, 0, sizeof(jobs));
    grid_geom gmain, gstrip[3];
    int ok = geom_make(shape, halo, &gmain);
    for (int a = 0; a < 3; a++) {
        /* a fold replays its two ends instead (fold1d.cu), a fused
           CUDA-core pass recomputes its band in place (fused_band.cu) */
        jobs[a].active = plan->needs_band && plan->band[a] > 0
                         && !fold->active && !cc_fused;
        if (jobs[a].active) {
            ok = ok && geom_make(n_strip[a], r, &gstrip[a]);
        }
    }
    const size_t kbytes = (size_t)cs_kernel_count(kernel) * sizeof(double);
    const size_t cbytes =
        cc_fused ? (size_t)cs_kernel_count(&s->composed) * sizeof(double)
                 : 0;
    const size_t wbytes = use_tc ? s->w_count * sizeof(double) : 0;
    const size_t lbytes =
        use_tc ? (size_t)4 * s->layout.in_cols * sizeof(int) : 0;
    size_t top = 0, off_main[2] = {0, 0}, off_strip[3][2] = {{0}};
    size_t off_w = 0, off_wc = 0, off_wa = 0, off_wb = 0, off_lut = 0;
    ok = ok && arena_take(&top, gmain.bytes, &off_main[0])
         && arena_take(&top, gmain.bytes, &off_main[1])
         && arena_take(&top, kbytes, &off_w)
         && arena_take(&top, cbytes, &off_wc)
         && arena_take(&top, wbytes, &off_wa)
         && arena_take(&top, wbytes, &off_wb)
         && arena_take(&top, lbytes, &off_lut);
    for (int a = 0; a < 3; a++) {
        for (int i = 0; i < 2 && jobs[a].active; i++) {
            ok = ok && arena_take(&top, gstrip[a].bytes, &off_strip[a][i]);
        }
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_apply: a %td x %td x %td grid is too "
                             "large to address",
                        shape[0], shape[1], shape[2]);
        return CS_ERR_DEVICE_NOMEM;
    }
    cudaError_t e = cudaMalloc((void **)&s->arena, top);
    if (e != cudaSuccess) {
        s->arena = NULL;
        cs_cuda_message(ctx,
                        "cudaMalloc of %.1f MiB (%zu bytes: two padded grids "
                        "of %zu bytes, scratch and parameters) failed: %s",
                        (double)top / (1024.0 * 1024.0), top, gmain.bytes,
                        cudaGetErrorString(e));
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? CS_ERR_DEVICE_NOMEM
                                              : CS_ERR_CUDA;
    }
    e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        s->stream = NULL;
        return cs_cuda_fail(ctx, e, "cudaStreamCreateWithFlags");
    }
    ctx->stream = s->stream;
    if (ctx->poison_memory) {
        CS_CUDA_CHECK(ctx, cudaMemsetAsync(s->arena, 0xff, top, s->stream),
                      "cudaMemsetAsync (poison device memory)");
    }
    e = cudaEventCreate(&s->loop_start);
    if (e != cudaSuccess) {
        s->loop_start = NULL;
        return cs_cuda_fail(ctx, e, "cudaEventCreate");
    }
    e = cudaEventCreate(&s->loop_stop);
    if (e != cudaSuccess) {
        s->loop_stop = NULL;
        return cs_cuda_fail(ctx, e, "cudaEventCreate");
    }
    const int banded = jobs[0].active || jobs[1].active || jobs[2].active;
    if (banded) {
        CS_TRY(band_stream_create(ctx, s));
    }

    char *arena = s->arena;
    cs_dgrid g[2] = {geom_view(&gmain, arena + off_main[0]),
                     geom_view(&gmain, arena + off_main[1])};
    for (int a = 0; a < 3; a++) {
        for (int i = 0; i < 2 && jobs[a].active; i++) {
            jobs[a].buf[i] = geom_view(&gstrip[a], arena + off_strip[a][i]);
        }
    }
    cs_dkernel dk, dkc; /* the kernel; a fused CUDA-core pass's */
    dk.weights = (const double *)(arena + off_w);
    dk.host_weights = kernel->weights;
    dkc.weights = (const double *)(arena + off_wc);
    dkc.host_weights = s->composed.weights;
    for (int a = 0; a < 3; a++) {
        dk.size[a] = (int)kernel->size[a];
        dkc.size[a] = (int)s->composed.size[a];
    }
    cs_tc3d_plan tc3 = s->planes; /* tc3d: the planes; tc3.tile: both */
    cs_tc2d_plan *tc = &tc3.tile;
    memset(tc, 0, sizeof(*tc));
    if (use_tc) {
        tc->ky = (int)s->composed.size[1];
        tc->payload = s->layout.payload;
        tc->ld = s->layout.ld;
        tc->matrix_size = s->layout.matrix_size;
        tc->lut = (const int *)(arena + off_lut);
        tc->wa = (const double *)(arena + off_wa);
        tc->wb = (const double *)(arena + off_wb);
        /* tc2d's persistent blocks leave SMs to the band stream, whose
           kernels would otherwise wait for the end of the pass */
        tc->spare_sms = banded ? BAND_SPARE_SMS : 0;
    }

    /* ---- uploads: parameters, then the grid, contiguous, into the spare
       buffer, repacked into the padded one on the device ---- */
    CS_TRY(upload(ctx, arena + off_w, kernel->weights, kbytes,
                  "cudaMemcpyAsync (upload weights)"));
    if (cc_fused) {
        CS_TRY(upload(ctx, arena + off_wc, s->composed.weights, cbytes,
                      "cudaMemcpyAsync (upload fused weights)"));
    }
    if (use_tc) {
        CS_TRY(upload(ctx, arena + off_wa, s->wa_host, wbytes,
                      "cudaMemcpyAsync (upload weight matrix A)"));
        CS_TRY(upload(ctx, arena + off_wb, s->wb_host, wbytes,
                      "cudaMemcpyAsync (upload weight matrix B)"));
        CS_TRY(upload(ctx, arena + off_lut, s->layout.lut, lbytes,
                      "cudaMemcpyAsync (upload lookup table)"));
    }
    CS_TRY(upload(ctx, arena + off_main[1], in, count * sizeof(double),
                  "cudaMemcpyAsync (upload grid)"));
    CS_TRY(repack(ctx, fold, &g[0], shape, arena + off_main[1], 1));

    /* ---- the step loop ---- */
    CS_CUDA_CHECK(ctx, cudaEventRecord(s->loop_start, s->stream),
                  "cudaEventRecord (step loop start)");
    int cur = 0;
    int filled[2] = {0, 0}; /* constant mode: halo filled once per buffer */
    for (long pass = 0; pass < plan->passes; pass++) {
        CS_TRY(check_interrupt(ctx));
        CS_TRY(refresh_halo(ctx, &g[cur], fold, mode, cval, &filled[cur]));
        if (banded) {
            CS_TRY(bands_start(ctx, s, jobs, &g[cur], plan, &dk, mode, cval));
        }
        if (cc_fused) {
            CS_TRY(cs_cuda_core_step(ctx, &g[cur], &g[1 - cur], &dkc));
        } else if (s->use_tc3d) {
            CS_TRY(cs_cuda_tc3d_pass(ctx, &g[cur], &g[1 - cur], &tc3));
        } else if (tc->payload > 7) {
            CS_TRY(cs_cuda_tc1d_pass(ctx, &g[cur], &g[1 - cur], tc));
        } else {
            CS_TRY(cs_cuda_tc2d_pass(ctx, &g[cur], &g[1 - cur], tc));
        }
        if (cc_fused && plan->needs_band) {
            CS_TRY(cs_cuda_fused_band(ctx, &g[cur], &g[1 - cur], &dk, mode,
                                      cval));
        }
        if (fold->active && plan->needs_band) {
            CS_TRY(cs_cuda_fold1d_fix_ends(ctx, &g[cur], &g[1 - cur],
                                           fold->n, &dk, plan->depth, mode,
                                           cval));
        }
        if (banded) {
            CS_TRY(bands_finish(ctx, s, jobs, &g[1 - cur], plan));
        }
        cur = 1 - cur;
    }
    for (long t = 0; t < plan->remainder; t++) {
        CS_TRY(check_interrupt(ctx));
        CS_TRY(refresh_halo(ctx, &g[cur], fold, mode, cval, &filled[cur]));
        CS_TRY(cs_cuda_core_step(ctx, &g[cur], &g[1 - cur], &dk));
        cur = 1 - cur;
    }

    CS_CUDA_CHECK(ctx, cudaEventRecord(s->loop_stop, s->stream),
                  "cudaEventRecord (step loop end)");

    /* ---- download through the spare buffer ---- */
    char *staging = arena + off_main[1 - cur];
    CS_TRY(repack(ctx, fold, &g[cur], shape, staging, 0));
    e = cudaMemcpyAsync(out, staging, count * sizeof(double),
                        cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(s->stream);
    }
    if (e != cudaSuccess) {
        /* an asynchronous kernel fault surfaces here too: run with
           CONVSTENCIL_CUDA_SYNC=1 to name the kernel */
        return cs_cuda_fail(ctx, e, "cudaMemcpyAsync (download grid)");
    }
    float ms = 0.0f;
    CS_CUDA_CHECK(ctx, cudaEventElapsedTime(&ms, s->loop_start, s->loop_stop),
                  "cudaEventElapsedTime (step loop)");
    *loop_seconds = 1e-3 * (double)ms;
    return CS_OK;
}

cs_status
cs_cuda_apply(const double *in, double *out, const ptrdiff_t shape[3],
              const cs_kernel *kernel, cs_mode mode, double cval,
              long steps, cs_cuda_path path, cs_run_info *info,
              const cs_interrupt *intr, char *err, size_t err_len)
{
    cs_cuda_ctx ctx;
    ctx.intr = intr;
    const char *sync_env = getenv("CONVSTENCIL_CUDA_SYNC");
    ctx.stream = NULL;
    ctx.sync_each_launch = sync_env != NULL && strcmp(sync_env, "0") != 0;
    const char *poison_env = getenv("CONVSTENCIL_CUDA_POISON");
    ctx.poison_memory = poison_env != NULL && strcmp(poison_env, "0") != 0;
    ctx.err = err;
    ctx.err_len = err_len;
    ctx.sms = 0; /* choose_path reads the device's facts */
    ctx.smem_optin = 0;
    if (err != NULL && err_len > 0) {
        err[0] = '\0';
    }
    if (info != NULL) {
        info->backend = "cuda";
        info->path = "cuda-core";
        info->fused_depth = 1;
        info->fused_passes = 0;
        info->unfused_steps = steps;
        info->threads = 0;
        info->device_seconds = -1.0;
    }

    cs_status st = check_args(&ctx, in, out, shape, kernel, mode, steps, path);
    int use_tc = 0;
    fold1d fold;
    memset(&fold, 0, sizeof(fold));
    if (st == CS_OK) {
        fold = fold1d_plan(shape, kernel);
        st = choose_path(&ctx, kernel, &fold, path, &use_tc);
    }
    if (st != CS_OK) {
        return st;
    }
    if (info != NULL && use_tc) {
        info->path = "tensor-core";
    }
    const ptrdiff_t count = shape[0] * shape[1] * shape[2];
    if (count == 0 || steps == 0) {
        if (count > 0 && out != in) {
            memmove(out, in, (size_t)count * sizeof(double));
        }
        if (info != NULL) {
            info->unfused_steps = 0;
        }
        return CS_OK;
    }

    apply_state s;
    memset(&s, 0, sizeof(s));
    cs_fusion_plan plan;
    memset(&plan, 0, sizeof(plan));
    plan.depth = 1; /* the CUDA-core path: every step unfused */
    plan.remainder = steps;
    if (use_tc) {
        st = plan_tensor_core(&ctx, &s, kernel, steps, mode, shape, &fold,
                              &plan);
    } else {
        st = plan_cuda_core(&ctx, &s, kernel, steps, mode, shape, &fold,
                            &plan);
    }
    if (st == CS_OK) {
        if (info != NULL) {
            info->fused_depth = plan.depth;
            info->fused_passes = plan.passes;
            info->unfused_steps = plan.remainder;
        }
        double loop_seconds = -1.0;
        st = run_on_device(&ctx, &s, in, out, shape, kernel, mode, cval,
                           use_tc, &plan, &fold, &loop_seconds);
        if (info != NULL && st == CS_OK) {
            info->device_seconds = loop_seconds;
        }
    }
    release_state(&s);
    return st;
}
