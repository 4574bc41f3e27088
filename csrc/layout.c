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
 *     ld % 16 == 7), then a dump area;
 *   - the lookup table: per input tile column y, the offset and row
 *     stride of that column in A and in B.
 *
 * The weight matrices depend on the weights, the rest on the extents
 * only: cs_layout2d_weights fills WA / WB of other ky x kx weights for an
 * existing layout (the z-planes of a 3D kernel share one layout and
 * lookup table, each with its own pair of weight matrices).
 *
 * Which columns are dirty.  Input tile column y belongs to matrix A when
 * y % G < P and y / G < tile_groups (then it sits at row y / G, position
 * y % G, stride P); the others are A's dirty columns: one per group (the
 * column y % G == P) and the P - 1 columns past tile_cols.  For B the
 * same holds for y - P: the first P columns and one column per group but
 * the last are dirty.  Every dirty element gets a dump slot of its own,
 * so the loader stores every input element into A and into B without a
 * branch.
 *
 * Shared-memory banks (8-byte words: 16 per 32 banks).  Two access
 * patterns must each be conflict-free within a half-warp:
 *   - the MMA operand load: 4 matrix rows x 4 consecutive entries;
 *   - the loader's store: 16 consecutive tile columns (16-aligned) of one
 *     input row x, into both matrices.
 * With ld % 16 == 7, row g starts on word 7g mod 16, so (i) the rows
 * {c, c+4, c+8, c+12} start on words 4 apart, and a kernel that feeds
 * those groups to the MMA rows of one half-warp loads conflict-free; and
 * (ii) the real elements of any 16 aligned columns land on distinct
 * words in A and in B, leaving exactly one free word per dirty column.
 * Dirty column y therefore gets slots d + P*x (the stride of the real
 * elements, so its word moves with theirs from row to row) with d on the
 * free word of its 16-column block; dirty columns of the last, partial
 * block take any word.  Slots are packed greedily after the rows.
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
/* ld % BANK_PERIOD (see the top comment) */
#define BANK_SKEW 7
/* the loader's store pattern: this many consecutive, aligned columns */
#define STORE_SPAN 16

#define MIN_INT(a, b) ((a) < (b) ? (a) : (b))
#define MAX_INT(a, b) ((a) > (b) ? (a) : (b))

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
    long long p = kx <= 7 ? 7 : kx <= 15 ? 15 : 31;
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
    /* the dump area's worst case (see dump_area_len), for the int bound */
    long long end = dump_base + (tile_groups + p - 1)
                                    * (p * (in_rows - 1) + 1 + BANK_PERIOD);

    if (end + BANK_PERIOD > INT_MAX) {
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
    l->matrix_size = 0; /* set by fill_lut, once the dump area is packed */
    return 1;
}

/*
 * WA[P*dy + t][c] = E[dy][t - c] for t >= c and
 * WB[P*dy + t][c] = E[dy][t + P - c] for t < c, with E the kernel
 * embedded centred into P columns (zero outside it), into the kpad x G
 * matrices weight_a / weight_b.  Rows from kdim to kpad are not written:
 * the caller zeroes them.
 */
static void
fill_weights(const cs_layout2d *l, const double *w, double *weight_a,
             double *weight_b)
{
    int p = l->payload;
    int g = l->group;
    int shift = (p - l->kx) / 2;

    for (int dy = 0; dy < l->ky; dy++) {
        for (int t = 0; t < p; t++) {
            double *wa = weight_a + (size_t)(p * dy + t) * g;
            double *wb = weight_b + (size_t)(p * dy + t) * g;
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
 * Where column y of the input tile sits in one matrix whose groups start
 * `shift` columns into the tile (0 for A, P for B): 1 and its slot for
 * row 0 and row stride in entry[0..1], or 0 when y is dirty there.
 */
static int
real_column(const cs_layout2d *l, int y, int shift, int *entry)
{
    int rel = y - shift;

    if (rel < 0) {
        return 0;
    }
    int g = rel / l->group;
    int t = rel % l->group;
    if (g >= l->tile_groups || t >= l->payload) {
        return 0;
    }
    entry[0] = g * l->ld + t;
    entry[1] = l->payload;
    return 1;
}

/* A matrix's dump area being packed: which slots past dump_base are used. */
typedef struct dump_area {
    unsigned char *used; /* one flag per slot past dump_base */
    int len;
    int end;             /* one past the highest slot used so far */
} dump_area;

/* Slots the dump area may need at worst: each dirty column placed after
 * all earlier ones, one bank period further (layout_geometry bounds it). */
static int
dump_area_len(const cs_layout2d *l)
{
    int dirty_cols = l->tile_groups + l->payload - 1;
    return dirty_cols * (l->payload * (l->in_rows - 1) + 1 + BANK_PERIOD);
}

/*
 * Give a dirty column the lowest slots d + P*x (x < in_rows) that are all
 * free, with d % BANK_PERIOD == word (any d when word < 0).
 */
static cs_status
dump_place(const cs_layout2d *l, dump_area *a, int word, int *entry)
{
    int p = l->payload;
    int first = 0;
    int step = 1;

    if (word >= 0) {
        first = ((word - l->dump_base) % BANK_PERIOD + BANK_PERIOD)
                % BANK_PERIOD;
        step = BANK_PERIOD;
    }
    for (int d = first; d + p * (l->in_rows - 1) < a->len; d += step) {
        int x = 0;
        while (x < l->in_rows && !a->used[d + p * x]) {
            x++;
        }
        if (x < l->in_rows) {
            continue;
        }
        for (x = 0; x < l->in_rows; x++) {
            a->used[d + p * x] = 1;
        }
        a->end = MAX_INT(a->end, d + p * (l->in_rows - 1) + 1);
        entry[0] = l->dump_base + d;
        entry[1] = p;
        return CS_OK;
    }
    return CS_ERR_INVALID; /* cannot happen: dump_area_len is the worst case */
}

/*
 * The lookup-table entries of one matrix (entry pair `which`: 0 for A, 1
 * for B), block by block of STORE_SPAN columns: real columns where the
 * layout puts them, dirty ones on the words the real ones leave free.
 */
static cs_status
fill_matrix_lut(cs_layout2d *l, int which, dump_area *a)
{
    int shift = which == 0 ? 0 : l->payload;

    for (int y0 = 0; y0 < l->in_cols; y0 += STORE_SPAN) {
        int y1 = MIN_INT(y0 + STORE_SPAN, l->in_cols);
        int is_dirty[STORE_SPAN];
        unsigned free_words = (1u << BANK_PERIOD) - 1;
        int words_ok = y1 - y0 == STORE_SPAN;

        for (int y = y0; y < y1; y++) {
            int *entry = l->lut + 4 * y + 2 * which;
            is_dirty[y - y0] = !real_column(l, y, shift, entry);
            if (!is_dirty[y - y0]) {
                unsigned bit = 1u << (entry[0] % BANK_PERIOD);
                words_ok = words_ok && (free_words & bit);
                free_words &= ~bit;
            }
        }
        for (int y = y0; y < y1; y++) {
            if (!is_dirty[y - y0]) {
                continue;
            }
            int word = -1;
            if (words_ok && free_words != 0) {
                word = __builtin_ctz(free_words);
                free_words &= free_words - 1;
            }
            cs_status st = dump_place(l, a, word, l->lut + 4 * y + 2 * which);
            if (st != CS_OK) {
                return st;
            }
        }
    }
    return CS_OK;
}

/* Both matrices' lookup tables and dump areas; sets matrix_size. */
static cs_status
fill_lut(cs_layout2d *l)
{
    dump_area a = {NULL, dump_area_len(l), 0};
    int end = 0;
    cs_status st = CS_OK;

    a.used = malloc((size_t)a.len);
    if (a.used == NULL) {
        return CS_ERR_NOMEM;
    }
    for (int which = 0; which < 2 && st == CS_OK; which++) {
        memset(a.used, 0, (size_t)a.len);
        a.end = 0;
        st = fill_matrix_lut(l, which, &a);
        end = MAX_INT(end, a.end);
    }
    free(a.used);
    end += l->dump_base;
    l->matrix_size = (end + BANK_PERIOD - 1) / BANK_PERIOD * BANK_PERIOD;
    return st;
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
    fill_weights(out, w, out->weight_a, out->weight_b);
    cs_status st = fill_lut(out);
    if (st != CS_OK) {
        cs_layout2d_free(out);
    }
    return st;
}

cs_status
cs_layout2d_weights(const cs_layout2d *layout, const double *w,
                    double *weight_a, double *weight_b)
{
    if (layout == NULL || w == NULL || weight_a == NULL || weight_b == NULL
        || layout->kpad < layout->kdim || layout->group < 1) {
        return CS_ERR_INVALID;
    }
    size_t wcount = (size_t)layout->kpad * (size_t)layout->group;
    memset(weight_a, 0, wcount * sizeof(double));
    memset(weight_b, 0, wcount * sizeof(double));
    fill_weights(layout, w, weight_a, weight_b);
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
