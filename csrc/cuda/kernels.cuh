/*
 * kernels.cuh -- what the .cu files of the CUDA engine share: the view of
 * a padded device grid, and the launchers of each kernel family
 * (halo.cu, fold1d.cu, cudacore.cu, cc2d.cu, cc3d.cu, fused_band.cu,
 * tc2d.cu, tc1d.cu, tc3d.cu), which engine.cu orchestrates.  (The device code
 * tc2d.cu and tc3d.cu share is in tc_tile.cuh.)
 *
 * Every launcher queues its work on ctx->stream, checks its
 * preconditions (CS_ERR_INVALID with a message when one fails: a bug in
 * the caller, not in the user's input) and its launch, and returns a
 * cs_status.  Host code is plain C apart from the launches.
 */
#ifndef CS_CUDA_KERNELS_CUH
#define CS_CUDA_KERNELS_CUH

#include "check.cuh"
#include "../layout.h"
#include "../plan.h"
#include "../stencil.h"

#include <stdint.h>

/*
 * Images for GPUs older than sm_90 (the A100's sm_80) hold each
 * temporally blocked kernel (tb2d, tb3d) in its checked form only (the
 * form that notes non-finite values): the unchecked twin, about 5% faster
 * at depth 8 on the H100, would add half again to the build's largest
 * part for a card it was never measured on.  In those images the twin is
 * a stub that traps, and the host launches the checked form wherever the
 * device runs such an image (cs_cuda_checked_only).
 */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define CS_CHECKED_ONLY_IMAGE 1
#else
#define CS_CHECKED_ONLY_IMAGE 0
#endif

static inline bool
cs_cuda_checked_only(const cs_cuda_ctx *ctx)
{
    return ctx->image_arch < 90;
}

/*
 * A padded device grid.  Grid element (z, y, x) is
 *     origin[z * plane + y * pitch + x]
 * for -halo[a] <= coordinate[a] < n[a] + halo[a] on every axis a
 * (axis 0 = z, 1 = y, 2 = x); nothing outside that box may be read or
 * written.  The interior is 0 <= coordinate < n; the rest is the halo,
 * which halo.cu fills from the interior per boundary mode.
 */
typedef struct cs_dgrid {
    double *origin;
    ptrdiff_t n[3];
    ptrdiff_t halo[3];
    ptrdiff_t pitch; /* doubles between rows */
    ptrdiff_t plane; /* doubles between planes */
} cs_dgrid;

/* A stencil kernel whose weights live in device memory. */
typedef struct cs_dkernel {
    const double *weights; /* size[0]*size[1]*size[2], C order, device */
    const double *host_weights; /* the same on the host (NULL: none), for
                                   kernels that take them as parameters */
    int size[3];           /* odd extents */
} cs_dkernel;

/* Blocks of `block` threads for a grid-stride loop over n items: enough
   to cover them, at most 65536 (each thread then takes several). */
static inline unsigned
cs_stride_blocks(ptrdiff_t n, int block)
{
    const ptrdiff_t blocks = CEIL_DIV(n, (ptrdiff_t)block);
    return (unsigned)(blocks < 65536 ? blocks : 65536);
}

/* The first owned cell of tile `index` along an axis of n cells: tiles
   (tb2d's strips, tb3d's tiles) own `own` cells each, the last one moved
   back to end at the edge. */
static __device__ __forceinline__ ptrdiff_t
cs_tile_origin(ptrdiff_t index, ptrdiff_t own, ptrdiff_t n)
{
    const ptrdiff_t start = index * own;
    const ptrdiff_t last = n - own;
    return start < last ? start : (last > 0 ? last : 0);
}

/* The first cell tile `index` stores: where its own cells start in the
   even partition.  The last tile, moved back, computes cells the tile
   before it stores too, at other places in the tile, where a kernel may
   round them differently (tb3d's rows: a thread's second row adds the
   rows beside it in another order than its first); each cell is stored
   by one tile only, so the result does not depend on which block writes
   last. */
static __device__ __forceinline__ ptrdiff_t
cs_tile_first_stored(ptrdiff_t index, ptrdiff_t own)
{
    return index * own;
}

/* The environment variable `var` into *segs (0 when it is not set): a
   fixed segment count per unit, for measuring cs_stream_segments' choice
   (benchmarks/bench_segments.py); at most the n cells there are. */
static inline cs_status
cs_env_segments(cs_cuda_ctx *ctx, const char *var, ptrdiff_t n,
                ptrdiff_t *segs)
{
    long v = 0;
    CS_TRY(cs_env_count(ctx, var, &v));
    *segs = (ptrdiff_t)v < n ? (ptrdiff_t)v : n;
    return CS_OK;
}

/* Segments of the streamed axis (n cells) per unit that streams it (a
   tb2d strip, a tb3d tile), at most `most`: each segment's 2 `halo`
   extra cells of reading weighed against the rounds of units the launch
   takes (`resident` at a time), plus `extra_rounds` (tb2d's 1 and
   tb3d's 0 are measured: tb2d.cu and tb3d.cu say how). */
static inline ptrdiff_t
cs_stream_segments(ptrdiff_t units, ptrdiff_t n, int halo, ptrdiff_t resident,
                   ptrdiff_t most, int extra_rounds)
{
    ptrdiff_t best = 1;
    double best_cost = 0.0;
    const ptrdiff_t top = n < most ? n : most;
    for (ptrdiff_t s = 1; s <= top; s++) {
        const ptrdiff_t cells = CEIL_DIV(n, s);
        const ptrdiff_t rounds = CEIL_DIV(units * s, resident);
        const double cost = (double)(rounds + extra_rounds)
                            * (double)(cells + 2 * halo);
        if (s == 1 || cost < best_cost) {
            best = s;
            best_cost = cost;
        }
    }
    return best;
}

/*
 * The launch shape of the kernels that walk a box in blocks of rows
 * (halo.cu's copy_box, transfer.cu, direct.cu): blocks of `block`
 * threads, each row `*row_threads` wide (a power of two, no wider than
 * a row of ex needs), grid.x covering a row, grid.y (at most 65535)
 * striding over `rows` rows.  0 when a row would need 2^31 blocks.
 */
static inline int
cs_row_blocks(ptrdiff_t ex, ptrdiff_t rows, int block, int *row_threads,
              dim3 *grid)
{
    int rt = block;
    while (rt > 1 && rt / 2 >= ex) {
        rt /= 2;
    }
    const ptrdiff_t gx = CEIL_DIV(ex, (ptrdiff_t)rt);
    const ptrdiff_t gy = CEIL_DIV(rows, (ptrdiff_t)(block / rt));
    if (gx > 0x7fffffff) {
        return 0;
    }
    *row_threads = rt;
    *grid = dim3((unsigned)gx, (unsigned)(gy < 65535 ? gy : 65535));
    return 1;
}

/*
 * The plane z of row r = z * ey + y of such a box of `rows` rows.  A
 * 64-bit division costs about as many instructions as a thread's whole
 * copy of one element (a copy then runs short of the memory's rate): one
 * plane needs none, and most 3D boxes have few enough rows for a 32-bit
 * one.
 */
static __device__ __forceinline__ ptrdiff_t
cs_plane_of_row(ptrdiff_t r, ptrdiff_t ey, ptrdiff_t rows)
{
    if (rows == ey) {
        return 0;
    }
    if (rows <= (ptrdiff_t)UINT32_MAX) {
        return (ptrdiff_t)((uint32_t)r / (uint32_t)ey);
    }
    return r / ey;
}

/* ---- halo.cu ---------------------------------------------------------- */

/* Fill every halo element of g from its interior per `mode`. */
cs_status
cs_cuda_fill_halo(cs_cuda_ctx *ctx, const cs_dgrid *g, cs_mode mode,
                  double cval);

/*
 * Copy the box of extents ext[3] at dst_at[3] in dst from src_at[3] in
 * src (grid coordinates; the boxes may reach into the halos and must not
 * overlap when dst and src share memory).
 */
cs_status
cs_cuda_copy_box(cs_cuda_ctx *ctx, const cs_dgrid *dst,
                 const ptrdiff_t dst_at[3], const cs_dgrid *src,
                 const ptrdiff_t src_at[3], const ptrdiff_t ext[3]);

/* ---- fold1d.cu -------------------------------------------------------- */

/*
 * A 1D grid of n points folded into rows (see fold1d.cu): g is
 * {1, ceil(n / w), w} with an x-halo and no y- or z-halo, point p at
 * (0, p / w, p % w).  Write every cell beyond the rows' interiors that
 * the 2D kernels read (the x-halos, the tail past n) with the point it
 * stands for under `mode`.
 */
cs_status
cs_cuda_fold1d_fill_halo(cs_cuda_ctx *ctx, const cs_dgrid *g, ptrdiff_t n,
                         cs_mode mode, double cval);

/*
 * The band fix-up of a fused pass src -> dst over a folded 1D grid:
 * recompute the (depth-1)*r points at either end of dst by `depth`
 * unfused steps of k (a {1, 1, kx} kernel) from src, the mode applied at
 * the ends at every step.  Needs depth >= 2, n >= 2*(2*depth-1)*r and a
 * mode other than wrap (wrap composes exactly and needs no band).
 */
cs_status
cs_cuda_fold1d_fix_ends(cs_cuda_ctx *ctx, const cs_dgrid *src,
                        const cs_dgrid *dst, ptrdiff_t n, const cs_dkernel *k,
                        int depth, cs_mode mode, double cval);

/*
 * One unfused step of k (a {1, 1, kx} kernel, kx <= CS_FOLD1D_STEP_MAX_K)
 * from the folded grid src (halo filled) into the caller's flat array
 * `out` of n points, noting in *out_flag (device) a result that is not
 * finite: the last step of a run between device arrays, which so needs
 * no store from the fold.  Each output reads its kx points itself (from
 * the cache, no shared tile), so wider kernels keep the CUDA-core step
 * and the store; the presets have 3 and 5 points.
 */
#define CS_FOLD1D_STEP_MAX_K 63
cs_status
cs_cuda_fold1d_step_out(cs_cuda_ctx *ctx, const cs_dgrid *src, ptrdiff_t n,
                        const cs_dkernel *k, double *out, int *out_flag);

/* ---- cudacore.cu ------------------------------------------------------ */

/*
 * The grid fields of a kernel's launch parameters (every kernel struct
 * with these members: cc2d.cu, and the tensor-core kernels through
 * tc_params.cuh): origins, pitches, extents, and lim = n + halo of `in`,
 * the first row and column a load may not read.
 */
template <class Params>
static inline void
cs_params_grids(Params *p, const cs_dgrid *in, const cs_dgrid *out)
{
    p->in = in->origin;
    p->out = out->origin;
    p->in_pitch = in->pitch;
    p->in_plane = in->plane;
    p->out_pitch = out->pitch;
    p->out_plane = out->plane;
    p->nz = in->n[0];
    p->ny = in->n[1];
    p->nx = in->n[2];
    p->lim_y = in->n[1] + in->halo[1];
    p->lim_x = in->n[2] + in->halo[2];
}

/* The same and lim_z, the first plane a load may not read, for the
   kernels that stream along z (cudacore.cu, cc3d.cu). */
template <class Params>
static inline void
cs_step_params_grids(Params *p, const cs_dgrid *in, const cs_dgrid *out)
{
    cs_params_grids(p, in, out);
    p->lim_z = in->n[0] + in->halo[0];
}

/*
 * One direct stencil step on CUDA cores: the interior of `out` from the
 * interior and halo of `in` (same extents n; in's halo at least the
 * kernel's radius on every axis, already filled).  Any odd kernel size.
 */
cs_status
cs_cuda_core_step(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k);

/* ---- cc3d.cu ---------------------------------------------------------- */

/* The taps cc3d computes (CS_CC3D_BOX: the whole K^3 box, or
   CS_CC3D_DIAMOND: those within distance (K-1)/2 of the centre in the
   1-norm, a 7-point star and its powers) are chosen by cs_cc3d_taps
   (plan.h). */

/*
 * One step of a kernel of tap set `shape` (cs_cc3d_taps of k,
 * >= 0), streaming along z: cs_cuda_core_step's contract, whose checks of
 * the grids it relies on (cs_cuda_core_step calls it).
 */
cs_status
cs_cuda_cc3d_step(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int shape);

/* ---- cc2d.cu ---------------------------------------------------------- */

/* How cc2d computes a kernel (cs_cc2d_taps, plan.h): every tap of the
   K x K box (CS_CC2D_BOX); only the centre row and column (CS_CC2D_PLUS:
   star2d13p, the 5-point star); or, for a kernel that is an outer
   product w[dy][dx] = col[dy] * row[dx] (CS_CC2D_RANK1: box2d49p,
   Gaussian-like smoothing), a pass along each row and one down the
   columns (about 2K + K (K - 1) / 8 multiply-adds per output instead of
   K * K). */

/* Shared memory (bytes) a cc2d block of a kernel of this side and tap
   set opts into (up to 150 KB: cs_cuda_core_step runs cc2d only where
   the device allows it). */
size_t
cs_cuda_cc2d_smem_bytes(int side, int shape);

/*
 * One step of a planar kernel of tap set `shape` (cs_cc2d_taps_factored
 * of k, >= 0, with its factors col and row for CS_CC2D_RANK1) on every
 * plane: cs_cuda_core_step's contract, whose checks of the grids it
 * relies on, and rows of `out` 16-byte aligned (origin, pitch and plane:
 * cs_cuda_core_step checks).
 */
cs_status
cs_cuda_cc2d_step(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int shape, const double *col,
                  const double *row);

/* ---- tb2d.cu ---------------------------------------------------------- */

/*
 * The bands of a split pass (an engine session's round, session.cu):
 * ranges along the windowed axis (rows of tb2d, planes of tb3d) at the
 * ends of the window, which the neighbours receive.  The launch writes
 * them in its first blocks (tb3d) or warps (tb2d), ahead of the window's
 * own, and each of those adds one to *done once what it wrote is visible
 * to the copy engines and the other GPUs (__threadfence_system); the
 * launch sets `arrivals` to how many will, so that a stream can wait for
 * the count to pass its value before the launch plus `arrivals`
 * (cuStreamWaitValue32) while the rest of the pass runs.
 */
typedef struct cs_lead_bands {
    int count;           /* ranges: 1 or 2 */
    ptrdiff_t at[2][2];  /* each [lo, hi), outside the window */
    unsigned *done;      /* on the device, counting up */
    unsigned arrivals;   /* set by the launch */
} cs_lead_bands;

/* A split pass's bands into a launch's parameters p (tb2d's, tb3d's: the
   fields lead_count, lead and lead_done; none where lead is NULL): ranges
   inside [0, n) outside the window [lo, hi); *ok cleared otherwise. */
template <class Params>
static inline void
cs_lead_params(Params *p, const cs_lead_bands *lead, ptrdiff_t n,
               ptrdiff_t lo, ptrdiff_t hi, int *ok)
{
    if (lead == NULL) {
        return;
    }
    *ok = *ok && lead->count >= 1 && lead->count <= 2
          && lead->done != NULL;
    for (int b = 0; *ok && b < lead->count; b++) {
        const ptrdiff_t a = lead->at[b][0], z = lead->at[b][1];
        *ok = a >= 0 && a < z && z <= n && (z <= lo || a >= hi);
        p->lead[b][0] = a;
        p->lead[b][1] = z;
    }
    p->lead_count = lead->count;
    p->lead_done = lead->done;
}

/*
 * A pass's second input (tb2d on a single plane, tb3d; checked passes
 * only: in_flag given): the rows of tb2d or planes of tb3d from `at` to
 * at + grid.n[axis] - 1 along the windowed axis are read from `grid`
 * (whose first row or plane is the input's `at`) instead of the input
 * grid, the rest from that.  An engine session's first pass reads the
 * caller's block so, its grid loaded at the block's ends only
 * (session.cu).
 */
typedef struct cs_box_input {
    cs_dgrid grid;
    ptrdiff_t at;
} cs_box_input;

/* A second input into a launch's parameters p (tb2d's, tb3d's: box_in,
   box_pitch, box_plane, box_lo, box_hi; none where box is NULL): `n`
   the block's extent along the windowed axis, inside the input's
   `extent`; *ok cleared otherwise. */
template <class Params>
static inline void
cs_box_params(Params *p, const cs_box_input *box, ptrdiff_t n,
              ptrdiff_t extent, int *ok)
{
    if (box == NULL) {
        return;
    }
    *ok = *ok && box->grid.origin != NULL && box->at >= 0 && n >= 1
          && box->at <= extent - n;
    p->box_in = box->grid.origin;
    p->box_pitch = box->grid.pitch;
    p->box_plane = box->grid.plane;
    p->box_lo = box->at;
    p->box_hi = box->at + n;
}

/*
 * `depth` (1..cs_tb2d_max_depth) steps of a planar 3 x 3 kernel or a
 * planar plus of side 5 or 7 on every plane of `in` into `out`,
 * temporally blocked, exact at every boundary mode (the modes applied
 * at each step inside the block).  Reads and
 * writes interiors only (no halo needed: `in` and `out` may be any
 * float64 arrays with unit x stride); planes of at least
 * CS_TB2D_MIN_EXTENT rows and columns; k's host weights known.  A
 * non-NULL in_flag (out_flag) is set to 1 where the input (the result)
 * holds a value that is not finite, and left alone otherwise.
 * `window` (NULL: every row): the rows [window[0], window[1]) of each
 * plane, the only ones the pass computes and writes (it reads the rows
 * within its depth's reach of them); a row's value does not depend on
 * the window (an engine session's rounds: session.cu).  `lead` (NULL:
 * none; with a window): rows the launch writes besides the window,
 * first, and counts (cs_lead_bands).  `box` (NULL: none; a single plane,
 * with in_flag): rows read from a second input (cs_box_input).
 */
cs_status
cs_cuda_tb2d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int depth, cs_mode mode, double cval,
                  int *in_flag, int *out_flag, const ptrdiff_t window[2],
                  cs_lead_bands *lead, const cs_box_input *box);

/*
 * One pass of `depth` steps (1 to CS_TB3D_MAX_DEPTH) of a 3 x 3 x 3
 * kernel cs_tb3d_taps takes (a 7-point star, an outer product), in -> out
 * (tb3d.cu): cs_cuda_tb2d_pass's contract in 3D, on grids of at least
 * CS_TB3D_MIN_EXTENT cells along every axis; `window`, `lead` and `box`:
 * planes.
 */
cs_status
cs_cuda_tb3d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int depth, cs_mode mode, double cval,
                  int *in_flag, int *out_flag, const ptrdiff_t window[2],
                  cs_lead_bands *lead, const cs_box_input *box);

/* ---- fused_band.cu ---------------------------------------------------- */

#define CS_FUSED_BAND_MAX_TAPS 27 /* nonzero taps of k: a 3 x 3 x 3 box */

/*
 * After a pass src -> dst of k's composed kernel k*k (two steps in one):
 * recompute dst's band, the points within k's radius r of an edge on some
 * axis, as two steps of k from src under `mode` (src's halo at least r
 * on every axis, filled per mode; k's host weights known, at most
 * CS_FUSED_BAND_MAX_TAPS of them nonzero).
 */
cs_status
cs_cuda_fused_band(cs_cuda_ctx *ctx, const cs_dgrid *src, const cs_dgrid *dst,
                   const cs_dkernel *k, cs_mode mode, double cval);

/* ---- tc2d.cu ---------------------------------------------------------- */

#define CS_TC2D_TILE_ROWS 32 /* output rows per block (layout tile_rows) */
#define CS_TC2D_GROUPS 16    /* column groups per block (= MMA M) */

/* A checked stencil2row layout, its tables copied to the device. */
typedef struct cs_tc2d_plan {
    int ky;              /* rows of the (composed) kernel: 1, 3, 5 or 7 */
    int payload;         /* P: 7 (tc2d), 15 or 31 (tc1d) */
    int ld;              /* row stride of the shared matrices */
    int matrix_size;     /* doubles per shared matrix, dump area included */
    const int *lut;      /* device, 4 * in_cols ints, 16-byte aligned */
    const double *wa;    /* device, kpad x 8 */
    const double *wb;    /* device, kpad x 8 */
    int spare_sms;       /* tc2d: SMs its persistent blocks leave free */
} cs_tc2d_plan;

/*
 * Check that `layout` is one tc2d's and tc3d's kernels run: P = 7, 16
 * groups by CS_TC2D_TILE_ROWS rows, ld and the lookup table as layout.h
 * says (real elements where the convention puts them, dirty ones in
 * distinct dump slots, every row stride P), and shared memory that fits
 * `smem_optin` bytes per block.
 * Host only; CS_ERR_UNSUPPORTED with a message when it does not hold.
 */
cs_status
cs_cuda_tc2d_check_layout(cs_cuda_ctx *ctx, const cs_layout2d *layout,
                          size_t smem_optin);

/* Shared memory (bytes) one tc2d block uses for `layout` (tc3d's
   blocks use half of it). */
size_t
cs_cuda_tc2d_smem_bytes(const cs_layout2d *layout);

/*
 * One pass of the planar kernel of `plan` on FP64 tensor cores: every
 * plane z of out's interior from in (same extents n, in's halo at least
 * 3 columns and ky/2 rows, already filled).
 */
cs_status
cs_cuda_tc2d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_tc2d_plan *plan);

/* ---- tc1d.cu ---------------------------------------------------------- */

/*
 * tc1d: 1D kernels of 9 to 31 points (layout payload P = 15 or 31) on a
 * folded 1D grid, 16 groups x cs_cuda_tc1d_tile_rows(kx) rows per block.
 * The check and the pass mirror tc2d's; the plan is a cs_tc2d_plan with
 * ky = 1 and its payload.
 */
int
cs_cuda_tc1d_tile_rows(int kx);

cs_status
cs_cuda_tc1d_check_layout(cs_cuda_ctx *ctx, const cs_layout2d *layout,
                          size_t smem_optin);

size_t
cs_cuda_tc1d_smem_bytes(const cs_layout2d *layout);

/* A pass's input read from the caller's 1D array (tc1d.cu's FLAT). */
typedef struct cs_tc1d_flat {
    ptrdiff_t points; /* the grid's points */
    cs_mode mode;     /* what a point beyond either end reads */
    double cval;
    int *in_flag;     /* device: set to 1 when a point is not finite */
} cs_tc1d_flat;

/*
 * One pass: every row of out's interior from in.  flat NULL: `in` is the
 * fold's padded grid (x-halo >= (P-1)/2, filled).  Otherwise `in` views
 * the caller's array of flat->points doubles as rows of w = n[2] points
 * one after another (pitch w, no halo), and the kernel reads what the
 * padded grid's cells would hold (a row's halo: the next rows' points;
 * beyond either end: the mode's value), noting non-finite points, so a
 * device array needs no load into the fold before the first pass.
 */
cs_status
cs_cuda_tc1d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_tc2d_plan *plan, const cs_tc1d_flat *flat);

/* ---- tc3d.cu ---------------------------------------------------------- */

/*
 * A 3D kernel on tensor cores: out[z] = sum over the kernel's z-planes dz
 * of W_dz applied to in[z + dz - rz].  Each plane is skipped (all zero),
 * a "point plane" (one nonzero weight w at (dy, dx): added on CUDA cores
 * as w * in[z + dz - rz][i + dy - ry][j + dx - rx]) or a "dense plane"
 * (run on tensor cores).  Every dense plane uses the one stencil2row
 * layout of the kernel's ky x kx (zeros where a plane's weights are
 * zero), so they share the lookup table and differ in their weight
 * matrices only.
 */
typedef struct cs_tc3d_plan {
    /* the shared layout; tile.wa / tile.wb hold `dense` weight matrices
       of kpad x 8 each, one after another, in the order of dz */
    cs_tc2d_plan tile;
    int kz;                 /* odd, <= CS_TC3D_MAX_KZ */
    int dense;              /* dense planes */
    unsigned dense_mask;    /* bit dz set: plane dz is dense */
    int points;             /* point planes: */
    int point_dz[CS_TC3D_MAX_KZ]; /* the plane */
    int point_y[CS_TC3D_MAX_KZ];  /* its weight's offset from the plane's */
    int point_x[CS_TC3D_MAX_KZ];  /* centre, -ry..ry and -rx..rx */
    double point_w[CS_TC3D_MAX_KZ]; /* the weight */
} cs_tc3d_plan;

/*
 * Classify the z-planes of `k` (size[0] odd and <= CS_TC3D_MAX_KZ) into
 * plan's kz, dense, dense_mask and point fields (host only; `tile` is
 * left alone).  CS_ERR_INVALID with a message for a kernel it cannot
 * take.
 */
cs_status
cs_cuda_tc3d_classify(cs_cuda_ctx *ctx, const cs_kernel *k,
                      cs_tc3d_plan *plan);

/*
 * One pass of the 3D kernel of `plan`: out's interior from in (same
 * extents n; in's halo at least rz planes, ky/2 rows and 3 columns,
 * already filled).  The shared layout must have passed
 * cs_cuda_tc2d_check_layout.
 */
cs_status
cs_cuda_tc3d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_tc3d_plan *plan);

#endif /* CS_CUDA_KERNELS_CUH */
