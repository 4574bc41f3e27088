/*
 * halo.c -- the halo of padded buffers.  Every buffer the stencil reads
 * is padded by the kernel radius r on each side of each axis, so
 * interiors are computed with no boundary branch: before a step, the
 * halo of its source is filled from the mode (only halo cells; a
 * constant halo is written once per buffer).  Along x, a short list of
 * moves, the same for every row of a buffer, refreshes the mode's cells
 * beyond the edges and the lanes' halo vectors (lanes.c); along y and z,
 * whole rows and planes are copied.
 */
#include "cpu_private.h"

#include <string.h>

/*
 * The home cell of grid point x in a row of box b: in its lane's run, or,
 * beyond the row's ends, in the halo of the first or last lane.
 */
static ptrdiff_t
home_pos(const engine *e, const box *b, ptrdiff_t x)
{
    ptrdiff_t q = x - b->lo[2];
    ptrdiff_t m = e->lane_len;
    if (q < 0) {
        return lane_pos(e, 0, q);
    }
    if (q >= LANES * m) {
        return lane_pos(e, LANES - 1, q - (LANES - 1) * m);
    }
    return lane_pos(e, q / m, q % m);
}

static void
row_halo_add(row_halo *h, ptrdiff_t dst, ptrdiff_t src)
{
    h->dst[h->count] = dst;
    h->src[h->count] = src;
    h->count++;
}

/*
 * The x halo refresh of rows of box b: first the home cells of points
 * beyond an edge get the mode's values (cval, or the cell the mode maps
 * them to, inside the box), then every lane halo cell that is not itself
 * a home repeats the home of its point.
 */
void
cs_cpu_row_halo_build(const engine *e, const box *b, row_halo *h)
{
    ptrdiff_t rx = e->r[2];
    ptrdiff_t m = e->lane_len;
    h->count = 0;
    for (ptrdiff_t k = 1; k <= rx; k++) {
        ptrdiff_t beyond[2] = {b->lo[2] - k, b->hi[2] - 1 + k};
        int edge[2] = {b->edge_lo[2], b->edge_hi[2]};
        for (int side = 0; side < 2; side++) {
            if (!edge[side]) {
                continue;
            }
            ptrdiff_t mapped = cs_extend_index(beyond[side], e->n[2],
                                               e->mode);
            row_halo_add(h, home_pos(e, b, beyond[side]),
                         mapped < 0 ? -1 : home_pos(e, b, mapped));
        }
    }
    for (ptrdiff_t lane = 0; lane < LANES; lane++) {
        for (ptrdiff_t k = 1; k <= rx; k++) {
            ptrdiff_t cells[2] = {-k, m - 1 + k};
            for (int side = 0; side < 2; side++) {
                ptrdiff_t at = lane_pos(e, lane, cells[side]);
                ptrdiff_t home = home_pos(e, b, b->lo[2] + lane * m
                                                    + cells[side]);
                if (home != at) {
                    row_halo_add(h, at, home);
                }
            }
        }
    }
}

static void
row_halo_apply(const engine *e, const row_halo *h, double *row)
{
    for (int i = 0; i < h->count; i++) {
        row[h->dst[i]] = h->src[i] < 0 ? e->cval : row[h->src[i]];
    }
}

/*
 * One halo slab at index i of `axis` (0 or 1) in box b: a padded plane
 * or row, set to cval or copied from the slab the mode maps i to.  That
 * slab lies in the box and is valid (tiles are planned so that it does).
 */
static void
fill_slab(const engine *e, const box *b, double *base, int axis,
          ptrdiff_t i)
{
    ptrdiff_t m = cs_extend_index(i, e->n[axis], e->mode);
    ptrdiff_t slab = e->stride[axis];
    double *dst = base + (i - b->lo[axis] + e->r[axis]) * slab;
    if (m < 0) {
        for (ptrdiff_t k = 0; k < slab; k++) {
            dst[k] = e->cval;
        }
        return;
    }
    memcpy(dst, base + (m - b->lo[axis] + e->r[axis]) * slab,
           (size_t)slab * sizeof(double));
}

/* Both halos of `axis` (0 or 1; edge sides only) of box b. */
void
cs_cpu_fill_line(const engine *e, const box *b, double *base, int axis)
{
    for (ptrdiff_t k = 1; k <= e->r[axis]; k++) {
        if (b->edge_lo[axis]) {
            fill_slab(e, b, base, axis, b->lo[axis] - k);
        }
        if (b->edge_hi[axis]) {
            fill_slab(e, b, base, axis, b->hi[axis] - 1 + k);
        }
    }
}

/*
 * The x halo of rows [y0, y1) of one plane (rows outside are not valid
 * yet), and unless `x_only`, the y halo rows, copied whole after, so the
 * corners follow: the modes extend each axis independently.
 */
void
cs_cpu_fill_plane_halo(const engine *e, const box *b, const row_halo *h,
                       double *plane, ptrdiff_t y0, ptrdiff_t y1, int x_only)
{
    if (h->count > 0) {
        for (ptrdiff_t y = y0; y < y1; y++) {
            row_halo_apply(e, h, plane + row_offset(e, b, y));
        }
    }
    if (!x_only && e->r[1] > 0) {
        cs_cpu_fill_line(e, b, plane, 1);
    }
}
