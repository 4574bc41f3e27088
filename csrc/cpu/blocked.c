/*
 * blocked.c -- the path "direct-temporal-blocked": large grids, 3.5D
 * blocking.  The grid is cut into tiles: blocks along z, tiles along y
 * and x.  A thread advances one tile T steps at once, streaming through
 * its z range: it loads a plane, and as soon as a level t-1 plane and its
 * neighbours exist it computes the level t plane, keeping only a ring of
 * 2*rz+1 planes per level in cache; level T planes go back to the grid.
 * Tiles overlap: a tile reads a margin of T*r beyond its output on each
 * internal side, and what it computes there (redundantly, shrinking by r
 * per step) is discarded.  A side on the real grid edge instead keeps its
 * full extent and re-applies the mode at every step, from the tile's own
 * cells (tiles are planned so that the cells the mode reads lie inside
 * the tile).  Under "wrap" a tiled axis, and the streaming axis always,
 * have no edges at all: their margins are loaded periodically.  A 2D grid
 * {1, ny, nx} is handled as {ny, 1, nx}, the same memory: it streams
 * through rows.  A 1D grid has a single plane per tile: plain overlapped
 * tiling along x.
 *
 * The planner (cs_cpu_plan_tiling) picks the depth T and the tiles from
 * a cost model; the caller runs direct where no tiling fits.
 */
#include "cpu_private.h"
#include "workspace.h"

#include <stdlib.h>
#include <string.h>

/*
 * Cache budgets (bytes) for one thread's ring planes:
 * CS_CPU_L2_BYTES about its L2, CS_CPU_CACHE_BYTES the most it may use,
 * with its share of L3.  Measured on Zen 5 (2 MB L2 per core, 32 MB L3),
 * rings spilling into L3 run nearly as fast (COST_OUTER_CACHE), while an
 * extra pass costs a trip through memory: a budget that lets one pass do
 * ten steps beats a tighter one.
 */
#ifndef CS_CPU_L2_BYTES
#define CS_CPU_L2_BYTES (1536 * 1024)
#endif
#ifndef CS_CPU_CACHE_BYTES
#define CS_CPU_CACHE_BYTES (6 * 1024 * 1024)
#endif

/* Most steps fused into one blocked pass. */
#define MAX_DEPTH 32

/*
 * Smallest tile worth having: CS_CPU_MIN_TILE_MARGINS times its margin
 * T*r, and at least CS_CPU_MIN_TILE points (CS_CPU_MIN_TILE_X along x,
 * where long rows keep the vector loops busy).  Overridable so that tests
 * can force many tiny tiles.
 */
#ifndef CS_CPU_MIN_TILE_MARGINS
#define CS_CPU_MIN_TILE_MARGINS 4
#endif
#ifndef CS_CPU_MIN_TILE
#define CS_CPU_MIN_TILE 8
#endif
#ifndef CS_CPU_MIN_TILE_X
#define CS_CPU_MIN_TILE_X 256
#endif

/* Tiles per thread the planner aims for, so dynamic scheduling balances. */
#define TILES_PER_THREAD 2

/*
 * The planner's cost model, in units of one tap on one point (an FMA,
 * about 0.05 ns on one Zen 5 core): moving a byte between memory and
 * cache while both cores stream, the first touch of a fresh byte (page
 * fault, zeroing, unmapping: 0.4-0.5 ns per byte measured, which is why
 * one pass without a temporary grid wins whenever it fits), and the
 * factor on taps whose rings spill from L2 into L3.
 */
#define COST_BYTE 1.3
#define COST_FRESH_BYTE 10.0
#define COST_OUTER_CACHE 1.05

/*
 * Are the sides of axis a internal even where they touch the grid edge?
 * Under wrap, yes on a tiled axis and always on the streaming axis z:
 * its ring keeps no far planes for the periodic halo to copy.
 */
static int
wrap_margins(const engine *e, const tiling *tl, int a)
{
    return e->mode == CS_MODE_WRAP && e->r[a] > 0
           && (a == 0 || tl->count[a] > 1);
}

/* Grid points a tile holds along axis a. */
ptrdiff_t
cs_cpu_tile_held(const engine *e, const tiling *tl, int a)
{
    if (tl->count[a] == 1 && !wrap_margins(e, tl, a)) {
        return e->n[a];
    }
    return tl->tile[a] + 2 * (ptrdiff_t)tl->depth * e->r[a];
}

/* Ring planes per level; the bytes of all levels' rings of one thread. */
static ptrdiff_t
ring_size(const engine *e)
{
    return 2 * e->r[0] + 1;
}

static double
ring_bytes(const engine *e, const tiling *tl)
{
    double row = (double)(CEIL_DIV(cs_cpu_tile_held(e, tl, 2), LANES)
                          + 2 * e->r[2]) * LANES;
    double plane = row * (double)(cs_cpu_tile_held(e, tl, 1) + 2 * e->r[1]);
    return (tl->depth + 1.0) * (double)ring_size(e) * plane * sizeof(double);
}

/* The smallest tile worth having along axis a (see CS_CPU_MIN_TILE). */
static ptrdiff_t
tile_min(const engine *e, int a, int depth)
{
    ptrdiff_t m = MAX(CS_CPU_MIN_TILE_MARGINS * (ptrdiff_t)depth * e->r[a],
                      e->r[a] + 1);
    return MAX(m, a == 2 ? CS_CPU_MIN_TILE_X : CS_CPU_MIN_TILE);
}

/*
 * Cut axis a into tiles of at most `most` points; 0 where that would
 * make tiles smaller than tile_min or the edge mode could read beyond a
 * tile (n <= 2r).
 */
static int
split_axis(const engine *e, tiling *tl, int a, ptrdiff_t most)
{
    if (most >= e->n[a]) {
        tl->tile[a] = e->n[a];
        tl->count[a] = 1;
        return 1;
    }
    if (most < tile_min(e, a, tl->depth) || e->n[a] <= 2 * e->r[a]) {
        return 0;
    }
    tl->count[a] = CEIL_DIV(e->n[a], most);
    tl->tile[a] = CEIL_DIV(e->n[a], tl->count[a]);
    return 1;
}

/*
 * Tiles for T = tl->depth: y and then x as large as `budget` bytes of
 * rings allow, then z blocks until every thread has a few tiles.
 * Returns 0 when no tiling fits.
 */
static int
fit_tiles(const engine *e, int nt, double budget, tiling *tl)
{
    for (int a = 0; a < 3; a++) {
        tl->tile[a] = e->n[a];
        tl->count[a] = 1;
    }
    if (ring_bytes(e, tl) > budget && e->n[1] > 1) {
        /* rows of full x the budget holds, less margins and halo */
        double per_row = ring_bytes(e, tl)
                         / (double)(cs_cpu_tile_held(e, tl, 1) + 2 * e->r[1]);
        ptrdiff_t rows = (ptrdiff_t)(budget / per_row);
        ptrdiff_t most = rows - 2 * ((ptrdiff_t)tl->depth + 1) * e->r[1];
        /* y stays whole where it cannot be split */
        split_axis(e, tl, 1, MAX(most, tile_min(e, 1, tl->depth)));
    }
    if (ring_bytes(e, tl) > budget) {
        double per_point = ring_bytes(e, tl)
                           / (double)(cs_cpu_tile_held(e, tl, 2)
                                      + 2 * e->r[2]);
        ptrdiff_t points = (ptrdiff_t)(budget / per_point);
        ptrdiff_t most = points - 2 * ((ptrdiff_t)tl->depth + 1) * e->r[2]
                         - LANES;
        if (!split_axis(e, tl, 2, most)) {
            return 0;
        }
    }
    ptrdiff_t want = (ptrdiff_t)TILES_PER_THREAD * nt;
    ptrdiff_t tiles = tl->count[1] * tl->count[2];
    if (nt > 1 && tiles < want) {
        ptrdiff_t blocks = CEIL_DIV(want, tiles);
        ptrdiff_t most = MAX(CEIL_DIV(e->n[0], blocks),
                             tile_min(e, 0, tl->depth));
        if (!split_axis(e, tl, 0, most)) {
            tl->tile[0] = e->n[0];
            tl->count[0] = 1;
        }
    }
    return 1;
}

/*
 * Per output point of a pass: the points a step computes (rows are
 * computed whole, so x margins cost every step; y and z margins shrink
 * by r a step) and the points the pass loads (with every margin); and
 * whether one thread's rings spill from L2 (CS_CPU_L2_BYTES).
 */
void
cs_cpu_tiling_factors(const engine *e, const tiling *tl, double *computed,
                      double *loaded, int *spills)
{
    *computed = 1.0;
    *loaded = 1.0;
    for (int a = 0; a < 3; a++) {
        double held = (double)cs_cpu_tile_held(e, tl, a);
        double out = (double)tl->tile[a];
        double shrink = (held - out) / 2.0 / tl->depth;   /* r or 0 */
        *computed *= a == 2 ? held / out
                            : (out + (tl->depth - 1) * shrink) / out;
        *loaded *= held / out;
    }
    *spills = ring_bytes(e, tl) > CS_CPU_L2_BYTES;
}

/* The bytes of all levels' rings of one thread. */
double
cs_cpu_ring_bytes(const engine *e, const tiling *tl)
{
    return ring_bytes(e, tl);
}

/*
 * Estimated cost of `steps` steps with this tiling, per grid point, in
 * taps: the work including the redundant margins, the memory traffic of
 * the passes (load with margins, store, write-allocate), and the fresh
 * temporary grid that more than one pass needs.
 */
static double
tiling_cost(const engine *e, const tiling *tl, long steps)
{
    double redundant, loaded;
    int spills;
    cs_cpu_tiling_factors(e, tl, &redundant, &loaded, &spills);
    long passes = CEIL_DIV(steps, (long)tl->depth);
    double cost = (double)steps * taps_per_point(e) * redundant;
    if (spills) {
        cost *= COST_OUTER_CACHE;
    }
    cost += (double)passes * (8.0 * loaded + 16.0) * COST_BYTE;
    if (passes > 1) {
        cost += 8.0 * COST_FRESH_BYTE;
    }
    return cost;
}

/*
 * The cheapest tiling over both budgets and depths T = ceil(steps /
 * passes) <= MAX_DEPTH (an uneven depth does no better than the even one
 * below it).  Returns 0 when none fits: the caller runs direct.
 */
int
cs_cpu_plan_tiling(const engine *e, long steps, int nt, tiling *best)
{
    double best_cost = 0.0;
    int found = 0;
    long most = MIN(steps, (long)MAX_DEPTH);
    const double budgets[2] = {CS_CPU_L2_BYTES, CS_CPU_CACHE_BYTES};
    for (long t = 1; t <= most; t++) {
        if (CEIL_DIV(steps, CEIL_DIV(steps, t)) != t) {
            continue;   /* an uneven depth */
        }
        for (int i = 0; i < 2; i++) {
            tiling tl;
            tl.depth = (int)t;
            if (!fit_tiles(e, nt, budgets[i], &tl)) {
                continue;
            }
            double cost = tiling_cost(e, &tl, steps);
            if (!found || cost < best_cost) {
                *best = tl;
                best_cost = cost;
                found = 1;
            }
        }
    }
    return found;
}

/* The buffer box of tile (tz, ty, tx) for a pass of `depth` steps. */
static void
tile_box(const engine *e, const tiling *tl, const ptrdiff_t t[3], int depth,
         box *part, box *b)
{
    for (int a = 0; a < 3; a++) {
        ptrdiff_t o0 = e->n[a] * t[a] / tl->count[a];
        ptrdiff_t o1 = e->n[a] * (t[a] + 1) / tl->count[a];
        part->lo[a] = o0;
        part->hi[a] = o1;
        part->edge_lo[a] = 0;
        part->edge_hi[a] = 0;
        if (tl->count[a] == 1 && !wrap_margins(e, tl, a)) {
            b->lo[a] = 0;
            b->hi[a] = e->n[a];
            b->edge_lo[a] = 1;
            b->edge_hi[a] = 1;
            continue;
        }
        ptrdiff_t margin = (ptrdiff_t)depth * e->r[a];
        b->lo[a] = o0 - margin;
        b->hi[a] = o1 + margin;
        b->edge_lo[a] = 0;
        b->edge_hi[a] = 0;
        if (e->mode != CS_MODE_WRAP) {
            /* a margin reaching the grid edge becomes an edge side */
            if (b->lo[a] <= 0) {
                b->lo[a] = 0;
                b->edge_lo[a] = 1;
            }
            if (b->hi[a] >= e->n[a]) {
                b->hi[a] = e->n[a];
                b->edge_hi[a] = 1;
            }
        }
    }
}

/*
 * The region step `s` (1-based) of a pass computes: the whole box along
 * edge sides, shrunk by s*r from each internal side.
 */
static void
step_region(const engine *e, const box *b, int s, box *c)
{
    for (int a = 0; a < 3; a++) {
        ptrdiff_t shrink = (ptrdiff_t)s * e->r[a];
        c->lo[a] = b->lo[a] + (b->edge_lo[a] ? 0 : shrink);
        c->hi[a] = b->hi[a] - (b->edge_hi[a] ? 0 : shrink);
        c->edge_lo[a] = b->edge_lo[a];
        c->edge_hi[a] = b->edge_hi[a];
    }
}

/* One thread's ring planes, tap table, x halo moves and a scratch row. */
typedef struct workspace {
    double *planes;          /* (depth + 1) levels of ring_size planes */
    const double **tap;
    row_halo halo;
    double *scratch;
} workspace;

/* Plane z of level `level` in the ring. */
static double *
ring_plane(const engine *e, const workspace *ws, int level, ptrdiff_t z)
{
    ptrdiff_t ring = ring_size(e);
    ptrdiff_t slot = level * ring + ((z % ring) + ring) % ring;
    return ws->planes + slot * e->stride[0];
}

/*
 * Halo plane p (beyond an edge) of one level: cval, or a copy of the
 * plane the mode maps it to.  That plane is still in the ring: for
 * |p - edge| <= rz the modes map within rz of the edge (or anywhere in a
 * grid thinner than rz), all inside the window of 2*rz+1 planes around
 * the plane being computed, and already computed at this level.
 */
static void
fill_ring_halo(const engine *e, const workspace *ws, int level, ptrdiff_t p)
{
    ptrdiff_t m = cs_extend_index(p, e->n[0], e->mode);
    double *dst = ring_plane(e, ws, level, p);
    if (m < 0) {
        for (ptrdiff_t k = 0; k < e->stride[0]; k++) {
            dst[k] = e->cval;
        }
    }
    else {
        memcpy(dst, ring_plane(e, ws, level, m),
               (size_t)e->stride[0] * sizeof(double));
    }
}

/* Level `level` plane z from the ring of level - 1, rows of region c. */
static void
compute_ring_plane(const engine *e, const box *b, const box *c,
                   const workspace *ws, int level, ptrdiff_t z)
{
    /* the window's planes; those beyond an edge come from the mode */
    for (ptrdiff_t p = z - e->r[0]; p <= z + e->r[0]; p++) {
        if ((p < 0 && b->edge_lo[0]) || (p >= e->n[0] && b->edge_hi[0])) {
            fill_ring_halo(e, ws, level - 1, p);
        }
    }
    for (int t = 0; t < e->ntaps; t++) {
        ws->tap[t] = ring_plane(e, ws, level - 1, z - e->r[0] + e->tz[t])
                     + e->toff[t];
    }
    double *dst = ring_plane(e, ws, level, z);
    for (ptrdiff_t y = c->lo[1]; y < c->hi[1]; y++) {
        ptrdiff_t at = row_offset(e, b, y) + lane_pos(e, 0, 0);
        cs_cpu_row_apply(dst + at, ws->tap, at - corner_offset(e), e,
                         e->lane_len * LANES);
    }
}

/*
 * Advance tile `index` by `depth` steps from grid g_src into g_dst.  The
 * front f walks through z: load plane f, then compute level t plane
 * f - t*rz for every t, which needs level t-1 planes up to f - (t-1)*rz,
 * just made.  Each level's ring then holds the 2*rz+1 planes it must.
 */
static void
run_tile(const engine *e, const tiling *tl, ptrdiff_t index, int depth,
         const double *g_src, double *g_dst, workspace *ws)
{
    ptrdiff_t t[3];
    t[2] = index % tl->count[2];
    t[1] = (index / tl->count[2]) % tl->count[1];
    t[0] = index / (tl->count[2] * tl->count[1]);
    box part, b;
    tile_box(e, tl, t, depth, &part, &b);
    cs_cpu_row_halo_build(e, &b, &ws->halo);
    /* a constant halo beyond y is never overwritten: fill it once */
    const int constant = (e->mode == CS_MODE_CONSTANT);
    const ptrdiff_t rz = e->r[0];

    if (constant) {
        for (ptrdiff_t s = 0; s < (depth + 1) * ring_size(e); s++) {
            cs_cpu_fill_line(e, &b, ws->planes + s * e->stride[0], 1);
        }
    }
    for (ptrdiff_t f = b.lo[0]; f < b.hi[0] + depth * rz; f++) {
        if (f < b.hi[0]) {
            double *plane = ring_plane(e, ws, 0, f);
            cs_cpu_load_plane(e, &b, g_src, f, plane, ws->scratch);
            cs_cpu_fill_plane_halo(e, &b, &ws->halo, plane, b.lo[1],
                                   b.hi[1], constant);
        }
        for (int level = 1; level <= depth; level++) {
            ptrdiff_t z = f - level * rz;
            box c;
            step_region(e, &b, level, &c);
            if (z < c.lo[0] || z >= c.hi[0]) {
                continue;
            }
            compute_ring_plane(e, &b, &c, ws, level, z);
            double *plane = ring_plane(e, ws, level, z);
            if (level < depth) {
                cs_cpu_fill_plane_halo(e, &b, &ws->halo, plane, c.lo[1],
                                       c.hi[1], constant);
            }
            else if (z >= part.lo[0] && z < part.hi[0]) {
                store_plane(e, &b, &part, plane, z, g_dst);
            }
        }
    }
}

/*
 * Blocked path: passes of tl->depth steps over the tiles.  Before each
 * pass but the first the team polls `intr` (cs_team_poll), so every
 * thread leaves at the same pass.
 */
cs_status
cs_cpu_run_blocked(const engine *e, const tiling *tl, const double *in,
                   double *out, long steps, int nt, const cs_interrupt *intr)
{
    size_t npoints = (size_t)(e->n[0] * e->n[1] * e->n[2]);
    ptrdiff_t ntiles = tl->count[0] * tl->count[1] * tl->count[2];
    long passes = CEIL_DIV(steps, (long)tl->depth);
    size_t per_thread = (size_t)((tl->depth + 1) * ring_size(e)
                                 * e->stride[0] + LANES);
    size_t ntaps = (size_t)MAX(e->ntaps, 1);
    size_t moves = (size_t)MAX(ROW_HALO_MOVES(e->r[2]), 1);
    size_t row = (size_t)cs_cpu_tile_held(e, tl, 2);
    int need_grid = (passes > 1 || in == out);
    /* the temporary grid and the rings: kept blocks (workspace.h) */
    size_t grid_size = 0, local_size = 0;
    double *grid = need_grid
                   ? cs_cpu_workspace_take(npoints * sizeof(double),
                                           &grid_size)
                   : NULL;
    double *local = cs_cpu_workspace_take((size_t)nt * per_thread
                                          * sizeof(double), &local_size);
    double *scratch = malloc((size_t)nt * row * sizeof(double));
    const double **taps = malloc((size_t)nt * ntaps * sizeof(*taps));
    ptrdiff_t *halo_moves = malloc((size_t)nt * 2 * moves
                                   * sizeof(ptrdiff_t));
    if ((need_grid && grid == NULL) || local == NULL || scratch == NULL
        || taps == NULL || halo_moves == NULL) {
        cs_cpu_workspace_give(grid, grid_size);
        cs_cpu_workspace_give(local, local_size);
        free(scratch);
        free(taps);
        free(halo_moves);
        return CS_ERR_NOMEM;
    }
    /*
     * Passes ping-pong between `out` and `grid`, the last one writing
     * `out`.  A pass reads margins that other tiles write, so it must not
     * write the grid it reads: when `in` is `out` and the first pass
     * would write `out`, start from a copy.
     */
    const double *first = in;
    if (in == out && passes % 2 == 1) {
        memcpy(grid, in, npoints * sizeof(double));
        first = grid;
    }
    long stop_at = -1;
    cs_barrier bar = {0, 0, 0};

#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        size_t id = (size_t)cs_team_thread();
        /* zeroed: cells no step writes (lane padding) stay finite */
        memset(local + id * per_thread, 0, per_thread * sizeof(double));
        workspace ws;
        ws.planes = align_up(local + id * per_thread);
        ws.tap = taps + id * ntaps;
        ws.halo.count = 0;
        ws.halo.dst = halo_moves + id * 2 * moves;
        ws.halo.src = ws.halo.dst + moves;
        ws.scratch = scratch + id * row;
        for (long p = 0; p < passes; p++) {
            if (p > 0
                && cs_team_poll(intr, p, p * tl->depth, &stop_at, &bar)) {
                break;
            }
            int depth = (int)MIN((long)tl->depth, steps - p * tl->depth);
            double *g_dst = ((passes - 1 - p) % 2 == 0) ? out : grid;
            const double *g_src = (p == 0) ? first
                                  : (g_dst == out ? grid : out);
            /* no barrier at the end: the next pass starts with one */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1) nowait
#endif
            for (ptrdiff_t i = 0; i < ntiles; i++) {
                run_tile(e, tl, i, depth, g_src, g_dst, &ws);
            }
        }
    }
    cs_cpu_workspace_give(grid, grid_size);
    cs_cpu_workspace_give(local, local_size);
    free(scratch);
    free(taps);
    free(halo_moves);
    return stop_at >= 0 ? CS_ERR_INTERRUPTED : CS_OK;
}
