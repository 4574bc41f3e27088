/*
 * extend_index.cuh -- scipy.ndimage's boundary index mapping on the
 * device: cs_extend_index of stencil.c, ported for the kernels that fill
 * halos (halo.cu) and replay edge bands (fold1d.cu).
 */
#ifndef CS_CUDA_EXTEND_INDEX_CUH
#define CS_CUDA_EXTEND_INDEX_CUH

#include <stddef.h>

#include "../stencil.h"

static __device__ __forceinline__ ptrdiff_t
positive_mod(ptrdiff_t i, ptrdiff_t m)
{
    ptrdiff_t r = i % m;
    return r < 0 ? r + m : r;
}

/* cs_extend_index for i outside [0, n) and a mode other than constant. */
static __device__ ptrdiff_t
extend_index(ptrdiff_t i, ptrdiff_t n, int mode)
{
    if (i >= 0 && i < n) {
        return i;
    }
    switch (mode) {
    case CS_MODE_WRAP:
        return positive_mod(i, n);
    case CS_MODE_NEAREST:
        return i < 0 ? 0 : n - 1;
    case CS_MODE_REFLECT: {
        ptrdiff_t m = positive_mod(i, 2 * n); /* a b c d | d c b a */
        return m < n ? m : 2 * n - 1 - m;
    }
    case CS_MODE_MIRROR: {
        if (n == 1) {
            return 0;
        }
        ptrdiff_t m = positive_mod(i, 2 * n - 2); /* a b c d | c b */
        return m < n ? m : 2 * n - 2 - m;
    }
    default:
        return 0; /* constant never maps (the launcher checks the mode) */
    }
}

#endif /* CS_CUDA_EXTEND_INDEX_CUH */
