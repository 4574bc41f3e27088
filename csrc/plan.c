/*
 * plan.c -- cs_plan_make: the engines' policy (see plan.h).
 *
 * Every choice here was measured on the H100 (benchmarks/results/):
 *  - The Python package does not pass AUTO: it passes the path its
 *    performance model predicts fastest (src/convstencil/_model.py,
 *    auto_gpu_path).  AUTO is this engine's own rule for callers of the
 *    C API, as measured before tb2d: it takes tensor cores wherever they
 *    run the kernel, faster than
 *    CUDA cores for every 1D preset and for the 2D kernels they fuse
 *    (side 3: three steps per pass); planar squares of side 5 and 7 that
 *    cc2d runs (boxes, a plus such as star2d13p, outer products such as
 *    box2d49p), which tensor cores cannot fuse, and the 3D kernels that
 *    cc3d streams along z (cubes of side 3 and 5, 7-point stars and
 *    their powers) go to CUDA cores (h100_1d.md, h100_2d.md, h100_3d.md,
 *    h100_3d_paths.md).
 *  - Tensor-core passes fuse up to one tile per axis (7), or 31 points
 *    for a folded 1D grid (tc1d).  Kernels of several z-planes are not
 *    fused: a fused 3D pass costs more than the steps it saves
 *    (h100_3d_depth.md).
 *  - On CUDA cores only a 7-point star in 3D fuses: two steps per cc3d
 *    pass of its square, 1.6 times as fast as single steps with its band
 *    recomputed; three steps and fused boxes run slower than they save
 *    (h100_3d_depth_cuda_core.md).
 *  - The depth is the one that needs the fewest launches: a pass and an
 *    unfused step cost about the same (both read and write the grid
 *    once), so 100 steps fused at most 15 deep run as 7 passes of 14
 *    (9 launches), not 6 passes of 15 and 10 single steps (16).
 * CONVSTENCIL_CUDA_MAX_DEPTH (caps->max_depth; for measuring what fusion
 * buys) caps the depth of every kernel instead: a side of cap*(k-1)+1
 * admits at most cap steps of a kernel of side k > 1.
 */
#include "plan.h"

#include <string.h>

int
cs_cc3d_taps(const int size[3], const double *weights)
{
    const int k = size[0];
    if (weights == NULL || k != size[1] || k != size[2]
        || (k != 3 && k != 5 && k != 7)) {
        return -1;
    }
    if (cs_taps_diamond(k, weights)) {
        return CS_CC3D_DIAMOND;
    }
    /* a box of side 7 (343 taps per point: registers past what streaming
       allows) runs on the generic kernel */
    return k == 7 ? -1 : CS_CC3D_BOX;
}

int
cs_cc2d_taps(const int size[3], const double *weights)
{
    double col[CS_CC2D_MAX_SIDE], row[CS_CC2D_MAX_SIDE];
    return cs_cc2d_taps_factored(size, weights, col, row);
}

int
cs_cc2d_taps_factored(const int size[3], const double *weights, double *col,
                      double *row)
{
    const int k = size[1];
    if (weights == NULL || size[0] != 1 || size[2] != k
        || (k != 3 && k != 5 && k != 7)) {
        return -1;
    }
    if (cs_taps_plus(k, weights)) {
        return CS_CC2D_PLUS; /* 2 k - 1 taps: cheaper than the factors */
    }
    return cs_outer_factors(k, k, weights, col, row) ? CS_CC2D_RANK1
                                                     : CS_CC2D_BOX;
}

int
cs_tb2d_max_depth(const int size[3], const double *weights)
{
    return cs_tb2d_depth_of_taps(size[1], cs_cc2d_taps(size, weights));
}

int
cs_tb2d_depth_of_taps(int k, int taps)
{
    if (taps < 0) {
        return 0; /* not a plane of side 3, 5 or 7 */
    }
    if (k == 3) {
        return CS_TB2D_MAX_DEPTH;
    }
    if (taps != CS_CC2D_PLUS && taps != CS_CC2D_RANK1) {
        /* a full-rank box: k * k multiply-adds a cell and level */
        return k == 5 ? CS_TB2D_MAX_DEPTH_BOX_5 : CS_TB2D_MAX_DEPTH_BOX_7;
    }
    return k == 5 ? CS_TB2D_MAX_DEPTH_5 : CS_TB2D_MAX_DEPTH_7;
}

int
cs_tb3d_taps(const int size[3], const double *weights, double cz[3],
             double cy[3], double cx[3])
{
    double z[3], y[3], x[3], rest[9];
    if (weights == NULL || size[0] != 3 || size[1] != 3 || size[2] != 3) {
        return -1;
    }
    if (cs_taps_diamond(3, weights)) {
        return CS_TB3D_STAR;
    }
    if (!cs_outer_factors(3, 9, weights, z, rest)
        || !cs_outer_factors(3, 3, rest, y, x)) {
        return -1;
    }
    if (cz != NULL) {
        memcpy(cz, z, sizeof(z));
        memcpy(cy, y, sizeof(y));
        memcpy(cx, x, sizeof(x));
    }
    return CS_TB3D_RANK1;
}

size_t
cs_tb3d_smem_bytes(int shape, int depth)
{
    const size_t planes = shape == CS_TB3D_STAR ? 2 * (size_t)depth : 2;
    return planes * (CS_TB3D_TILE_ROWS + 2) * CS_TB3D_TILE_COLS
           * sizeof(double);
}

int
cs_tb3d_max_depth(const int size[3], const double *weights,
                  size_t smem_optin)
{
    const int shape = cs_tb3d_taps(size, weights, NULL, NULL, NULL);
    if (shape < 0) {
        return 0;
    }
    int depth = CS_TB3D_MAX_DEPTH;
    while (depth > 0 && smem_optin != 0
           && cs_tb3d_smem_bytes(shape, depth) > smem_optin) {
        depth--;
    }
    return depth;
}

static int
kernel_size(const cs_kernel *k, int axis)
{
    return (int)k->size[axis];
}

/* k's extents as the tap-set rules (cs_cc3d_taps, cs_tb2d_max_depth ...)
   take them. */
static void
kernel_sizes(const cs_kernel *k, int size[3])
{
    for (int a = 0; a < 3; a++) {
        size[a] = kernel_size(k, a);
    }
}

static int
cc3d_runs(const cs_kernel *k)
{
    int size[3];
    kernel_sizes(k, size);
    return k->size[0] > 1 ? cs_cc3d_taps(size, k->weights) : -1;
}

/* Whether cc2d runs k and tensor cores would not fuse it: a planar
   square of side 5 or 7, a box or a plus. */
static int
cc2d_runs_better(const cs_kernel *k)
{
    int size[3];
    kernel_sizes(k, size);
    return size[1] >= 5 && cs_cc2d_taps(size, k->weights) >= 0;
}

/* A 1D problem (the user's 1D kernel {1, 1, kx} on a grid {1, 1, n}) is
   folded into rows of CS_FOLD_WIDTH points (fewer for a short grid, a
   multiple of 128), so that the 2D kernels get whole tiles of rows. */
static void
plan_fold(const cs_kernel *k, const ptrdiff_t shape[3], cs_plan *plan)
{
    for (int a = 0; a < 3; a++) {
        plan->run_shape[a] = shape[a];
    }
    plan->fold = k->ndim == 1 && shape[0] == 1 && shape[1] == 1
                 && k->size[0] == 1 && k->size[1] == 1;
    if (plan->fold) {
        const ptrdiff_t n = shape[2];
        plan->fold_points = n;
        plan->fold_width = n < CS_FOLD_WIDTH ? (n + 127) / 128 * 128
                                             : CS_FOLD_WIDTH;
        plan->run_shape[1] = (n + plan->fold_width - 1) / plan->fold_width;
        plan->run_shape[2] = plan->fold_width;
    }
}

/* Whether `path` may run k on the device; the path AUTO resolves to. */
static cs_status
choose_path(const cs_kernel *k, const cs_plan *plan, cs_cuda_path path,
            const cs_caps *caps, cs_cuda_path *chosen, char *msg,
            size_t msg_len)
{
    const int tc_fits =
        plan->fold ? k->size[2] <= CS_TC_MAX_SIDE_1D
                   : k->size[0] <= CS_TC3D_MAX_KZ
                         && k->size[1] <= CS_TC_MAX_SIDE
                         && k->size[2] <= CS_TC_MAX_SIDE;
    const int tc_hw = caps->cc_major >= 9; /* FP64 m16n8k4 MMA: sm_90 */
    if (path == CS_CUDA_PATH_TENSOR_CORE && !tc_fits && k->ndim == 1) {
        cs_say(msg, msg_len,
               "the tensor-core path runs 1D kernels up to 31 points; this "
               "one has %td (use the CUDA-core path)",
               k->size[2]);
        return CS_ERR_UNSUPPORTED;
    }
    if (path == CS_CUDA_PATH_TENSOR_CORE && !tc_fits) {
        cs_say(msg, msg_len,
               "the tensor-core path runs kernels up to 7 per axis (7 x 7 x "
               "7); this one is %td x %td x %td",
               k->size[0], k->size[1], k->size[2]);
        return CS_ERR_UNSUPPORTED;
    }
    if (path == CS_CUDA_PATH_TENSOR_CORE && !tc_hw) {
        cs_say(msg, msg_len,
               "the tensor-core path needs sm_90 or newer (FP64 m16n8k4 "
               "MMA); this device is sm_%d%d",
               caps->cc_major, caps->cc_minor);
        return CS_ERR_UNSUPPORTED;
    }
    const int tc = path == CS_CUDA_PATH_TENSOR_CORE
                   || (path == CS_CUDA_PATH_AUTO && tc_fits && tc_hw
                       && cc3d_runs(k) < 0 && !cc2d_runs_better(k));
    *chosen = tc ? CS_CUDA_PATH_TENSOR_CORE : CS_CUDA_PATH_CUDA_CORE;
    return CS_OK;
}

/* Launches of `steps` steps fused `depth` deep: passes, then single
   steps. */
static long
launches(long steps, int depth)
{
    return steps / depth + steps % depth;
}

/*
 * The fusion plan within max_side: the deepest that fits (and whose band
 * fits the grid), then the depth below it that needs the fewest
 * launches, the deepest of equals.
 */
static cs_status
plan_depth(const cs_kernel *k, long steps, cs_mode mode,
           const ptrdiff_t shape[3], ptrdiff_t max_side[3],
           cs_fusion_plan *fusion)
{
    cs_status st = cs_fusion_plan_make(k, steps, mode, shape, max_side,
                                       fusion);
    if (st != CS_OK || fusion->depth <= 2) {
        return st;
    }
    int best = fusion->depth;
    for (int d = fusion->depth - 1; d >= 1; d--) {
        if (launches(steps, d) < launches(steps, best)) {
            best = d;
        }
    }
    if (best == fusion->depth) {
        return CS_OK;
    }
    for (int a = 0; a < 3; a++) {
        if (k->size[a] > 1) {
            max_side[a] = best * (k->size[a] - 1) + 1;
        }
    }
    return cs_fusion_plan_make(k, steps, mode, shape, max_side, fusion);
}

/* The tensor-core path's limits on the fused kernel's extents. */
static void
tc_max_side(const cs_kernel *k, const cs_plan *plan, const cs_caps *caps,
            ptrdiff_t max_side[3])
{
    for (int a = 0; a < 3; a++) {
        max_side[a] = plan->fold ? (a == 2 ? CS_TC_MAX_SIDE_1D : 1)
                                 : CS_TC_MAX_SIDE;
    }
    if (caps->max_depth == 0) {
        if (k->size[0] > 1) {
            for (int a = 0; a < 3; a++) {
                max_side[a] = k->size[a]; /* several planes: depth 1 */
            }
        }
        return;
    }
    for (int a = 0; a < 3; a++) {
        if (k->size[a] > 1 && caps->max_depth < max_side[a]) {
            const ptrdiff_t side = caps->max_depth * (k->size[a] - 1) + 1;
            max_side[a] = side < max_side[a] ? side : max_side[a];
        }
    }
}

static cs_status
plan_tensor_core(const cs_kernel *k, const ptrdiff_t shape[3], cs_mode mode,
                 long steps, const cs_caps *caps, cs_plan *plan)
{
    tc_max_side(k, plan, caps, plan->max_side);
    /* the band is the user's grid's: a folded grid's two ends */
    const cs_status st = plan_depth(k, steps, mode, shape, plan->max_side,
                                    &plan->fusion);
    if (st != CS_OK) {
        return st;
    }
    const ptrdiff_t depth = plan->fusion.depth;
    const ptrdiff_t kz = depth * (k->size[0] - 1) + 1;
    const ptrdiff_t kx = depth * (k->size[2] - 1) + 1;
    plan->pass = kz > 1 ? CS_PASS_TC3D
                 : kx > CS_TC_MAX_SIDE ? CS_PASS_TC1D
                                       : CS_PASS_TC2D;
    return CS_OK;
}

/* The most steps per pass tb2d runs of k on this grid; 0: it does not
   (a folded grid, kernels cs_tb2d_max_depth refuses, planes under
   CS_TB2D_MIN_EXTENT rows or columns). */
static int
tb2d_depth(const cs_kernel *k, const cs_plan *plan)
{
    int size[3];
    kernel_sizes(k, size);
    if (plan->fold || plan->run_shape[1] < CS_TB2D_MIN_EXTENT
        || plan->run_shape[2] < CS_TB2D_MIN_EXTENT) {
        return 0;
    }
    return cs_tb2d_max_depth(size, k->weights);
}

/* The most steps per pass tb3d runs of k on this grid; 0: it does not. */
static int
tb3d_depth(const cs_kernel *k, const cs_plan *plan, const cs_caps *caps)
{
    int size[3];
    kernel_sizes(k, size);
    if (plan->fold) {
        return 0;
    }
    for (int a = 0; a < 3; a++) {
        if (plan->run_shape[a] < CS_TB3D_MIN_EXTENT) {
            return 0;
        }
    }
    return cs_tb3d_max_depth(size, k->weights, caps->smem_optin);
}

/* tb2d and tb3d (pass kind `pass`): passes of their most steps (or the
   cap), the remainder as one more pass of its own depth (each pass reads
   and writes the grid once, whatever its depth); exact at every edge, no
   band. */
static void
plan_blocked(const cs_kernel *k, int max_depth, long steps,
             const cs_caps *caps, cs_pass_kind pass, cs_plan *plan)
{
    long top = caps->max_depth == 0 || caps->max_depth > max_depth
                   ? max_depth
                   : caps->max_depth;
    const int best = (int)(top < steps ? top : steps);
    plan->pass = pass;
    plan->tail_pass = 1;
    plan->fusion.depth = best;
    plan->fusion.passes = steps / best;
    plan->fusion.remainder = steps % best;
    for (int a = 0; a < 3; a++) {
        plan->max_side[a] = best * (int)(k->size[a] - 1) + 1;
    }
}

/* CUDA cores: a planar 3 x 3 kernel, or a planar plus or outer product
   of side 5 or 7, runs temporally blocked (tb2d), and so does a 3D star
   of 7 points or outer product of side 3 (tb3d) on a grid of at least
   CS_TB3D_MIN_EXTENT in every extent; on a smaller one a 7-point star
   fuses two steps per cc3d pass (at most two: fused_band.cu recomputes
   the band of two steps); every other kernel runs step by step. */
static cs_status
plan_cuda_core(const cs_kernel *k, const ptrdiff_t shape[3], cs_mode mode,
               long steps, const cs_caps *caps, cs_plan *plan)
{
    const int tb2d_max = tb2d_depth(k, plan);
    if (tb2d_max > 0) {
        plan_blocked(k, tb2d_max, steps, caps, CS_PASS_TB2D, plan);
        return CS_OK;
    }
    const int tb3d_max = tb3d_depth(k, plan, caps);
    if (tb3d_max > 0) {
        plan_blocked(k, tb3d_max, steps, caps, CS_PASS_TB3D, plan);
        return CS_OK;
    }
    const long depth = caps->max_depth == 0 || caps->max_depth > 2
                           ? 2
                           : caps->max_depth;
    if (plan->fold || k->size[0] != 3 || depth < 2
        || cc3d_runs(k) != CS_CC3D_DIAMOND) {
        return CS_OK; /* step by step */
    }
    for (int a = 0; a < 3; a++) {
        plan->max_side[a] = 2 * depth + 1;
    }
    const cs_status st = plan_depth(k, steps, mode, shape, plan->max_side,
                                    &plan->fusion);
    if (st != CS_OK) {
        return st;
    }
    if (plan->fusion.depth == 1) {
        /* no fused pass after all (one step, or a grid narrower than the
           band's strips): every step is a single CUDA-core step */
        plan->fusion.passes = 0;
        plan->fusion.remainder = steps;
        return CS_OK;
    }
    plan->pass = CS_PASS_CC3D;
    return CS_OK;
}

static int
args_valid(const cs_kernel *k, const ptrdiff_t shape[3], cs_mode mode,
           long steps, cs_cuda_path path, const cs_caps *caps,
           const cs_plan *plan)
{
    if (k == NULL || k->weights == NULL || shape == NULL || caps == NULL
        || plan == NULL || steps < 0 || (int)mode < 0
        || (int)mode >= CS_MODE_COUNT || caps->max_depth < 0
        || (path != CS_CUDA_PATH_AUTO && path != CS_CUDA_PATH_TENSOR_CORE
            && path != CS_CUDA_PATH_CUDA_CORE)) {
        return 0;
    }
    for (int a = 0; a < 3; a++) {
        if (shape[a] < 1 || k->size[a] < 1 || k->size[a] % 2 == 0) {
            return 0;
        }
    }
    return 1;
}

cs_status
cs_plan_make(const cs_kernel *k, const ptrdiff_t shape[3], cs_mode mode,
             long steps, cs_cuda_path path, const cs_caps *caps,
             cs_plan *plan, char *msg, size_t msg_len)
{
    if (msg != NULL && msg_len > 0) {
        msg[0] = '\0';
    }
    if (!args_valid(k, shape, mode, steps, path, caps, plan)) {
        cs_say(msg, msg_len, "cs_plan_make: invalid arguments");
        return CS_ERR_INVALID;
    }
    memset(plan, 0, sizeof(*plan));
    plan_fold(k, shape, plan);
    cs_status st = choose_path(k, plan, path, caps, &plan->path, msg,
                               msg_len);
    if (st != CS_OK) {
        return st;
    }
    if (steps == 0) {
        plan->path = CS_CUDA_PATH_CUDA_CORE; /* the grid is only copied */
    }
    for (int a = 0; a < 3; a++) {
        plan->max_side[a] = k->size[a];
    }
    plan->fusion.depth = 1;
    plan->fusion.remainder = steps;
    if (steps > 0) {
        st = plan->path == CS_CUDA_PATH_TENSOR_CORE
                 ? plan_tensor_core(k, shape, mode, steps, caps, plan)
                 : plan_cuda_core(k, shape, mode, steps, caps, plan);
    }
    if (st != CS_OK) {
        cs_say(msg, msg_len, "fusion plan: %s", cs_status_string(st));
        return st;
    }
    if (plan->fusion.needs_band && plan->fusion.passes > 0) {
        plan->band = plan->fold ? CS_BAND_FOLD_ENDS
                     : plan->pass == CS_PASS_CC3D ? CS_BAND_IN_PLACE
                                                  : CS_BAND_STRIPS;
    }
    return CS_OK;
}

const char *
cs_pass_kind_name(cs_pass_kind pass)
{
    switch (pass) {
    case CS_PASS_NONE: return "none";
    case CS_PASS_TC2D: return "tc2d";
    case CS_PASS_TC1D: return "tc1d";
    case CS_PASS_TC3D: return "tc3d";
    case CS_PASS_CC3D: return "cc3d";
    case CS_PASS_TB2D: return "tb2d";
    case CS_PASS_TB3D: return "tb3d";
    }
    return "unknown";
}

const char *
cs_band_kind_name(cs_band_kind band)
{
    switch (band) {
    case CS_BAND_NONE: return "none";
    case CS_BAND_STRIPS: return "strips";
    case CS_BAND_FOLD_ENDS: return "fold-ends";
    case CS_BAND_IN_PLACE: return "in-place";
    }
    return "unknown";
}
