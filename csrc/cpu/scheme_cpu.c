/*
 * scheme_cpu.c -- the CPU engine of PDE schemes (scheme_cpu.h): entry
 * point, setup, halos and the step loop.  The row kernels, which compute
 * every output, are in scheme_rows.c; scheme_private.h is what the two
 * files share.
 *
 * Every field lives in a buffer of its own, padded by the scheme's
 * radius on each side of each axis, so that a stencil term reads its
 * taps with no boundary branch.  The ins are copied into buffers before
 * the first step and the outs written after the last, so any aliasing
 * between them gives the right result.
 *
 * Halos are never filled in a pass of their own: a halo cell holds a
 * copy of the grid cell the mode maps it to (its source), and whoever
 * writes a grid cell writes its copies too, in the same row and in the
 * halo rows and planes that map to its row and plane (the corners
 * follow: the modes extend each axis independently).  So a buffer's halo
 * is complete as soon as its interior is, whatever thread wrote each
 * part.  A constant halo is written once: only interiors change.
 *
 * A stage writes each target into a free buffer of a pool (a field's old
 * values must stay readable until the stage ends) and the field then
 * points at it.  An update that merely copies a field (u_prev <- u)
 * writes nothing: its target points at the source's buffer, shared and
 * never written in place.  Every thread follows this bookkeeping on its
 * own copy (it is deterministic), so the team meets once per stage: one
 * OpenMP parallel region runs the whole loop, the threads share each
 * stage's rows in contiguous blocks (pieces of rows where rows are few:
 * 1D grids), and a barrier ends the stage.  A row is computed SEGMENT
 * points at a time, all the stage's updates in turn, so rows that several
 * updates read stay in cache.
 */
#include "scheme_private.h"
#include "threads.h"
#include "workspace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Fewest points per piece when rows are split among threads. */
#define MIN_PIECE 512

/* Everything a run holds, read-only once the threads start. */
typedef struct scheme_run {
    const cs_scheme *s;
    geom g;
    cs_mode mode;
    double cval;
    int nt;
    ptrdiff_t split;         /* pieces per row, one thread each */
    scheme_tables tab;       /* the row kernels' tables */
    axis_halo halo[3];
    double *scratch;         /* SEGMENT doubles per thread */
    int nbuf;                /* the pool */
    double *block;           /* the pool's kept block (workspace.h) */
    size_t block_size;
    double *buf[MAX_BUFFERS];/* carved out of it */
} scheme_run;

/* ------------------------------------------------------------------ */
/* Setup                                                                */
/* ------------------------------------------------------------------ */

static void
run_free(scheme_run *run)
{
    cs_scheme_tables_free(&run->tab);
    free(run->scratch);
    for (int a = 0; a < 3; a++) {
        cs_scheme_axis_halo_free(&run->halo[a]);
    }
    cs_cpu_workspace_give(run->block, run->block_size);
}

/* Each axis's halo indices and their sources (none for constant). */
static cs_status
prepare_halos(scheme_run *run)
{
    for (int a = 0; a < 3; a++) {
        if (cs_scheme_axis_halo_init(&run->halo[a], run->g.n[a],
                                     run->g.r[a], run->mode) != CS_OK) {
            return CS_ERR_NOMEM;
        }
    }
    return CS_OK;
}

/* The pool, in a kept block (workspace.h: a fresh one's page faults
   would cost more than a call of a few steps): one buffer per field, and
   one per non-copy update of the stage that has most. */
static cs_status
prepare_buffers(scheme_run *run)
{
    run->nbuf = run->s->field_count
                + cs_scheme_targets_most(run->s, run->tab.copy_of);
    const size_t doubles = cs_scheme_pool_doubles(run->nbuf, run->g.size);
    if (doubles == 0) {
        return CS_ERR_NOMEM;
    }
    run->block = cs_cpu_workspace_take(doubles * sizeof(double),
                                       &run->block_size);
    if (run->block == NULL) {
        return CS_ERR_NOMEM;
    }
    cs_scheme_carve(run->block, run->nbuf, run->g.size, run->buf);
    return CS_OK;
}

/* ------------------------------------------------------------------ */
/* Halos                                                                */
/* ------------------------------------------------------------------ */

/*
 * Every halo cell of every buffer set to cval (the constant mode, once):
 * the x halos of the grid rows, the halo rows of the grid planes and the
 * halo planes, whole.  Shared by the team.
 */
static void
fill_constant_halos(const scheme_run *run)
{
    const geom *g = &run->g;
    const ptrdiff_t planes = g->n[0] + 2 * g->r[0];
    const ptrdiff_t rows = g->n[1] + 2 * g->r[1];
    const ptrdiff_t len = g->n[2] + 2 * g->r[2];
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (ptrdiff_t i = 0; i < run->nbuf * planes; i++) {
        const ptrdiff_t z = i % planes - g->r[0];
        double *base = run->buf[i / planes] + g->origin;
        for (ptrdiff_t y = -g->r[1]; y < rows - g->r[1]; y++) {
            double *row = base + cs_scheme_row_at(g, z, y) - g->r[2];
            const int inside = z >= 0 && z < g->n[0] && y >= 0
                               && y < g->n[1];
            for (ptrdiff_t x = 0; x < len; x++) {
                if (!inside || x < g->r[2] || x >= g->r[2] + g->n[2]) {
                    row[x] = run->cval;
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* Steps                                                                */
/* ------------------------------------------------------------------ */

/*
 * This thread's share of one stage: the fields in buffers fb, update j
 * written into buffer dst[j], and the copies of what it writes.
 */
static void
stage_rows(const scheme_run *run, const cs_stage *stage, const int *fb,
           const int *dst, const double *const *params)
{
    const cs_scheme *s = run->s;
    const geom *g = &run->g;
    const ptrdiff_t rows = g->n[0] * g->n[1];
    const ptrdiff_t split = run->split;
    double *t = run->scratch + (size_t)cs_team_thread() * SEGMENT;
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (ptrdiff_t unit = 0; unit < rows * split; unit++) {
        const ptrdiff_t r = unit / split, piece = unit % split;
        const ptrdiff_t z = r / g->n[1], y = r % g->n[1];
        const ptrdiff_t row = g->origin + cs_scheme_row_at(g, z, y);
        const ptrdiff_t begin = g->n[2] * piece / split;
        const ptrdiff_t end = g->n[2] * (piece + 1) / split;
        for (ptrdiff_t x0 = begin; x0 < end; x0 += SEGMENT) {
            const double *field[CS_SCHEME_MAX_FIELDS];
            const double *param[CS_SCHEME_MAX_PARAMS];
            for (int f = 0; f < s->field_count; f++) {
                field[f] = run->buf[fb[f]] + row + x0;
            }
            for (int p = 0; p < s->param_count; p++) {
                param[p] = params[p] + r * g->n[2] + x0;
            }
            for (int j = 0; j < stage->update_count; j++) {
                if (dst[j] >= 0) {
                    cs_scheme_update_row(
                        run->tab.terms, &s->updates[stage->first_update + j],
                        run->buf[dst[j]] + row + x0, field, param, t,
                        MIN(SEGMENT, end - x0));
                }
            }
        }
        for (int j = 0; j < stage->update_count; j++) {
            if (dst[j] >= 0) {
                cs_scheme_write_copies(g, run->halo,
                                       run->buf[dst[j]] + g->origin, z, y,
                                       begin, end);
            }
        }
    }
}

/* The ins into buffers 0 .. K - 1 with their copies (load), or the
   fields' buffers fb into the outs; shared by the team. */
static void
copy_grids(const scheme_run *run, const double *const *in,
           double *const *out, const int *fb)
{
    const geom *g = &run->g;
    const ptrdiff_t rows = g->n[0] * g->n[1];
    const int k_count = run->s->field_count;
    const size_t bytes = (size_t)g->n[2] * sizeof(double);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (ptrdiff_t i = 0; i < k_count * rows; i++) {
        const int k = (int)(i / rows);
        const ptrdiff_t r = i % rows;
        const ptrdiff_t z = r / g->n[1], y = r % g->n[1];
        const ptrdiff_t at = g->origin + cs_scheme_row_at(g, z, y);
        if (in != NULL) {
            memcpy(run->buf[k] + at, in[k] + r * g->n[2], bytes);
            cs_scheme_write_copies(g, run->halo, run->buf[k] + g->origin,
                                   z, y, 0, g->n[2]);
        }
        else {
            memcpy(out[k] + r * g->n[2], run->buf[fb[k]] + at, bytes);
        }
    }
}

/*
 * The whole run, by every thread of the team.  Thread 0 (the caller's
 * thread) polls `intr` after each step but the last and writes the step
 * it stops after into *stop_after; the barrier that ends the step
 * publishes it, and every thread leaves after that step (a value meant
 * for a later step is never mistaken for this one's).  The outs are
 * written only after the last step.
 */
static void
run_team(const scheme_run *run, const double *const *in, double *const *out,
         const double *const *params, long steps, const cs_interrupt *intr,
         long *stop_after, cs_barrier *bar)
{
    const cs_scheme *s = run->s;
    int fb[CS_SCHEME_MAX_FIELDS], next[CS_SCHEME_MAX_FIELDS];
    int dst[CS_SCHEME_MAX_FIELDS];
    for (int f = 0; f < s->field_count; f++) {
        fb[f] = f;
    }
    if (run->mode == CS_MODE_CONSTANT) {
        fill_constant_halos(run);
    }
    copy_grids(run, in, NULL, fb);
    for (long step = 0; step < steps; step++) {
        for (int i = 0; i < s->stage_count; i++) {
            cs_scheme_assign_stage(s, run->tab.copy_of, &s->stages[i], fb,
                                   dst, next);
            stage_rows(run, &s->stages[i], fb, dst, params);
            if (i == s->stage_count - 1 && cs_team_thread() == 0
                && step + 1 < steps
                && cs_interrupt_requested(intr, step + 1)) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
                *stop_after = step;
            }
            cs_barrier_wait(bar, cs_team_size());
            memcpy(fb, next, sizeof(fb));
        }
        long stop;
#ifdef _OPENMP
#pragma omp atomic read
#endif
        stop = *stop_after;
        if (stop == step) {
            return;
        }
    }
    copy_grids(run, NULL, out, fb);
}

/* ------------------------------------------------------------------ */
/* Public API                                                           */
/* ------------------------------------------------------------------ */

static cs_status
check_args(const cs_scheme *s, const double *const *in, double *const *out,
           const double *const *params, const ptrdiff_t shape[3],
           cs_mode mode, long steps)
{
    if (cs_scheme_check(s, NULL, 0) != CS_OK || in == NULL || out == NULL
        || shape == NULL || steps < 0 || (int)mode < 0
        || (int)mode >= CS_MODE_COUNT
        || (s->param_count > 0 && params == NULL)) {
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < 3; a++) {
        if (shape[a] < 1 || (a < 3 - s->ndim && shape[a] != 1)) {
            return CS_ERR_INVALID;
        }
    }
    for (int k = 0; k < s->field_count; k++) {
        if (in[k] == NULL || out[k] == NULL) {
            return CS_ERR_INVALID;
        }
    }
    for (int p = 0; p < s->param_count; p++) {
        if (params[p] == NULL) {
            return CS_ERR_INVALID;
        }
    }
    return CS_OK;
}

/* Pieces per row: 1 where the rows are enough to share among nt
   threads, else as many as make 8 units a thread, of MIN_PIECE points
   or more. */
static ptrdiff_t
pieces_per_row(const geom *g, int nt)
{
    const ptrdiff_t rows = g->n[0] * g->n[1];
    if (nt <= 1 || rows >= 8 * (ptrdiff_t)nt) {
        return 1;
    }
    const ptrdiff_t want = (8 * (ptrdiff_t)nt + rows - 1) / rows;
    return MAX(1, MIN(want, g->n[2] / MIN_PIECE));
}

/*
 * The work between two barriers (threads.h): a stage's point-factors
 * (each term's taps or factors, and one for the term), on average, plus
 * the per-point cost of a pass over the grid.
 */
static double
stage_work(const cs_scheme *s, const geom *g, const scheme_tables *tab)
{
    const double per_point = cs_scheme_point_work(s, tab)
                             + CS_THREADS_POINT_TAPS;
    return per_point * (double)g->n[0] * (double)g->n[1] * (double)g->n[2];
}

/* The team for `steps` steps (num_threads as cs_cpu_scheme_apply takes
   it): by the work between two barriers, a stage. */
static int
team_for(const cs_scheme *s, const geom *g, const scheme_tables *tab,
         long steps, int num_threads)
{
    const double work = stage_work(s, g, tab);
    const int nt = steps > 0 ? cs_threads_for_steps(num_threads, work,
                                                    steps * s->stage_count,
                                                    work)
                             : 1;
    return nt < 1 ? 1 : nt;
}

cs_status
cs_cpu_scheme_choose(const cs_scheme *s, const ptrdiff_t shape[3],
                     cs_mode mode, long steps, int num_threads,
                     cs_scheme_cpu_plan *plan, int *threads)
{
    ptrdiff_t r[3];
    for (int a = 0; a < 3; a++) {
        r[a] = cs_scheme_radius(s, a);
    }
    geom g;
    scheme_tables tab;
    if (!cs_scheme_geom_init(&g, shape, r)) {
        return CS_ERR_NOMEM;
    }
    cs_status st = cs_scheme_tables_init(&tab, s, &g);
    if (st == CS_OK) {
        *threads = team_for(s, &g, &tab, steps, num_threads);
        st = cs_cpu_scheme_plan(s, shape, mode, steps, *threads, plan);
    }
    cs_scheme_tables_free(&tab);
    return st;
}

/* The run's record: its path, threads and passes. */
static void
report(cs_run_info *info, const char *path, int threads, int depth,
       long passes, long unfused)
{
    info->backend = "cpu";
    info->path = path;
    info->threads = threads;
    info->fused_depth = depth;
    info->fused_passes = passes;
    info->unfused_steps = unfused;
    info->device_seconds = -1.0;
    info->nonfinite = -1;
}

cs_status
cs_cpu_scheme_apply(const cs_scheme *s, const double *const *in,
                    double *const *out, const double *const *params,
                    const ptrdiff_t shape[3], cs_mode mode, double cval,
                    long steps, int num_threads,
                    const cs_scheme_cpu_plan *force, cs_run_info *info,
                    const cs_interrupt *intr)
{
    cs_status st = check_args(s, in, out, params, shape, mode, steps);
    if (st != CS_OK) {
        return st;
    }
    scheme_run run;
    memset(&run, 0, sizeof(run));
    run.s = s;
    run.mode = mode;
    run.cval = cval;
    ptrdiff_t r[3];
    for (int a = 0; a < 3; a++) {
        r[a] = cs_scheme_radius(s, a);
    }
    long stop_after = -1;
    cs_barrier bar = {0, 0, 0};
    if (!cs_scheme_geom_init(&run.g, shape, r)) {
        st = CS_ERR_NOMEM; /* the padded grid exceeds the address space */
        goto exit;
    }
    st = cs_scheme_tables_init(&run.tab, s, &run.g);
    if (st != CS_OK) {
        goto exit;
    }
    run.nt = team_for(s, &run.g, &run.tab, steps, num_threads);
    cs_scheme_cpu_plan plan;
    if (force != NULL) {
        plan = *force;
    }
    else {
        st = cs_cpu_scheme_plan(s, shape, mode, steps, run.nt, &plan);
        if (st != CS_OK) {
            goto exit;
        }
    }
    if (plan.blocked && steps > 0) {
        st = cs_cpu_scheme_run_blocked(s, &plan, in, out, params, shape,
                                       mode, cval, steps, run.nt, intr);
        if (st == CS_OK && info != NULL) {
            report(info, "scheme-blocked", run.nt, plan.depth,
                   CEIL_DIV(steps, (long)plan.depth), 0);
        }
        goto exit;
    }
    st = prepare_halos(&run);
    if (st == CS_OK) {
        st = prepare_buffers(&run);
    }
    if (st != CS_OK) {
        goto exit;
    }
    run.split = pieces_per_row(&run.g, run.nt);
    run.scratch = malloc((size_t)run.nt * SEGMENT * sizeof(double));
    if (run.scratch == NULL) {
        st = CS_ERR_NOMEM;
        goto exit;
    }

#ifdef _OPENMP
#pragma omp parallel num_threads(run.nt) if (run.nt > 1)
#endif
    run_team(&run, in, out, params, steps, intr, &stop_after, &bar);

    if (stop_after >= 0) {
        st = CS_ERR_INTERRUPTED;
        goto exit;
    }
    if (info != NULL) {
        report(info, "scheme", run.nt, 1, 0, steps);
    }

exit:
    run_free(&run);
    return st;
}
