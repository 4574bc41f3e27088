/*
 * cpu_engine.c -- the direct CPU engine: `steps` correlations of a
 * float64 grid with a weight box, every step re-applying the boundary
 * mode, exactly as repeated scipy.ndimage.correlate calls.
 *
 * Every buffer the stencil reads is padded by the kernel radius r on each
 * side of each axis, so interiors are computed with no boundary branch:
 * a step fills the halo of its source from the mode (only halo cells; a
 * constant halo is written once per buffer) and computes the destination
 * from the non-zero taps, row by row, in register-blocked loops that the
 * compiler vectorizes.
 *
 * Rows are stored lane-split (a dimension-lifted transposition): a row of
 * H points is cut into LANES runs of M = ceil(H / LANES) points, and run
 * i fills lane i of M consecutive vectors.  A neighbour at x + dx is then
 * the same lane dx vectors away, so every tap loads whole aligned vectors
 * (unaligned loads of shifted x would split cache lines and halve the
 * throughput).  Each lane's r[2] halo vectors on either side repeat the
 * neighbouring lane's end cells, or hold the mode's values beyond the
 * grid edge; a short list of moves, the same for every row of a buffer,
 * refreshes them after each step.  Rows are transposed into this layout
 * when loaded and back when stored.
 *
 * A kernel that is x-separable, w = p (x) q with q along x (the box
 * presets), is applied as column sums of its rows weighted by p, then a
 * width-wide pass with q over those sums, in registers and L1: about one
 * FMA per row and vector plus width in all, instead of width per row
 * (49 -> about 19 per point for a 7x7 box).
 *
 * Two paths:
 *
 * "direct": small grids (they live in cache anyway) or shapes the blocked
 * path does not take.  Two padded ping-pong buffers hold the whole grid;
 * each step is shared by the OpenMP team.
 *
 * "direct-temporal-blocked": large grids, 3.5D blocking.  The grid is cut
 * into tiles: blocks along z, tiles along y and x.  A thread advances one
 * tile T steps at once, streaming through its z range: it loads a plane,
 * and as soon as a level t-1 plane and its neighbours exist it computes
 * the level t plane, keeping only a ring of 2*rz+1 planes per level in
 * cache; level T planes go back to the grid.  Tiles overlap: a tile reads
 * a margin of T*r beyond its output on each internal side, and what it
 * computes there (redundantly, shrinking by r per step) is discarded.  A
 * side on the real grid edge instead keeps its full extent and re-applies
 * the mode at every step, from the tile's own cells (tiles are planned
 * so that the cells the mode reads lie inside the tile).  Under "wrap" a
 * tiled axis, and the streaming axis always, have no edges at all: their
 * margins are loaded periodically.  A 2D grid {1, ny, nx} is handled as
 * {ny, 1, nx}, the same memory: it streams through rows.  A 1D grid has
 * a single plane per tile: plain overlapped tiling along x.
 *
 * cs_cpu_fix_bands replays single steps on edge strips (see stencil.h).
 */
#include "cpu_engine.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/*
 * The row kernel's register block: VECS vectors of LANES doubles.  With
 * AVX-512 that is eight zmm accumulators, with AVX2 eight ymm (of 16
 * registers): one broadcast weight feeds them all, and they stay in
 * registers across every tap.
 */
#define LANES 8
#ifdef __AVX512F__
#define VECS 8
#else
#define VECS 4
#endif
#define ROW_BLOCK (VECS * LANES)
#define ALIGN_BYTES (LANES * sizeof(double))

/*
 * Widest x factor the separable row kernel takes: its VECS + width - 1
 * column sums must stay in registers (32 zmm with AVX-512; with AVX2 a
 * vector is two of 16 ymm).
 */
#ifdef __AVX512F__
#define SEP_MAX_WIDTH 7
#else
#define SEP_MAX_WIDTH 3
#endif

/*
 * -std=c99 turns floating-point contraction off, so ask for the fused
 * multiply-add explicitly where the hardware has it (FP_FAST_FMA: fma()
 * is one instruction); elsewhere a plain multiply and add.
 */
#ifdef FP_FAST_FMA
#define MULADD(acc, w, x) fma((w), (x), (acc))
#else
#define MULADD(acc, w, x) ((acc) + (w) * (x))
#endif

/*
 * Cache budgets (bytes) for one thread's ring planes in the blocked path:
 * CS_CPU_L2_BYTES about its L2, CS_CPU_CACHE_BYTES the most it may use,
 * with its share of L3.  Measured on Zen 5 (2 MB L2 per core, 32 MB L3),
 * rings spilling into L3 run nearly as fast (COST_OUTER_CACHE), while an
 * extra pass costs a trip through memory: a budget that lets one pass do
 * ten steps beats a tighter one.  Grids up to CS_CPU_DIRECT_BYTES run
 * direct: they live in cache anyway.
 */
#ifndef CS_CPU_L2_BYTES
#define CS_CPU_L2_BYTES (1536 * 1024)
#endif
#ifndef CS_CPU_CACHE_BYTES
#define CS_CPU_CACHE_BYTES (6 * 1024 * 1024)
#endif
#ifndef CS_CPU_DIRECT_BYTES
#define CS_CPU_DIRECT_BYTES (2 * 1024 * 1024)
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

/* Point-taps per step below which one more thread costs more than it saves. */
#define MIN_WORK_PER_THREAD (1 << 16)

/* Fewest points per x segment when the direct path splits short grids. */
#define MIN_SEGMENT 512

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* Everything a run needs, read-only once built. */
typedef struct engine {
    ptrdiff_t n[3];          /* grid extents */
    ptrdiff_t r[3];          /* kernel radius per axis */
    ptrdiff_t lane_len;      /* M: points per lane of a lane-split row */
    ptrdiff_t stride[2];     /* plane and row strides of every buffer */
    cs_mode mode;
    double cval;
    int ntaps;
    double *w;               /* the non-zero weights, in kernel order */
    int *tz;                 /* plane of each tap in its window, 0..2*r[0] */
    int *ty;                 /* row of each tap in its plane, 0..2*r[1] */
    int *tx;                 /* point of each tap in its row, 0..2*r[2] */
    ptrdiff_t *toff;         /* offset in that plane from the window corner */
    int sep_width;           /* 0, or x-separable: see try_separable */
    double xw[SEP_MAX_WIDTH];    /* the x factor of a separable kernel */
} engine;

/*
 * The part of the grid a buffer holds, [lo, hi) per axis, plus r halo
 * cells per side.  An `edge` side lies on the real grid edge: its halo is
 * refilled from the mode.  Other sides are internal: nothing fills them,
 * and the valid region shrinks by r per step from them.
 */
typedef struct box {
    ptrdiff_t lo[3];
    ptrdiff_t hi[3];
    int edge_lo[3];
    int edge_hi[3];
} box;

/*
 * The x halo refresh of one row of a box, the same for every row: moves
 * row[dst[i]] = row[src[i]] (or cval where src[i] < 0), first the mode's
 * values beyond edges, then the lanes' halo vectors.  At most
 * ROW_HALO_MOVES(r) moves.
 */
typedef struct row_halo {
    int count;
    ptrdiff_t *dst;
    ptrdiff_t *src;
} row_halo;

#define ROW_HALO_MOVES(rx) (2 * (rx) + 2 * LANES * (rx))

/* ------------------------------------------------------------------ */
/* Threads                                                              */
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
thread_count(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

static void
team_barrier(void)
{
#ifdef _OPENMP
#pragma omp barrier
#endif
}

/* This thread's share [*begin, *end) of n items, in contiguous blocks. */
static void
thread_share(ptrdiff_t n, ptrdiff_t *begin, ptrdiff_t *end)
{
    ptrdiff_t id = thread_id();
    ptrdiff_t count = thread_count();
    *begin = n * id / count;
    *end = n * (id + 1) / count;
}

/* Threads to use: the request (or OpenMP's default), capped by the work. */
static int
choose_threads(int requested, double work)
{
    int nt = 1;
#ifdef _OPENMP
    nt = requested > 0 ? requested : omp_get_max_threads();
#else
    (void)requested;
#endif
    double useful = work / MIN_WORK_PER_THREAD;
    if (useful < nt) {
        nt = useful < 1.0 ? 1 : (int)useful;
    }
    return nt;
}

/* ------------------------------------------------------------------ */
/* The row kernel                                                       */
/* ------------------------------------------------------------------ */

/*
 * dst[0 .. ROW_BLOCK) = sum_t w[t] * tap[t][at .. at + ROW_BLOCK), for
 * t < ntaps, ntaps >= 1.  The fixed-size accumulator array is what lets the compiler
 * keep it in vector registers across the tap loop: one load and one FMA
 * per tap and vector.  The do-while matters: with a loop that might run
 * zero times, GCC merges the two paths through a stack copy of acc.
 */
static void
row_block(double *restrict dst, const double *const *restrict tap,
          ptrdiff_t at, const double *restrict w, int ntaps)
{
    double acc[VECS][LANES];
    for (int v = 0; v < VECS; v++) {
        for (int i = 0; i < LANES; i++) {
            acc[v][i] = 0.0;
        }
    }
    int t = 0;
    do {
        const double *restrict s = tap[t] + at;
        const double wt = w[t];
        for (int v = 0; v < VECS; v++) {
            for (int i = 0; i < LANES; i++) {
                acc[v][i] = MULADD(acc[v][i], wt, s[v * LANES + i]);
            }
        }
        t++;
    } while (t < ntaps);
    for (int v = 0; v < VECS; v++) {
        for (int i = 0; i < LANES; i++) {
            dst[v * LANES + i] = acc[v][i];
        }
    }
}

/* The same for one vector of LANES outputs: rows shorter than a block. */
static void
lane_block(double *restrict dst, const double *const *restrict tap,
           ptrdiff_t at, const double *restrict w, int ntaps)
{
    double acc[LANES];
    for (int i = 0; i < LANES; i++) {
        acc[i] = 0.0;
    }
    int t = 0;
    do {
        const double *restrict s = tap[t] + at;
        const double wt = w[t];
        for (int i = 0; i < LANES; i++) {
            acc[i] = MULADD(acc[i], wt, s[i]);
        }
        t++;
    } while (t < ntaps);
    for (int i = 0; i < LANES; i++) {
        dst[i] = acc[i];
    }
}

/*
 * col[j] = sum_t w[t] * tap[t][at + j] for the ncol vectors j: the
 * column sums of an x-separable kernel's rows.  ncol is a constant once
 * inlined, so the sums stay in registers across the taps.
 */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void
column_sums(double *restrict col, const double *const *restrict tap,
            ptrdiff_t at, const engine *e, const int ncol)
{
    double acc[VECS + SEP_MAX_WIDTH - 1][LANES];
    for (int j = 0; j < ncol; j++) {
        for (int i = 0; i < LANES; i++) {
            acc[j][i] = 0.0;
        }
    }
    int t = 0;
    do {
        const double *restrict s = tap[t] + at;
        const double wt = e->w[t];
        for (int j = 0; j < ncol; j++) {
            for (int i = 0; i < LANES; i++) {
                acc[j][i] = MULADD(acc[j][i], wt, s[j * LANES + i]);
            }
        }
        t++;
    } while (t < e->ntaps);
    for (int j = 0; j < ncol; j++) {
        for (int i = 0; i < LANES; i++) {
            col[j * LANES + i] = acc[j][i];
        }
    }
}

/*
 * The block kernels for an x-separable kernel w = p (x) q (see
 * try_separable): the taps are its rows, each with weight p and pointing
 * at the row's first point, and q is e->xw.  For nv output vectors (VECS
 * or 1), first the column sums of the nv + width - 1 vectors they read,
 * then dst[v] = sum_k q[k] * col[v + k] by the plain block kernel, from
 * L1: (nv + width - 1) / nv FMAs per row and vector, plus width, instead
 * of width per row.
 */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void
sep_block(double *restrict dst, const double *const *restrict tap,
          ptrdiff_t at, const engine *e, const int nv, const int width)
{
    double col[(VECS + SEP_MAX_WIDTH - 1) * LANES];
    const double *shifted[SEP_MAX_WIDTH];
    column_sums(col, tap, at, e, nv + width - 1);
    for (int k = 0; k < width; k++) {
        shifted[k] = col + k * LANES;
    }
    /* e->sep_width, not the constant: GCC would specialize the kernel
       for it and vectorize it across taps, with shuffles */
    if (nv == VECS) {
        row_block(dst, shifted, 0, e->xw, e->sep_width);
    }
    else {
        lane_block(dst, shifted, 0, e->xw, e->sep_width);
    }
}

/* row_apply for a separable kernel of x width `width` (a constant). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void
sep_row(double *restrict dst, const double *const *restrict tap,
        ptrdiff_t at, const engine *e, ptrdiff_t n, const int width)
{
    if (n >= ROW_BLOCK) {
        for (ptrdiff_t x = 0; x + ROW_BLOCK <= n; x += ROW_BLOCK) {
            sep_block(dst + x, tap, at + x, e, VECS, width);
        }
        if (n % ROW_BLOCK != 0) {
            sep_block(dst + n - ROW_BLOCK, tap, at + n - ROW_BLOCK, e,
                      VECS, width);
        }
    }
    else {
        for (ptrdiff_t x = 0; x < n; x += LANES) {
            sep_block(dst + x, tap, at + x, e, 1, width);
        }
    }
}

/* One instance per width the planner may choose (odd, <= SEP_MAX_WIDTH). */
static void
sep_apply(double *restrict dst, const double *const *restrict tap,
          ptrdiff_t at, const engine *e, ptrdiff_t n)
{
    switch (e->sep_width) {
    case 3:
        sep_row(dst, tap, at, e, n, 3);
        break;
#if SEP_MAX_WIDTH >= 5
    case 5:
        sep_row(dst, tap, at, e, n, 5);
        break;
#endif
#if SEP_MAX_WIDTH >= 7
    case 7:
        sep_row(dst, tap, at, e, n, 7);
        break;
#endif
    default:
        break;    /* try_separable takes no other width */
    }
}

/*
 * n outputs of one row, dst[x] = sum_t w[t] * tap[t][at + x], n a
 * multiple of LANES (lane-split rows are whole vectors).  A ragged end is
 * covered by one more block flush with the row's end, overlapping the
 * previous one: it rewrites a few outputs with the same values (same
 * taps, same order), which is cheaper than a narrower tail loop.
 */
static void
row_apply(double *restrict dst, const double *const *restrict tap,
          ptrdiff_t at, const engine *e, ptrdiff_t n)
{
    if (e->ntaps == 0) {
        /* every weight is zero */
        for (ptrdiff_t x = 0; x < n; x++) {
            dst[x] = 0.0;
        }
    }
    else if (e->sep_width > 0) {
        sep_apply(dst, tap, at, e, n);
    }
    else if (n >= ROW_BLOCK) {
        for (ptrdiff_t x = 0; x + ROW_BLOCK <= n; x += ROW_BLOCK) {
            row_block(dst + x, tap, at + x, e->w, e->ntaps);
        }
        if (n % ROW_BLOCK != 0) {
            row_block(dst + n - ROW_BLOCK, tap, at + n - ROW_BLOCK, e->w,
                      e->ntaps);
        }
    }
    else {
        for (ptrdiff_t x = 0; x < n; x += LANES) {
            lane_block(dst + x, tap, at + x, e->w, e->ntaps);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Buffers: lane-split rows                                             */
/* ------------------------------------------------------------------ */

/* raw rounded up to a vector boundary (raw has LANES spare elements). */
static double *
align_up(double *raw)
{
    size_t pad = (ALIGN_BYTES - (uintptr_t)raw % ALIGN_BYTES) % ALIGN_BYTES;
    return (double *)(void *)((char *)raw + pad);
}

/* Offset of row y of box b in a plane. */
static ptrdiff_t
row_offset(const engine *e, const box *b, ptrdiff_t y)
{
    return (y - b->lo[1] + e->r[1]) * e->stride[1];
}

/* Offset in a row of cell p of lane `lane`; p < 0 or >= M is halo. */
static ptrdiff_t
lane_pos(const engine *e, ptrdiff_t lane, ptrdiff_t p)
{
    return (p + e->r[2]) * LANES + lane;
}

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

/* Offset, from a window's corner, of the output cell it computes. */
static ptrdiff_t
corner_offset(const engine *e)
{
    return e->r[1] * e->stride[1] + e->r[2] * LANES;
}

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
static void
lanes_to_row(const engine *e, const box *b, const double *row, double *dst,
             ptrdiff_t x0, ptrdiff_t x1)
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
static void
load_plane(const engine *e, const box *b, const double *g, ptrdiff_t z,
           double *plane, double *scratch)
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

/* Store the rows of sub-box `part` in plane z of box b into grid g. */
static void
store_plane(const engine *e, const box *b, const box *part,
            const double *plane, ptrdiff_t z, double *g)
{
    for (ptrdiff_t y = part->lo[1]; y < part->hi[1]; y++) {
        lanes_to_row(e, b, plane + row_offset(e, b, y),
                     g + (z * e->n[1] + y) * e->n[2], part->lo[2],
                     part->hi[2]);
    }
}

/* ------------------------------------------------------------------ */
/* Halo                                                                 */
/* ------------------------------------------------------------------ */

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
static void
row_halo_build(const engine *e, const box *b, row_halo *h)
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
static void
fill_line(const engine *e, const box *b, double *base, int axis)
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
static void
fill_plane_halo(const engine *e, const box *b, const row_halo *h,
                double *plane, ptrdiff_t y0, ptrdiff_t y1, int x_only)
{
    if (h->count > 0) {
        for (ptrdiff_t y = y0; y < y1; y++) {
            row_halo_apply(e, h, plane + row_offset(e, b, y));
        }
    }
    if (!x_only && e->r[1] > 0) {
        fill_line(e, b, plane, 1);
    }
}

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

/* FMAs per output point and step of the row kernel. */
static double
taps_per_point(const engine *e)
{
    if (e->sep_width > 0) {
        return e->ntaps * (VECS + e->sep_width - 1.0) / VECS
               + e->sep_width;
    }
    return MAX(e->ntaps, 1);
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
    ptrdiff_t big = 0;
    for (ptrdiff_t i = 0; i < count; i++) {
        if (fabs(weights[i]) > fabs(weights[big])) {
            big = i;
        }
    }
    ptrdiff_t rows = count / sx;
    double direct = (double)VECS * e->ntaps;
    if (sx < 3 || sx > SEP_MAX_WIDTH || weights[big] == 0.0) {
        return;
    }
    const double *pivot = weights + big / sx * sx;
    double q[SEP_MAX_WIDTH];
    for (ptrdiff_t x = 0; x < sx; x++) {
        q[x] = pivot[x] / pivot[big % sx];
        if (q[x] == 0.0) {
            return;
        }
    }
    int nrows = 0;
    for (ptrdiff_t i = 0; i < rows; i++) {
        double p = weights[i * sx + big % sx];
        for (ptrdiff_t x = 0; x < sx; x++) {
            double w = weights[i * sx + x];
            if (fabs(p * q[x] - w) > 4.0 * DBL_EPSILON * fabs(w)) {
                return;
            }
        }
        nrows += (p != 0.0);
    }
    if ((double)nrows * (VECS + sx - 1) + (double)VECS * sx >= direct) {
        return;    /* no FMAs saved: short rows or few of them */
    }
    int t = 0;
    for (ptrdiff_t i = 0; i < rows; i++) {
        double p = weights[i * sx + big % sx];
        if (p != 0.0) {
            e->w[t] = p;
            e->tz[t] = (int)(i / sy);
            e->ty[t] = (int)(i % sy);
            e->tx[t] = 0;
            t++;
        }
    }
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

static cs_status
check_args(const double *in, const double *out, const ptrdiff_t shape[3],
           const cs_kernel *k, cs_mode mode, long steps)
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
/* Direct path: the whole grid in two padded buffers                    */
/* ------------------------------------------------------------------ */

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
                 double *buf, int x_only)
{
    ptrdiff_t z0, z1;
    thread_share(b->hi[0] - b->lo[0], &z0, &z1);
    for (ptrdiff_t z = b->lo[0] + z0; z < b->lo[0] + z1; z++) {
        fill_plane_halo(e, b, h, direct_plane(e, b, buf, z), b->lo[1],
                        b->hi[1], x_only);
    }
    team_barrier();
    if (!x_only && e->r[0] > 0) {
        if (thread_id() == 0) {
            fill_line(e, b, buf, 0);
        }
        team_barrier();
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
        row_apply(direct_plane(e, b, dst, z) + at, tap,
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
static cs_status
run_direct(const engine *e, const double *in, double *out, long steps,
           int nt, const cs_interrupt *intr)
{
    size_t size = (size_t)((e->n[0] + 2 * e->r[0]) * e->stride[0] + LANES);
    size_t moves = (size_t)MAX(ROW_HALO_MOVES(e->r[2]), 1);
    /* zeroed: cells no step writes (lane padding) stay finite */
    double *raw_a = calloc(size, sizeof(double));
    double *raw_b = calloc(size, sizeof(double));
    const double **taps = malloc((size_t)nt * (size_t)MAX(e->ntaps, 1)
                                 * sizeof(*taps));
    ptrdiff_t *halo_moves = malloc(2 * moves * sizeof(ptrdiff_t));
    if (raw_a == NULL || raw_b == NULL || taps == NULL
        || halo_moves == NULL) {
        free(raw_a);
        free(raw_b);
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
    row_halo_build(e, &whole, &h);
    /* a constant halo beyond y and z is never overwritten: fill it once */
    const int constant = (e->mode == CS_MODE_CONSTANT);
    long stop_after = -1; /* the step after which every thread stops */

#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        double *src = align_up(raw_a);
        double *dst = align_up(raw_b);
        const double **tap = taps + (size_t)thread_id() * MAX(e->ntaps, 1);
        ptrdiff_t z0, z1;
        thread_share(e->n[0], &z0, &z1);
        for (ptrdiff_t z = z0; z < z1; z++) {
            load_plane(e, &whole, in, z, direct_plane(e, &whole, src, z),
                       NULL);
        }
        team_barrier();
        if (constant) {
            direct_fill_halo(e, &whole, &h, dst, 0);
        }
        ptrdiff_t nseg = segments_per_row(e, &whole, thread_count());
        ptrdiff_t u0, u1;
        thread_share(e->n[0] * e->n[1] * nseg, &u0, &u1);
        for (long s = 0; s < steps; s++) {
            direct_fill_halo(e, &whole, &h, src, constant && s > 0);
            direct_units(e, &whole, src, dst, tap, nseg, u0, u1);
            if (thread_id() == 0 && s + 1 < steps
                && cs_interrupt_requested(intr, s + 1)) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
                stop_after = s;
            }
            team_barrier();
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
    free(raw_a);
    free(raw_b);
    free(taps);
    free(halo_moves);
    return stop_after < 0 ? CS_OK : CS_ERR_INTERRUPTED;
}

/* ------------------------------------------------------------------ */
/* Blocked path: tiles streamed through z, T steps per pass             */
/* ------------------------------------------------------------------ */

typedef struct tiling {
    int depth;              /* T: steps per pass */
    ptrdiff_t tile[3];      /* output extent of a tile per axis */
    ptrdiff_t count[3];     /* tiles per axis */
} tiling;

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
static ptrdiff_t
tile_held(const engine *e, const tiling *tl, int a)
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
    double row = (double)(CEIL_DIV(tile_held(e, tl, 2), LANES) + 2 * e->r[2])
                 * LANES;
    double plane = row * (double)(tile_held(e, tl, 1) + 2 * e->r[1]);
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
                         / (double)(tile_held(e, tl, 1) + 2 * e->r[1]);
        ptrdiff_t rows = (ptrdiff_t)(budget / per_row);
        ptrdiff_t most = rows - 2 * ((ptrdiff_t)tl->depth + 1) * e->r[1];
        /* y stays whole where it cannot be split */
        split_axis(e, tl, 1, MAX(most, tile_min(e, 1, tl->depth)));
    }
    if (ring_bytes(e, tl) > budget) {
        double per_point = ring_bytes(e, tl)
                           / (double)(tile_held(e, tl, 2) + 2 * e->r[2]);
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
 * Estimated cost of `steps` steps with this tiling, per grid point, in
 * taps: the work including the redundant margins, the memory traffic of
 * the passes (load with margins, store, write-allocate), and the fresh
 * temporary grid that more than one pass needs.
 */
static double
tiling_cost(const engine *e, const tiling *tl, long steps)
{
    double redundant = 1.0;
    double loaded = 1.0;
    for (int a = 0; a < 3; a++) {
        double held = (double)tile_held(e, tl, a);
        double out = (double)tl->tile[a];
        double shrink = (held - out) / 2.0 / tl->depth;   /* r or 0 */
        /* rows are computed whole: x margins cost every step */
        redundant *= a == 2 ? held / out
                            : (out + (tl->depth - 1) * shrink) / out;
        loaded *= held / out;
    }
    long passes = CEIL_DIV(steps, (long)tl->depth);
    double cost = (double)steps * taps_per_point(e) * redundant;
    if (ring_bytes(e, tl) > CS_CPU_L2_BYTES) {
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
static int
plan_tiling(const engine *e, long steps, int nt, tiling *best)
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
        row_apply(dst + at, ws->tap, at - corner_offset(e), e,
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
    row_halo_build(e, &b, &ws->halo);
    /* a constant halo beyond y is never overwritten: fill it once */
    const int constant = (e->mode == CS_MODE_CONSTANT);
    const ptrdiff_t rz = e->r[0];

    if (constant) {
        for (ptrdiff_t s = 0; s < (depth + 1) * ring_size(e); s++) {
            fill_line(e, &b, ws->planes + s * e->stride[0], 1);
        }
    }
    for (ptrdiff_t f = b.lo[0]; f < b.hi[0] + depth * rz; f++) {
        if (f < b.hi[0]) {
            double *plane = ring_plane(e, ws, 0, f);
            load_plane(e, &b, g_src, f, plane, ws->scratch);
            fill_plane_halo(e, &b, &ws->halo, plane, b.lo[1], b.hi[1],
                            constant);
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
                fill_plane_halo(e, &b, &ws->halo, plane, c.lo[1], c.hi[1],
                                constant);
            }
            else if (z >= part.lo[0] && z < part.hi[0]) {
                store_plane(e, &b, &part, plane, z, g_dst);
            }
        }
    }
}

/*
 * Blocked path: passes of tl->depth steps over the tiles.  Before each
 * pass but the first, thread 0 (the caller's) polls `intr` and a barrier
 * publishes its answer, so every thread leaves at the same pass.
 */
static cs_status
run_blocked(const engine *e, const tiling *tl, const double *in,
            double *out, long steps, int nt, const cs_interrupt *intr)
{
    size_t npoints = (size_t)(e->n[0] * e->n[1] * e->n[2]);
    ptrdiff_t ntiles = tl->count[0] * tl->count[1] * tl->count[2];
    long passes = CEIL_DIV(steps, (long)tl->depth);
    size_t per_thread = (size_t)((tl->depth + 1) * ring_size(e)
                                 * e->stride[0] + LANES);
    size_t ntaps = (size_t)MAX(e->ntaps, 1);
    size_t moves = (size_t)MAX(ROW_HALO_MOVES(e->r[2]), 1);
    size_t row = (size_t)tile_held(e, tl, 2);
    int need_grid = (passes > 1 || in == out);
    double *grid = need_grid ? malloc(npoints * sizeof(double)) : NULL;
    /* zeroed: cells no step writes (lane padding) stay finite */
    double *local = calloc((size_t)nt * per_thread, sizeof(double));
    double *scratch = malloc((size_t)nt * row * sizeof(double));
    const double **taps = malloc((size_t)nt * ntaps * sizeof(*taps));
    ptrdiff_t *halo_moves = malloc((size_t)nt * 2 * moves
                                   * sizeof(ptrdiff_t));
    if ((need_grid && grid == NULL) || local == NULL || scratch == NULL
        || taps == NULL || halo_moves == NULL) {
        free(grid);
        free(local);
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
    int stop = 0;

#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
#endif
    {
        size_t id = (size_t)thread_id();
        workspace ws;
        ws.planes = align_up(local + id * per_thread);
        ws.tap = taps + id * ntaps;
        ws.halo.count = 0;
        ws.halo.dst = halo_moves + id * 2 * moves;
        ws.halo.src = ws.halo.dst + moves;
        ws.scratch = scratch + id * row;
        for (long p = 0; p < passes; p++) {
            if (p > 0) {
                if (thread_id() == 0) {
                    stop = cs_interrupt_requested(intr, p * tl->depth);
                }
                team_barrier();
                if (stop) {
                    break;
                }
            }
            int depth = (int)MIN((long)tl->depth, steps - p * tl->depth);
            double *g_dst = ((passes - 1 - p) % 2 == 0) ? out : grid;
            const double *g_src = (p == 0) ? first
                                  : (g_dst == out ? grid : out);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (ptrdiff_t i = 0; i < ntiles; i++) {
                run_tile(e, tl, i, depth, g_src, g_dst, &ws);
            }
        }
    }
    free(grid);
    free(local);
    free(scratch);
    free(taps);
    free(halo_moves);
    return stop ? CS_ERR_INTERRUPTED : CS_OK;
}

/* ------------------------------------------------------------------ */
/* Public API                                                           */
/* ------------------------------------------------------------------ */

cs_status
cs_cpu_apply(const double *in, double *out, const ptrdiff_t shape[3],
             const cs_kernel *kernel, cs_mode mode, double cval, long steps,
             int num_threads, cs_run_info *info, const cs_interrupt *intr)
{
    cs_status st = check_args(in, out, shape, kernel, mode, steps);
    if (st != CS_OK) {
        return st;
    }
    size_t npoints = (size_t)(shape[0] * shape[1] * shape[2]);
    const char *path = "direct";
    int nt = 1;
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
        nt = choose_threads(num_threads,
                            (double)npoints * taps_per_point(&e));
        tiling tl;
        if (npoints * sizeof(double) > CS_CPU_DIRECT_BYTES
            && plan_tiling(&e, steps, nt, &tl)) {
            engine_layout(&e, tile_held(&e, &tl, 1),
                          tile_held(&e, &tl, 2));
            st = run_blocked(&e, &tl, in, out, steps, nt, intr);
            path = "direct-temporal-blocked";
        }
        else {
            engine_layout(&e, e.n[1], e.n[2]);
            st = run_direct(&e, in, out, steps, nt, intr);
        }
        engine_free(&e);
    }
    if (st == CS_OK && info != NULL) {
        /* the fusion fields belong to the caller, who planned the passes */
        info->backend = "cpu";
        info->path = path;
        info->threads = nt;
    }
    return st;
}

/* Copy the box [slo, slo + ext) of grid src (extents sn) to dst at dlo. */
static void
copy_box(double *dst, const ptrdiff_t dn[3], const ptrdiff_t dlo[3],
         const double *src, const ptrdiff_t sn[3], const ptrdiff_t slo[3],
         const ptrdiff_t ext[3])
{
    for (ptrdiff_t z = 0; z < ext[0]; z++) {
        for (ptrdiff_t y = 0; y < ext[1]; y++) {
            double *d = dst + ((dlo[0] + z) * dn[1] + dlo[1] + y) * dn[2]
                        + dlo[2];
            const double *s = src + ((slo[0] + z) * sn[1] + slo[1] + y)
                                    * sn[2] + slo[2];
            memcpy(d, s, (size_t)ext[2] * sizeof(double));
        }
    }
}

cs_status
cs_cpu_fix_bands(const double *in, double *out, const ptrdiff_t shape[3],
                 const cs_kernel *kernel, const cs_fusion_plan *plan,
                 cs_mode mode, double cval, int num_threads)
{
    cs_status st = check_args(in, out, shape, kernel, mode, 0);
    if (st != CS_OK || plan == NULL) {
        return st != CS_OK ? st : CS_ERR_INVALID;
    }
    if (!plan->needs_band) {
        return CS_OK;
    }
    /* one scratch strip, as large as the largest one */
    size_t most = 0;
    for (int a = 0; a < 3; a++) {
        if (plan->band[a] <= 0) {
            continue;
        }
        if (plan->strip[a] > shape[a] || plan->band[a] > plan->strip[a]) {
            return CS_ERR_INVALID;
        }
        size_t size = (size_t)plan->strip[a];
        for (int b = 0; b < 3; b++) {
            size *= (size_t)(b == a ? 1 : shape[b]);
        }
        most = MAX(most, size);
    }
    double *strip = malloc(MAX(most, (size_t)1) * sizeof(double));
    if (strip == NULL) {
        return CS_ERR_NOMEM;
    }
    static const ptrdiff_t origin[3] = {0, 0, 0};
    for (int a = 0; a < 3 && st == CS_OK; a++) {
        if (plan->band[a] <= 0) {
            continue;
        }
        ptrdiff_t sshape[3] = {shape[0], shape[1], shape[2]};
        sshape[a] = plan->strip[a];
        for (int side = 0; side < 2 && st == CS_OK; side++) {
            /*
             * The strip's inner edge is artificial, but what it corrupts
             * travels depth*r inwards and never reaches the band.
             */
            ptrdiff_t glo[3] = {0, 0, 0};
            glo[a] = side == 0 ? 0 : shape[a] - plan->strip[a];
            copy_box(strip, sshape, origin, in, shape, glo, sshape);
            st = cs_cpu_apply(strip, strip, sshape, kernel, mode, cval,
                              plan->depth, num_threads, NULL, NULL);
            if (st != CS_OK) {
                break;
            }
            ptrdiff_t ext[3] = {shape[0], shape[1], shape[2]};
            ptrdiff_t slo[3] = {0, 0, 0};
            ptrdiff_t olo[3] = {0, 0, 0};
            ext[a] = plan->band[a];
            slo[a] = side == 0 ? 0 : plan->strip[a] - plan->band[a];
            olo[a] = side == 0 ? 0 : shape[a] - plan->band[a];
            copy_box(out, shape, olo, strip, sshape, slo, ext);
        }
    }
    free(strip);
    return st;
}
