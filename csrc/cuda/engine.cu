/*
 * engine.cu -- cs_cuda_apply: one call of the GPU engine, in order.
 *
 *   plan_call      cs_plan_make (plan.c: path, pass kind, fused depth,
 *                  band fix-up, fold of a 1D grid), then what the passes
 *                  need on the host: the composed kernel, its stencil2row
 *                  layout, tc3d's planes
 *   begin          a lane: streams, events, pinned staging (resources.cu)
 *   run_on_device  the arena (arena.cu: two padded ping-pong grids and
 *                  the band strips, in one kept device block), the
 *                  parameters (one block, uploaded only when they
 *                  change), the grid in (grid_io.cu), the step loop, the
 *                  result out (between float64 device arrays, tb2d
 *                  and a fold's tc1d passes: the first pass reads the
 *                  caller's array and the last pass or step writes the
 *                  result, no load or store); a grid that
 *                  holds NaN or infinite values goes to the masked path
 *                  instead (grid_io.cu)
 *   release        the lane and the block back, the host side freed
 *
 * Step loop: `passes` fused passes, each a halo refresh (bands.cu), the
 * pass's kernel (tc2d, tc1d, tc3d on tensor cores; cc3d on CUDA cores)
 * and the fix-up of the band the plan names (edge strips on a second
 * stream, bands.cu; a fold's two ends, fold1d.cu; in place,
 * fused_band.cu); then `remainder` unfused steps on CUDA cores
 * (cudacore.cu, which picks cc2d or cc3d where they run the kernel).
 * Device arrays come in through device_call.cu, which also runs a
 * single step as one direct kernel.
 */
#include "engine.cuh"
#include "arena.cuh"
#include "bands.cuh"
#include "grid_io.cuh"
#include "transfer.cuh"
#include "../host_copy.h"
#include "../layout.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BAND_SPARE_SMS 4 /* SMs a banded tc2d pass leaves free: on the H100,
                            heat2d fused 3 deep ran fastest with 4 of 1, 2, 4 */

/* ------------------------------------------------------------------------
 * the plan and what its passes need on the host
 * --------------------------------------------------------------------- */

/*
 * tc3d: classify the composed kernel's z-planes and build each dense
 * plane's weight matrices for the shared layout (s->plane_w).
 */
static cs_status
plan_planes(cs_cuda_ctx *ctx, cs_apply_state *s)
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

/* The composed kernel's stencil2row layout, checked against the kernel
   that runs it (tc1d for passes past 7 points, else tc2d's tile, whose
   layout tc3d shares), and tc3d's planes. */
static cs_status
build_layout(cs_cuda_ctx *ctx, cs_apply_state *s, const cs_plan *plan)
{
    const int wide = plan->pass == CS_PASS_TC1D;
    const int kx = (int)s->composed.size[2];
    s->layout_built = 1;
    cs_status st = cs_layout2d_build(
        s->composed.weights, (int)s->composed.size[1], kx, CS_TC2D_GROUPS,
        wide ? cs_cuda_tc1d_tile_rows(kx) : CS_TC2D_TILE_ROWS, &s->layout);
    if (st != CS_OK) {
        cs_cuda_message(ctx, "tensor-core plan (depth %d): %s",
                        plan->fusion.depth, cs_status_string(st));
        return st;
    }
    const size_t smem = (size_t)ctx->smem_optin;
    CS_TRY(wide ? cs_cuda_tc1d_check_layout(ctx, &s->layout, smem)
                : cs_cuda_tc2d_check_layout(ctx, &s->layout, smem));
    if (plan->pass == CS_PASS_TC3D) {
        return plan_planes(ctx, s);
    }
    /* one plane: the layout's own matrices (built from its weights) */
    s->wa_host = s->layout.weight_a;
    s->wb_host = s->layout.weight_b;
    s->w_count = (size_t)s->layout.kpad * (size_t)s->layout.group;
    return CS_OK;
}

/* tb2d and tb3d: passes that step the kernel themselves, exact at every
   edge (no band), the remainder one tail pass of its own depth. */
static int
blocked(const cs_plan *plan)
{
    return plan->pass == CS_PASS_TB2D || plan->pass == CS_PASS_TB3D;
}

/* The fused passes' kernel, and on tensor cores its layout. */
static cs_status
prepare_passes(cs_cuda_ctx *ctx, cs_apply_state *s, const cs_kernel *kernel,
               const cs_plan *plan)
{
    if (plan->fusion.passes == 0 || blocked(plan)) {
        return CS_OK;
    }
    const cs_status st =
        cs_kernel_compose(kernel, plan->fusion.depth, &s->composed);
    if (st != CS_OK) {
        cs_cuda_message(ctx, "fused kernel (depth %d): %s",
                        plan->fusion.depth, cs_status_string(st));
        return st;
    }
    if (plan->path == CS_CUDA_PATH_TENSOR_CORE) {
        return build_layout(ctx, s, plan);
    }
    return CS_OK;
}

/*
 * The plan (cs_plan_make for this device and CONVSTENCIL_CUDA_MAX_DEPTH)
 * and what it needs on the host.  A grid with no points is planned as
 * one point: the plan then only says whether the path could run.
 */
cs_status
cs_engine_plan(cs_cuda_ctx *ctx, cs_apply_state *s, const ptrdiff_t shape[3],
               const cs_kernel *kernel, cs_mode mode, long steps,
               cs_cuda_path path, cs_plan *plan, cs_run_info *info)
{
    CS_TRY(cs_cuda_device_facts(ctx));
    cs_caps caps;
    memset(&caps, 0, sizeof(caps));
    caps.cc_major = ctx->cc_major;
    caps.smem_optin = (size_t)ctx->smem_optin;
    CS_TRY(cs_env_count(ctx, "CONVSTENCIL_CUDA_MAX_DEPTH", &caps.max_depth));
    const ptrdiff_t one[3] = {1, 1, 1};
    const int empty = shape[0] == 0 || shape[1] == 0 || shape[2] == 0;
    char msg[256];
    const cs_status st = cs_plan_make(kernel, empty ? one : shape, mode,
                                      steps, path, &caps, plan, msg,
                                      sizeof(msg));
    if (st != CS_OK) {
        cs_cuda_message(ctx, "%s", msg);
        return st;
    }
    CS_TRY(prepare_passes(ctx, s, kernel, plan));
    if (info != NULL) {
        info->path = plan->path == CS_CUDA_PATH_TENSOR_CORE ? "tensor-core"
                                                            : "cuda-core";
        info->fused_depth = plan->fusion.depth;
        info->fused_passes = plan->fusion.passes;
        info->unfused_steps = plan->fusion.remainder;
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
upload_params(cs_cuda_ctx *ctx, cs_apply_state *s, const cs_kernel *kernel,
              const cs_plan *plan, cs_dkernel *dk, cs_dkernel *dkc,
              cs_tc2d_plan *tc)
{
    const int use_tc = plan->path == CS_CUDA_PATH_TENSOR_CORE;
    const int cc_fused = plan->pass == CS_PASS_CC3D;
    param_plan pp;
    memset(&pp, 0, sizeof(pp));
    pp.kbytes = (size_t)cs_kernel_count(kernel) * sizeof(double);
    pp.cbytes =
        cc_fused ? (size_t)cs_kernel_count(&s->composed) * sizeof(double) : 0;
    pp.wbytes = use_tc ? s->w_count * sizeof(double) : 0;
    pp.lbytes = use_tc ? (size_t)4 * s->layout.in_cols * sizeof(int) : 0;
    int ok = cs_arena_take(&pp.top, pp.kbytes, &pp.off_w)
             && cs_arena_take(&pp.top, pp.cbytes, &pp.off_wc)
             && cs_arena_take(&pp.top, pp.wbytes, &pp.off_wa)
             && cs_arena_take(&pp.top, pp.wbytes, &pp.off_wb)
             && cs_arena_take(&pp.top, pp.lbytes, &pp.off_lut);
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

/* ------------------------------------------------------------------------
 * the step loop
 * --------------------------------------------------------------------- */

/* Where a run between the caller's device arrays reads its input and
   writes its result instead of the main grids (see "between the caller's
   device arrays" below); neither flag set: the grid is loaded into
   L->g[0] and the result stored from the main grids. */
typedef struct cs_loop_ends {
    cs_dgrid in, out; /* the caller's arrays as grids */
    int read_in;      /* the first pass reads `in` */
    int write_out;    /* the last pass or step writes `out` */
} cs_loop_ends;

/* The main kernel of one fused pass src -> dst; flat: tc1d reads the
   caller's array (src its flat view), else NULL. */
static cs_status
run_pass(cs_cuda_ctx *ctx, const cs_plan *plan, const cs_loop_args *L,
         const cs_dgrid *src, const cs_dgrid *dst,
         const cs_tc1d_flat *flat)
{
    switch (plan->pass) {
    case CS_PASS_TC2D:
        return cs_cuda_tc2d_pass(ctx, src, dst, &L->tc3.tile);
    case CS_PASS_TC1D:
        return cs_cuda_tc1d_pass(ctx, src, dst, &L->tc3.tile, flat);
    case CS_PASS_TC3D:
        return cs_cuda_tc3d_pass(ctx, src, dst, &L->tc3);
    case CS_PASS_CC3D:
        return cs_cuda_core_step(ctx, src, dst, &L->dkc);
    case CS_PASS_TB2D: /* blocked_passes runs those */
    case CS_PASS_TB3D:
    case CS_PASS_NONE:
        break;
    }
    cs_cuda_message(ctx, "step loop: no kernel for a pass of kind %s",
                    cs_pass_kind_name(plan->pass));
    return CS_ERR_INVALID;
}

/* After the pass's main kernel: the outputs near the edges, step by
   step, as the plan says. */
static cs_status
fix_band(cs_cuda_ctx *ctx, const cs_apply_state *s, const cs_plan *plan,
         const cs_loop_args *L, const cs_dgrid *src, const cs_dgrid *dst,
         cs_mode mode, double cval)
{
    switch (plan->band) {
    case CS_BAND_STRIPS:
        return cs_bands_finish(ctx, s->lane, L->jobs, dst, &plan->fusion);
    case CS_BAND_FOLD_ENDS:
        return cs_cuda_fold1d_fix_ends(ctx, src, dst, plan->fold_points,
                                       &L->dk, plan->fusion.depth, mode,
                                       cval);
    case CS_BAND_IN_PLACE:
        return cs_cuda_fused_band(ctx, src, dst, &L->dk, mode, cval);
    case CS_BAND_NONE:
        break;
    }
    return CS_OK;
}

/*
 * tb2d's or tb3d's passes: `depth` steps each, then the remainder as one
 * pass of its own (their plans have tail_pass).  Pass i reads the main grid
 * g[i % 2] and writes g[(i + 1) % 2]; between the caller's arrays (ends)
 * the first pass reads ends->in instead, noting a non-finite input in
 * the lane's flag 0, and the last writes ends->out, noting a non-finite
 * result in flag 1.  *cur_out: the main grid holding the result
 * otherwise.
 */
static cs_status
blocked_passes(cs_cuda_ctx *ctx, const cs_apply_state *s,
               const cs_loop_args *L, const cs_plan *plan,
               const cs_loop_ends *ends, cs_mode mode, double cval,
               int *cur_out)
{
    cs_status (*const run)(cs_cuda_ctx *, const cs_dgrid *, const cs_dgrid *,
                           const cs_dkernel *, int, cs_mode, double, int *,
                           int *, const ptrdiff_t *, cs_lead_bands *,
                           const cs_box_input *) =
        plan->pass == CS_PASS_TB3D ? cs_cuda_tb3d_pass : cs_cuda_tb2d_pass;
    const cs_fusion_plan *f = &plan->fusion;
    const long total = f->passes + (f->remainder > 0);
    const int between = ends->read_in && ends->write_out;
    int *flags = between ? s->lane->flags : NULL;
    for (long i = 0; i < total; i++) {
        CS_TRY(cs_cuda_check_interrupt(ctx, i * f->depth));
        const int depth = (int)(i < f->passes ? f->depth : f->remainder);
        const int first = i == 0, last = i + 1 == total;
        const cs_dgrid *src = first && between ? &ends->in : &L->g[i % 2];
        const cs_dgrid *dst =
            last && between ? &ends->out : &L->g[(i + 1) % 2];
        CS_TRY(run(ctx, src, dst, &L->dk, depth, mode, cval,
                   first && flags ? flags + 0 : NULL,
                   last && flags ? flags + 1 : NULL, NULL, NULL, NULL));
    }
    *cur_out = (int)(total % 2);
    return CS_OK;
}

/* The fused passes, then the unfused steps, from L->g[0] or, for a fold
   whose ends->read_in is set, from the caller's array (the first tc1d
   pass reads it, noting non-finite points in flag 0); the last unfused
   step writes the caller's array where ends->write_out is set (noting
   non-finite results in flag 1).  *cur_out: the result's main grid
   otherwise. */
static cs_status
step_loop(cs_cuda_ctx *ctx, const cs_apply_state *s, cs_loop_args *L,
          const cs_plan *plan, const cs_loop_ends *ends, cs_mode mode,
          double cval, int *cur_out)
{
    if (blocked(plan)) {
        return blocked_passes(ctx, s, L, plan, ends, mode, cval, cur_out);
    }
    const cs_fusion_plan *f = &plan->fusion;
    const ptrdiff_t fold = plan->fold ? plan->fold_points : 0;
    int cur = 0;
    int filled[2] = {0, 0}; /* constant mode: halo filled once per buffer */
    for (long pass = 0; pass < f->passes; pass++) {
        CS_TRY(cs_cuda_check_interrupt(ctx, pass * f->depth));
        const int from_array = pass == 0 && ends->read_in;
        const cs_tc1d_flat flat = {fold, mode, cval, s->lane->flags + 0};
        const cs_dgrid *src = from_array ? &ends->in : &L->g[cur];
        const cs_dgrid *dst = &L->g[1 - cur];
        if (!from_array) {
            CS_TRY(cs_refresh_halo(ctx, src, fold, mode, cval,
                                   &filled[cur]));
        }
        if (plan->band == CS_BAND_STRIPS) {
            CS_TRY(cs_bands_start(ctx, s->lane, L->jobs, src, f, &L->dk,
                                  mode, cval));
        }
        CS_TRY(run_pass(ctx, plan, L, src, dst, from_array ? &flat : NULL));
        CS_TRY(fix_band(ctx, s, plan, L, src, dst, mode, cval));
        cur = 1 - cur;
    }
    for (long t = 0; t < f->remainder; t++) {
        CS_TRY(cs_cuda_check_interrupt(ctx, f->passes * f->depth + t));
        CS_TRY(cs_refresh_halo(ctx, &L->g[cur], fold, mode, cval,
                               &filled[cur]));
        if (t + 1 == f->remainder && ends->write_out) {
            CS_TRY(cs_cuda_fold1d_step_out(ctx, &L->g[cur], fold, &L->dk,
                                           ends->out.origin,
                                           s->lane->flags + 1));
            break;
        }
        CS_TRY(cs_cuda_core_step(ctx, &L->g[cur], &L->g[1 - cur], &L->dk));
        cur = 1 - cur;
    }
    *cur_out = cur;
    return CS_OK;
}

cs_status
cs_engine_step_loop(cs_cuda_ctx *ctx, const cs_apply_state *s,
                    cs_loop_args *L, const cs_plan *plan, cs_mode mode,
                    double cval, int *cur_out)
{
    cs_loop_ends none;
    memset(&none, 0, sizeof(none));
    return step_loop(ctx, s, L, plan, &none, mode, cval, cur_out);
}

/* ------------------------------------------------------------------------
 * between the caller's device arrays
 *
 * tb2d reads its input and writes its result at plain addresses (the
 * modes applied by index, no halo), so a float64 device grid need not be
 * loaded into the padded layout nor the result stored from it: the first
 * pass reads the caller's array and the last writes the caller's result,
 * noting non-finite values in the lane's flags as the load and the store
 * would.  On the H100 the load and the store took about 2 ms of a
 * 100-step heat2d call on 10240^2 (14 ms; h100_e2e.md at 6991c80).
 *
 * A folded 1D grid does the same where its passes allow: the first tc1d
 * pass reads the caller's contiguous float64 array as the fold's rows
 * (tc1d's FLAT), and the last unfused step writes the caller's result
 * (cs_cuda_fold1d_step_out).  The load and the store of a fold each took
 * about 0.73 ms on 2^27 points (h100_ncu_copy1d.md), against about 10 ms
 * for heat1d's 100 steps: a CuPy array ran at 84% of the step loop with
 * them (h100_e2e.md at 0070e77), at 95% without (at ffc986f).
 * --------------------------------------------------------------------- */

int
cs_engine_array_grid(const cs_darray *a, const ptrdiff_t n[3], cs_dgrid *g)
{
    const ptrdiff_t e = (ptrdiff_t)sizeof(double);
    const ptrdiff_t *st = a->strides;
    const int rows_ok = st[1] % e == 0 && st[1] >= n[2] * e;
    const int planes_ok = n[0] == 1 || (st[0] % e == 0
                                        && st[0] >= n[1] * st[1]);
    if (a->dtype != CS_DTYPE_FLOAT64 || st[2] != e || !rows_ok
        || !planes_ok || (uintptr_t)a->data % sizeof(double) != 0) {
        return 0;
    }
    memset(g, 0, sizeof(*g));
    g->origin = (double *)a->data;
    for (int i = 0; i < 3; i++) {
        g->n[i] = n[i];
    }
    g->pitch = st[1] / e;
    g->plane = n[0] == 1 ? 0 : st[0] / e;
    return 1;
}

/* Whether this run goes between the caller's arrays (see above): tb2d
   or tb3d, device arrays that cs_engine_array_grid takes, a result that is
   not the input (a rerun reads the input). */
static int
blocked_between_arrays(const cs_grid_io *io, const cs_plan *plan,
                       cs_dgrid *in, cs_dgrid *out)
{
    return blocked(plan) && io->dev_in != NULL && io->dev_out != NULL
           && !io->out_reads_in
           && plan->fusion.passes + (plan->fusion.remainder > 0) >= 1
           && cs_engine_array_grid(io->dev_in, plan->run_shape, in)
           && cs_engine_array_grid(io->dev_out, plan->run_shape, out);
}

/* The caller's 1D array `a` as the fold's rows one after another (pitch
   w, no halo): float64, contiguous, 8-byte aligned.  0 when it is not
   such an array. */
static int
fold_array_grid(const cs_darray *a, const cs_plan *plan, cs_dgrid *g)
{
    if (a == NULL || a->dtype != CS_DTYPE_FLOAT64
        || a->strides[2] != (ptrdiff_t)sizeof(double)
        || (uintptr_t)a->data % sizeof(double) != 0) {
        return 0;
    }
    memset(g, 0, sizeof(*g));
    g->origin = (double *)a->data;
    g->n[0] = 1;
    g->n[1] = plan->run_shape[1];
    g->n[2] = plan->fold_width;
    g->pitch = plan->fold_width;
    return 1;
}

/* Which ends of a fold's run are the caller's arrays: the input where
   a tc1d pass comes first, the result (not the input: a rerun reads
   that) where an unfused step of a kernel fold1d_step_out takes comes
   last. */
static void
fold_ends(const cs_grid_io *io, const cs_plan *plan,
          const cs_kernel *kernel, cs_loop_ends *ends)
{
    if (!plan->fold || io->dev_in == NULL || io->dev_out == NULL) {
        return;
    }
    ends->read_in = plan->pass == CS_PASS_TC1D && plan->fusion.passes >= 1
                    && fold_array_grid(io->dev_in, plan, &ends->in);
    ends->write_out = !io->out_reads_in && plan->fusion.remainder >= 1
                      && kernel->size[2] <= CS_FOLD1D_STEP_MAX_K
                      && fold_array_grid(io->dev_out, plan, &ends->out);
}

/* Where this run reads its input and writes its result (see above). */
static void
loop_ends(const cs_grid_io *io, const cs_plan *plan, const cs_kernel *kernel,
          cs_loop_ends *ends)
{
    memset(ends, 0, sizeof(*ends));
    if (blocked_between_arrays(io, plan, &ends->in, &ends->out)) {
        ends->read_in = ends->write_out = 1;
        return;
    }
    fold_ends(io, plan, kernel, ends);
}

/* ------------------------------------------------------------------------
 * one call on the device: arena, parameters, load, step loop, store
 * --------------------------------------------------------------------- */

/* The reach of what runs on the main grids: the kernel's, the fused
   kernel's on CUDA cores, and on tensor cores the fused kernel's in z
   and y and the layout's x-halo ((P - 1) / 2: 3, or 7, 15 for tc1d). */
static void
main_halo(const cs_apply_state *s, const cs_plan *plan,
          const cs_kernel *kernel, ptrdiff_t halo[3])
{
    /* prepare_passes composed the kernel for tensor-core and cc3d passes */
    const int composed = s->composed.weights != NULL;
    const cs_kernel *reach = composed ? &s->composed : kernel;
    for (int a = 0; a < 3; a++) {
        halo[a] = cs_kernel_radius(reach, a);
    }
    if (composed && plan->path == CS_CUDA_PATH_TENSOR_CORE) {
        halo[2] = s->layout.halo_x;
    }
}

/* The arena in a block of its own, the loop's grids and strips, and the
   parameters on the device. */
cs_status
cs_engine_setup_grids(cs_cuda_ctx *ctx, cs_apply_state *s,
                      const cs_plan *plan, const cs_kernel *kernel,
                      cs_loop_args *L, char *main_buf[2])
{
    ptrdiff_t halo[3];
    main_halo(s, plan, kernel, halo);
    cs_arena ar;
    if (!cs_arena_make(plan, kernel, halo, &ar)) {
        cs_cuda_message(ctx, "a %td x %td x %td grid is too large to "
                             "address",
                        plan->run_shape[0], plan->run_shape[1],
                        plan->run_shape[2]);
        return CS_ERR_DEVICE_NOMEM;
    }
    CS_TRY(cs_block_take(ctx, ar.bytes, "two padded grids and scratch",
                         &s->block));
    char *arena = s->block->ptr;
    if (ctx->poison_memory) {
        CS_CUDA_CHECK(ctx, cudaMemsetAsync(arena, 0xff, ar.bytes, ctx->stream),
                      "cudaMemsetAsync (poison device memory)");
    }
    memset(L, 0, sizeof(*L));
    for (int i = 0; i < 2; i++) {
        main_buf[i] = arena + ar.off_main[i];
        L->g[i] = cs_geom_view(&ar.main, main_buf[i]);
    }
    for (int a = 0; a < 3; a++) {
        L->jobs[a].active = ar.has_strips[a];
        for (int i = 0; i < 2 && ar.has_strips[a]; i++) {
            L->jobs[a].buf[i] =
                cs_geom_view(&ar.strip[a], arena + ar.off_strip[a][i]);
        }
    }
    L->tc3 = s->planes; /* tc3d: the planes; tc3.tile: both */
    memset(&L->tc3.tile, 0, sizeof(L->tc3.tile));
    /* tc2d's persistent blocks leave SMs to the band stream, whose
       kernels would otherwise wait for the end of the pass */
    L->tc3.tile.spare_sms = plan->band == CS_BAND_STRIPS ? BAND_SPARE_SMS : 0;
    return upload_params(ctx, s, kernel, plan, &L->dk, &L->dkc, &L->tc3.tile);
}

/* The step loop, timed with the lane's events when `timed`, between
   the ends `ends` names. */
static cs_status
timed_loop(cs_cuda_ctx *ctx, const cs_apply_state *s, cs_loop_args *L,
           const cs_plan *plan, cs_mode mode, double cval, int timed,
           const cs_loop_ends *ends, int *cur)
{
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaEventRecord(s->lane->loop_start, ctx->stream),
                      "cudaEventRecord (step loop start)");
    }
    CS_TRY(step_loop(ctx, s, L, plan, ends, mode, cval, cur));
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaEventRecord(s->lane->loop_stop, ctx->stream),
                      "cudaEventRecord (step loop end)");
    }
    return CS_OK;
}

/* The step loop's device time, once the queued work is done. */
static cs_status
loop_seconds(cs_cuda_ctx *ctx, const cs_apply_state *s, double *seconds)
{
    float ms = 0.0f;
    CS_CUDA_CHECK(ctx,
                  cudaEventElapsedTime(&ms, s->lane->loop_start,
                                       s->lane->loop_stop),
                  "cudaEventElapsedTime (step loop)");
    *seconds = 1e-3 * (double)ms;
    return CS_OK;
}

/*
 * Take a block, upload the parameters, load the grid, run the step loop
 * of `plan`, store the result (between device arrays the loop reads
 * or writes the caller's arrays where it can: loop_ends), or, when the
 * input or the result holds a value that is not finite, run the masked
 * path.  The step loop's device time goes to *seconds when `timed` (the
 * call waits for the device anyway).
 */
static cs_status
run_on_device(cs_cuda_ctx *ctx, cs_apply_state *s, const cs_grid_io *io,
              const ptrdiff_t shape[3], const cs_kernel *kernel, cs_mode mode,
              double cval, const cs_plan *plan, int timed, double *seconds)
{
    cs_loop_args L;
    char *buf[2];
    CS_TRY(cs_engine_setup_grids(ctx, s, plan, kernel, &L, buf));
    CS_CUDA_CHECK(ctx,
                  cudaMemsetAsync(s->lane->flags, 0, 2 * sizeof(int),
                                  ctx->stream),
                  "cudaMemsetAsync (non-finite flags)");
    cs_loop_ends ends;
    loop_ends(io, plan, kernel, &ends);
    int cur = 0;
    int stored = ends.write_out; /* the last pass or step wrote it */
    if (!ends.read_in) {
        CS_TRY(cs_load_grid(ctx, s->lane, io, plan, &L.g[0], buf[1]));
    }
    CS_TRY(timed_loop(ctx, s, &L, plan, mode, cval, timed, &ends, &cur));
    if (!ends.write_out) {
        CS_TRY(cs_stage_result(ctx, s->lane, io, plan, &L.g[cur],
                               buf[1 - cur], &stored));
    }
    if (io->host_out != NULL) {
        /* the cores fault in a fresh result's pages while the device
           runs the loop: the download then copies at the memory's pace */
        cs_host_prefault(io->host_out, cs_io_points(plan) * sizeof(double));
    }
    /* the verdict on non-finite values: an input or a result that holds
       one (finite values can overflow) is run again on the masked path */
    int flags[2] = {0, 0};
    CS_TRY(cs_read_flags(ctx, s->lane, flags));
    if (timed) {
        CS_TRY(loop_seconds(ctx, s, seconds));
    }
    s->nonfinite = flags[0] || flags[1];
    if (s->nonfinite) {
        const long steps = plan->fusion.passes * plan->fusion.depth
                           + plan->fusion.remainder;
        CS_TRY(cs_run_masked(ctx, s->lane, io, shape, kernel, mode, cval,
                             steps, buf));
    } else if (!stored) {
        CS_TRY(cs_store_grid(ctx, s->lane, io, plan, &L.g[cur],
                             buf[1 - cur]));
    }
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream),
                      "cudaStreamSynchronize (end of the run)");
    }
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * a call's beginning and end
 * --------------------------------------------------------------------- */

void
cs_engine_ctx_init(cs_cuda_ctx *ctx, const cs_interrupt *intr, char *err,
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

void
cs_engine_info_init(cs_run_info *info, long steps)
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

cs_status
cs_engine_check_args(cs_cuda_ctx *ctx, const double *in, const double *out,
                     const ptrdiff_t shape[3], const cs_kernel *kernel,
                     cs_mode mode, long steps, cs_cuda_path path)
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

cs_status
cs_engine_begin(cs_cuda_ctx *ctx, cs_apply_state *s,
                const cs_cuda_streams *streams, int *timed)
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

void
cs_engine_release(cs_cuda_ctx *ctx, cs_apply_state *s)
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


cs_status
cs_engine_run(cs_cuda_ctx *ctx, const cs_grid_io *io,
              const ptrdiff_t shape[3], const cs_kernel *kernel,
              cs_mode mode, double cval, long steps, cs_cuda_path path,
              const cs_cuda_streams *streams, cs_run_info *info)
{
    cs_apply_state s;
    memset(&s, 0, sizeof(s));
    cs_plan plan;
    int timed = 1;
    cs_status st = cs_engine_plan(ctx, &s, shape, kernel, mode, steps,
                                  path, &plan, info);
    if (st == CS_OK) {
        st = cs_engine_begin(ctx, &s, streams, &timed);
    }
    double seconds = -1.0;
    if (st == CS_OK) {
        st = run_on_device(ctx, &s, io, shape, kernel, mode, cval, &plan,
                           timed, &seconds);
    }
    if (info != NULL && st == CS_OK) {
        info->device_seconds = seconds;
        info->nonfinite = s.nonfinite;
        if (s.nonfinite) {
            info->device_seconds = -1.0; /* the step loop ran twice */
            info->path = "direct";
            info->fused_depth = 1;
            info->fused_passes = 0;
            info->unfused_steps = steps;
        }
    }
    cs_engine_release(ctx, &s);
    return st;
}

cs_status
cs_cuda_apply(const double *in, double *out, const ptrdiff_t shape[3],
              const cs_kernel *kernel, cs_mode mode, double cval,
              long steps, cs_cuda_path path, cs_run_info *info,
              const cs_interrupt *intr, char *err, size_t err_len)
{
    cs_cuda_ctx ctx;
    cs_engine_ctx_init(&ctx, intr, err, err_len);
    cs_engine_info_init(info, steps);
    CS_TRY(cs_engine_check_args(&ctx, in, out, shape, kernel, mode, steps,
                                path));
    const ptrdiff_t count = shape[0] * shape[1] * shape[2];
    if (count == 0 || steps == 0) {
        /* still says whether the path could run (no device, ...) */
        cs_apply_state s;
        memset(&s, 0, sizeof(s));
        cs_plan plan;
        cs_status st = cs_engine_plan(&ctx, &s, shape, kernel, mode, 0,
                                      path, &plan, info);
        cs_engine_release(&ctx, &s);
        if (st == CS_OK && count > 0 && out != in) {
            memmove(out, in, (size_t)count * sizeof(double));
        }
        return st;
    }
    cs_grid_io io = {in, out, NULL, NULL, 0};
    return cs_engine_run(&ctx, &io, shape, kernel, mode, cval, steps, path,
                         NULL, info);
}
