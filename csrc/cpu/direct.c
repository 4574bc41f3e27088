/*
 * direct.c -- the path "direct", for small grids (they live in cache
 * anyway) and shapes the blocked path does not take.  Two padded
 * ping-pong buffers hold the whole grid; each step is shared by the
 * OpenMP team, in units of one row (or a segment of one, so that 1D and
 * thin grids still split).
 */
#include "cpu_private.h"
#include "workspace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Fewest points per x segment when the direct path splits short grids. */
#define MIN_SEGMENT 512

/* Plane z of a whole-grid buffer. */
static double *
direct_plane(const engine *e, const box *b, double *buf, ptrdiff_t z)
{
    return buf + (z - b->lo[0] + e->r[0]) * e->stride[0];
}

/*
 * The halo of a whole-grid buffer, shared by the team: x halos of every
 * row, and unless `x_only`, the y halo rows and z halo planes, each after
 * what it copies is complete.
 */
static void
direct_fill_halo(const engine *e, const box *b, const row_halo *h,
                 double *buf, int x_only, cs_barrier *bar)
{
    ptrdiff_t z0, z1;
    thread_share(b->hi[0] - b->lo[0], &z0, &z1);
    for (ptrdiff_t z = b->lo[0] + z0; z < b->lo[0] + z1; z++) {
        cs_cpu_fill_plane_halo(e, b, h, direct_plane(e, b, buf, z),
                               b->lo[1], b->hi[1], x_only);
    }
    team_barrier(bar);
    if (!x_only && e->r[0] > 0) {
        if (cs_team_thread() == 0) {
            cs_cpu_fill_line(e, b, buf, 0);
        }
        team_barrier(bar);
    }
}

/* Vector segments per row, so that 1D and thin grids still split. */
static ptrdiff_t
segments_per_row(const engine *e, const box *b, int nt)
{
    ptrdiff_t rows = (b->hi[0] - b->lo[0]) * (b->hi[1] - b->lo[1]);
    if (nt <= 1 || rows >= 8 * (ptrdiff_t)nt) {
        return 1;
    }
    ptrdiff_t want = CEIL_DIV(8 * (ptrdiff_t)nt, rows);
    return MAX(1, MIN(want, e->lane_len * LANES / MIN_SEGMENT));
}

/*
 * Units [u0, u1) of one step: a unit is one segment of the vectors of one
 * row, nseg per row.  The tap table is rebuilt when the plane changes.
 */
static void
direct_units(const engine *e, const box *b, const double *src, double *dst,
             const double **tap, ptrdiff_t nseg, ptrdiff_t u0, ptrdiff_t u1)
{
    ptrdiff_t ny = b->hi[1] - b->lo[1];
    ptrdiff_t m = e->lane_len;
    ptrdiff_t tap_z = -1;
    for (ptrdiff_t u = u0; u < u1; u++) {
        ptrdiff_t row = u / nseg;
        ptrdiff_t seg = u % nseg;
        ptrdiff_t z = b->lo[0] + row / ny;
        ptrdiff_t y = b->lo[1] + row % ny;
        if (z != tap_z) {
            /* window planes z - rz .. z + rz sit at local z - lo .. */
            const double *first = src + (z - b->lo[0]) * e->stride[0];
            for (int t = 0; t < e->ntaps; t++) {
                tap[t] = first + e->tz[t] * e->stride[0] + e->toff[t];
            }
            tap_z = z;
        }
        ptrdiff_t p0 = m * seg / nseg;
        ptrdiff_t p1 = m * (seg + 1) / nseg;
        ptrdiff_t at = row_offset(e, b, y) + lane_pos(e, 0, p0);
        cs_cpu_row_apply(direct_plane(e, b, dst, z) + at, tap,
                         at - corner_offset(e), e, (p1 - p0) * LANES);
    }
}

/*
 * Direct path: the whole grid in two padded buffers, one step at a time.
 * Thread 0 (the caller's thread) polls `intr` during each step and
 * writes the step it stops after into stop_after; the step's barrier
 * publishes it, and every thread leaves after that step (a value meant
 * for a later step is never mistaken for this one's).  The output is
 * written only after the last step.
 */
cs_status
cs_cpu_run_direct(const engine *e, const double *in, double *out,
                  long steps, int nt, const cs_interrupt *intr)
{
    size_t size = (size_t)((e->n[0] + 2 * e->r[0]) * e->stride[0] + LANES);
    size_t moves = (size_t)MAX(ROW_HALO_MOVES(e->r[2]), 1);
    /* both buffers in one kept block (workspace.h) */
    size_t block_size = 0;
    double *raw_a = size <= SIZE_MAX / (2 * sizeof(double))
                    ? cs_cpu_workspace_take(2 * size * sizeof(double),
                                            &block_size)
                    : NULL;
    double *raw_b = raw_a + size;
    const double **taps = malloc((size_t)nt * (size_t)MAX(e->ntaps, 1)
                                 * sizeof(*taps));
    ptrdiff_t *halo_moves = malloc(2 * moves * sizeof(ptrdiff_t));
    if (raw_a == NULL || taps == NULL || halo_moves == NULL) {
        cs_cpu_workspace_give(raw_a, block_size);
        free(taps);
        free(halo_moves);
        return CS_ERR_NOMEM;
    }
    box whole;
    for (int ax = 0; ax < 3; ax++) {
        whole.lo[ax] = 0;
        whole.hi[ax] = e->n[ax];
        whole.edge_lo[ax] = 1;
        whole.edge_hi[ax] = 1;
    }
    row_halo h = {0, halo_moves, halo_moves + moves};
    cs_cpu_row_halo_build(e, &whole, &h);
    /* a constant halo beyond y and z is never overwritten: fill it once */
    const int constant = (e->mode == CS_MODE_CONSTANT);
    long stop_after = -1; /* the step after which every thread stops */
    cs_barrier bar = {0, 0, 0};

#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        double *src = align_up(raw_a);
        double *dst = align_up(raw_b);
        const double **tap = taps + (size_t)cs_team_thread() * MAX(e->ntaps, 1);
        ptrdiff_t z0, z1;
        /* zeroed: cells no step writes (lane padding) stay finite */
        thread_share((ptrdiff_t)(2 * size), &z0, &z1);
        memset(raw_a + z0, 0, (size_t)(z1 - z0) * sizeof(double));
        team_barrier(&bar);
        thread_share(e->n[0], &z0, &z1);
        for (ptrdiff_t z = z0; z < z1; z++) {
            cs_cpu_load_plane(e, &whole, in, z,
                              direct_plane(e, &whole, src, z), NULL);
        }
        team_barrier(&bar);
        if (constant) {
            direct_fill_halo(e, &whole, &h, dst, 0, &bar);
        }
        ptrdiff_t nseg = segments_per_row(e, &whole, cs_team_size());
        ptrdiff_t u0, u1;
        thread_share(e->n[0] * e->n[1] * nseg, &u0, &u1);
        for (long s = 0; s < steps; s++) {
            direct_fill_halo(e, &whole, &h, src, constant && s > 0, &bar);
            direct_units(e, &whole, src, dst, tap, nseg, u0, u1);
            if (cs_team_thread() == 0 && s + 1 < steps
                && cs_interrupt_requested(intr, s + 1)) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
                stop_after = s;
            }
            team_barrier(&bar);
            double *t = src;
            src = dst;
            dst = t;
            long stop;
#ifdef _OPENMP
#pragma omp atomic read
#endif
            stop = stop_after;
            if (stop == s) {
                break;
            }
        }
        if (stop_after < 0) {
            for (ptrdiff_t z = z0; z < z1; z++) {
                store_plane(e, &whole, &whole,
                            direct_plane(e, &whole, src, z), z, out);
            }
        }
    }
    cs_cpu_workspace_give(raw_a, block_size);
    free(taps);
    free(halo_moves);
    return stop_after < 0 ? CS_OK : CS_ERR_INTERRUPTED;
}
