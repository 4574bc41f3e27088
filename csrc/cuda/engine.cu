/*
 * engine.cu -- cs_cuda_apply: the GPU engine's orchestration.
 *
 * Data flow: one device arena (a block kept between calls,
 * resources.cu) holds two padded ping-pong grids and the band fix-up's
 * strip buffers; the parameters (weights, stencil2row tables) go to the
 * lane's parameter block.  The grid is read once into the padded grid
 * (a host grid uploaded through pinned staging into the spare grid,
 * contiguous, then repacked; a device array read where it is), the whole
 * step loop runs on one stream (with a second one for the band fix-ups,
 * below), and the result is written out once.  Every exit gives the
 * lane and the block back.
 *
 * Non-finite values: the load notes whether the input holds a NaN or an
 * infinity, and the result is checked before it leaves (finite values
 * can overflow); either sends the run to the masked path (run_masked:
 * direct.cu's kernel step by step over the nonzero taps, which puts NaN
 * and infinities exactly where scipy.ndimage does; zeros of padded
 * weight matrices and tiles would spread them).  Finite grids pay one
 * flag read at the end of the call, and device grids one read of the
 * result.  A steps=1 call on device arrays runs the direct kernel alone.
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
 * replays the two ends of the 1D grid, and the load and the result's
 * staging repack the points into and out of the rows.
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
#include "resources.cuh"
#include "transfer.cuh"
#include "direct.cuh"
#include "../host_copy.h"
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
    cs_kernel composed;    /* the fused kernel */
    cs_layout2d layout;    /* its stencil2row layout (one z-plane's) */
    int layout_built;
    int use_tc3d;          /* composed has several z-planes: tc3d */
    cs_tc3d_plan planes;   /* tc3d: which planes are dense, point, zero */
    double *plane_w;       /* tc3d: the dense planes' WA, then their WB */
    const double *wa_host; /* weight matrices to upload: the layout's, */
    const double *wb_host; /* or plane_w's two halves */
    size_t w_count;        /* doubles in each of them */
    cs_lane *lane;         /* streams, events, staging, parameters */
    cs_block *block;       /* device memory of the grids and strips */
    char *params_host;     /* the parameter block, as uploaded */
    int nonfinite;         /* the masked path ran */
} apply_state;

/*
 * Give the lane and the block back (after the work queued on
 * ctx->stream: the next user waits for it) and free the host side.
 */
static void
release_state(cs_cuda_ctx *ctx, apply_state *s)
{
    if (s->block != NULL) {
        cs_block_give(ctx, s->block);
    }
    if (s->lane != NULL) {
        cs_lane_give(s->lane, ctx->stream);
    }
    if (s->layout_built) {
        cs_layout2d_free(&s->layout);
    }
    free(s->plane_w);
    free(s->params_host);
    cs_kernel_free(&s->composed);
}

/* Start the band fix-ups of the pass reading src: once src is ready on
   the main stream, the band stream gathers and steps every banded axis's
   strips. */
static cs_status
bands_start(cs_cuda_ctx *ctx, const apply_state *s, band_job jobs[3],
            const cs_dgrid *src, const cs_fusion_plan *plan,
            const cs_dkernel *k, cs_mode mode, double cval)
{
    const cs_lane *l = s->lane;
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

/* Finish them after the pass's main kernel: the main stream waits for the
   band stream, then scatters the bands into dst. */
static cs_status
bands_finish(cs_cuda_ctx *ctx, const apply_state *s, const band_job jobs[3],
             const cs_dgrid *dst, const cs_fusion_plan *plan)
{
    CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(ctx->stream, s->lane->band_done, 0),
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
 * while it queues launches, `steps_done` steps into the run; once the
 * launch queue is full each launch waits for an earlier one to finish,
 * so a request is seen within that queue's worth of passes.  The
 * caller's `out` is written only after the last pass, so it is left as
 * it was.
 */
static cs_status
check_interrupt(cs_cuda_ctx *ctx, long steps_done)
{
    if (cs_interrupt_requested(ctx->intr, steps_done)) {
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
    CS_TRY(cs_cuda_device_facts(ctx));
    const int major = ctx->cc_major;
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

/* ------------------------------------------------------------------------
 * one call on the device: arena, parameters, load, step loop, store
 * --------------------------------------------------------------------- */

/* Where the pieces of a call live in its device block. */
typedef struct arena_plan {
    ptrdiff_t shape[3]; /* the grid as the engine runs it (a fold's rows) */
    grid_geom gmain, gstrip[3];
    band_job jobs[3];
    int cc_fused;       /* a fused CUDA-core pass (cc3d) */
    size_t off_main[2], off_strip[3][2];
    size_t top;
} arena_plan;

/*
 * The padded main grids (halo: the reach of what runs on them) and, per
 * banded axis, the band fix-up's strip grids (both edge strips stacked
 * along the axis).
 */
static cs_status
arena_plan_make(cs_cuda_ctx *ctx, const apply_state *s,
                const ptrdiff_t user_shape[3], const cs_kernel *kernel,
                int use_tc, const cs_fusion_plan *plan, const fold1d *fold,
                arena_plan *ap)
{
    memset(ap, 0, sizeof(*ap));
    for (int a = 0; a < 3; a++) {
        ap->shape[a] = user_shape[a];
    }
    if (fold->active) {
        ap->shape[1] = fold->rows;
        ap->shape[2] = fold->w;
    }
    ptrdiff_t r[3], halo[3], n_strip[3][3];
    for (int a = 0; a < 3; a++) {
        r[a] = cs_kernel_radius(kernel, a);
        halo[a] = r[a];
        for (int b = 0; b < 3; b++) {
            n_strip[a][b] = ap->shape[b];
        }
        n_strip[a][a] = 2 * plan->strip[a];
    }
    ap->cc_fused = !use_tc && plan->depth > 1;
    if (ap->cc_fused) {
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
    int ok = geom_make(ap->shape, halo, &ap->gmain)
             && arena_take(&ap->top, ap->gmain.bytes, &ap->off_main[0])
             && arena_take(&ap->top, ap->gmain.bytes, &ap->off_main[1]);
    for (int a = 0; a < 3; a++) {
        /* a fold replays its two ends instead (fold1d.cu), a fused
           CUDA-core pass recomputes its band in place (fused_band.cu) */
        band_job *job = &ap->jobs[a];
        job->active = plan->needs_band && plan->band[a] > 0 && !fold->active
                      && !ap->cc_fused;
        if (job->active) {
            ok = ok && geom_make(n_strip[a], r, &ap->gstrip[a])
                 && arena_take(&ap->top, ap->gstrip[a].bytes,
                               &ap->off_strip[a][0])
                 && arena_take(&ap->top, ap->gstrip[a].bytes,
                               &ap->off_strip[a][1]);
        }
    }
    if (!ok) {
        cs_cuda_message(ctx, "a %td x %td x %td grid is too large to "
                             "address",
                        ap->shape[0], ap->shape[1], ap->shape[2]);
        return CS_ERR_DEVICE_NOMEM;
    }
    return CS_OK;
}

/* The kernels' parameters as one block: host copy, then device views. */
typedef struct param_plan {
    size_t off_w, off_wc, off_wa, off_wb, off_lut, top;
    size_t kbytes, cbytes, wbytes, lbytes;
} param_plan;

/*
 * Gather the weights (and the fused kernel's, the weight matrices and
 * the lookup table of the tensor-core path) into one host block, have
 * the lane's parameter block hold it (no upload when it already does),
 * and point the kernels' views at it.
 */
static cs_status
upload_params(cs_cuda_ctx *ctx, apply_state *s, const cs_kernel *kernel,
              int use_tc, int cc_fused, cs_dkernel *dk, cs_dkernel *dkc,
              cs_tc2d_plan *tc)
{
    param_plan pp;
    memset(&pp, 0, sizeof(pp));
    pp.kbytes = (size_t)cs_kernel_count(kernel) * sizeof(double);
    pp.cbytes =
        cc_fused ? (size_t)cs_kernel_count(&s->composed) * sizeof(double) : 0;
    pp.wbytes = use_tc ? s->w_count * sizeof(double) : 0;
    pp.lbytes = use_tc ? (size_t)4 * s->layout.in_cols * sizeof(int) : 0;
    int ok = arena_take(&pp.top, pp.kbytes, &pp.off_w)
             && arena_take(&pp.top, pp.cbytes, &pp.off_wc)
             && arena_take(&pp.top, pp.wbytes, &pp.off_wa)
             && arena_take(&pp.top, pp.wbytes, &pp.off_wb)
             && arena_take(&pp.top, pp.lbytes, &pp.off_lut);
    s->params_host = ok ? (char *)calloc(1, pp.top) : NULL;
    if (s->params_host == NULL) {
        cs_cuda_message(ctx, "out of host memory (kernel parameters)");
        return CS_ERR_NOMEM;
    }
    char *h = s->params_host;
    memcpy(h + pp.off_w, kernel->weights, pp.kbytes);
    if (cc_fused) {
        memcpy(h + pp.off_wc, s->composed.weights, pp.cbytes);
    }
    if (use_tc && pp.wbytes > 0) {
        memcpy(h + pp.off_wa, s->wa_host, pp.wbytes);
        memcpy(h + pp.off_wb, s->wb_host, pp.wbytes);
    }
    if (use_tc) {
        memcpy(h + pp.off_lut, s->layout.lut, pp.lbytes);
    }
    char *dev = NULL;
    CS_TRY(cs_lane_params(ctx, s->lane, h, pp.top, &dev));

    dk->weights = (const double *)(dev + pp.off_w);
    dk->host_weights = kernel->weights;
    dkc->weights = (const double *)(dev + pp.off_wc);
    dkc->host_weights = s->composed.weights;
    for (int a = 0; a < 3; a++) {
        dk->size[a] = (int)kernel->size[a];
        dkc->size[a] = (int)s->composed.size[a];
    }
    if (use_tc) {
        tc->ky = (int)s->composed.size[1];
        tc->payload = s->layout.payload;
        tc->ld = s->layout.ld;
        tc->matrix_size = s->layout.matrix_size;
        tc->lut = (const int *)(dev + pp.off_lut);
        tc->wa = (const double *)(dev + pp.off_wa);
        tc->wb = (const double *)(dev + pp.off_wb);
    }
    return CS_OK;
}

/* Where the grid comes from and goes to: host arrays, or device arrays. */
typedef struct grid_io {
    const double *host_in;
    double *host_out;
    const cs_darray *dev_in;
    const cs_darray *dev_out;
    int out_reads_in; /* dev_out overlaps dev_in: a rerun could not read
                         the input once the result is stored */
} grid_io;

/*
 * A device array as the engine's boxes see it: the whole grid, or for a
 * fold its full rows ({1, rows - 1, w}: a row is w elements on) and its
 * last row (the tail) from element (rows - 1) * w on.
 */
static void
fold_views(const cs_darray *a, const fold1d *f, cs_darray *rows,
           cs_darray *tail)
{
    *rows = *a;
    *tail = *a;
    if (f->active) {
        const ptrdiff_t sx = a->strides[2];
        rows->strides[0] = 0;
        rows->strides[1] = f->w * sx;
        tail->strides[0] = 0;
        tail->strides[1] = f->w * sx;
        tail->data = (char *)a->data + (f->rows - 1) * f->w * sx;
    }
}

/* The boxes of a fold (full rows, then the tail) or the whole grid. */
static void
io_boxes(const fold1d *f, const ptrdiff_t shape[3], ptrdiff_t box[3],
         ptrdiff_t tail_at[3], ptrdiff_t tail[3])
{
    for (int a = 0; a < 3; a++) {
        box[a] = shape[a];
        tail_at[a] = 0;
        tail[a] = 0;
    }
    if (f->active) {
        box[1] = f->rows - 1;
        tail_at[1] = f->rows - 1;
        tail[0] = 1;
        tail[1] = 1;
        tail[2] = f->n - (f->rows - 1) * f->w;
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

/* Points of the caller's grid (a fold's n, not its rows' padding). */
static size_t
grid_count(const fold1d *fold, const arena_plan *ap)
{
    return (size_t)(fold->active ? fold->n
                                 : ap->shape[0] * ap->shape[1] * ap->shape[2]);
}

/* Flag i of the lane's block (device memory). */
static int *
lane_flag(const apply_state *s, int i)
{
    return s->lane->flags + i;
}

/*
 * The grid into g (its interior), from the caller's memory, noting in
 * flag 0 whether it holds a value that is not finite; `spare` is the
 * other main grid, free until the first pass (a host grid goes there
 * first, contiguous).
 */
static cs_status
load_grid(cs_cuda_ctx *ctx, const apply_state *s, const grid_io *io,
          const fold1d *fold, const arena_plan *ap, const cs_dgrid *g,
          char *spare)
{
    cs_darray host_copy;
    const cs_darray *src = io->dev_in;
    if (src == NULL) {
        const size_t count = grid_count(fold, ap);
        CS_TRY(cs_cuda_upload_host(ctx, s->lane, spare,
                                   (const char *)io->host_in,
                                   count * sizeof(double)));
        host_copy = contiguous_array(spare, ap->shape);
        if (fold->active) { /* the points one after another */
            host_copy.strides[1] = host_copy.strides[2];
        }
        src = &host_copy;
    }
    ptrdiff_t box[3], tail_at[3], tail[3];
    const ptrdiff_t zero[3] = {0, 0, 0};
    cs_darray rows, last;
    io_boxes(fold, ap->shape, box, tail_at, tail);
    fold_views(src, fold, &rows, &last);
    CS_TRY(cs_cuda_load_array(ctx, g, zero, &rows, box, lane_flag(s, 0)));
    if (fold->active) {
        CS_TRY(cs_cuda_load_array(ctx, g, tail_at, &last, tail,
                                  lane_flag(s, 0)));
    }
    return CS_OK;
}

/*
 * The result in g ready to leave, flag 1 noting whether it holds a value
 * that is not finite: a host grid's is repacked into `spare` (free: the
 * loop is over), contiguous; a device grid's is stored, unless `out`
 * overlaps the input, which a rerun reads: then it is only checked, and
 * the store waits for the verdict.  *stored says which.
 */
static cs_status
stage_result(cs_cuda_ctx *ctx, const apply_state *s, const grid_io *io,
             const fold1d *fold, const arena_plan *ap, const cs_dgrid *g,
             char *spare, int *stored)
{
    ptrdiff_t box[3], tail_at[3], tail[3];
    const ptrdiff_t zero[3] = {0, 0, 0};
    io_boxes(fold, ap->shape, box, tail_at, tail);
    *stored = 0;
    if (io->dev_out != NULL && !io->out_reads_in) {
        cs_darray rows, last;
        fold_views(io->dev_out, fold, &rows, &last);
        CS_TRY(cs_cuda_store_array(ctx, &rows, g, zero, box,
                                   lane_flag(s, 1)));
        if (fold->active) {
            CS_TRY(cs_cuda_store_array(ctx, &last, g, tail_at, tail,
                                       lane_flag(s, 1)));
        }
        *stored = 1;
        return CS_OK;
    }
    if (io->dev_out != NULL) {
        CS_TRY(cs_cuda_check_finite(ctx, g, zero, box, lane_flag(s, 1)));
        if (fold->active) {
            CS_TRY(cs_cuda_check_finite(ctx, g, tail_at, tail,
                                        lane_flag(s, 1)));
        }
        return CS_OK;
    }
    cs_darray flat = contiguous_array(spare, ap->shape);
    if (fold->active) {
        flat.strides[1] = flat.strides[2];
    }
    cs_darray rows, last;
    fold_views(&flat, fold, &rows, &last);
    CS_TRY(cs_cuda_store_array(ctx, &rows, g, zero, box, lane_flag(s, 1)));
    if (fold->active) {
        CS_TRY(cs_cuda_store_array(ctx, &last, g, tail_at, tail,
                                   lane_flag(s, 1)));
    }
    return CS_OK;
}

/* The staged result into the caller's memory (host: complete on
   return). */
static cs_status
store_grid(cs_cuda_ctx *ctx, const apply_state *s, const grid_io *io,
           const fold1d *fold, const arena_plan *ap, const cs_dgrid *g,
           char *spare)
{
    if (io->dev_out != NULL) {
        ptrdiff_t box[3], tail_at[3], tail[3];
        const ptrdiff_t zero[3] = {0, 0, 0};
        cs_darray rows, last;
        io_boxes(fold, ap->shape, box, tail_at, tail);
        fold_views(io->dev_out, fold, &rows, &last);
        CS_TRY(cs_cuda_store_array(ctx, &rows, g, zero, box, NULL));
        if (fold->active) {
            CS_TRY(cs_cuda_store_array(ctx, &last, g, tail_at, tail, NULL));
        }
        return CS_OK;
    }
    const size_t bytes = grid_count(fold, ap) * sizeof(double);
    return cs_cuda_download_host(ctx, s->lane, (char *)io->host_out, spare,
                                 bytes);
}

/* Flags 0 and 1 (input, result) on the host, once the queued work is
   done. */
static cs_status
read_flags(cs_cuda_ctx *ctx, const apply_state *s, int flags[2])
{
    CS_CUDA_CHECK(ctx,
                  cudaMemcpyAsync(flags, s->lane->flags, 2 * sizeof(int),
                                  cudaMemcpyDeviceToHost, ctx->stream),
                  "cudaMemcpyAsync (non-finite flags)");
    /* an asynchronous kernel fault surfaces here too: run with
       CONVSTENCIL_CUDA_SYNC=1 to name the kernel */
    CS_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream),
                  "cudaStreamSynchronize (end of the step loop)");
    return CS_OK;
}

/*
 * The masked path, for grids that hold NaN or infinite values: every
 * step by direct.cu's kernel over the nonzero taps only, with the
 * boundary mode applied per tap (so values are NaN or infinite exactly
 * where scipy.ndimage.correlate, repeated, puts them), ping-pong between
 * the two main grids' memory used as contiguous arrays, from the input
 * read again; then the result goes out as the fast path's would.
 */
static cs_status
run_masked(cs_cuda_ctx *ctx, apply_state *s, const grid_io *io,
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
    cs_status st = cs_lane_params(ctx, s->lane, host_taps, bytes, &taps);
    free(host_taps);
    CS_TRY(st);
    cs_darray a[2] = {contiguous_array(buf[0], user_shape),
                      contiguous_array(buf[1], user_shape)};
    const size_t count =
        (size_t)(user_shape[0] * user_shape[1] * user_shape[2]);
    const cs_darray *src = io->dev_in;
    int next = 0;
    if (src == NULL) {
        CS_TRY(cs_cuda_upload_host(ctx, s->lane, buf[1],
                                   (const char *)io->host_in,
                                   count * sizeof(double)));
        src = &a[1];
    }
    for (long t = 0; t < steps; t++) {
        CS_TRY(check_interrupt(ctx, t));
        CS_TRY(cs_cuda_direct_step(ctx, src, &a[next], user_shape, kernel,
                                   taps, ntaps, mode, cval, NULL));
        src = &a[next];
        next = 1 - next;
    }
    if (io->dev_out != NULL) {
        const cs_dgrid flat = contiguous_view(user_shape, (char *)src->data);
        const ptrdiff_t zero[3] = {0, 0, 0};
        return cs_cuda_store_array(ctx, io->dev_out, &flat, zero, user_shape,
                                   NULL);
    }
    cs_host_prefault(io->host_out, count * sizeof(double));
    return cs_cuda_download_host(ctx, s->lane, (char *)io->host_out,
                                 (const char *)src->data,
                                 count * sizeof(double));
}

/* What the step loop runs on. */
typedef struct loop_args {
    cs_dgrid g[2];
    band_job *jobs;
    int banded, cc_fused, use_tc;
    cs_dkernel dk, dkc;
    cs_tc3d_plan tc3;
} loop_args;

/* The fused passes, then the unfused steps; *cur: the result's grid. */
static cs_status
step_loop(cs_cuda_ctx *ctx, const apply_state *s, loop_args *L,
          const cs_fusion_plan *plan, const fold1d *fold, cs_mode mode,
          double cval, int *cur_out)
{
    int cur = 0;
    int filled[2] = {0, 0}; /* constant mode: halo filled once per buffer */
    const cs_tc2d_plan *tc = &L->tc3.tile;
    for (long pass = 0; pass < plan->passes; pass++) {
        CS_TRY(check_interrupt(ctx, pass * plan->depth));
        const cs_dgrid *src = &L->g[cur], *dst = &L->g[1 - cur];
        CS_TRY(refresh_halo(ctx, src, fold, mode, cval, &filled[cur]));
        if (L->banded) {
            CS_TRY(bands_start(ctx, s, L->jobs, src, plan, &L->dk, mode,
                               cval));
        }
        if (L->cc_fused) {
            CS_TRY(cs_cuda_core_step(ctx, src, dst, &L->dkc));
        } else if (s->use_tc3d) {
            CS_TRY(cs_cuda_tc3d_pass(ctx, src, dst, &L->tc3));
        } else if (tc->payload > 7) {
            CS_TRY(cs_cuda_tc1d_pass(ctx, src, dst, tc));
        } else {
            CS_TRY(cs_cuda_tc2d_pass(ctx, src, dst, tc));
        }
        if (L->cc_fused && plan->needs_band) {
            CS_TRY(cs_cuda_fused_band(ctx, src, dst, &L->dk, mode, cval));
        }
        if (fold->active && plan->needs_band) {
            CS_TRY(cs_cuda_fold1d_fix_ends(ctx, src, dst, fold->n, &L->dk,
                                           plan->depth, mode, cval));
        }
        if (L->banded) {
            CS_TRY(bands_finish(ctx, s, L->jobs, dst, plan));
        }
        cur = 1 - cur;
    }
    for (long t = 0; t < plan->remainder; t++) {
        CS_TRY(check_interrupt(ctx, plan->passes * plan->depth + t));
        CS_TRY(refresh_halo(ctx, &L->g[cur], fold, mode, cval, &filled[cur]));
        CS_TRY(cs_cuda_core_step(ctx, &L->g[cur], &L->g[1 - cur], &L->dk));
        cur = 1 - cur;
    }
    *cur_out = cur;
    return CS_OK;
}

/*
 * Take a block, upload the parameters, load the grid, run the step loop
 * of `plan`, store the result.  The step loop's device time goes to
 * *loop_seconds when `timed` (the call waits for the device anyway).
 */
static cs_status
run_on_device(cs_cuda_ctx *ctx, apply_state *s, const grid_io *io,
              const ptrdiff_t user_shape[3], const cs_kernel *kernel,
              cs_mode mode, double cval, int use_tc,
              const cs_fusion_plan *plan, const fold1d *fold, int timed,
              double *loop_seconds)
{
    arena_plan ap;
    CS_TRY(arena_plan_make(ctx, s, user_shape, kernel, use_tc, plan, fold,
                           &ap));
    CS_TRY(cs_block_take(ctx, ap.top, "two padded grids and scratch",
                         &s->block));
    char *arena = s->block->ptr;
    if (ctx->poison_memory) {
        CS_CUDA_CHECK(ctx, cudaMemsetAsync(arena, 0xff, ap.top, ctx->stream),
                      "cudaMemsetAsync (poison device memory)");
    }
    loop_args L;
    memset(&L, 0, sizeof(L));
    L.jobs = ap.jobs;
    L.cc_fused = ap.cc_fused;
    L.use_tc = use_tc;
    for (int i = 0; i < 2; i++) {
        L.g[i] = geom_view(&ap.gmain, arena + ap.off_main[i]);
    }
    for (int a = 0; a < 3; a++) {
        for (int i = 0; i < 2 && ap.jobs[a].active; i++) {
            ap.jobs[a].buf[i] =
                geom_view(&ap.gstrip[a], arena + ap.off_strip[a][i]);
        }
        L.banded = L.banded || ap.jobs[a].active;
    }
    L.tc3 = s->planes; /* tc3d: the planes; tc3.tile: both */
    memset(&L.tc3.tile, 0, sizeof(L.tc3.tile));
    /* tc2d's persistent blocks leave SMs to the band stream, whose
       kernels would otherwise wait for the end of the pass */
    L.tc3.tile.spare_sms = L.banded ? BAND_SPARE_SMS : 0;
    CS_TRY(upload_params(ctx, s, kernel, use_tc, ap.cc_fused, &L.dk, &L.dkc,
                         &L.tc3.tile));

    CS_CUDA_CHECK(ctx,
                  cudaMemsetAsync(s->lane->flags, 0, 2 * sizeof(int),
                                  ctx->stream),
                  "cudaMemsetAsync (non-finite flags)");
    CS_TRY(load_grid(ctx, s, io, fold, &ap, &L.g[0], arena + ap.off_main[1]));
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaEventRecord(s->lane->loop_start, ctx->stream),
                      "cudaEventRecord (step loop start)");
    }
    int cur = 0;
    CS_TRY(step_loop(ctx, s, &L, plan, fold, mode, cval, &cur));
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaEventRecord(s->lane->loop_stop, ctx->stream),
                      "cudaEventRecord (step loop end)");
    }
    char *spare = arena + ap.off_main[1 - cur];
    int stored = 0;
    CS_TRY(stage_result(ctx, s, io, fold, &ap, &L.g[cur], spare, &stored));
    if (io->host_out != NULL) {
        /* the cores fault in a fresh result's pages while the device
           runs the loop: the download then copies at the memory's pace */
        cs_host_prefault(io->host_out,
                         grid_count(fold, &ap) * sizeof(double));
    }
    /* the verdict on non-finite values: an input or a result that holds
       one (finite values can overflow) is run again on the masked path */
    int flags[2] = {0, 0};
    CS_TRY(read_flags(ctx, s, flags));
    if (timed) {
        float ms = 0.0f;
        CS_CUDA_CHECK(ctx,
                      cudaEventElapsedTime(&ms, s->lane->loop_start,
                                           s->lane->loop_stop),
                      "cudaEventElapsedTime (step loop)");
        *loop_seconds = 1e-3 * (double)ms;
    }
    s->nonfinite = flags[0] || flags[1];
    if (!s->nonfinite && !stored) {
        CS_TRY(store_grid(ctx, s, io, fold, &ap, &L.g[cur], spare));
    } else if (s->nonfinite) {
        char *buf[2] = {arena + ap.off_main[0], arena + ap.off_main[1]};
        CS_TRY(run_masked(ctx, s, io, user_shape, kernel, mode, cval,
                          plan->passes * plan->depth + plan->remainder, buf));
    }
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream),
                      "cudaStreamSynchronize (end of the run)");
    }
    return CS_OK;
}

/* The context of one call: environment switches, message buffer. */
static void
ctx_init(cs_cuda_ctx *ctx, const cs_interrupt *intr, char *err,
         size_t err_len)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->intr = intr;
    const char *sync_env = getenv("CONVSTENCIL_CUDA_SYNC");
    ctx->sync_each_launch = sync_env != NULL && strcmp(sync_env, "0") != 0;
    const char *poison_env = getenv("CONVSTENCIL_CUDA_POISON");
    ctx->poison_memory = poison_env != NULL && strcmp(poison_env, "0") != 0;
    ctx->err = err;
    ctx->err_len = err_len;
    if (err != NULL && err_len > 0) {
        err[0] = '\0';
    }
}

static void
info_init(cs_run_info *info, long steps)
{
    if (info != NULL) {
        info->backend = "cuda";
        info->path = "cuda-core";
        info->fused_depth = 1;
        info->fused_passes = 0;
        info->unfused_steps = steps;
        info->threads = 0;
        info->device_seconds = -1.0;
        info->nonfinite = -1;
    }
}

/*
 * Everything but the grid's memory: which path, the fusion plan and what
 * it needs on the host (composed kernel, layout, tc3d planes).
 */
static cs_status
plan_call(cs_cuda_ctx *ctx, apply_state *s, const ptrdiff_t shape[3],
          const cs_kernel *kernel, cs_mode mode, long steps,
          cs_cuda_path path, fold1d *fold, int *use_tc,
          cs_fusion_plan *plan, cs_run_info *info)
{
    *fold = fold1d_plan(shape, kernel);
    CS_TRY(choose_path(ctx, kernel, fold, path, use_tc));
    if (steps == 0) {
        *use_tc = 0; /* the grid is only copied */
    }
    memset(plan, 0, sizeof(*plan));
    plan->depth = 1; /* the CUDA-core path: every step unfused */
    plan->remainder = steps;
    if (steps > 0) {
        CS_TRY(*use_tc ? plan_tensor_core(ctx, s, kernel, steps, mode, shape,
                                          fold, plan)
                       : plan_cuda_core(ctx, s, kernel, steps, mode, shape,
                                        fold, plan));
    }
    if (info != NULL) {
        info->path = *use_tc ? "tensor-core" : "cuda-core";
        info->fused_depth = plan->depth;
        info->fused_passes = plan->passes;
        info->unfused_steps = plan->remainder;
    }
    return CS_OK;
}

/*
 * Take a lane and set up the call's stream: the lane's own (the call then
 * waits for the result, and times the step loop: *timed), or the
 * caller's `streams->run`; the stream waits for the lane's last user and
 * for the producers' streams.
 */
static cs_status
begin_call(cs_cuda_ctx *ctx, apply_state *s, const cs_cuda_streams *streams,
           int *timed)
{
    CS_TRY(cs_lane_take(ctx, &s->lane));
    *timed = streams == NULL || streams->run == 0;
    ctx->stream = *timed ? s->lane->stream : (cudaStream_t)streams->run;
    CS_TRY(cs_lane_wait_done(ctx, s->lane, ctx->stream));
    for (int i = 0; i < 2 && streams != NULL; i++) {
        const uintptr_t w = streams->wait[i];
        if (w != 0 && w != (uintptr_t)ctx->stream) {
            /* the producer's work so far, before ours */
            CS_CUDA_CHECK(ctx,
                          cudaEventRecord(s->lane->producer, (cudaStream_t)w),
                          "cudaEventRecord (the array's stream)");
            CS_CUDA_CHECK(ctx,
                          cudaStreamWaitEvent(ctx->stream, s->lane->producer,
                                              0),
                          "cudaStreamWaitEvent (the array's stream)");
        }
    }
    return CS_OK;
}

/* Plan, take a lane, run with `io`, give everything back. */
static cs_status
apply_with_io(cs_cuda_ctx *ctx, const grid_io *io, const ptrdiff_t shape[3],
              const cs_kernel *kernel, cs_mode mode, double cval,
              long steps, cs_cuda_path path, const cs_cuda_streams *streams,
              cs_run_info *info)
{
    apply_state s;
    memset(&s, 0, sizeof(s));
    fold1d fold;
    cs_fusion_plan plan;
    int use_tc = 0, timed = 1;
    cs_status st = plan_call(ctx, &s, shape, kernel, mode, steps, path, &fold,
                             &use_tc, &plan, info);
    if (st == CS_OK) {
        st = begin_call(ctx, &s, streams, &timed);
    }
    double loop_seconds = -1.0;
    if (st == CS_OK) {
        st = run_on_device(ctx, &s, io, shape, kernel, mode, cval, use_tc,
                           &plan, &fold, timed, &loop_seconds);
    }
    if (info != NULL && st == CS_OK) {
        info->device_seconds = loop_seconds;
        info->nonfinite = s.nonfinite;
        if (s.nonfinite) {
            info->device_seconds = -1.0; /* the step loop ran twice */
            info->path = "direct";
            info->fused_depth = 1;
            info->fused_passes = 0;
            info->unfused_steps = steps;
        }
    }
    release_state(ctx, &s);
    return st;
}

/* One step with direct.cu's kernel: taps uploaded (unless the lane holds
   them), one launch. */
static cs_status
apply_direct(cs_cuda_ctx *ctx, const cs_darray *in, const cs_darray *out,
             const ptrdiff_t shape[3], const cs_kernel *kernel, cs_mode mode,
             double cval, const cs_cuda_streams *streams, cs_run_info *info)
{
    apply_state s;
    memset(&s, 0, sizeof(s));
    int timed = 1;
    cs_status st = begin_call(ctx, &s, streams, &timed);
    const size_t bytes = cs_direct_taps_bytes(kernel);
    if (st == CS_OK) {
        s.params_host = (char *)calloc(1, bytes);
        if (s.params_host == NULL) {
            cs_cuda_message(ctx, "out of host memory (taps)");
            st = CS_ERR_NOMEM;
        }
    }
    char *taps = NULL;
    int ntaps = 0;
    if (st == CS_OK) {
        ntaps = cs_direct_taps(kernel, s.params_host);
        st = cs_lane_params(ctx, s.lane, s.params_host, bytes, &taps);
    }
    if (st == CS_OK && timed) {
        cudaError_t e = cudaMemsetAsync(s.lane->flags, 0, sizeof(int),
                                        ctx->stream);
        if (e == cudaSuccess) {
            e = cudaEventRecord(s.lane->loop_start, ctx->stream);
        }
        st = e == cudaSuccess ? CS_OK
                              : cs_cuda_fail(ctx, e, "direct step (start)");
    }
    if (st == CS_OK) {
        /* its result is exact for non-finite values too; the flag only
           reports whether there were any (where the call waits) */
        st = cs_cuda_direct_step(ctx, in, out, shape, kernel, taps, ntaps,
                                 mode, cval, timed ? s.lane->flags : NULL);
    }
    int flag = 0;
    if (st == CS_OK && timed) {
        cudaError_t e = cudaEventRecord(s.lane->loop_stop, ctx->stream);
        if (e == cudaSuccess) {
            e = cudaMemcpyAsync(&flag, s.lane->flags, sizeof(int),
                                cudaMemcpyDeviceToHost, ctx->stream);
        }
        if (e == cudaSuccess) {
            e = cudaStreamSynchronize(ctx->stream);
        }
        float ms = 0.0f;
        if (e == cudaSuccess) {
            e = cudaEventElapsedTime(&ms, s.lane->loop_start,
                                     s.lane->loop_stop);
        }
        st = e == cudaSuccess ? CS_OK
                              : cs_cuda_fail(ctx, e, "direct step (end)");
        if (st == CS_OK && info != NULL) {
            info->device_seconds = 1e-3 * (double)ms;
            info->nonfinite = flag;
        }
    }
    release_state(ctx, &s);
    return st;
}

/* Do the bytes the two arrays may touch overlap? */
static int
arrays_overlap(const cs_darray *a, const cs_darray *b,
               const ptrdiff_t shape[3])
{
    const cs_darray *arr[2] = {a, b};
    uintptr_t lo[2], hi[2];
    for (int i = 0; i < 2; i++) {
        lo[i] = hi[i] = (uintptr_t)arr[i]->data;
        for (int k = 0; k < 3; k++) {
            const ptrdiff_t reach = (shape[k] - 1) * arr[i]->strides[k];
            if (reach < 0) {
                lo[i] -= (uintptr_t)(-reach);
            } else {
                hi[i] += (uintptr_t)reach;
            }
        }
        hi[i] += cs_dtype_size(arr[i]->dtype);
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

cs_status
cs_cuda_apply(const double *in, double *out, const ptrdiff_t shape[3],
              const cs_kernel *kernel, cs_mode mode, double cval,
              long steps, cs_cuda_path path, cs_run_info *info,
              const cs_interrupt *intr, char *err, size_t err_len)
{
    cs_cuda_ctx ctx;
    ctx_init(&ctx, intr, err, err_len);
    info_init(info, steps);
    CS_TRY(check_args(&ctx, in, out, shape, kernel, mode, steps, path));
    const ptrdiff_t count = shape[0] * shape[1] * shape[2];
    if (count == 0 || steps == 0) {
        /* still says whether the path could run (no device, ...) */
        apply_state s;
        memset(&s, 0, sizeof(s));
        fold1d fold;
        cs_fusion_plan plan;
        int use_tc = 0;
        cs_status st = plan_call(&ctx, &s, shape, kernel, mode, 0, path,
                                 &fold, &use_tc, &plan, info);
        release_state(&ctx, &s);
        if (st == CS_OK && count > 0 && out != in) {
            memmove(out, in, (size_t)count * sizeof(double));
        }
        return st;
    }
    grid_io io = {in, out, NULL, NULL, 0};
    return apply_with_io(&ctx, &io, shape, kernel, mode, cval, steps, path,
                         NULL, info);
}

/* Is [data, data + its extent) in memory of the current device? */
static cs_status
check_device_pointer(cs_cuda_ctx *ctx, const void *data, const char *what)
{
    cudaPointerAttributes attr;
    memset(&attr, 0, sizeof(attr));
    cudaError_t e = cudaPointerGetAttributes(&attr, data);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cs_cuda_message(ctx, "%s is not memory CUDA knows (%s)", what,
                        cudaGetErrorString(e));
        return CS_ERR_INVALID;
    }
    if (attr.type != cudaMemoryTypeDevice
        && attr.type != cudaMemoryTypeManaged) {
        cs_cuda_message(ctx, "%s is not in device memory (CUDA memory type "
                             "%d)",
                        what, (int)attr.type);
        return CS_ERR_INVALID;
    }
    if (attr.device != ctx->device) {
        cs_cuda_message(ctx,
                        "%s is on CUDA device %d, but the current device is "
                        "%d: make device %d current (e.g. with "
                        "cupy.cuda.Device(%d) or torch.cuda.device(%d)) or "
                        "move the array",
                        what, attr.device, ctx->device, attr.device,
                        attr.device, attr.device);
        return CS_ERR_INVALID;
    }
    return CS_OK;
}

cs_status
cs_cuda_apply_device(const cs_darray *in, const cs_darray *out,
                     const ptrdiff_t shape[3], const cs_kernel *kernel,
                     cs_mode mode, double cval, long steps,
                     cs_cuda_path path, const cs_cuda_streams *streams,
                     cs_run_info *info, const cs_interrupt *intr, char *err,
                     size_t err_len)
{
    cs_cuda_ctx ctx;
    ctx_init(&ctx, intr, err, err_len);
    info_init(info, steps);
    if (in == NULL || out == NULL || in->data == NULL || out->data == NULL
        || cs_dtype_size(in->dtype) == 0 || out->dtype != CS_DTYPE_FLOAT64) {
        cs_cuda_message(&ctx, "cs_cuda_apply_device: NULL array or "
                              "unknown dtype (out must be float64)");
        return CS_ERR_INVALID;
    }
    CS_TRY(check_args(&ctx, (const double *)in->data,
                      (const double *)out->data, shape, kernel, mode, steps,
                      path));
    CS_TRY(cs_cuda_device_facts(&ctx));
    CS_TRY(check_device_pointer(&ctx, in->data, "the grid"));
    CS_TRY(check_device_pointer(&ctx, out->data, "out"));
    if (steps == 1 && path != CS_CUDA_PATH_TENSOR_CORE
        && !arrays_overlap(in, out, shape)) {
        /* one step: read and write the arrays where they are */
        if (info != NULL) {
            info->path = "direct";
            info->unfused_steps = 1;
        }
        return apply_direct(&ctx, in, out, shape, kernel, mode, cval,
                            streams, info);
    }
    grid_io io = {NULL, NULL, in, out, arrays_overlap(in, out, shape)};
    return apply_with_io(&ctx, &io, shape, kernel, mode, cval, steps, path,
                         streams, info);
}
