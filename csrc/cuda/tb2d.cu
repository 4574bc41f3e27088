/*
 * tb2d.cu -- the host side of tb2d (the method: tb2d_kernel.cuh): the
 * strips and segments of a launch, the instance for a kernel and depth,
 * and cs_cuda_tb2d_pass.
 */
#include "tb2d.cuh"

#include <string.h>

#define TS_MAX_SEGMENTS 4096 /* per strip (the model's TB2D_MAX_SEGMENTS) */
#define TS_EXTRA_ROUNDS 1    /* cs_stream_segments' (TB2D_EXTRA_ROUNDS) */

/* Segments per strip: each segment's 2 R T extra rows of reading weighed
   against the rounds of warps the launch takes, plus one.  The extra
   round is measured, not derived (h100_tb2d_segments.md): on the H100,
   heat2d at depth 8 on 10240^2 ran at 471 G stencils/s as 8 segments
   per strip (about one round) and at 878 as 64 (several rounds), though
   both read about as much; the engine's 74 gave 891.  Warps that start
   together stay in step, all loading and then all computing; later
   rounds start staggered and overlap the two. */
static ptrdiff_t
choose_segments(ptrdiff_t columns, ptrdiff_t ny, int halo_rows,
                ptrdiff_t resident_warps)
{
    return cs_stream_segments(columns, ny, halo_rows, resident_warps,
                              TS_MAX_SEGMENTS, TS_EXTRA_ROUNDS);
}

cs_status
cs_tb2d_layout(cs_cuda_ctx *ctx, tbs_params *p, ptrdiff_t own, int halo_rows,
               ptrdiff_t resident_warps, unsigned *blocks)
{
    p->strips = CEIL_DIV(p->nx, own);
    const ptrdiff_t rows = p->y_hi - p->y_lo; /* those it writes */
    const cs_status st =
        cs_env_segments(ctx, "CONVSTENCIL_TB2D_SEGMENTS", rows, &p->segs);
    if (st != CS_OK) {
        return st;
    }
    if (p->segs == 0) {
        p->segs = choose_segments(p->strips * p->nz, rows, halo_rows,
                                  resident_warps);
    }
    p->seg_rows = CEIL_DIV(rows, p->segs);
    p->items = p->strips * (p->segs + p->lead_count) * p->nz;
    const ptrdiff_t n = CEIL_DIV(p->items, (ptrdiff_t)TS_WARPS);
    if (n > 0x7fffffff) {
        cs_cuda_message(ctx, "tb2d: grid of %lld planes too large",
                        (long long)p->nz);
        return CS_ERR_INVALID;
    }
    *blocks = (unsigned)n;
    return CS_OK;
}

/* The instance of radius R and tap set SHAPE for `depth` (1 to TOP):
   TOP steps for `depth` TOP or more, else the next lower instance. */
template <int R, int SHAPE, bool FLAGS, int TOP>
static cs_status
launch_depth(cs_cuda_ctx *ctx, tbs_params *p, int depth)
{
    if constexpr (TOP > 1) {
        if (depth < TOP) {
            return launch_depth<R, SHAPE, FLAGS, TOP - 1>(ctx, p, depth);
        }
    }
    return tbs_launch<R, TOP, SHAPE, FLAGS>(ctx, p);
}

/* The instance of radius R for the tap set `shape` and `depth` (1 to
   TOP for pluses and outer products, 1 to BOX_TOP for full-rank boxes). */
template <int R, bool FLAGS, int TOP, int BOX_TOP>
static cs_status
launch_shape(cs_cuda_ctx *ctx, tbs_params *p, int depth, int shape)
{
    switch (shape) {
    case CS_CC2D_PLUS:
        return launch_depth<R, CS_CC2D_PLUS, FLAGS, TOP>(ctx, p, depth);
    case CS_CC2D_RANK1:
        return launch_depth<R, CS_CC2D_RANK1, FLAGS, TOP>(ctx, p, depth);
    default:
        return launch_depth<R, CS_CC2D_BOX, FLAGS, BOX_TOP>(ctx, p, depth);
    }
}

/* The instance for the kernel's side, tap set and `depth` (1 to
   cs_tb2d_max_depth's): radius 1 in tb2d_3x3.cu, tb2d_3x3_deep.cu and
   tb2d_rank1.cu; pluses of sides 5 and 7 in tb2d_plus.cu, their outer
   products in tb2d_rank1_wide.cu, full-rank boxes in tb2d_box_wide.cu. */
template <bool FLAGS>
static cs_status
tbs_dispatch(cs_cuda_ctx *ctx, tbs_params *p, int side, int depth, int shape)
{
    switch (side) {
    case 7:
        return launch_shape<3, FLAGS, CS_TB2D_MAX_DEPTH_7,
                            CS_TB2D_MAX_DEPTH_BOX_7>(ctx, p, depth, shape);
    case 5:
        return launch_shape<2, FLAGS, CS_TB2D_MAX_DEPTH_5,
                            CS_TB2D_MAX_DEPTH_BOX_5>(ctx, p, depth, shape);
    default:
        return launch_shape<1, FLAGS, CS_TB2D_MAX_DEPTH,
                            CS_TB2D_MAX_DEPTH>(ctx, p, depth, shape);
    }
}

cs_status
cs_cuda_tb2d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int depth, cs_mode mode, double cval,
                  int *in_flag, int *out_flag, const ptrdiff_t window[2],
                  cs_lead_bands *lead, const cs_box_input *box)
{
    const int side = k->size[2];
    tbs_params p;
    memset(&p, 0, sizeof(p));
    /* the tap set, and an outer product's factors: it filters each row
       once (2 k multiply-adds a cell, not k * k) */
    const int shape =
        cs_cc2d_taps_factored(k->size, k->host_weights, p.col, p.row);
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && depth >= 1 && ctx->sms > 0
             && depth <= cs_tb2d_depth_of_taps(side, shape);
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= 1;
    }
    ok = ok && in->n[1] >= CS_TB2D_MIN_EXTENT
         && in->n[2] >= CS_TB2D_MIN_EXTENT;
    p.y_lo = window != NULL ? window[0] : 0;
    p.y_hi = window != NULL ? window[1] : in->n[1];
    ok = ok && p.y_lo >= 0 && p.y_lo < p.y_hi && p.y_hi <= in->n[1];
    cs_lead_params(&p, lead, in->n[1], p.y_lo, p.y_hi, &ok);
    if (box != NULL) {
        cs_box_params(&p, box, box->grid.n[1], in->n[1], &ok);
        ok = ok && in_flag != NULL && in->n[0] == 1
             && box->grid.n[0] == 1 && box->grid.n[2] == in->n[2];
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_tb2d_pass: invalid grids, kernel or "
                             "depth");
        return CS_ERR_INVALID;
    }
    cs_params_grids(&p, in, out);
    p.mode = mode;
    p.cval = cval;
    p.in_flag = in_flag;
    p.out_flag = out_flag;
    memcpy(p.w, k->host_weights, sizeof(double) * side * side);
    /* the checks cost about 5% of the kernel's rate (H100, heat2d at
       depth 8): passes that need no flag run without them, where the
       image has that form (kernels.cuh) */
    const cs_status st =
        in_flag != NULL || out_flag != NULL || cs_cuda_checked_only(ctx)
            ? tbs_dispatch<true>(ctx, &p, side, depth, shape)
            : tbs_dispatch<false>(ctx, &p, side, depth, shape);
    if (lead != NULL) { /* a warp per band, strip and plane */
        lead->arrivals = st == CS_OK ? (unsigned)(p.lead_count * p.strips
                                                  * p.nz)
                                     : 0u;
    }
    return st;
}
