/*
 * lanes.c -- lane-split rows: moving grid rows into the engine's buffers
 * and back.
 *
 * Rows are stored lane-split (a dimension-lifted transposition): a row of
 * H points is cut into LANES runs of M = ceil(H / LANES) points, and run
 * i fills lane i of M consecutive vectors.  A neighbour at x + dx is then
 * the same lane dx vectors away, so every tap loads whole aligned vectors
 * (unaligned loads of shifted x would split cache lines and halve the
 * throughput).  Each lane's r[2] halo vectors on either side repeat the
 * neighbouring lane's end cells, or hold the mode's values beyond the
 * grid edge (halo.c).  Rows are transposed into this layout when loaded
 * and back when stored; the offsets within a row and plane are the
 * inline helpers of cpu_private.h.
 */
#include "cpu_private.h"

#include <string.h>

/*
 * dst[0 .. hi-lo) = src[lo .. hi) with indices taken modulo n: the
 * identity inside the grid, the periodic margin of a wrap tile outside.
 */
static void
copy_wrapped(double *dst, const double *src, ptrdiff_t lo, ptrdiff_t hi,
             ptrdiff_t n)
{
    ptrdiff_t i = lo;
    while (i < hi) {
        ptrdiff_t m = cs_extend_index(i, n, CS_MODE_WRAP);
        ptrdiff_t len = MIN(hi - i, n - m);
        memcpy(dst + (i - lo), src + m, (size_t)len * sizeof(double));
        i += len;
    }
}

/*
 * Transpose `count` contiguous values (x = lo, lo+1, ...) into a row.
 * Vector by vector, gathering one cell from each lane's run: eight
 * sequential streams in, whole vectors out, near memcpy speed (lane by
 * lane would scatter single cells and run three times slower).
 */
static void
row_to_lanes(const engine *e, double *row, const double *vals,
             ptrdiff_t count)
{
    ptrdiff_t m = e->lane_len;
    double *dst = row + lane_pos(e, 0, 0);
    /* up to `full`, every lane's run has its point */
    ptrdiff_t full = MAX(0, MIN(m, count - (LANES - 1) * m));
    for (ptrdiff_t p = 0; p < full; p++) {
        for (ptrdiff_t lane = 0; lane < LANES; lane++) {
            dst[p * LANES + lane] = vals[lane * m + p];
        }
    }
    for (ptrdiff_t p = full; p < m; p++) {
        for (ptrdiff_t lane = 0; lane < LANES; lane++) {
            if (lane * m + p < count) {
                dst[p * LANES + lane] = vals[lane * m + p];
            }
        }
    }
}

/*
 * Cells p0 <= p < p1 of a lane-split row (src at its cell 0) out to
 * dst[q], q = lane * M + p, for the wanted points q0 <= q < q1 only.
 */
static void
lanes_to_row_checked(const engine *e, const double *src, double *dst,
                     ptrdiff_t q0, ptrdiff_t q1, ptrdiff_t p0, ptrdiff_t p1)
{
    ptrdiff_t m = e->lane_len;
    for (ptrdiff_t p = p0; p < p1; p++) {
        for (ptrdiff_t lane = 0; lane < LANES; lane++) {
            ptrdiff_t q = lane * m + p;
            if (q >= q0 && q < q1) {
                dst[q] = src[p * LANES + lane];
            }
        }
    }
}

/*
 * Transpose the points x0 <= x < x1 of a row of box b out to dst[x], the
 * inverse of row_to_lanes: whole vectors in, eight streams out.
 */
void
cs_cpu_lanes_to_row(const engine *e, const box *b, const double *row,
                    double *dst, ptrdiff_t x0, ptrdiff_t x1)
{
    ptrdiff_t m = e->lane_len;
    ptrdiff_t q0 = x0 - b->lo[2];
    ptrdiff_t q1 = x1 - b->lo[2];
    const double *src = row + lane_pos(e, 0, 0);
    double *out = dst + b->lo[2];
    /* [a, c): cells whose points are all wanted, in every lane */
    ptrdiff_t a = MAX(0, MIN(m, q0));
    ptrdiff_t c = MAX(a, MIN(m, q1 - (LANES - 1) * m));
    lanes_to_row_checked(e, src, out, q0, q1, 0, a);
    for (ptrdiff_t p = a; p < c; p++) {
        for (ptrdiff_t lane = 0; lane < LANES; lane++) {
            out[lane * m + p] = src[p * LANES + lane];
        }
    }
    lanes_to_row_checked(e, src, out, q0, q1, c, m);
}

/*
 * Load plane z of box b (all its rows) from the unpadded grid g; scratch
 * holds a row where a wrap margin has to be gathered first.
 */
void
cs_cpu_load_plane(const engine *e, const box *b, const double *g,
                  ptrdiff_t z, double *plane, double *scratch)
{
    ptrdiff_t gz = cs_extend_index(z, e->n[0], CS_MODE_WRAP);
    int inside = (b->lo[2] >= 0 && b->hi[2] <= e->n[2]);
    for (ptrdiff_t y = b->lo[1]; y < b->hi[1]; y++) {
        ptrdiff_t gy = cs_extend_index(y, e->n[1], CS_MODE_WRAP);
        const double *src = g + (gz * e->n[1] + gy) * e->n[2];
        const double *vals = src + b->lo[2];
        if (!inside) {
            copy_wrapped(scratch, src, b->lo[2], b->hi[2], e->n[2]);
            vals = scratch;
        }
        row_to_lanes(e, plane + row_offset(e, b, y), vals,
                     b->hi[2] - b->lo[2]);
    }
}
