/*
 * layout.c -- the stencil2row layout builder for dual tessellation.
 *
 * Builds, once on the host, everything a tile loader and the MMA loop
 * need and that would otherwise cost integer division on the device
 * (conventions in layout.h):
 *
 *   - weight matrices WA / WB (kpad x G): the kernel embedded centred
 *     into P columns, cut into lower (WA) and upper (WB) triangles, one
 *     ky-block of P rows per kernel row, zero rows up to kpad;
 *   - the shared-memory geometry of one stencil2row matrix: tile_groups
 *     rows of stride ld (the smallest ld >= P*(tile_rows-1) + kpad with
 *     ld % 16 == 4), then a dump area;
 *   - the lookup table: per input tile column y, the offset and row
 *     stride of that column in A and in B.
 *
 * Which columns are dirty.  Input tile column y belongs to matrix A when
 * y % G < P and y / G < tile_groups (then it sits at row y / G, position
 * y % G, stride P); the others are A's dirty columns: one per group (the
 * column y % G == P) and the P - 1 columns past tile_cols.  For B the
 * same holds for y - P: the first P columns and one column per group but
 * the last are dirty.  Each matrix thus has tile_groups + P - 1 dirty
 * columns of in_rows elements.  Dirty column d (counted left to right)
 * gets the in_rows consecutive slots dump_base + d*in_rows + x, so every
 * dirty element has a slot of its own and the loader stores every input
 * element into A and into B without a branch.
 *
 * matrix_size is the end of the dump area rounded up to a multiple of 16
 * doubles, so that a second matrix placed right after the first starts
 * 128-byte aligned and on the same shared-memory bank as the first.
 */
#include "layout.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* doubles per 32 four-byte shared-memory banks */
#define BANK_PERIOD 16
/*
 * ld % BANK_PERIOD: any 4 consecutive rows of a 4-double operand slice
 * cover all 32 banks once, so each 256-byte half of a 16 x 4 (or 8 x 4)
 * operand load is one conflict-free wavefront, whatever its column.
 */
#define BANK_SKEW 4

static int
layout_args_ok(const double *w, int ky, int kx, int tile_groups,
               int tile_rows, const cs_layout2d *out)
{
    if (w == NULL || out == NULL) {
        return 0;
    }
    if (ky < 1 || kx < 1 || ky % 2 == 0 || kx % 2 == 0) {
        return 0;
    }
    if (ky > CS_LAYOUT_MAX_KY || kx > CS_LAYOUT_MAX_KX) {
        return 0;
    }
    return tile_groups >= 1 && tile_rows >= 1;
}

/*
 * Fill the geometry fields of `l` from the kernel extents and tile plan.
 * Returns 0 when a size does not fit an int (absurd tile plans).
 */
static int
layout_geometry(int ky, int kx, int tile_groups, int tile_rows,
                cs_layout2d *l)
{
    long long p = kx <= 7 ? 7 : 15;
    long long kdim = ky * p;
    long long kpad = (kdim + CS_MMA_K - 1) / CS_MMA_K * CS_MMA_K;
    long long in_rows = (long long)tile_rows + ky - 1;
    long long tile_cols = (long long)tile_groups * (p + 1);
    long long ld = p * (tile_rows - 1LL) + kpad;
    ld += ((BANK_SKEW - ld) % BANK_PERIOD + BANK_PERIOD) % BANK_PERIOD;

    /* with these two bounds the products below fit a long long */
    if (ld > INT_MAX || tile_cols + p - 1 > INT_MAX / 4) {
        return 0;
    }
    long long dump_base = (long long)tile_groups * ld;
    long long dirty_cols = tile_groups + p - 1;
    long long end = dump_base + dirty_cols * in_rows;
    long long size = (end + BANK_PERIOD - 1) / BANK_PERIOD * BANK_PERIOD;

    if (size > INT_MAX) {
        return 0;
    }
    l->ky = ky;
    l->kx = kx;
    l->payload = (int)p;
    l->group = (int)p + 1;
    l->halo_x = (int)(p - 1) / 2;
    l->halo_y = (ky - 1) / 2;
    l->kdim = (int)kdim;
    l->kpad = (int)kpad;
    l->tile_groups = tile_groups;
    l->tile_rows = tile_rows;
    l->tile_cols = (int)tile_cols;
    l->in_rows = (int)in_rows;
    l->in_cols = (int)(tile_cols + p - 1);
    l->ld = (int)ld;
    l->dump_base = (int)dump_base;
    l->matrix_size = (int)size;
    return 1;
}

/*
 * WA[P*dy + t][c] = E[dy][t - c] for t >= c and
 * WB[P*dy + t][c] = E[dy][t + P - c] for t < c, with E the kernel
 * embedded centred into P columns (zero outside it).  Rows from kdim to
 * kpad stay zero (calloc).
 */
static void
fill_weights(const double *w, cs_layout2d *l)
{
    int p = l->payload;
    int g = l->group;
    int shift = (p - l->kx) / 2;

    for (int dy = 0; dy < l->ky; dy++) {
        for (int t = 0; t < p; t++) {
            double *wa = l->weight_a + (size_t)(p * dy + t) * g;
            double *wb = l->weight_b + (size_t)(p * dy + t) * g;
            for (int c = 0; c < g; c++) {
                int u = t >= c ? t - c : t + p - c;
                int col = u - shift;
                double v = 0.0;
                if (col >= 0 && col < l->kx) {
                    v = w[(size_t)dy * l->kx + col];
                }
                if (t >= c) {
                    wa[c] = v;
                }
                else {
                    wb[c] = v;
                }
            }
        }
    }
}

/*
 * Lookup table: column y of the input tile, as seen by one matrix whose
 * groups start `shift` columns into the tile (0 for A, P for B).  Dirty
 * columns take the next free dump column, counted in *dirty.
 */
static void
lut_column(const cs_layout2d *l, int y, int shift, int *dirty, int *entry)
{
    int rel = y - shift;
    int g = rel >= 0 ? rel / l->group : -1;
    int t = rel >= 0 ? rel % l->group : 0;

    if (rel >= 0 && g < l->tile_groups && t < l->payload) {
        entry[0] = g * l->ld + t;
        entry[1] = l->payload;
    }
    else {
        entry[0] = l->dump_base + *dirty * l->in_rows;
        entry[1] = 1;
        (*dirty)++;
    }
}

static void
fill_lut(cs_layout2d *l)
{
    int dirty_a = 0;
    int dirty_b = 0;

    for (int y = 0; y < l->in_cols; y++) {
        lut_column(l, y, 0, &dirty_a, l->lut + 4 * y);
        lut_column(l, y, l->payload, &dirty_b, l->lut + 4 * y + 2);
    }
}

cs_status
cs_layout2d_build(const double *w, int ky, int kx, int tile_groups,
                  int tile_rows, cs_layout2d *out)
{
    if (!layout_args_ok(w, ky, kx, tile_groups, tile_rows, out)) {
        return CS_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    if (!layout_geometry(ky, kx, tile_groups, tile_rows, out)) {
        return CS_ERR_INVALID;
    }
    size_t wcount = (size_t)out->kpad * (size_t)out->group;
    out->weight_a = calloc(wcount, sizeof(double));
    out->weight_b = calloc(wcount, sizeof(double));
    out->lut = malloc((size_t)out->in_cols * 4 * sizeof(int));
    if (out->weight_a == NULL || out->weight_b == NULL || out->lut == NULL) {
        cs_layout2d_free(out);
        return CS_ERR_NOMEM;
    }
    fill_weights(w, out);
    fill_lut(out);
    return CS_OK;
}

void
cs_layout2d_free(cs_layout2d *layout)
{
    if (layout == NULL) {
        return;
    }
    free(layout->weight_a);
    free(layout->weight_b);
    free(layout->lut);
    layout->weight_a = NULL;
    layout->weight_b = NULL;
    layout->lut = NULL;
}
