/*
 * scheme_blocked.c -- a scheme's steps on the CPU, several a pass (the
 * path "scheme-blocked"): overlapped tiling, as blocked.c does for one
 * stencil, generalised to K fields, stages, copies and parameter fields.
 *
 * The grid is cut into tiles along axes 0 and 1 (z and y); rows stay
 * whole along x, so x's halo is the whole engine's (scheme_cpu.c).  A
 * thread takes a tile, loads it with a margin of `depth` steps' reach
 * into buffers of its own (fields and parameter fields, padded like the
 * whole engine's), advances them `depth` steps there, in cache, and
 * stores the tile's own rows.  The rows a stage computes shrink from
 * each internal side by the stage's radius, so what the margin computes
 * redundantly is exact where the tile's output needs it.
 *
 * Sides of a tile on the grid's edge keep their full extent and apply
 * the mode at every stage, from the tile's own rows: a halo row is a
 * copy of its source row, written with it (cs_scheme_write_copies),
 * and the constant mode's halo is filled once a tile.  An axis cut into
 * several tiles under wrap has no edges: its margins are loaded
 * periodically, and wrap's ghost rows are real rows computed like any.
 * An axis left whole is all edge, for every mode.
 *
 * Passes read one global copy of the fields and write another (a tile's
 * margin is another tile's output): the first pass reads the ins, the
 * last writes the outs, and the ones between alternate between two kept
 * sets of K grids.  Where an out overlaps what the last pass still
 * reads, that pass writes a kept set and a copy follows.
 */
#define _GNU_SOURCE /* sysconf's cache sizes */
#include "scheme_private.h"
#include "threads.h"
#include "workspace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Most steps fused into one pass. */
#define MAX_DEPTH 16

/* Cache budgets for one thread's tile buffers (bytes): about its L2, and
   the most it may use, with its share of the last level. */
#ifndef CS_SCHEME_L2_BYTES
#define CS_SCHEME_L2_BYTES (1536 * 1024)
#endif
#ifndef CS_SCHEME_CACHE_BYTES
#define CS_SCHEME_CACHE_BYTES (6 * 1024 * 1024)
#endif

/*
 * The smallest tile along a cut axis: CS_SCHEME_MIN_TILE_MARGINS times
 * the margin on each side, and at least CS_SCHEME_MIN_TILE rows (tests
 * build with small values to force many tiny tiles).
 */
#ifndef CS_SCHEME_MIN_TILE_MARGINS
#define CS_SCHEME_MIN_TILE_MARGINS 2
#endif
#ifndef CS_SCHEME_MIN_TILE
#define CS_SCHEME_MIN_TILE 4
#endif

/* Tiles per thread the planner aims for, so dynamic scheduling balances. */
#define TILES_PER_THREAD 3

/*
 * The cost model, in the units of cs_scheme_point_work (an operation on
 * one point; the row kernels run about 1e9 points of the leapfrog wave's
 * 12 a second on two cores of a Xeon), fitted there on the wave, the
 * wave with a velocity field, Gray-Scott and heat with a source, in 2D
 * and 3D, 1 to 100 steps: a byte that a whole-grid step moves costs
 * COST_BYTE_LLC where the whole-grid passes' buffers fit the last level
 * cache, else COST_BYTE_MEMORY; the blocked passes' bytes (their loads
 * and stores alternate between two copies of the fields, which no cache
 * keeps) and the whole engine's copies of the fields into its padded
 * buffers and out again (32 bytes a point and field a call) always cost
 * COST_BYTE_MEMORY; work whose tile buffers spill from L2 costs
 * COST_OUTER_CACHE times as much; and the whole-grid passes are kept
 * unless the blocked ones cost at most BLOCKED_MARGIN of them.
 */
#define COST_BYTE_LLC 0.5
#define COST_BYTE_MEMORY 1.7
#define COST_OUTER_CACHE 1.3
#define BLOCKED_MARGIN 0.75

/* The last level cache's bytes where the C library says (glibc), else
   a laptop's 32 MiB. */
static double
llc_bytes(void)
{
#ifdef _SC_LEVEL3_CACHE_SIZE
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) {
        return (double)l3;
    }
#endif
    return 32.0 * 1024 * 1024;
}

/* A tile: its output rows out_lo .. out_hi along axes 0 and 1, the rows
   it loads lo .. hi (beyond the grid under wrap), and which sides are
   edges. */
typedef struct tile_box {
    ptrdiff_t out_lo[2], out_hi[2];
    ptrdiff_t lo[2], hi[2];
    int edge_lo[2], edge_hi[2];
} tile_box;

/* Everything a blocked run holds, read-only once the threads start. */
typedef struct blocked_run {
    const cs_scheme *s;
    const cs_scheme_cpu_plan *plan;
    ptrdiff_t n[3];
    cs_mode mode;
    double cval;
    geom lg;                 /* a tile's buffers (the largest tile's) */
    scheme_tables tab;       /* for lg */
    ptrdiff_t *stage_r;      /* per stage, its radius along axes 0, 1 */
    axis_halo xhalo;         /* x's halo (the grid's, rows are whole) */
    int nbuf;                /* field buffers of a tile: fields + targets */
    size_t thread_doubles;   /* one thread's buffers, tables and scratch */
} blocked_run;

/* ------------------------------------------------------------------ */
/* The plan                                                             */
/* ------------------------------------------------------------------ */

/* Stage i's largest stencil radius along axis a. */
static ptrdiff_t
stage_radius(const cs_scheme *s, int i, int a)
{
    ptrdiff_t r = 0;
    const cs_stage *st = &s->stages[i];
    for (int j = 0; j < st->update_count; j++) {
        const cs_update *u = &s->updates[st->first_update + j];
        for (int t = 0; t < u->term_count; t++) {
            const cs_term *term = &s->terms[u->first_term + t];
            if (term->kind == CS_TERM_STENCIL) {
                r = MAX(r, cs_kernel_radius(&s->stencils[term->stencil],
                                            a));
            }
        }
    }
    return r;
}

/* A step's reach along axis a: the stages' radii summed. */
static ptrdiff_t
step_reach(const cs_scheme *s, int a)
{
    ptrdiff_t reach = 0;
    for (int i = 0; i < s->stage_count; i++) {
        reach += stage_radius(s, i, a);
    }
    return reach;
}

/* Whether axis a (0 or 1), cut into several tiles, loads its margins
   periodically instead of having edges. */
static int
periodic_margins(const cs_scheme_cpu_plan *p, cs_mode mode, int a)
{
    return mode == CS_MODE_WRAP && p->count[a] > 1;
}

/* The rows a tile of plan p holds along axis a, at most. */
static ptrdiff_t
tile_held(const cs_scheme_cpu_plan *p, const ptrdiff_t n[3], cs_mode mode,
          int a)
{
    if (p->count[a] == 1) {
        return n[a];
    }
    const ptrdiff_t held = p->tile[a] + 2 * p->margin[a];
    return periodic_margins(p, mode, a) ? held : MIN(held, n[a]);
}

/* Buffers of a tile: the fields', its stages' targets', the params'. */
static int
tile_buffers(const cs_scheme *s, const int *copy_of)
{
    return s->field_count + cs_scheme_targets_most(s, copy_of)
           + s->param_count;
}

/* Bytes of one thread's tile buffers under plan p. */
static double
tile_bytes(const cs_scheme_cpu_plan *p, const ptrdiff_t n[3],
           const ptrdiff_t r[3], cs_mode mode, int buffers)
{
    double row = (double)(n[2] + 2 * r[2] + ALIGN_DOUBLES);
    return 8.0 * buffers * row
           * (double)(tile_held(p, n, mode, 0) + 2 * r[0])
           * (double)(tile_held(p, n, mode, 1) + 2 * r[1]);
}

/*
 * The bytes a step of the whole-grid engine moves per point: each stage
 * reads the fields and parameter fields its terms read and writes its
 * targets that are not plain copies.
 */
static double
plain_bytes(const cs_scheme *s, const int *copy_of)
{
    double bytes = 0.0;
    for (int i = 0; i < s->stage_count; i++) {
        unsigned char read_f[CS_SCHEME_MAX_FIELDS] = {0};
        unsigned char read_p[CS_SCHEME_MAX_PARAMS] = {0};
        const cs_stage *st = &s->stages[i];
        for (int j = 0; j < st->update_count; j++) {
            const int u = st->first_update + j;
            const cs_update *up = &s->updates[u];
            bytes += copy_of[u] < 0 ? 8.0 : 0.0;
            for (int t = 0; t < up->term_count; t++) {
                const cs_term *term = &s->terms[up->first_term + t];
                if (term->param >= 0) {
                    read_p[term->param] = 1;
                }
                if (term->kind == CS_TERM_STENCIL) {
                    read_f[term->field] = 1;
                }
                for (int f = 0; f < s->field_count; f++) {
                    read_f[f] |= term->power[f] > 0;
                }
            }
        }
        for (int f = 0; f < s->field_count; f++) {
            bytes += 8.0 * read_f[f];
        }
        for (int q = 0; q < s->param_count; q++) {
            bytes += 8.0 * read_p[q];
        }
    }
    return bytes;
}

/*
 * Cost per point and step of `steps` steps under plan p (work units):
 * the work with its redundant margins (and the L2 spill factor), the
 * passes' loads with margins and stores, and the tiles' imbalance over
 * nt threads.
 */
static double
blocked_cost(const cs_scheme_cpu_plan *p, const ptrdiff_t n[3],
             cs_mode mode, double work,
             double fields, double params, double bytes, double cost_byte,
             long steps, int nt)
{
    double computed = 1.0, loaded = 1.0;
    for (int a = 0; a < 2; a++) {
        const double held = (double)tile_held(p, n, mode, a);
        const double out = (double)p->tile[a];
        const double margin = (held - out) / 2.0;
        computed *= (out + margin) / out; /* shrinking: half on average */
        loaded *= held / out;
    }
    const long passes = CEIL_DIV(steps, (long)p->depth);
    double cost = work * computed * (double)steps;
    if (bytes > CS_SCHEME_L2_BYTES) {
        cost *= COST_OUTER_CACHE;
    }
    cost += (double)passes * 8.0 * ((fields + params) * loaded + fields)
            * cost_byte;
    const double tiles = (double)(p->count[0] * p->count[1]);
    const double rounds = (double)CEIL_DIV((ptrdiff_t)tiles, (ptrdiff_t)nt);
    return cost / (double)steps * rounds * nt / tiles;
}

/* Cut axis a into `count` tiles (tile: the largest); 0 when they would
   be smaller than the smallest worth having. */
static int
cut_axis(cs_scheme_cpu_plan *p, const ptrdiff_t n[3], const ptrdiff_t r[3],
         const ptrdiff_t reach[2], int a, ptrdiff_t count)
{
    p->count[a] = count;
    p->tile[a] = CEIL_DIV(n[a], count);
    p->margin[a] = count > 1 ? (ptrdiff_t)p->depth * reach[a] : 0;
    if (count == 1) {
        return 1;
    }
    const ptrdiff_t least = MAX(CS_SCHEME_MIN_TILE_MARGINS * p->depth
                                * reach[a], MAX(r[a] + 1,
                                                CS_SCHEME_MIN_TILE));
    /* the edge modes read up to r rows in from the edge */
    return n[a] / count >= least && n[a] > 2 * r[a];
}

cs_status
cs_cpu_scheme_plan(const cs_scheme *s, const ptrdiff_t shape[3],
                   cs_mode mode, long steps, int nt,
                   cs_scheme_cpu_plan *best)
{
    memset(best, 0, sizeof(*best));
    best->depth = 1;
    best->count[0] = best->count[1] = 1;
    best->tile[0] = shape[0];
    best->tile[1] = shape[1];
    if (steps < 1 || s->ndim < 2) {
        return CS_OK;       /* a copy, or a 1D grid: the whole engine */
    }
    ptrdiff_t r[3], reach[2] = {step_reach(s, 0), step_reach(s, 1)};
    for (int a = 0; a < 3; a++) {
        r[a] = cs_scheme_radius(s, a);
    }
    geom g;
    scheme_tables tab;
    if (!cs_scheme_geom_init(&g, shape, r)) {
        return CS_OK;
    }
    cs_status st = cs_scheme_tables_init(&tab, s, &g);
    if (st != CS_OK) {
        cs_scheme_tables_free(&tab);
        return st;
    }
    const double work = cs_scheme_point_work(s, &tab)
                        * (double)s->stage_count;
    const int buffers = tile_buffers(s, tab.copy_of);
    const double fields = (double)s->field_count;
    const double params = (double)s->param_count;
    const double points = (double)shape[0] * shape[1] * shape[2];
    const double grids = 8.0 * points * buffers;
    const double step_byte = grids <= llc_bytes() ? COST_BYTE_LLC
                                                  : COST_BYTE_MEMORY;
    /* a step's passes, and the call's copies in and out (read, write the
       padded buffer, read it, write the out) */
    const double whole = work + plain_bytes(s, tab.copy_of) * step_byte
                         + 32.0 * fields / (double)steps * COST_BYTE_MEMORY;
    cs_scheme_tables_free(&tab);
    if (grids <= (double)CS_SCHEME_L2_BYTES * nt) {
        return CS_OK;   /* the whole grid stays in the cores' caches */
    }

    double best_cost = whole * BLOCKED_MARGIN;
    const long most = MIN(steps, (long)MAX_DEPTH);
    for (long t = 1; t <= most; t++) {
        if (CEIL_DIV(steps, CEIL_DIV(steps, t)) != t) {
            continue;   /* an uneven depth does no better than the one below */
        }
        for (ptrdiff_t c1 = 1; c1 <= shape[1]; c1 = c1 < 4 ? c1 + 1
                                                          : c1 * 3 / 2) {
            for (ptrdiff_t c0 = 1; c0 <= shape[0]; c0 = c0 < 4 ? c0 + 1
                                                              : c0 * 3 / 2) {
                cs_scheme_cpu_plan p = *best;
                p.depth = (int)t;
                if (!cut_axis(&p, shape, r, reach, 0, c0)
                    || !cut_axis(&p, shape, r, reach, 1, c1)) {
                    break;   /* more tiles along axis 0 are smaller yet */
                }
                const double bytes = tile_bytes(&p, shape, r, mode,
                                                buffers);
                if (bytes > CS_SCHEME_CACHE_BYTES) {
                    continue;
                }
                if (c0 * c1 == 1 && t < steps) {
                    /* one tile gains over the whole engine only by
                       skipping its copies: one pass, or none */
                    continue;
                }
                const double cost = blocked_cost(&p, shape, mode,
                                                 work, fields, params, bytes,
                                                 COST_BYTE_MEMORY, steps,
                                                 nt);
                if (cost < best_cost) {
                    best_cost = cost;
                    p.blocked = 1;
                    p.tile_bytes = bytes;
                    p.tile_spills = bytes > CS_SCHEME_L2_BYTES;
                    *best = p;
                }
                break;   /* the first that fits: more tiles cost more */
            }
        }
    }
    return CS_OK;
}

cs_status
cs_cpu_scheme_plan_forced(const cs_scheme *s, const ptrdiff_t shape[3],
                          int depth, const ptrdiff_t count[2],
                          cs_scheme_cpu_plan *plan)
{
    ptrdiff_t r[3];
    for (int a = 0; a < 3; a++) {
        r[a] = cs_scheme_radius(s, a);
    }
    memset(plan, 0, sizeof(*plan));
    plan->blocked = 1;
    plan->depth = depth;
    if (depth < 1 || depth > MAX_DEPTH) {
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < 2; a++) {
        if (count[a] < 1 || count[a] > shape[a]) {
            return CS_ERR_INVALID;
        }
        /* a forced tile only needs to hold what the edge modes read */
        plan->count[a] = count[a];
        plan->tile[a] = CEIL_DIV(shape[a], count[a]);
        plan->margin[a] = count[a] > 1 ? (ptrdiff_t)depth
                                         * step_reach(s, a) : 0;
        if (count[a] > 1 && (shape[a] / count[a] < r[a] + 1
                             || shape[a] <= 2 * r[a])) {
            return CS_ERR_INVALID;
        }
    }
    return CS_OK;
}

/* ------------------------------------------------------------------ */
/* Tiles                                                                */
/* ------------------------------------------------------------------ */

/* i modulo n, in 0 .. n - 1. */
static ptrdiff_t
wrap_index(ptrdiff_t i, ptrdiff_t n)
{
    const ptrdiff_t m = i % n;
    return m < 0 ? m + n : m;
}

/* Tile `index`'s box for passes of `depth` steps. */
static void
tile_box_of(const blocked_run *run, ptrdiff_t index, tile_box *b)
{
    const cs_scheme_cpu_plan *p = run->plan;
    const ptrdiff_t at[2] = {index / p->count[1], index % p->count[1]};
    for (int a = 0; a < 2; a++) {
        const ptrdiff_t n = run->n[a];
        b->out_lo[a] = n * at[a] / p->count[a];
        b->out_hi[a] = n * (at[a] + 1) / p->count[a];
        if (p->count[a] == 1) {
            b->lo[a] = 0;
            b->hi[a] = n;
            b->edge_lo[a] = b->edge_hi[a] = 1;
            continue;
        }
        b->lo[a] = b->out_lo[a] - p->margin[a];
        b->hi[a] = b->out_hi[a] + p->margin[a];
        b->edge_lo[a] = b->edge_hi[a] = 0;
        if (!periodic_margins(p, run->mode, a)) {
            /* a margin reaching the grid's edge becomes an edge side */
            if (b->lo[a] <= 0) {
                b->lo[a] = 0;
                b->edge_lo[a] = 1;
            }
            if (b->hi[a] >= n) {
                b->hi[a] = n;
                b->edge_hi[a] = 1;
            }
        }
    }
}

/*
 * Tile b's halo of axis a in its buffers' coordinates (index 0: grid
 * row b->lo[a]): the halo rows beyond its edge sides and the rows they
 * copy, into h (2 r entries of room); none for constant (filled once).
 */
static void
tile_halo(const blocked_run *run, const tile_box *b, int a, axis_halo *h)
{
    const ptrdiff_t r = run->lg.r[a], n = run->n[a];
    h->count = 0;
    if (run->mode == CS_MODE_CONSTANT) {
        return;
    }
    for (ptrdiff_t k = 1; k <= r; k++) {
        const ptrdiff_t beyond[2] = {-k, n - 1 + k};
        const int edge[2] = {b->edge_lo[a], b->edge_hi[a]};
        for (int side = 0; side < 2; side++) {
            if (!edge[side]) {
                continue;
            }
            h->index[h->count] = beyond[side] - b->lo[a];
            h->source[h->count] = cs_extend_index(beyond[side], n, run->mode)
                                  - b->lo[a];
            h->count++;
        }
    }
}

/* One thread's part of the run's memory. */
typedef struct tile_space {
    double *buf[MAX_BUFFERS];   /* fields and targets, then params */
    axis_halo halo[3];          /* the tile's z and y halos, x's */
    double *scratch;            /* SEGMENT doubles */
} tile_space;

/* Every halo cell of the tile's buffers along x, and its halo rows and
   planes along axes 0 and 1, set to cval (the constant mode). */
static void
fill_constant(const blocked_run *run, const tile_box *b, tile_space *ws)
{
    const geom *g = &run->lg;
    const ptrdiff_t len[2] = {b->hi[0] - b->lo[0], b->hi[1] - b->lo[1]};
    const ptrdiff_t width = g->n[2] + 2 * g->r[2];
    for (int k = 0; k < run->nbuf; k++) {
        double *base = ws->buf[k] + g->origin;
        for (ptrdiff_t z = -g->r[0]; z < len[0] + g->r[0]; z++) {
            for (ptrdiff_t y = -g->r[1]; y < len[1] + g->r[1]; y++) {
                const int beyond = (z < 0 && b->edge_lo[0])
                                   || (z >= len[0] && b->edge_hi[0])
                                   || (y < 0 && b->edge_lo[1])
                                   || (y >= len[1] && b->edge_hi[1]);
                const int inside = z >= 0 && z < len[0] && y >= 0
                                   && y < len[1];
                if (!beyond && !inside) {
                    continue;   /* an internal margin's halo: never read */
                }
                double *row = base + cs_scheme_row_at(g, z, y) - g->r[2];
                /* a halo row whole, else the row's x halo */
                for (ptrdiff_t x = 0; x < width; x++) {
                    if (beyond || x < g->r[2] || x >= g->r[2] + g->n[2]) {
                        row[x] = run->cval;
                    }
                    else {
                        x = g->r[2] + g->n[2] - 1;  /* over the row */
                    }
                }
            }
        }
    }
}

/*
 * n doubles from src to dst, a loop the compiler vectorizes: a row of a
 * tile is a few KiB, where the C library's memcpy takes its string move
 * (rep movsb), measured at less than half the loop's rate on a virtual
 * Xeon.
 */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static inline void
copy_row(double *restrict dst, const double *restrict src, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        dst[i] = src[i];
    }
}

/* Grid row (z, y) of a tile's buffers (grid rows are C-contiguous). */
static ptrdiff_t
grid_row(const blocked_run *run, const tile_box *b, ptrdiff_t z,
         ptrdiff_t y)
{
    const ptrdiff_t gz = wrap_index(b->lo[0] + z, run->n[0]);
    const ptrdiff_t gy = wrap_index(b->lo[1] + y, run->n[1]);
    return (gz * run->n[1] + gy) * run->n[2];
}

/* The tile's rows of the fields (src) and parameter fields into its
   buffers, with their copies. */
static void
load_tile(const blocked_run *run, const tile_box *b,
          const double *const *src, const double *const *params,
          tile_space *ws)
{
    const cs_scheme *s = run->s;
    const geom *g = &run->lg;
    for (ptrdiff_t z = 0; z < b->hi[0] - b->lo[0]; z++) {
        for (ptrdiff_t y = 0; y < b->hi[1] - b->lo[1]; y++) {
            const ptrdiff_t from = grid_row(run, b, z, y);
            const ptrdiff_t at = g->origin + cs_scheme_row_at(g, z, y);
            for (int k = 0; k < s->field_count; k++) {
                copy_row(ws->buf[k] + at, src[k] + from, g->n[2]);
                cs_scheme_write_copies(g, ws->halo, ws->buf[k] + g->origin,
                                       z, y, 0, g->n[2]);
            }
            for (int q = 0; q < s->param_count; q++) {
                copy_row(ws->buf[run->nbuf + q] + at, params[q] + from,
                         g->n[2]);
            }
        }
    }
}

/* Stage i over rows lo .. hi of the tile's buffers: the fields in
   buffers fb, update j into buffer dst[j], with their copies. */
static void
stage_tile(const blocked_run *run, const cs_stage *stage, const int *fb,
           const int *dst, const ptrdiff_t lo[2], const ptrdiff_t hi[2],
           tile_space *ws)
{
    const cs_scheme *s = run->s;
    const geom *g = &run->lg;
    const ptrdiff_t nx = g->n[2];
    for (ptrdiff_t z = lo[0]; z < hi[0]; z++) {
        for (ptrdiff_t y = lo[1]; y < hi[1]; y++) {
            const ptrdiff_t row = g->origin + cs_scheme_row_at(g, z, y);
            for (ptrdiff_t x0 = 0; x0 < nx; x0 += SEGMENT) {
                const double *field[CS_SCHEME_MAX_FIELDS];
                const double *param[CS_SCHEME_MAX_PARAMS];
                for (int f = 0; f < s->field_count; f++) {
                    field[f] = ws->buf[fb[f]] + row + x0;
                }
                for (int q = 0; q < s->param_count; q++) {
                    param[q] = ws->buf[run->nbuf + q] + row + x0;
                }
                for (int j = 0; j < stage->update_count; j++) {
                    if (dst[j] >= 0) {
                        cs_scheme_update_row(
                            run->tab.terms,
                            &s->updates[stage->first_update + j],
                            ws->buf[dst[j]] + row + x0, field, param,
                            ws->scratch, MIN(SEGMENT, nx - x0));
                    }
                }
            }
            for (int j = 0; j < stage->update_count; j++) {
                if (dst[j] >= 0) {
                    cs_scheme_write_copies(g, ws->halo,
                                           ws->buf[dst[j]] + g->origin, z, y,
                                           0, nx);
                }
            }
        }
    }
}

/* Tile `index`: `depth` steps from the fields src into dst. */
static void
run_tile(const blocked_run *run, ptrdiff_t index, int depth,
         const double *const *src, double *const *dst,
         const double *const *params, tile_space *ws)
{
    const cs_scheme *s = run->s;
    const geom *g = &run->lg;
    tile_box b;
    tile_box_of(run, index, &b);
    tile_halo(run, &b, 0, &ws->halo[0]);
    tile_halo(run, &b, 1, &ws->halo[1]);
    if (run->mode == CS_MODE_CONSTANT) {
        fill_constant(run, &b, ws);
    }
    load_tile(run, &b, src, params, ws);
    int fb[CS_SCHEME_MAX_FIELDS], next[CS_SCHEME_MAX_FIELDS];
    int to[CS_SCHEME_MAX_FIELDS];
    for (int f = 0; f < s->field_count; f++) {
        fb[f] = f;
    }
    ptrdiff_t lo[2] = {0, 0};
    ptrdiff_t hi[2] = {b.hi[0] - b.lo[0], b.hi[1] - b.lo[1]};
    for (int t = 0; t < depth; t++) {
        for (int i = 0; i < s->stage_count; i++) {
            for (int a = 0; a < 2; a++) {
                const ptrdiff_t r = run->stage_r[2 * i + a];
                lo[a] += b.edge_lo[a] ? 0 : r;
                hi[a] -= b.edge_hi[a] ? 0 : r;
            }
            cs_scheme_assign_stage(s, run->tab.copy_of, &s->stages[i], fb,
                                   to, next);
            stage_tile(run, &s->stages[i], fb, to, lo, hi, ws);
            memcpy(fb, next, sizeof(fb));
        }
    }
    for (ptrdiff_t z = b.out_lo[0]; z < b.out_hi[0]; z++) {
        for (ptrdiff_t y = b.out_lo[1]; y < b.out_hi[1]; y++) {
            const ptrdiff_t at = g->origin
                                 + cs_scheme_row_at(g, z - b.lo[0],
                                                    y - b.lo[1]);
            const ptrdiff_t to_row = (z * run->n[1] + y) * run->n[2];
            for (int k = 0; k < s->field_count; k++) {
                copy_row(dst[k] + to_row, ws->buf[fb[k]] + at, g->n[2]);
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* Passes                                                               */
/* ------------------------------------------------------------------ */

/* Whether [a, a + n) and [b, b + m) (doubles) overlap. */
static int
overlaps(const double *a, size_t n, const double *b, size_t m)
{
    const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a0 < b0 + m * sizeof(double) && b0 < a0 + n * sizeof(double);
}

/* Whether any out overlaps any of the `count` arrays of `with`. */
static int
outs_overlap(const blocked_run *run, double *const *out,
             const double *const *with, int count, size_t npoints)
{
    for (int k = 0; k < run->s->field_count; k++) {
        for (int j = 0; j < count; j++) {
            if (overlaps(out[k], npoints, with[j], npoints)) {
                return 1;
            }
        }
    }
    return 0;
}

/* Carve one thread's tile_space out of `block` (thread_doubles). */
static void
carve_space(const blocked_run *run, double *block, tile_space *ws)
{
    double *at = cs_scheme_carve(block, run->nbuf + run->s->param_count,
                                 run->lg.size, ws->buf);
    for (int a = 0; a < 2; a++) {
        const size_t room = (size_t)(2 * run->lg.r[a] + 1);
        ws->halo[a].index = (ptrdiff_t *)(void *)at;
        ws->halo[a].source = (ptrdiff_t *)(void *)(at + room);
        at += 2 * room;
    }
    ws->halo[2] = run->xhalo;
    ws->scratch = at;
}

/* The doubles carve_space takes; 0 when that overflows. */
static size_t
space_doubles(const blocked_run *run)
{
    const size_t pool = cs_scheme_pool_doubles(
        run->nbuf + run->s->param_count, run->lg.size);
    const size_t rest = 2 * (size_t)(2 * run->lg.r[0] + 1)
                        + 2 * (size_t)(2 * run->lg.r[1] + 1) + SEGMENT
                        + ALIGN_DOUBLES;
    return pool == 0 || pool > SIZE_MAX / sizeof(double) - rest ? 0
                                                                : pool + rest;
}

static cs_status
prepare(blocked_run *run, const cs_scheme *s, const cs_scheme_cpu_plan *p,
        const ptrdiff_t shape[3], cs_mode mode, double cval)
{
    memset(run, 0, sizeof(*run));
    run->s = s;
    run->plan = p;
    run->mode = mode;
    run->cval = cval;
    ptrdiff_t r[3], held[3];
    for (int a = 0; a < 3; a++) {
        run->n[a] = shape[a];
        r[a] = cs_scheme_radius(s, a);
    }
    held[0] = tile_held(p, shape, mode, 0);
    held[1] = tile_held(p, shape, mode, 1);
    held[2] = shape[2];
    if (!cs_scheme_geom_init(&run->lg, held, r)) {
        return CS_ERR_NOMEM;
    }
    cs_status st = cs_scheme_tables_init(&run->tab, s, &run->lg);
    if (st != CS_OK) {
        return st;
    }
    run->nbuf = s->field_count + cs_scheme_targets_most(s, run->tab.copy_of);
    run->stage_r = malloc((size_t)s->stage_count * 2 * sizeof(ptrdiff_t));
    if (run->stage_r == NULL
        || cs_scheme_axis_halo_init(&run->xhalo, shape[2], r[2], mode)
               != CS_OK) {
        return CS_ERR_NOMEM;
    }
    for (int i = 0; i < s->stage_count; i++) {
        run->stage_r[2 * i] = stage_radius(s, i, 0);
        run->stage_r[2 * i + 1] = stage_radius(s, i, 1);
    }
    run->thread_doubles = space_doubles(run);
    return run->thread_doubles == 0 ? CS_ERR_NOMEM : CS_OK;
}

static void
release(blocked_run *run)
{
    cs_scheme_tables_free(&run->tab);
    free(run->stage_r);
    cs_scheme_axis_halo_free(&run->xhalo);
}

/*
 * The passes, by every thread of the team.  Before each pass but the
 * first the team polls `intr` (cs_team_poll: every thread leaves at the
 * same pass, the outs unwritten).  set[0], set[1]: the kept grids passes write between the
 * first and the last (K pointers each); out_direct: whether the last
 * pass writes the outs, else set[last % 2] and a copy.
 */
static void
run_passes(const blocked_run *run, const double *const *in,
           double *const *out, const double *const *params, long steps,
           double *const *set[2], int out_direct, double *block,
           const cs_interrupt *intr, long *stop_at, cs_barrier *bar)
{
    const int depth = run->plan->depth;
    const long passes = CEIL_DIV(steps, (long)depth);
    const ptrdiff_t tiles = run->plan->count[0] * run->plan->count[1];
    tile_space ws;
    carve_space(run, block + (size_t)cs_team_thread() * run->thread_doubles, &ws);
    for (long p = 0; p < passes; p++) {
        if (p > 0 && cs_team_poll(intr, p, p * depth, stop_at, bar)) {
            return;
        }
        const int steps_now = (int)MIN((long)depth, steps - p * depth);
        const double *const *src = p == 0 ? in
                                   : (const double *const *)set[(p - 1) % 2];
        double *const *dst = (p == passes - 1 && out_direct) ? out
                                                             : set[p % 2];
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1) nowait
#endif
        for (ptrdiff_t i = 0; i < tiles; i++) {
            run_tile(run, i, steps_now, src, dst, params, &ws);
        }
    }
    if (!out_direct) {
        cs_barrier_wait(bar, cs_team_size());
        const ptrdiff_t rows = run->n[0] * run->n[1];
        const int k_count = run->s->field_count;
        double *const *last = set[(passes - 1) % 2];
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (ptrdiff_t i = 0; i < k_count * rows; i++) {
            const int k = (int)(i / rows);
            const ptrdiff_t at = (i % rows) * run->n[2];
            memcpy(out[k] + at, last[k] + at,
                   (size_t)run->n[2] * sizeof(double));
        }
    }
}

cs_status
cs_cpu_scheme_run_blocked(const cs_scheme *s, const cs_scheme_cpu_plan *p,
                          const double *const *in, double *const *out,
                          const double *const *params,
                          const ptrdiff_t shape[3], cs_mode mode, double cval,
                          long steps, int nt, const cs_interrupt *intr)
{
    blocked_run run;
    cs_status st = prepare(&run, s, p, shape, mode, cval);
    if (st != CS_OK) {
        release(&run);
        return st;
    }
    const int k_count = s->field_count;
    const size_t npoints = (size_t)(shape[0] * shape[1] * shape[2]);
    const long passes = CEIL_DIV(steps, (long)p->depth);
    /* the last pass may write the outs unless one of them is what it
       reads: a parameter field, or an in when it is the first pass */
    const int out_direct = !outs_overlap(&run, out, params, s->param_count,
                                         npoints)
                           && (passes > 1
                               || !outs_overlap(&run, out, in, k_count,
                                                npoints));
    const int sets = (int)MIN(2L, passes - (out_direct ? 1 : 0));
    if ((size_t)nt > SIZE_MAX / sizeof(double) / run.thread_doubles
        || npoints > SIZE_MAX / sizeof(double) / (2 * (size_t)k_count)) {
        release(&run);
        return CS_ERR_NOMEM;
    }
    size_t grid_size = 0, local_size = 0;
    double *grids = sets > 0
                    ? cs_cpu_workspace_take((size_t)sets * k_count * npoints
                                            * sizeof(double), &grid_size)
                    : NULL;
    double *local = cs_cpu_workspace_take((size_t)nt * run.thread_doubles
                                          * sizeof(double), &local_size);
    if ((sets > 0 && grids == NULL) || local == NULL) {
        cs_cpu_workspace_give(grids, grid_size);
        cs_cpu_workspace_give(local, local_size);
        release(&run);
        return CS_ERR_NOMEM;
    }
    double *set_ptr[2][CS_SCHEME_MAX_FIELDS];
    for (int k = 0; k < k_count; k++) {
        for (int i = 0; i < 2; i++) {
            set_ptr[i][k] = sets > 0 ? grids + ((size_t)(i % sets) * k_count
                                                + k) * npoints
                                     : NULL;
        }
    }
    double *const *set[2] = {set_ptr[0], set_ptr[1]};
    long stop_at = -1;
    cs_barrier bar = {0, 0, 0};

#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    run_passes(&run, in, out, params, steps, set, out_direct, local, intr,
               &stop_at, &bar);

    cs_cpu_workspace_give(grids, grid_size);
    cs_cpu_workspace_give(local, local_size);
    release(&run);
    return stop_at >= 0 ? CS_ERR_INTERRUPTED : CS_OK;
}
