/*
 * plan.h -- the policy of the engines, in one place: which path runs a
 * kernel, how many steps one pass fuses, how the boundary band of a
 * fused pass is fixed, and how a 1D grid is laid out.  Plain C (no CUDA
 * types): the device's capabilities are passed in, environment
 * overrides are parsed by the caller, so the whole policy runs, and is
 * tested, on machines without a GPU (convstencil._core.plan).
 *
 * The GPU engine (engine.cu) runs what cs_plan_make says; the CPU
 * emulation of the tensor-core path (tc_emulation.c) asks for the plan
 * of a device with FP64 tensor cores and runs the same passes.
 */
#ifndef CS_PLAN_H
#define CS_PLAN_H

#include "stencil.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tap sets the CUDA-core kernels specialise on (cc2d.cu, cc3d.cu). */
enum { CS_CC3D_BOX = 0, CS_CC3D_DIAMOND = 1 };
enum { CS_CC2D_BOX = 0, CS_CC2D_PLUS = 1, CS_CC2D_RANK1 = 2 };

#define CS_TC_MAX_SIDE 7      /* tc2d/tc3d: one stencil2row tile per axis */
#define CS_TC_MAX_SIDE_1D 31  /* tc1d: kernels of 9 to 31 points */
#define CS_TC3D_MAX_KZ 7      /* tc3d: planes of the (composed) kernel */
#define CS_TB2D_MAX_DEPTH 8   /* tb2d: steps per trip of a 3 x 3 kernel
                                 (its margins; cs_tb2d_max_depth) */
#define CS_TB2D_MAX_DEPTH_5 4 /* ... of a plus or an outer product of
                                 side 5 */
#define CS_TB2D_MAX_DEPTH_7 3 /* ... of side 7 */
#define CS_TB2D_MAX_DEPTH_BOX_5 3 /* ... of a full-rank box of side 5
                                     (measured: cs_tb2d_max_depth) */
#define CS_TB2D_MAX_DEPTH_BOX_7 1 /* ... of side 7 */
#define CS_TB2D_MIN_EXTENT 16 /* tb2d: rows and columns of a grid it runs
                                 (a tile holds the cells the modes map
                                 its margins to) */
#define CS_FOLD_WIDTH 4096    /* points per row of a folded 1D grid: a
                                 multiple of tc2d's 128-column tile */

/*
 * cc3d's tap set for the k x k x k weights of extents `size` (a cube of
 * side 3, 5 or 7): CS_CC3D_DIAMOND when every weight lies within the
 * 1-norm ball of radius (k-1)/2, else CS_CC3D_BOX for sides 3 and 5;
 * -1 when cc3d does not run it (any other extents, a 7-cube box).
 */
int
cs_cc3d_taps(const int size[3], const double *weights);

/*
 * cc2d's tap set for one plane of k x k weights (size {1, k, k}, k = 3,
 * 5 or 7): CS_CC2D_PLUS when every nonzero weight is on the centre row
 * and column, else CS_CC2D_RANK1 for an outer product (cs_outer_factors),
 * else CS_CC2D_BOX; -1 for other extents.
 */
int
cs_cc2d_taps(const int size[3], const double *weights);

#define CS_CC2D_MAX_SIDE 7 /* the planar kernels cc2d and tb2d take */

/* cs_cc2d_taps, and for CS_CC2D_RANK1 the factors it found: col (k
   entries, down the rows) and row (k, along them; k <= CS_CC2D_MAX_SIDE)
   with weights == outer(col, row), so that a caller need not factor the
   kernel again. */
int
cs_cc2d_taps_factored(const int size[3], const double *weights, double *col,
                      double *row);

/*
 * The most steps per pass tb2d runs of one plane of k x k weights (size
 * {1, k, k}): CS_TB2D_MAX_DEPTH for k = 3, CS_TB2D_MAX_DEPTH_5 (4) for
 * a plus or an outer product of side 5 and CS_TB2D_MAX_DEPTH_7 (3) of
 * side 7 (their margins, k - 1 columns per step, and the partial
 * rows each step keeps in registers: deeper ones spill, and star2d13p ran
 * slower at 4, h100_2d_tb2d_depth.md); CS_TB2D_MAX_DEPTH_BOX_5 (3) and
 * CS_TB2D_MAX_DEPTH_BOX_7 (1) for a full-rank box, whose k * k
 * multiply-adds a cell and level bind the FP64 units, so that a deeper
 * pass adds its margins' work and saves no time (H100, 10240^2,
 * h100_2d_tb2d_depth_box.md: side 7 at 152, 139 and 113 G stencils/s
 * at depths 1 to 3, side 5 at 170, 256, 271 and 267 at 1 to 4); 0 when
 * tb2d does not run the kernel (other extents).
 */
int
cs_tb2d_max_depth(const int size[3], const double *weights);

/* cs_tb2d_max_depth of a k x k plane whose tap set cs_cc2d_taps gave
   (`taps`, -1 for extents it does not take), for callers that have it. */
int
cs_tb2d_depth_of_taps(int k, int taps);

#define CS_TB3D_MAX_DEPTH 3   /* tb3d: steps per trip (at 4 the partial
                                 planes spill: ARCHITECTURE.md) */
#define CS_TB3D_MIN_EXTENT 8  /* tb3d: planes, rows and columns it needs */
#define CS_TB3D_TILE_ROWS 32  /* tb3d: a block's tile of a plane */
#define CS_TB3D_TILE_COLS 64
enum { CS_TB3D_STAR = 0, CS_TB3D_RANK1 = 1 };

/*
 * tb3d's tap set of a 3 x 3 x 3 kernel: CS_TB3D_STAR for a 7-point star
 * (heat3d), CS_TB3D_RANK1 for an outer product of three vectors
 * (box3d27p; its factors into cz, cy, cx when they are not NULL); -1
 * otherwise.  cs_tb3d_max_depth: the most steps a pass takes of those
 * (CS_TB3D_MAX_DEPTH, or fewer where a block's shared planes would not
 * fit in `smem_optin` bytes; 0: no limit), else 0.
 * cs_tb3d_smem_bytes: the shared memory a block of tap set `shape`
 * takes at `depth` (a star keeps a pair of shared planes per level,
 * an outer product one pair).
 */
int
cs_tb3d_taps(const int size[3], const double *weights, double cz[3],
             double cy[3], double cx[3]);

int
cs_tb3d_max_depth(const int size[3], const double *weights,
                  size_t smem_optin);

size_t
cs_tb3d_smem_bytes(int shape, int depth);

/* What the device offers, as the caller found it. */
typedef struct cs_caps {
    int cc_major, cc_minor; /* compute capability */
    long max_depth;         /* a cap on the fused depth for every kernel
                               (CONVSTENCIL_CUDA_MAX_DEPTH); 0: none */
    size_t smem_optin;      /* shared memory a block may opt in to;
                               0: unknown (taken as enough) */
} cs_caps;

/* What one fused pass runs. */
typedef enum cs_pass_kind {
    CS_PASS_NONE = 0,   /* no fused pass: every step unfused */
    CS_PASS_TC2D = 1,   /* tensor cores, one z-plane of weights */
    CS_PASS_TC1D = 2,   /* tensor cores, a 1D kernel of 9..31 points */
    CS_PASS_TC3D = 3,   /* tensor cores, several z-planes */
    CS_PASS_CC3D = 4,   /* CUDA cores: a 7-point star's square, cc3d */
    CS_PASS_TB2D = 5,   /* CUDA cores: `depth` steps of a planar kernel
                           (cs_tb2d_max_depth's) per trip through memory
                           (tb2d) */
    CS_PASS_TB3D = 6    /* CUDA cores: `depth` steps of a 3 x 3 x 3 kernel
                           (cs_tb3d_max_depth's) per trip (tb3d) */
} cs_pass_kind;

/* How the outputs near an edge that a fused pass gets wrong are fixed. */
typedef enum cs_band_kind {
    CS_BAND_NONE = 0,      /* wrap, or no fused pass */
    CS_BAND_STRIPS = 1,    /* edge strips stepped as grids of their own */
    CS_BAND_FOLD_ENDS = 2, /* a folded 1D grid's two ends replayed */
    CS_BAND_IN_PLACE = 3   /* recomputed in the output (fused_band.cu) */
} cs_band_kind;

typedef struct cs_plan {
    cs_cuda_path path;      /* CS_CUDA_PATH_TENSOR_CORE or _CUDA_CORE */
    cs_pass_kind pass;
    cs_band_kind band;
    cs_fusion_plan fusion;  /* depth, passes, remainder, band widths */
    ptrdiff_t max_side[3];  /* the fused kernel's largest extents */
    int tail_pass;          /* the `remainder` steps run as one more pass
                               of that depth (tb2d), not step by step */
    int fold;               /* a 1D grid folded into rows */
    ptrdiff_t fold_points;  /* its points (the user's grid) */
    ptrdiff_t fold_width;   /* points per row */
    ptrdiff_t run_shape[3]; /* the grid as the engine runs it */
} cs_plan;

/*
 * The plan for `steps` steps of kernel k on a grid of extents `shape`
 * under `mode`, on `path` (AUTO: the faster path that runs k) of a device
 * with `caps`.  CS_ERR_UNSUPPORTED with a message in msg (msg_len bytes)
 * when `path` cannot run k there; CS_ERR_INVALID for bad arguments.
 *
 * The fused depth is the one that needs the fewest launches (passes plus
 * unfused steps), the deepest of those: 100 steps of a 3-point 1D kernel
 * run as 7 passes of 14 rather than 6 of 15 and 10 single steps.
 */
cs_status
cs_plan_make(const cs_kernel *k, const ptrdiff_t shape[3], cs_mode mode,
             long steps, cs_cuda_path path, const cs_caps *caps,
             cs_plan *plan, char *msg, size_t msg_len);

const char *
cs_pass_kind_name(cs_pass_kind pass);

const char *
cs_band_kind_name(cs_band_kind band);

#ifdef __cplusplus
}
#endif

#endif /* CS_PLAN_H */
