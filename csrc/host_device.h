/*
 * host_device.h -- small functions that the C engines and the CUDA
 * kernels share, written once: scipy.ndimage's boundary index map and
 * the tests that classify a kernel's tap set (plus, diamond, outer
 * product), with the outer product's factors.
 *
 * Under nvcc they compile for host and device alike (CS_HOST_DEVICE, the
 * idiom of CUTLASS_HOST_DEVICE); under a C compiler they are plain
 * static inline functions.  Included by stencil.h, after the types they
 * use.
 */
#ifndef CS_HOST_DEVICE_H
#define CS_HOST_DEVICE_H

#include <float.h>
#include <stddef.h>

#if defined(__CUDACC__)
#define CS_HOST_DEVICE static __host__ __device__ __forceinline__
#else
#define CS_HOST_DEVICE static inline
#endif

/* i mod m in [0, m), for m >= 1 and any sign of i. */
CS_HOST_DEVICE ptrdiff_t
cs_positive_mod(ptrdiff_t i, ptrdiff_t m)
{
    ptrdiff_t r = i % m;
    return r < 0 ? r + m : r;
}

/*
 * Map an index i (possibly outside [0, n)) to the grid index it reads
 * under `mode`, for n >= 1.  Returns -1 for CS_MODE_CONSTANT when i is
 * outside the grid (the caller reads cval).  Handles |i| much larger
 * than n the way SciPy does (repeated wrapping or reflection).
 */
CS_HOST_DEVICE ptrdiff_t
cs_extend_index(ptrdiff_t i, ptrdiff_t n, cs_mode mode)
{
    if (i >= 0 && i < n) {
        return i;
    }
    switch (mode) {
    case CS_MODE_WRAP:
        return cs_positive_mod(i, n);
    case CS_MODE_NEAREST:
        return i < 0 ? 0 : n - 1;
    case CS_MODE_REFLECT: {
        /* period 2n: a b c d | d c b a */
        ptrdiff_t m = cs_positive_mod(i, 2 * n);
        return m < n ? m : 2 * n - 1 - m;
    }
    case CS_MODE_MIRROR: {
        /* period 2n - 2: a b c d | c b */
        if (n == 1) {
            return 0;
        }
        ptrdiff_t m = cs_positive_mod(i, 2 * n - 2);
        return m < n ? m : 2 * n - 2 - m;
    }
    default:
        return -1; /* constant: outside the grid reads cval */
    }
}

CS_HOST_DEVICE int
cs_abs_int(int v)
{
    return v < 0 ? -v : v;
}

/* Whether every nonzero weight of the k x k weights w lies on the centre
   row or the centre column (a plus: star2d13p). */
CS_HOST_DEVICE int
cs_taps_plus(int k, const double *w)
{
    const int r = (k - 1) / 2;
    for (int dy = 0; dy < k; dy++) {
        for (int dx = 0; dx < k; dx++) {
            if (dy != r && dx != r && w[dy * k + dx] != 0.0) {
                return 0;
            }
        }
    }
    return 1;
}

/* Whether every nonzero weight of the k x k x k weights w lies within
   |dz| + |dy| + |dx| <= r of the centre (a diamond: the 7-point star). */
CS_HOST_DEVICE int
cs_taps_diamond(int k, const double *w)
{
    const int r = (k - 1) / 2;
    for (int dz = 0; dz < k; dz++) {
        for (int dy = 0; dy < k; dy++) {
            for (int dx = 0; dx < k; dx++) {
                const int d = cs_abs_int(dz - r) + cs_abs_int(dy - r)
                              + cs_abs_int(dx - r);
                if (d > r && w[(dz * k + dy) * k + dx] != 0.0) {
                    return 0;
                }
            }
        }
    }
    return 1;
}

/*
 * The factors of the rows x cols weights w (C order) as an outer product
 * w[y][x] = col[y] * row[x]: col is w's column through its largest
 * weight, row that weight's row divided by it.  Returns 1 when the
 * factors give every weight to within 4 ulp (the order of the rounding
 * of the sum itself) and every zero exactly; 0 otherwise, for an
 * all-zero w, or when a weight is NaN.  col and row hold rows and cols
 * doubles.
 */
CS_HOST_DEVICE int
cs_outer_factors(int rows, int cols, const double *w, double *col,
                 double *row)
{
    int top = 0;
    for (int e = 1; e < rows * cols; e++) {
        if (!(w[e] == w[e])) {
            return 0; /* NaN */
        }
        if ((w[e] < 0 ? -w[e] : w[e]) > (w[top] < 0 ? -w[top] : w[top])) {
            top = e;
        }
    }
    const double big = w[top];
    if (!(big != 0.0) || !(big == big)) {
        return 0;
    }
    const int ty = top / cols, tx = top % cols;
    for (int y = 0; y < rows; y++) {
        col[y] = w[y * cols + tx];
    }
    for (int x = 0; x < cols; x++) {
        row[x] = w[ty * cols + x] / big;
    }
    for (int y = 0; y < rows; y++) {
        for (int x = 0; x < cols; x++) {
            const double want = w[y * cols + x];
            const double got = col[y] * row[x];
            const double err = got - want;
            const double tol = 4 * DBL_EPSILON * (want < 0 ? -want : want);
            if (!((err < 0 ? -err : err) <= tol)) {
                return 0;
            }
        }
    }
    return 1;
}

#endif /* CS_HOST_DEVICE_H */
