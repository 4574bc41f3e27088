/*
 * cpu_engine.c -- the direct CPU engine: `steps` correlations of a
 * float64 grid with a weight box, every step re-applying the boundary
 * mode, exactly as repeated scipy.ndimage.correlate calls.  This file
 * holds the public entry point cs_cpu_apply, the engine's setup (the
 * non-zero taps, a separable kernel's factors, buffer strides) and the
 * choice between its two paths:
 *
 *   direct.c       "direct": small grids, the whole grid in two padded
 *                  ping-pong buffers, one step at a time;
 *   blocked.c      "direct-temporal-blocked": large grids, overlapped
 *                  tiles streamed through z, several steps per pass.
 *
 * Both compute rows with the kernels of row_kernels.c, on lane-split
 * rows (lanes.c) in buffers padded by the kernel radius, whose halo is
 * filled from the mode before each step (halo.c).  bands.c holds
 * cs_cpu_fix_bands, the edge fix-up of fused passes.  What the files
 * share is in cpu_private.h.
 */
#include "cpu_private.h"
#include "threads.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Grids up to CS_CPU_DIRECT_BYTES run direct: they live in cache anyway. */
#ifndef CS_CPU_DIRECT_BYTES
#define CS_CPU_DIRECT_BYTES (2 * 1024 * 1024)
#endif

/* ------------------------------------------------------------------ */
/* Setup                                                                */
/* ------------------------------------------------------------------ */

static void
engine_free(engine *e)
{
    free(e->w);
    free(e->tz);
    free(e->ty);
    free(e->tx);
    free(e->toff);
    e->w = NULL;
    e->tz = NULL;
    e->ty = NULL;
    e->tx = NULL;
    e->toff = NULL;
}

/*
 * Is the kernel, as a matrix with one row per (z, y) and one column per
 * x, of rank one: w = p (x) q, every q[x] non-zero?  Then, where it saves
 * FMAs, keep one tap per non-zero row (weight p, at x = 0) and q in
 * e->xw.  p and q are taken from the largest weight's row and column;
 * each product must be within 4 ulp of its weight, an error of the same
 * order as the rounding of the sum itself.
 */
static void
try_separable(engine *e, const double *weights, ptrdiff_t count,
              ptrdiff_t sy, ptrdiff_t sx)
{
    const ptrdiff_t rows = count / sx;
    const double direct = (double)VECS * e->ntaps;
    double q[SEP_MAX_WIDTH];
    if (sx < 3 || sx > SEP_MAX_WIDTH || rows > INT_MAX) {
        return;
    }
    double *p = malloc((size_t)rows * sizeof(double));
    if (p == NULL) {
        return; /* the taps as they are: slower, as exact */
    }
    /* the factors host_device.h finds for cc2d too; every x factor
       nonzero, so that the row kernel covers every tap */
    int ok = cs_outer_factors((int)rows, (int)sx, weights, p, q);
    int nrows = 0;
    for (ptrdiff_t x = 0; x < sx && ok; x++) {
        ok = q[x] != 0.0;
    }
    for (ptrdiff_t i = 0; i < rows && ok; i++) {
        nrows += (p[i] != 0.0);
    }
    if (!ok
        || (double)nrows * (VECS + sx - 1) + (double)VECS * sx >= direct) {
        free(p);
        return; /* not an outer product, or no FMAs saved */
    }
    int t = 0;
    for (ptrdiff_t i = 0; i < rows; i++) {
        if (p[i] != 0.0) {
            e->w[t] = p[i];
            e->tz[t] = (int)(i / sy);
            e->ty[t] = (int)(i % sy);
            e->tx[t] = 0;
            t++;
        }
    }
    free(p);
    e->ntaps = t;
    e->sep_width = (int)sx;
    for (ptrdiff_t x = 0; x < sx; x++) {
        e->xw[x] = q[x];
    }
}

/*
 * Grid, kernel radii and the list of non-zero taps (zero weights are
 * skipped: star shapes arrive as boxes padded with zeros).  A 2D problem
 * {1, ny, nx} is taken as {ny, 1, nx}: same memory, same weights in the
 * same order, and the blocked path then streams through its rows.
 */
static cs_status
engine_init(engine *e, const ptrdiff_t shape[3], const cs_kernel *k,
            cs_mode mode, double cval)
{
    ptrdiff_t size[3];
    for (int a = 0; a < 3; a++) {
        e->n[a] = shape[a];
        size[a] = k->size[a];
    }
    if (shape[0] == 1 && size[0] == 1) {
        e->n[0] = shape[1];
        e->n[1] = 1;
        size[0] = size[1];
        size[1] = 1;
    }
    for (int a = 0; a < 3; a++) {
        e->r[a] = (size[a] - 1) / 2;
    }
    e->lane_len = 0;
    e->stride[0] = 0;
    e->stride[1] = 0;
    e->mode = mode;
    e->cval = cval;

    ptrdiff_t count = cs_kernel_count(k);
    e->ntaps = 0;
    e->sep_width = 0;
    e->w = malloc((size_t)count * sizeof(double));
    e->tz = malloc((size_t)count * sizeof(int));
    e->ty = malloc((size_t)count * sizeof(int));
    e->tx = malloc((size_t)count * sizeof(int));
    e->toff = malloc((size_t)count * sizeof(ptrdiff_t));
    if (e->w == NULL || e->tz == NULL || e->ty == NULL || e->tx == NULL
        || e->toff == NULL) {
        engine_free(e);
        return CS_ERR_NOMEM;
    }
    for (ptrdiff_t i = 0; i < count; i++) {
        if (k->weights[i] != 0.0) {
            e->w[e->ntaps] = k->weights[i];
            e->tz[e->ntaps] = (int)(i / (size[2] * size[1]));
            e->ty[e->ntaps] = (int)(i / size[2] % size[1]);
            e->tx[e->ntaps] = (int)(i % size[2]);
            e->ntaps++;
        }
    }
    try_separable(e, k->weights, count, size[1], size[2]);
    return CS_OK;
}

/*
 * Strides for buffers whose planes hold held_y x held_x grid points, and
 * the taps' in-plane offsets, which depend on them.  An x shift of one
 * point is one vector in a lane-split row.
 */
static void
engine_layout(engine *e, ptrdiff_t held_y, ptrdiff_t held_x)
{
    e->lane_len = CEIL_DIV(held_x, LANES);
    e->stride[1] = (e->lane_len + 2 * e->r[2]) * LANES;
    e->stride[0] = (held_y + 2 * e->r[1]) * e->stride[1];
    for (int t = 0; t < e->ntaps; t++) {
        e->toff[t] = e->ty[t] * e->stride[1] + e->tx[t] * LANES;
    }
}

cs_status
cs_cpu_check_args(const double *in, const double *out,
                  const ptrdiff_t shape[3], const cs_kernel *k, cs_mode mode,
                  long steps)
{
    if (in == NULL || out == NULL || shape == NULL || k == NULL
        || k->weights == NULL || steps < 0 || (int)mode < 0
        || (int)mode >= CS_MODE_COUNT) {
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < 3; a++) {
        if (shape[a] < 1 || k->size[a] < 1 || k->size[a] % 2 == 0) {
            return CS_ERR_INVALID;
        }
    }
    return CS_OK;
}

/* ------------------------------------------------------------------ */
/* The choice of path and threads                                       */
/* ------------------------------------------------------------------ */

/*
 * The path, its tiling and the team for `steps` steps (steps > 0), into
 * *p and *tl, and the engine's layout for that path.  The team is first
 * cut to the work (threads.h); a grid beyond CS_CPU_DIRECT_BYTES is then
 * tiled for it where a tiling fits.  Where the team would meet often
 * (the direct path meets every step, the blocked path every pass) and
 * other processes hold cores, the team is cut to the idle ones, and the
 * tiling made again for it.  cs_cpu_apply runs what this chooses, and
 * cs_cpu_plan_make reports it.
 */
static void
plan_run(engine *e, long steps, int num_threads, int in_place,
         cs_cpu_plan *p, tiling *tl)
{
    const double npoints = (double)e->n[0] * (double)e->n[1]
                           * (double)e->n[2];
    const double step_work = npoints * (taps_per_point(e)
                                        + CS_THREADS_POINT_TAPS);
    int nt = cs_threads_for_steps(num_threads, step_work, steps, HUGE_VAL);
    int blocked = npoints * sizeof(double) > CS_CPU_DIRECT_BYTES
                  && cs_cpu_plan_tiling(e, steps, nt, tl);
    int team = cs_threads_for_steps(num_threads, step_work, steps,
                                    blocked ? step_work * tl->depth
                                            : step_work);
    if (team != nt) {
        nt = team;
        blocked = blocked && cs_cpu_plan_tiling(e, steps, nt, tl);
    }

    memset(p, 0, sizeof(*p));
    p->blocked = blocked;
    p->threads = nt;
    for (int a = 0; a < 3; a++) {
        p->run_shape[a] = e->n[a];
        p->radius[a] = e->r[a];
    }
    p->ntaps = e->ntaps;
    p->separable = e->sep_width;
    p->row_taps = taps_per_point(e);
    p->computed = 1.0;
    p->loaded = 1.0;
    if (blocked) {
        p->depth = tl->depth;
        p->passes = CEIL_DIV(steps, (long)tl->depth);
        for (int a = 0; a < 3; a++) {
            p->tile[a] = tl->tile[a];
            p->tiles[a] = tl->count[a];
        }
        cs_cpu_tiling_factors(e, tl, &p->computed, &p->loaded,
                              &p->ring_spills);
        p->ring_bytes = cs_cpu_ring_bytes(e, tl);
        p->temp_grid = p->passes > 1 || in_place;
        engine_layout(e, cs_cpu_tile_held(e, tl, 1),
                      cs_cpu_tile_held(e, tl, 2));
    }
    else {
        p->depth = 1;
        p->passes = steps;
        engine_layout(e, e->n[1], e->n[2]);
        p->buffer_bytes = ((double)(e->n[0] + 2 * e->r[0]) * e->stride[0]
                           + LANES) * sizeof(double);
    }
}

/* ------------------------------------------------------------------ */
/* Public API                                                           */
/* ------------------------------------------------------------------ */

cs_status
cs_cpu_plan_make(const ptrdiff_t shape[3], const cs_kernel *kernel,
                 cs_mode mode, long steps, int num_threads, int in_place,
                 cs_cpu_plan *plan)
{
    double dummy = 0.0;
    cs_status st = cs_cpu_check_args(&dummy, &dummy, shape, kernel, mode,
                                     steps);
    if (st != CS_OK || plan == NULL) {
        return st != CS_OK ? st : CS_ERR_INVALID;
    }
    engine e;
    st = engine_init(&e, shape, kernel, mode, 0.0);
    if (st != CS_OK) {
        return st;
    }
    tiling tl;
    plan_run(&e, steps > 0 ? steps : 1, num_threads, in_place, plan, &tl);
    if (steps == 0) {
        plan->blocked = 0;
        plan->threads = 1;
        plan->passes = 0;
        plan->temp_grid = 0;
    }
    engine_free(&e);
    return CS_OK;
}

cs_status
cs_cpu_apply(const double *in, double *out, const ptrdiff_t shape[3],
             const cs_kernel *kernel, cs_mode mode, double cval, long steps,
             int num_threads, cs_run_info *info, const cs_interrupt *intr)
{
    cs_status st = cs_cpu_check_args(in, out, shape, kernel, mode, steps);
    if (st != CS_OK) {
        return st;
    }
    size_t npoints = (size_t)(shape[0] * shape[1] * shape[2]);
    cs_cpu_plan plan;
    memset(&plan, 0, sizeof(plan));
    plan.threads = 1;
    plan.depth = 1;
    if (steps == 0) {
        if (in != out) {
            memcpy(out, in, npoints * sizeof(double));
        }
    }
    else {
        engine e;
        st = engine_init(&e, shape, kernel, mode, cval);
        if (st != CS_OK) {
            return st;
        }
        tiling tl;
        plan_run(&e, steps, num_threads, in == out, &plan, &tl);
        if (plan.blocked) {
            st = cs_cpu_run_blocked(&e, &tl, in, out, steps, plan.threads,
                                    intr);
        }
        else {
            st = cs_cpu_run_direct(&e, in, out, steps, plan.threads, intr);
        }
        engine_free(&e);
    }
    if (st == CS_OK && info != NULL) {
        info->backend = "cpu";
        info->path = plan.blocked ? "direct-temporal-blocked" : "direct";
        info->threads = plan.threads;
        /* a blocked pass of several steps counts as a fused pass: each
           trip through memory advances the grid `depth` steps */
        if (plan.blocked && plan.depth > 1) {
            info->fused_depth = plan.depth;
            info->fused_passes = plan.passes;
            info->unfused_steps = 0;
        }
        else {
            info->fused_depth = 1;
            info->fused_passes = 0;
            info->unfused_steps = steps;
        }
    }
    return st;
}
