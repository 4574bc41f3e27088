/*
 * row_kernels.c -- the inner loops: every output of the engine is
 * computed here, one lane-split row at a time (lanes.c says why rows are
 * lane-split), from the non-zero taps, in register-blocked loops that
 * the compiler vectorizes.
 *
 * A kernel that is x-separable, w = p (x) q with q along x (the box
 * presets), is applied as column sums of its rows weighted by p, then a
 * width-wide pass with q over those sums, in registers and L1: about one
 * FMA per row and vector plus width in all, instead of width per row
 * (49 -> about 19 per point for a 7x7 box).
 *
 * These functions inline into one another and must stay in one file;
 * only cs_cpu_row_apply, called once per row by both paths, is shared.
 */
#include "cpu_private.h"

#include <math.h>

/*
 * What every caller guarantees, told to the compiler: n is a multiple of
 * LANES.  When the callers shared this file, GCC found it at every call
 * (interprocedural known bits); without it cs_cpu_row_apply and sep_apply
 * compile to other loop exits and register use.
 */
#if defined(__GNUC__)
#define CS_ASSUME(cond) \
    do { \
        if (!(cond)) { \
            __builtin_unreachable(); \
        } \
    } while (0)
#else
#define CS_ASSUME(cond) ((void)0)
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
    CS_ASSUME((n & (LANES - 1)) == 0);
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
void
cs_cpu_row_apply(double *restrict dst, const double *const *restrict tap,
                 ptrdiff_t at, const engine *e, ptrdiff_t n)
{
    CS_ASSUME((n & (LANES - 1)) == 0);
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
