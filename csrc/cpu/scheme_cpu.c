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

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Fewest points per piece when rows are split among threads. */
#define MIN_PIECE 512

/* Buffers: one per field, and one more per target of a stage. */
#define MAX_BUFFERS (2 * CS_SCHEME_MAX_FIELDS)

/* Buffers start at, and interior rows are aligned to, a cache line. */
#define ALIGN_DOUBLES 8

/*
 * Buffer b starts b * STAGGER_DOUBLES past a cache line: large blocks
 * come page-aligned from the allocator, and the same point of two
 * buffers would otherwise share its address modulo 4 KiB, so that every
 * load of one after a store to the other waits for the store (4K
 * aliasing).  17 lines: distinct offsets within a page for 64 buffers.
 */
#define STAGGER_DOUBLES (17 * ALIGN_DOUBLES)

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* The padded buffers' geometry: point (z, y, x) of the grid is at
   origin + z * plane + y * row + x. */
typedef struct geom {
    ptrdiff_t n[3];
    ptrdiff_t r[3];          /* halo width per axis */
    ptrdiff_t row;
    ptrdiff_t plane;
    ptrdiff_t origin;
    size_t size;             /* doubles per buffer */
} geom;

/* The halo of one axis: its 2 r indices beyond the grid (-r .. -1,
   n .. n + r - 1) and the grid index the mode maps each to; none under
   the constant mode, whose halo is filled once. */
typedef struct axis_halo {
    int count;
    ptrdiff_t *index;
    ptrdiff_t *source;
} axis_halo;

/* Everything a run holds, read-only once the threads start. */
typedef struct scheme_run {
    const cs_scheme *s;
    geom g;
    cs_mode mode;
    double cval;
    int nt;
    ptrdiff_t split;         /* pieces per row, one thread each */
    prep_term *terms;        /* one per scheme term */
    ptrdiff_t *tap_off;      /* every stencil's non-zero taps */
    double *tap_w;
    int *copy_of;            /* per update: the field it copies, or -1 */
    axis_halo halo[3];
    double *scratch;         /* SEGMENT doubles per thread */
    int nbuf;                /* the pool */
    void *raw[MAX_BUFFERS];  /* as allocated */
    double *buf[MAX_BUFFERS];/* aligned */
} scheme_run;

/* ------------------------------------------------------------------ */
/* Setup                                                                */
/* ------------------------------------------------------------------ */

static int
thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int
team_size(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* a * b into *out unless it overflows ptrdiff_t (a, b >= 0). */
static int
mul_ok(ptrdiff_t a, ptrdiff_t b, ptrdiff_t *out)
{
    if (a != 0 && b > PTRDIFF_MAX / a) {
        return 0;
    }
    *out = a * b;
    return 1;
}

/*
 * The geometry for grid `shape` and halo r.  Each row starts with `lead`
 * unused doubles so that its point x = 0 lies on a cache line; a row's
 * length is rounded up to whole lines.  0 when the buffer's size
 * overflows.
 */
static int
geom_init(geom *g, const ptrdiff_t shape[3], const ptrdiff_t r[3])
{
    const ptrdiff_t lead = (ALIGN_DOUBLES - r[2] % ALIGN_DOUBLES)
                           % ALIGN_DOUBLES;
    ptrdiff_t held[3], total;
    for (int a = 0; a < 3; a++) {
        g->n[a] = shape[a];
        g->r[a] = r[a];
        if (r[a] > (PTRDIFF_MAX / 4 - shape[a]) / 2) {
            return 0;
        }
        held[a] = shape[a] + 2 * r[a];
    }
    g->row = (lead + held[2] + ALIGN_DOUBLES - 1) / ALIGN_DOUBLES
             * ALIGN_DOUBLES;
    if (!mul_ok(held[1], g->row, &g->plane)
        || !mul_ok(held[0], g->plane, &total)
        || (size_t)total > SIZE_MAX / sizeof(double) - ALIGN_DOUBLES
                               - MAX_BUFFERS * STAGGER_DOUBLES) {
        return 0;
    }
    g->size = (size_t)total;
    g->origin = r[0] * g->plane + r[1] * g->row + lead + r[2];
    return 1;
}

/* Offset of grid row (z, y) from a buffer's origin (z, y may lie in the
   halo). */
static ptrdiff_t
row_at(const geom *g, ptrdiff_t z, ptrdiff_t y)
{
    return z * g->plane + y * g->row;
}

static void
run_free(scheme_run *run)
{
    free(run->terms);
    free(run->tap_off);
    free(run->tap_w);
    free(run->copy_of);
    free(run->scratch);
    for (int a = 0; a < 3; a++) {
        free(run->halo[a].index);
        free(run->halo[a].source);
    }
    for (int b = 0; b < MAX_BUFFERS; b++) {
        free(run->raw[b]);
    }
}

/* Whether update u is `target = 1 * field` (a plain copy): its field, or
   -1.  Exact: 0 + (1 * 1) * x is x, but for the sign of a zero. */
static int
copied_field(const scheme_run *run, const cs_update *u)
{
    if (u->term_count != 1) {
        return -1;
    }
    const prep_term *t = &run->terms[u->first_term];
    if (t->kind != CS_TERM_MONOMIAL || t->coef != 1.0 || t->param >= 0
        || t->nfactors != 1) {
        return -1;
    }
    return t->factor[0];
}

/*
 * The tables the row kernels read: each term's taps (the non-zero
 * weights of its stencil, in C order, with their offsets in a padded
 * buffer) or factors, and which updates are plain copies.
 */
static cs_status
prepare_terms(scheme_run *run)
{
    const cs_scheme *s = run->s;
    const geom *g = &run->g;
    size_t ntaps = 0;
    for (int i = 0; i < s->stencil_count; i++) {
        ntaps += (size_t)cs_kernel_count(&s->stencils[i]);
    }
    run->terms = malloc((size_t)(s->term_count > 0 ? s->term_count : 1)
                        * sizeof(prep_term));
    run->tap_off = malloc((ntaps > 0 ? ntaps : 1) * sizeof(ptrdiff_t));
    run->tap_w = malloc((ntaps > 0 ? ntaps : 1) * sizeof(double));
    run->copy_of = malloc((size_t)(s->update_count > 0 ? s->update_count
                                                        : 1) * sizeof(int));
    if (run->terms == NULL || run->tap_off == NULL || run->tap_w == NULL
        || run->copy_of == NULL) {
        return CS_ERR_NOMEM;
    }
    size_t at = 0;
    for (int i = 0; i < s->term_count; i++) {
        const cs_term *t = &s->terms[i];
        prep_term *p = &run->terms[i];
        memset(p, 0, sizeof(*p));
        p->kind = t->kind;
        p->coef = t->coef;
        p->param = t->param;
        if (t->kind != CS_TERM_STENCIL) {
            p->field = -1;
            for (int f = 0; f < s->field_count; f++) {
                for (int e = 0; e < t->power[f]; e++) {
                    p->factor[p->nfactors++] = f;
                }
            }
            continue;
        }
        p->field = t->field;
        /* each stencil's taps once, however many terms use it */
        for (int j = 0; j < i && p->w == NULL; j++) {
            if (s->terms[j].kind == CS_TERM_STENCIL
                && s->terms[j].stencil == t->stencil) {
                p->ntaps = run->terms[j].ntaps;
                p->off = run->terms[j].off;
                p->w = run->terms[j].w;
            }
        }
        if (p->w != NULL) {
            continue;
        }
        const cs_kernel *k = &s->stencils[t->stencil];
        const ptrdiff_t count = cs_kernel_count(k);
        p->off = run->tap_off + at;
        p->w = run->tap_w + at;
        for (ptrdiff_t q = 0; q < count; q++) {
            if (k->weights[q] == 0.0) {
                continue; /* skipped, as scipy.ndimage does */
            }
            const ptrdiff_t dz = q / (k->size[1] * k->size[2])
                                 - cs_kernel_radius(k, 0);
            const ptrdiff_t dy = q / k->size[2] % k->size[1]
                                 - cs_kernel_radius(k, 1);
            const ptrdiff_t dx = q % k->size[2] - cs_kernel_radius(k, 2);
            run->tap_off[at] = dz * g->plane + dy * g->row + dx;
            run->tap_w[at] = k->weights[q];
            at++;
            p->ntaps++;
        }
    }
    for (int u = 0; u < s->update_count; u++) {
        run->copy_of[u] = copied_field(run, &s->updates[u]);
    }
    return CS_OK;
}

/* Each axis's halo indices and their sources (none for constant). */
static cs_status
prepare_halos(scheme_run *run)
{
    for (int a = 0; a < 3; a++) {
        axis_halo *h = &run->halo[a];
        const ptrdiff_t r = run->g.r[a], n = run->g.n[a];
        h->count = 0;
        h->index = malloc((size_t)(2 * r + 1) * sizeof(ptrdiff_t));
        h->source = malloc((size_t)(2 * r + 1) * sizeof(ptrdiff_t));
        if (h->index == NULL || h->source == NULL) {
            return CS_ERR_NOMEM;
        }
        if (run->mode == CS_MODE_CONSTANT) {
            continue;
        }
        for (ptrdiff_t k = 1; k <= r; k++) {
            const ptrdiff_t beyond[2] = {-k, n - 1 + k};
            for (int side = 0; side < 2; side++) {
                h->index[h->count] = beyond[side];
                h->source[h->count] = cs_extend_index(beyond[side], n,
                                                      run->mode);
                h->count++;
            }
        }
    }
    return CS_OK;
}

/* The pool: one buffer per field, and one per non-copy update of the
   stage that has most. */
static cs_status
prepare_buffers(scheme_run *run)
{
    const cs_scheme *s = run->s;
    int most = 0;
    for (int i = 0; i < s->stage_count; i++) {
        int writes = 0;
        for (int j = 0; j < s->stages[i].update_count; j++) {
            writes += run->copy_of[s->stages[i].first_update + j] < 0;
        }
        most = MAX(most, writes);
    }
    run->nbuf = s->field_count + most;
    const uintptr_t line = ALIGN_DOUBLES * sizeof(double);
    for (int b = 0; b < run->nbuf; b++) {
        const size_t stagger = (size_t)b * STAGGER_DOUBLES;
        run->raw[b] = malloc((run->g.size + ALIGN_DOUBLES + stagger)
                             * sizeof(double));
        if (run->raw[b] == NULL) {
            return CS_ERR_NOMEM;
        }
        const uintptr_t addr = (uintptr_t)run->raw[b];
        run->buf[b] = (double *)(void *)((char *)run->raw[b]
                                         + (line - addr % line) % line)
                      + stagger;
    }
    return CS_OK;
}

/* ------------------------------------------------------------------ */
/* Halos                                                                */
/* ------------------------------------------------------------------ */

/* Whether grid index i of axis a is the source of halo entry e. */
static int
is_source(const axis_halo *h, int e, ptrdiff_t i)
{
    return h->source[e] == i;
}

/*
 * Cells [x0, x1) of grid row (z, y) of buffer `base` (its origin) were
 * just written: write their copies, the x halo cells of the row whose
 * sources they are, and the same cells of every halo row and plane that
 * maps to row (z, y).
 */
static void
write_copies(const scheme_run *run, double *base, ptrdiff_t z,
             ptrdiff_t y, ptrdiff_t x0, ptrdiff_t x1)
{
    const geom *g = &run->g;
    const axis_halo *hx = &run->halo[2];
    const axis_halo *hy = &run->halo[1];
    const axis_halo *hz = &run->halo[0];
    const double *row = base + row_at(g, z, y);
    /* the row itself (e = -1), then the halo rows and planes mapping to
       it (e >= 0) */
    for (int ez = -1; ez < hz->count; ez++) {
        if (ez >= 0 && !is_source(hz, ez, z)) {
            continue;
        }
        const ptrdiff_t zi = ez < 0 ? z : hz->index[ez];
        for (int ey = -1; ey < hy->count; ey++) {
            if (ey >= 0 && !is_source(hy, ey, y)) {
                continue;
            }
            const ptrdiff_t yi = ey < 0 ? y : hy->index[ey];
            double *image = base + row_at(g, zi, yi);
            if (image != row) {
                memcpy(image + x0, row + x0,
                       (size_t)(x1 - x0) * sizeof(double));
            }
            for (int ex = 0; ex < hx->count; ex++) {
                const ptrdiff_t src = hx->source[ex];
                if (src >= x0 && src < x1) {
                    image[hx->index[ex]] = row[src];
                }
            }
        }
    }
}

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
            double *row = base + row_at(g, z, y) - g->r[2];
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
 * The buffers stage `stage` writes, from the fields' buffers fb: dst[j]
 * for its update j (-1: a plain copy, nothing written), each one no
 * field points at; and next, the fields' buffers after it.
 */
static void
assign_stage(const scheme_run *run, const cs_stage *stage, const int *fb,
             int *dst, int *next)
{
    const cs_scheme *s = run->s;
    int taken[MAX_BUFFERS] = {0};
    for (int f = 0; f < s->field_count; f++) {
        taken[fb[f]] = 1;
        next[f] = fb[f];
    }
    for (int j = 0; j < stage->update_count; j++) {
        const int u = stage->first_update + j;
        const int target = s->updates[u].target;
        if (run->copy_of[u] >= 0) {
            dst[j] = -1;
            next[target] = fb[run->copy_of[u]];
            continue;
        }
        int b = 0;
        while (taken[b]) {
            b++; /* the pool has one buffer per field and per target */
        }
        taken[b] = 1;
        dst[j] = b;
        next[target] = b;
    }
}

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
    double *t = run->scratch + (size_t)thread_id() * SEGMENT;
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (ptrdiff_t unit = 0; unit < rows * split; unit++) {
        const ptrdiff_t r = unit / split, piece = unit % split;
        const ptrdiff_t z = r / g->n[1], y = r % g->n[1];
        const ptrdiff_t row = g->origin + row_at(g, z, y);
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
                        run->terms, &s->updates[stage->first_update + j],
                        run->buf[dst[j]] + row + x0, field, param, t,
                        MIN(SEGMENT, end - x0));
                }
            }
        }
        for (int j = 0; j < stage->update_count; j++) {
            if (dst[j] >= 0) {
                write_copies(run, run->buf[dst[j]] + g->origin, z, y, begin,
                             end);
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
        const ptrdiff_t at = g->origin + row_at(g, z, y);
        if (in != NULL) {
            memcpy(run->buf[k] + at, in[k] + r * g->n[2], bytes);
            write_copies(run, run->buf[k] + g->origin, z, y, 0, g->n[2]);
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
            assign_stage(run, &s->stages[i], fb, dst, next);
            stage_rows(run, &s->stages[i], fb, dst, params);
            if (i == s->stage_count - 1 && thread_id() == 0
                && step + 1 < steps
                && cs_interrupt_requested(intr, step + 1)) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
                *stop_after = step;
            }
            cs_barrier_wait(bar, team_size());
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
stage_work(const scheme_run *run)
{
    const geom *g = &run->g;
    double per_point = 0.0;
    for (int u = 0; u < run->s->update_count; u++) {
        const cs_update *up = &run->s->updates[u];
        for (int i = 0; i < up->term_count; i++) {
            const prep_term *t = &run->terms[up->first_term + i];
            per_point += 1.0 + t->ntaps + t->nfactors;
        }
    }
    per_point = per_point / MAX(run->s->stage_count, 1)
                + CS_THREADS_POINT_TAPS;
    return per_point * (double)g->n[0] * (double)g->n[1] * (double)g->n[2];
}

cs_status
cs_cpu_scheme_apply(const cs_scheme *s, const double *const *in,
                    double *const *out, const double *const *params,
                    const ptrdiff_t shape[3], cs_mode mode, double cval,
                    long steps, int num_threads, cs_run_info *info,
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
    if (!geom_init(&run.g, shape, r)) {
        st = CS_ERR_NOMEM; /* the padded grid exceeds the address space */
        goto exit;
    }
    st = prepare_terms(&run);
    if (st == CS_OK) {
        st = prepare_halos(&run);
    }
    if (st == CS_OK) {
        st = prepare_buffers(&run);
    }
    if (st != CS_OK) {
        goto exit;
    }
    const double work = stage_work(&run);
    run.nt = steps > 0 ? cs_threads_for_steps(num_threads, work,
                                              steps * run.s->stage_count,
                                              work)
                       : 1;
    if (run.nt < 1) {
        run.nt = 1;
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
        info->backend = "cpu";
        info->path = "scheme";
        info->threads = run.nt;
        info->fused_depth = 1;
        info->fused_passes = 0;
        info->unfused_steps = steps;
        info->device_seconds = -1.0;
        info->nonfinite = -1;
    }

exit:
    run_free(&run);
    return st;
}
