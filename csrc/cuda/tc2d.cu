/*
 * tc2d.cu -- the 2D stencil on FP64 tensor cores: stencil2row layout and
 * dual tessellation (ConvStencil), following csrc/layout.h exactly.
 *
 * One block (256 threads, 8 warps) computes a tile of 32 output rows x
 * 128 output columns (16 column groups of G = 8) of one plane.  It reads
 * the input tile of 32+ky-1 rows x 134 columns of X (the grid extended by
 * ky/2 rows and 3 columns per side, i.e. grid rows i0-ky/2.., grid
 * columns j0-3..j0+130) from the padded device grid, whose halo the
 * engine has filled per boundary mode.
 *
 * Loading (stencil2row in shared memory): thread t owns tile column
 * y = t % 128 for the rows x = t / 128, +2, +4, ... (a warp reads 32
 * consecutive doubles of a row: coalesced) and one element of the 6
 * columns past 128; it issues all its loads before its stores.  Its
 * lookup-table entries {offA, strideA, offB, strideB} stay in registers:
 * element (x, y) goes to sA[offA + x*strideA] and
 * sB[offB + x*strideB], with no branch and no division; elements that
 * belong to no matrix row land in distinct dump slots after the rows.
 * The row tails between 7*in_rows and ld, which the last k-step of the
 * last output row reads (times zero weights), are zeroed once per block.
 * Rows and columns past the padded grid (a tile hanging over the bottom
 * or right edge) read as zero: they feed only outputs outside the grid,
 * which are not stored, so the grid needs no margin beyond its halo.
 *
 * Computing: warp w computes output rows i = w, w+8, w+16, w+24 of the
 * tile, four independent accumulators of one m16n8k4 tile each (16
 * groups x 8 columns).  For each k-step s the A operand is the 16 x 4
 * block of sA at column 7i + 4s (MMA row m = group 4 (m % 4) + m / 4),
 * the B operand the 4 x 8 block of the weight matrix WA at row 4s; then
 * the same with sB and WB into the same accumulator (the tessellation of
 * vitrolites A and B).  All weight fragments are loaded into registers
 * once per thread (template on ky fixes kpad/4 = 2, 6, 9 or 13 k-steps,
 * fully unrolled).
 *
 * Shared-memory banks (layout.h): with ld % 16 == 7 the groups {c, c+4,
 * c+8, c+12} start on words 4 apart, so the row permutation above makes
 * every operand load conflict-free; and the loader's stores (a half-warp
 * writes 16 aligned consecutive columns of one row into A and into B)
 * hit 16 distinct words, the dump slots of dirty columns included.
 *
 * m16n8k4 f64 fragments (PTX ISA), with gq = lane/4 and kq = lane%4:
 *   a0 = A[gq][kq], a1 = A[gq+8][kq];  b0 = B[kq][gq];
 *   c0,c1 = C[gq][2kq, 2kq+1];  c2,c3 = C[gq+8][2kq, 2kq+1].
 * Output (i, 8g + c) of the tile is C[m][c] for the group g of MMA row
 * m: each thread stores two double2 per row, and a warp's stores cover
 * 16 runs of 64 contiguous bytes (whole sectors).
 *
 * Shared memory: two matrices of layout.matrix_size doubles (84 KB for a
 * 7 x 7 kernel), so two blocks fit an H100 SM; registers are capped at
 * 128 by __launch_bounds__(256, 2).
 *
 * The loader, the MMA loop and the store are inline functions in
 * tc_tile.cuh, shared with tc3d.cu (which sums such tiles over the
 * z-planes of a 3D kernel); the layout check below serves both.
 */
#include "tc_params.cuh"
#include "tc_tile.cuh"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef TC_QN
#define TC_QN 4                   /* rows a warp accumulates at once */
#endif

static_assert(TC_ROWS_PER_WARP % TC_QN == 0, "row groups per warp");

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

typedef struct tc2d_params {
    const double *in; /* origins */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_y, lim_x; /* n + halo of `in`: first unreadable */
    ptrdiff_t tiles_x;      /* blockIdx.x = tile_y * tiles_x + tile_x */
    ptrdiff_t z0;           /* plane of blockIdx.y == 0 */
    int ld;
    int matrix_size;
    const int *lut;
    const double *wa;
    const double *wb;
} tc2d_params;

template <int KY>
__global__ void __launch_bounds__(TC_THREADS, 2)
tc2d_kernel(const tc2d_params p)
{
    constexpr int RY = (KY - 1) / 2;
    constexpr int IN_ROWS = TC_IN_ROWS(KY);
    constexpr int HALF_ROWS = TC_HALF_ROWS(KY);
    constexpr int KSTEPS = TC_KSTEPS(KY);
    static_assert(IN_ROWS % 2 == 0, "odd ky and even tile rows");

    extern __shared__ double smem[];
    double *sA = smem;
    double *sB = smem + p.matrix_size;

    /* one tile of one plane per block (a loop over planes would let the
       compiler hoist the loader's invariant addresses, and spill them) */
    const int tid = threadIdx.x;
    const ptrdiff_t j0 = (ptrdiff_t)(blockIdx.x % p.tiles_x) * TC_COLS;
    const ptrdiff_t i0 = (ptrdiff_t)(blockIdx.x / p.tiles_x) * TC_TR;
    const ptrdiff_t z = p.z0 + blockIdx.y;

    /* ---- weight fragments b0 = W[4s + kq][gq], for the whole block:
       issued first, their latency hides behind the tile's ---- */
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int gq = lane >> 2;
    const int kq = lane & 3;
    double fa[KSTEPS], fb[KSTEPS];
    tc_load_fragments<KSTEPS>(fa, fb, p.wa, p.wb, gq, kq);

    /* ---- load the input tile into sA/sB through the LUT.  Thread t owns
       tile column t % 128 for rows t / 128, +2, +4, ... (a warp reads 32
       consecutive doubles of a row), plus one element of the 6 columns
       past 128 (6 x in_rows <= 256 of them): every thread issues all its
       loads at once, then its stores. ---- */
    constexpr int EXTRA_COLS = TC_EXTRA_COLS;
    const int col = tid % TC_COLS;
    const int half = tid / TC_COLS;
    const ptrdiff_t gx = j0 - 3 + col; /* grid column of tile column col */
    const double *src =
        p.in + z * p.in_plane + (i0 - RY + half) * p.in_pitch + gx;
    const int4 lut = *reinterpret_cast<const int4 *>(p.lut + 4 * col);
    const bool has_extra = tid < EXTRA_COLS * IN_ROWS;
    const int ey = TC_COLS + tid % EXTRA_COLS; /* tile column */
    const int ex = tid / EXTRA_COLS;           /* tile row */
    const int4 elut = has_extra
                          ? *reinterpret_cast<const int4 *>(p.lut + 4 * ey)
                          : make_int4(0, 0, 0, 0);
    double v[HALF_ROWS];
    tc_fetch_column<KY>(v, src, i0, half, gx, p);
    double ev = 0.0;
    tc_fetch_extra<KY>(ev, has_extra, ex, ey, i0, j0, z, p);

    /* ---- row tails of both matrices, then the stores of the loads ---- */
    tc_zero_tails<KY>(sA, sB, tid, p);
    tc_store_tile<KY>(sA, sB, v, half, lut, has_extra, ex, ev, elut);
    __syncthreads();

    /* ---- dual tessellation: rows warp + 8q of the tile, TC_QN at a time
       (independent accumulators) ---- */
    const int g_lo = tc_group_of_row(gq); /* of MMA row gq */
    const int g_hi = g_lo + 2;            /* of MMA row gq + 8 */
    const double *a_lo = sA + g_lo * p.ld + kq;
    const double *a_hi = sA + g_hi * p.ld + kq;
    const double *b_lo = sB + g_lo * p.ld + kq;
    const double *b_hi = sB + g_hi * p.ld + kq;
    const ptrdiff_t j_lo = j0 + TC_G * g_lo + 2 * kq;
    const ptrdiff_t j_hi = j0 + TC_G * g_hi + 2 * kq;
#pragma unroll
    for (int q0 = 0; q0 < TC_ROWS_PER_WARP; q0 += TC_QN) {
        double acc[TC_QN][4];
#pragma unroll
        for (int q = 0; q < TC_QN; q++) {
            acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0;
        }
        tc_mma_rows<KSTEPS, TC_QN>(acc, a_lo, a_hi, b_lo, b_hi, warp, q0,
                                   fa, fb);
        tc_store_rows<TC_QN>(acc, z, i0, warp, q0, j_lo, j_hi, p);
    }
}

/* ------------------------------------------------------------------------
 * host: layout check
 * --------------------------------------------------------------------- */

size_t
cs_cuda_tc2d_smem_bytes(const cs_layout2d *layout)
{
    return 2 * (size_t)layout->matrix_size * sizeof(double);
}

cs_status
cs_cuda_tc2d_check_layout(cs_cuda_ctx *ctx, const cs_layout2d *L,
                          size_t smem_optin)
{
    const int ky = L->ky;
    const char *bad = NULL;
    if (ky < 1 || ky > 7 || ky % 2 == 0 || L->kx < 1 || L->kx > 7) {
        bad = "kernel larger than 7 x 7";
    } else if (L->payload != TC_P || L->group != TC_G || L->halo_x != 3
               || L->halo_y != (ky - 1) / 2 || L->kdim != TC_P * ky
               || L->kpad != 4 * TC_KSTEPS(ky)) {
        bad = "kernel geometry is not P = 7";
    } else if (L->tile_groups != CS_TC2D_GROUPS || L->tile_rows != TC_TR
               || L->tile_cols != TC_COLS || L->in_rows != TC_TR + ky - 1
               || L->in_cols != TC_IN_COLS) {
        bad = "tile plan is not 16 groups x 32 rows";
    } else if (L->ld < TC_P * (TC_TR - 1) + L->kpad
               || L->ld < TC_P * L->in_rows
               || L->ld % 16 != 7
               || L->dump_base != CS_TC2D_GROUPS * L->ld
               || L->matrix_size < L->dump_base) {
        bad = "matrix stride (>= the rows, 7 mod 16) or dump area";
    } else if (L->weight_a == NULL || L->weight_b == NULL || L->lut == NULL) {
        bad = "missing weight matrices or lookup table";
    } else if (cs_cuda_tc2d_smem_bytes(L) > smem_optin) {
        bad = "shared memory per block exceeds the device's limit";
    }
    if (bad != NULL) {
        cs_cuda_message(ctx, "tensor-core layout (ky=%d, kx=%d): %s", L->ky,
                        L->kx, bad);
        return CS_ERR_UNSUPPORTED;
    }
    /* every element lands where layout.h says, or in its own dump slot */
    int nomem = 0;
    bad = tc_layout_slots_wrong(L, &nomem);
    if (bad != NULL) {
        cs_cuda_message(ctx, "tensor-core layout (ky=%d, kx=%d): %s", L->ky,
                        L->kx, bad);
        return nomem ? CS_ERR_NOMEM : CS_ERR_UNSUPPORTED;
    }
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * launcher
 * --------------------------------------------------------------------- */

/* Launches the KY instance for tc_launch_planes. */
struct tc2d_launcher {
    template <int KY>
    static cs_status
    run(cs_cuda_ctx *ctx, const tc2d_params &p, dim3 grid, size_t smem,
        const char *name)
    {
        CS_TRY(tc_allow_smem(ctx, tc2d_kernel<KY>, smem, name));
        tc2d_kernel<KY><<<grid, TC_THREADS, smem, ctx->stream>>>(p);
        return cs_cuda_check_launch(ctx, name);
    }
};

cs_status
cs_cuda_tc2d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_tc2d_plan *plan)
{
    const int ky = plan->ky;
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && plan->lut != NULL
             && plan->wa != NULL && plan->wb != NULL
             && (ky == 1 || ky == 3 || ky == 5 || ky == 7)
             && in->halo[1] >= (ky - 1) / 2 && in->halo[2] >= 3
             /* double2 stores: 16-byte aligned rows */
             && ((uintptr_t)out->origin % 16) == 0 && out->pitch % 2 == 0
             && out->plane % 2 == 0
             /* int4 lookup-table loads */
             && ((uintptr_t)plan->lut % 16) == 0;
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= 1;
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_tc2d_pass: invalid grids or plan");
        return CS_ERR_INVALID;
    }
    tc2d_params p;
    ptrdiff_t tiles = 0;
    CS_TRY(tc_params_fill(ctx, in, out, plan, TC_TR, TC_COLS, "tc2d_kernel",
                          &p, &tiles));
    const size_t smem = 2 * (size_t)plan->matrix_size * sizeof(double);
    static const char *const names[4] = {
        "tc2d_kernel<ky=1>", "tc2d_kernel<ky=3>", "tc2d_kernel<ky=5>",
        "tc2d_kernel<ky=7>"};
    return tc_launch_planes<tc2d_launcher>(ctx, p, ky, tiles, smem, names);
}
