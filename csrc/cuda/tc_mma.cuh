/*
 * tc_mma.cuh -- the two warp-level primitives of the tensor-core
 * kernels: the FP64 m16n8k4 MMA and the 16-byte store of two outputs.
 */
#ifndef CS_CUDA_TC_MMA_CUH
#define CS_CUDA_TC_MMA_CUH

#include <stddef.h>

/*
 * D += A * B on one 16 x 8 x 4 FP64 tile (warp-wide).  Fragments (PTX
 * ISA), with gq = lane / 4 and kq = lane % 4: a0 = A[gq][kq],
 * a1 = A[gq + 8][kq]; b0 = B[kq][gq]; d0, d1 = D[gq][2kq, 2kq + 1];
 * d2, d3 = D[gq + 8][2kq, 2kq + 1].
 */
static __device__ __forceinline__ void
cs_dmma_16x8x4(double (&d)[4], double a0, double a1, double b0)
{
#if defined(CS_CUDA_EMULATION)
    /* the CPU harness that checks these kernels supplies the warp MMA */
    cs_emu_dmma_16x8x4(d, a0, a1, b0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    /* an image for an older GPU (sm_80) has no FP64 m16n8k4: the planner
       never picks the tensor-core path there (plan.c, choose_path) */
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 "
        "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a0), "d"(a1), "d"(b0));
#endif
}

/*
 * Store outputs j, j+1 of a row (j even, row 16-byte aligned) as one
 * 16-byte store, or j alone at the row's end.  PTX, because the compiler
 * splits a double2 assignment here into two 8-byte stores.
 */
static __device__ __forceinline__ void
cs_store_pair(double *row, ptrdiff_t j, ptrdiff_t nx, double c0, double c1)
{
    if (j + 1 < nx) {
#if defined(CS_CUDA_EMULATION)
        row[j] = c0;
        row[j + 1] = c1;
#else
        asm volatile("st.global.v2.f64 [%0], {%1, %2};\n"
                     :
                     : "l"(row + j), "d"(c0), "d"(c1)
                     : "memory");
#endif
    } else if (j < nx) {
        row[j] = c0;
    }
}

#endif /* CS_CUDA_TC_MMA_CUH */
