/*
 * tc_tile.cuh -- the device code the tensor-core kernels share (tc2d.cu,
 * tc3d.cu): the tile geometry, the m16n8k4 DMMA, the loader that builds
 * one plane's stencil2row tile in shared memory through the host-built
 * lookup table, the MMA loop of the dual tessellation, and the store.
 * tc2d.cu's top comment describes the tile, the loader, the operand rows
 * and the shared-memory bank plan; this file cuts that kernel into
 * inline functions that tc3d.cu reuses.  They take scalars and the
 * kernel's parameter struct, not structs of their own, and tc2d keeps
 * its statements in their order: its machine code is byte for byte what
 * it was when written out in one function (checked by comparing the
 * cubins' .text sections).  Structs passed between the pieces, copies of
 * parameters passed by value, or a && on parameters inside a piece each
 * perturb the register allocation.
 *
 * One block (TC_THREADS threads) covers TC_TR output rows x TC_COLS
 * output columns of one plane; the layout (csrc/layout.h) has P = 7,
 * G = 8, 16 column groups and TC_TR rows, checked on the host by
 * cs_cuda_tc2d_check_layout.
 */
#ifndef CS_CUDA_TC_TILE_CUH
#define CS_CUDA_TC_TILE_CUH

#include "kernels.cuh"
#include "tc_mma.cuh"

#define TC_THREADS 256
#define TC_WARPS (TC_THREADS / 32)
#define TC_P 7                    /* kernel payload columns */
#define TC_G 8                    /* outputs per column group */
#define TC_TR CS_TC2D_TILE_ROWS   /* output rows per tile */
#define TC_COLS (CS_TC2D_GROUPS * TC_G)  /* 128 output columns per tile */
#define TC_IN_COLS (TC_COLS + TC_P - 1)  /* 134 input columns per tile */
#define TC_ROWS_PER_WARP (TC_TR / TC_WARPS)

static_assert(TC_TR % TC_WARPS == 0, "tile rows must split among warps");
static_assert(TC_TR % 2 == 0, "the loader splits rows into two halves");
static_assert((TC_IN_COLS - TC_COLS) * (TC_TR + 6) <= TC_THREADS,
              "one element of the extra columns per thread");

/* k-steps of 4 for a kernel of ky rows: kpad / 4 with kpad = 7 ky
   rounded up to 4 (2, 6, 9 or 13) */
#define TC_KSTEPS(ky) ((TC_P * (ky) + 3) / 4)

/*
 * x, with its value hidden from the optimizer: what a loop computes from
 * it is recomputed in the loop rather than hoisted out and kept in
 * registers for every iteration (a few integer operations, against the
 * spills the hoisted copies cause).
 */
static __device__ __forceinline__ ptrdiff_t
tc_opaque(ptrdiff_t x)
{
#if !defined(CS_CUDA_EMULATION)
    asm volatile("" : "+l"(x));
#endif
    return x;
}

/* ------------------------------------------------------------------------
 * weight fragments: b0 = W[4s + kq][gq] of a kpad x 8 weight matrix
 * --------------------------------------------------------------------- */

template <int KSTEPS>
static __device__ __forceinline__ void
tc_load_fragments(double (&fa)[KSTEPS], double (&fb)[KSTEPS],
                  const double *wa, const double *wb, int gq, int kq)
{
#pragma unroll
    for (int s = 0; s < KSTEPS; s++) {
        fa[s] = __ldg(wa + (4 * s + kq) * TC_G + gq);
        fb[s] = __ldg(wb + (4 * s + kq) * TC_G + gq);
    }
}

/* ------------------------------------------------------------------------
 * the tile loader: one plane's input tile into sA / sB through the LUT
 *
 * Thread t owns tile column col = t % TC_COLS for the tile rows
 * half = t / TC_COLS, half + 2, ... (a warp reads 32 consecutive doubles
 * of a row), plus, for t < EXTRA_COLS * in_rows, one element (ex, ey) of
 * the columns past TC_COLS.  Its lookup-table entries {offA, strideA,
 * offB, strideB} of both columns stay in registers.  The kernel computes
 * these indices (a few lines, kept in the kernel so that its statements
 * keep their order); the functions below do the loads and stores.
 *
 * P is the kernel's parameter struct: the functions read its fields
 * in, in_pitch, in_plane, lim_y, lim_x, ld (and out, out_pitch,
 * out_plane, ny, nx for the store) where the kernel uses them, rather
 * than copies passed by value, so that the kernel compiles as if the
 * code were written out in it.
 * --------------------------------------------------------------------- */

/* Input rows of the tile of a kernel of KY rows, and per loader thread. */
#define TC_IN_ROWS(ky) (TC_TR + (ky) - 1)
#define TC_HALF_ROWS(ky) (TC_IN_ROWS(ky) / 2)
#define TC_EXTRA_COLS (TC_IN_COLS - TC_COLS)

/*
 * Issue the loads of the thread's column of one input plane: v[r] = X
 * tile element (half + 2r, col), src its address for r = 0, gx its grid
 * column, pitch the input's row pitch (p.in_pitch, or a copy the
 * compiler cannot see through, in a loop over tiles).  Rows and columns at or past lim_y / lim_x (a tile hanging
 * over the bottom or right edge) read as zero: they feed only outputs
 * outside the grid, which are not stored, so the grid needs no margin
 * beyond its halo.
 */
template <int KY, class P>
static __device__ __forceinline__ void
tc_fetch_column(double (&v)[TC_HALF_ROWS(KY)], const double *src,
                ptrdiff_t i0, int half, ptrdiff_t gx, const P &p,
                ptrdiff_t pitch)
{
    constexpr int RY = (KY - 1) / 2;
#pragma unroll
    for (int r = 0; r < TC_HALF_ROWS(KY); r++) {
        const bool row_ok = i0 - RY + half + 2 * r < p.lim_y;
        v[r] = (gx < p.lim_x && row_ok) ? src[2 * r * pitch] : 0.0;
    }
}

/* The thread's element (ex, ey) of the columns past TC_COLS in input
   plane z into ev, where it has one and it lies in the padded grid
   (ev stays as it is otherwise). */
template <int KY, class P>
static __device__ __forceinline__ void
tc_fetch_extra(double &ev, bool has_extra, int ex, int ey, ptrdiff_t i0,
               ptrdiff_t j0, ptrdiff_t z, const P &p)
{
    constexpr int RY = (KY - 1) / 2;
    /* & rather than &&: the kernel's parameters are always readable, and
       one combined branch is what the compiler makes of the && when
       written out in the kernel */
    if (has_extra & (i0 - RY + ex < p.lim_y) & (j0 - 3 + ey < p.lim_x)) {
        ev = p.in[z * p.in_plane + (i0 - RY + ex) * p.in_pitch + j0 - 3 + ey];
    }
}

/*
 * Zero the row tails TC_P * in_rows .. ld-1 of both matrices: the loader
 * never writes them and the last k-step of the last row reads them
 * (times zero weights), so once per block is enough.
 */
template <int KY, class P>
static __device__ __forceinline__ void
tc_zero_tails(double *sA, double *sB, int tid, const P &p)
{
    for (int e = TC_P * TC_IN_ROWS(KY) + (tid & 15); e < p.ld; e += 16) {
        sA[(tid >> 4) * p.ld + e] = 0.0;
        sB[(tid >> 4) * p.ld + e] = 0.0;
    }
}

/*
 * The stores of the fetches above: element (x, y) goes to
 * sA[offA + x*strideA] and sB[offB + x*strideB], no branch.  With
 * STRIDE > 0 the strides are taken to be STRIDE (layout.c makes every
 * stride P, and cs_cuda_tc2d_check_layout checks it), so that the row
 * offsets are immediates rather than registers.
 */
template <int KY, int STRIDE = 0>
static __device__ __forceinline__ void
tc_store_tile(double *sA, double *sB, const double (&v)[TC_HALF_ROWS(KY)],
              int half, const int4 &lut, bool has_extra, int ex, double ev,
              const int4 &elut)
{
#pragma unroll
    for (int r = 0; r < TC_HALF_ROWS(KY); r++) {
        const int x = half + 2 * r;
        if (STRIDE > 0) {
            sA[lut.x + x * STRIDE] = v[r];
            sB[lut.z + x * STRIDE] = v[r];
        } else {
            sA[lut.x + x * lut.y] = v[r];
            sB[lut.z + x * lut.w] = v[r];
        }
    }
    if (has_extra) {
        if (STRIDE > 0) {
            sA[elut.x + ex * STRIDE] = ev;
            sB[elut.z + ex * STRIDE] = ev;
        } else {
            sA[elut.x + ex * elut.y] = ev;
            sB[elut.z + ex * elut.w] = ev;
        }
    }
}

/* ------------------------------------------------------------------------
 * dual tessellation and store
 * --------------------------------------------------------------------- */

/*
 * The column group computed by MMA row gq (gq + 8 computes this + 2):
 * 4 (gq % 4) + gq / 4, so that the four groups of one half-warp's
 * operand rows start on shared-memory words 4 apart (ld % 16 == 7) and
 * each operand load is conflict-free.
 */
static __device__ __forceinline__ int
tc_group_of_row(int gq)
{
    return 4 * (gq & 3) + (gq >> 2);
}

/*
 * Vitrolites A and B of tile rows warp + TC_WARPS * (q0 + q), q < QN,
 * accumulated into acc[q] (independent accumulators): for each k-step s
 * the A operand is the 16 x 4 block at column 7i + 4s of sA (a_lo, a_hi:
 * this thread's entries of MMA rows gq and gq + 8), times fragment
 * fa[s]; then the same with sB and fb[s].
 */
template <int KSTEPS, int QN>
static __device__ __forceinline__ void
tc_mma_rows(double (&acc)[QN][4], const double *a_lo, const double *a_hi,
            const double *b_lo, const double *b_hi, int warp, int q0,
            const double (&fa)[KSTEPS], const double (&fb)[KSTEPS])
{
#pragma unroll
    for (int s = 0; s < KSTEPS; s++) {
#pragma unroll
        for (int q = 0; q < QN; q++) {
            const int off = TC_P * (warp + TC_WARPS * (q0 + q)) + 4 * s;
            cs_dmma_16x8x4(acc[q], a_lo[off], a_hi[off], fa[s]);
            cs_dmma_16x8x4(acc[q], b_lo[off], b_hi[off], fb[s]);
        }
    }
}

/*
 * Store C[m][c], output (i, 8 g + c) of the tile for the group g of MMA
 * row m (j_lo, j_hi: this thread's columns of c0 and c2), into output
 * plane z: two double2 per row and thread; a warp's stores cover 16 runs
 * of 64 contiguous bytes (whole sectors).
 */
template <int QN, class P>
static __device__ __forceinline__ void
tc_store_rows(const double (&acc)[QN][4], ptrdiff_t z, ptrdiff_t i0,
              int warp, int q0, ptrdiff_t j_lo, ptrdiff_t j_hi, const P &p)
{
#pragma unroll
    for (int q = 0; q < QN; q++) {
        const ptrdiff_t i = i0 + warp + TC_WARPS * (q0 + q);
        if (i < p.ny) {
            double *row = p.out + z * p.out_plane + i * p.out_pitch;
            cs_store_pair(row, j_lo, p.nx, acc[q][0], acc[q][1]);
            cs_store_pair(row, j_hi, p.nx, acc[q][2], acc[q][3]);
        }
    }
}

#endif /* CS_CUDA_TC_TILE_CUH */
