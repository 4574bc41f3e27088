/*
 * tb2d.cuh -- what tb2d.cu (the host side of tb2d) and the files that
 * instantiate its kernels share: the launch shape, the parameters, the
 * launch template and the strip layout.  The method is in
 * tb2d_kernel.cuh; the instances are compiled in six files
 * (tb2d_3x3.cu, tb2d_3x3_deep.cu, tb2d_rank1.cu, tb2d_plus.cu,
 * tb2d_rank1_wide.cu, tb2d_box_wide.cu) so that nvcc builds them in
 * parallel.
 */
#ifndef CS_TB2D_CUH
#define CS_TB2D_CUH

#include "kernels.cuh"

#define TS_WARPS 4  /* warps per block, each on its own strip segment */
#define TS_RING 4   /* rows of level 0 per warp in flight or waiting */
#define TS_V 2      /* columns per lane */
#define TS_UNROLL 2 /* rows per turn of the row loop, radius 1 */
#define TS_MIN_BLOCKS 3 /* blocks per SM the registers must allow */
#define TS_MAX_SIDE CS_CC2D_MAX_SIDE

typedef struct tbs_params {
    const double *in; /* origins (interior element (0, 0, 0)) */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_y, lim_x; /* unused: cs_params_grids fills them */
    ptrdiff_t strips, segs, seg_rows, items;
    ptrdiff_t y_lo, y_hi; /* the rows the pass writes (its segments') */
    /* a split pass's bands (cs_lead_bands): a segment of each for every
       strip and plane, the launch's first warps, each counted in
       *lead_done */
    int lead_count;
    ptrdiff_t lead[2][2];
    unsigned *lead_done;
    /* a second input (cs_box_input; FLAGS instances, one plane): rows
       box_lo .. box_hi - 1 from box_in */
    const double *box_in;
    ptrdiff_t box_pitch, box_plane, box_lo, box_hi;
    cs_mode mode;
    double cval;
    double w[TS_MAX_SIDE * TS_MAX_SIDE]; /* side x side, row-major */
    double col[TS_MAX_SIDE], row[TS_MAX_SIDE]; /* an outer product's
                                                  factors (w = col row) */
    int *in_flag;  /* non-NULL: set to 1 if the input holds a value that
                      is not finite (a pass reading the caller's array) */
    int *out_flag; /* the same for the result (a pass writing it) */
} tbs_params;

/* Strips of `own` columns and segments of rows for a launch of warps that
   start `halo_rows` above their segment and end as far below it
   (`resident_warps` fit the device at once), into p's strips, segs,
   seg_rows and items (the bands' warps included); *blocks: the blocks of
   TS_WARPS warps it takes. */
cs_status
cs_tb2d_layout(cs_cuda_ctx *ctx, tbs_params *p, ptrdiff_t own, int halo_rows,
               ptrdiff_t resident_warps, unsigned *blocks);

/* One pass of `T` steps of a kernel of radius `R` and tap set SHAPE
   (cs_cc2d_taps's: a box, a plus, an outer product); FLAGS: the pass
   notes non-finite values (p's flags). */
template <int R, int T, int SHAPE, bool FLAGS>
cs_status
tbs_launch(cs_cuda_ctx *ctx, tbs_params *p);

/* The instances a file compiles, with and without the checks. */
#define TBS_INSTANCES(R, T, SHAPE)                                           \
    template cs_status tbs_launch<R, T, SHAPE, false>(cs_cuda_ctx *,        \
                                                      tbs_params *);        \
    template cs_status tbs_launch<R, T, SHAPE, true>(cs_cuda_ctx *,         \
                                                     tbs_params *)

#endif
