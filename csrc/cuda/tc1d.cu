/*
 * tc1d.cu -- long 1D kernels (9 to 15 points) on FP64 tensor cores: the
 * stencil2row layout of csrc/layout.h with payload P = 15 and groups of
 * G = 16 outputs, for 1D grids folded into rows (fold1d.cu).
 *
 * The same method as tc2d.cu for a kernel of one row (ky = 1), on a
 * payload twice as wide, so that heat1d fuses 7 steps and 1d5p 3 into
 * one pass.  What differs from tc2d:
 *
 *   - a column group holds 16 outputs, two MMA n-blocks of 8: every A
 *     operand (16 groups x 4 entries of the stencil2row row) feeds two
 *     MMAs, one per half of the group's weight columns;
 *   - a block computes 16 rows x 256 columns (16 groups of 16) from an
 *     input tile of 16 rows x 270 columns (7 columns of halo per side);
 *     no row halo, since the kernel has one row;
 *   - K = P = 15 is padded to 16: four k-steps of m16n8k4.
 *
 * The loader, the dump slots of dirty columns, the zeroed row tails and
 * the bank plan (ld % 16 == 7, MMA row m computing group 4 (m % 4) +
 * m / 4) are tc2d's, see there and layout.c: the operand addresses of a
 * half-warp differ only in their group row and k-entry, as in tc2d, so
 * the same permutation makes them conflict-free.
 *
 * Shared memory: two matrices of layout.matrix_size doubles (about 36 KB
 * each), so three blocks fit an H100 SM.
 */
#include "kernels.cuh"
#include "tc_mma.cuh"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#define T1_THREADS 256
#define T1_WARPS (T1_THREADS / 32)
#define T1_P 15                     /* kernel payload columns */
#define T1_G 16                     /* outputs per column group */
#define T1_TR CS_TC1D_TILE_ROWS     /* output rows per tile */
#define T1_GROUPS CS_TC2D_GROUPS    /* column groups per tile (= MMA M) */
#define T1_COLS (T1_GROUPS * T1_G)  /* 256 output columns per tile */
#define T1_IN_COLS (T1_COLS + T1_P - 1) /* 270 input columns per tile */
#define T1_ROWS_PER_WARP (T1_TR / T1_WARPS)
#define T1_KSTEPS 4                 /* kpad / 4, kpad = 16 */

static_assert(T1_TR % T1_WARPS == 0, "tile rows must split among warps");
static_assert(T1_COLS == T1_THREADS, "one tile column per thread");
static_assert((T1_IN_COLS - T1_COLS) * T1_TR <= T1_THREADS,
              "one element of the extra columns per thread");

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

typedef struct tc1d_params {
    const double *in; /* origins of the folded grids */
    double *out;
    ptrdiff_t in_pitch, out_pitch;
    ptrdiff_t ny, nx;       /* rows of the fold, points per row */
    ptrdiff_t lim_y, lim_x; /* first unreadable row and column of `in` */
    ptrdiff_t tiles_x;      /* blockIdx.x = tile_y * tiles_x + tile_x */
    int ld;
    int matrix_size;
    const int *lut;
    const double *wa; /* kpad x 16, row-major */
    const double *wb;
} tc1d_params;

__global__ void __launch_bounds__(T1_THREADS, 2)
tc1d_kernel(const tc1d_params p)
{
    extern __shared__ double smem[];
    double *sA = smem;
    double *sB = smem + p.matrix_size;

    const int tid = threadIdx.x;
    const ptrdiff_t j0 = (ptrdiff_t)(blockIdx.x % p.tiles_x) * T1_COLS;
    const ptrdiff_t i0 = (ptrdiff_t)(blockIdx.x / p.tiles_x) * T1_TR;

    /* ---- weight fragments b0 = W[4s + kq][8n + gq] of both n-blocks ---- */
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int gq = lane >> 2;
    const int kq = lane & 3;
    double fa[T1_KSTEPS][2], fb[T1_KSTEPS][2];
#pragma unroll
    for (int s = 0; s < T1_KSTEPS; s++) {
#pragma unroll
        for (int n = 0; n < 2; n++) {
            fa[s][n] = __ldg(p.wa + (4 * s + kq) * T1_G + 8 * n + gq);
            fb[s][n] = __ldg(p.wb + (4 * s + kq) * T1_G + 8 * n + gq);
        }
    }

    /* ---- load the input tile through the LUT: thread t owns tile
       column t for every row (a warp reads 32 consecutive doubles of a
       row), plus one element of the 14 columns past 256 ---- */
    constexpr int EXTRA_COLS = T1_IN_COLS - T1_COLS;
    const int col = tid;
    const ptrdiff_t gx = j0 - (T1_P - 1) / 2 + col; /* grid column */
    const double *src = p.in + i0 * p.in_pitch + gx;
    const int4 lut = *reinterpret_cast<const int4 *>(p.lut + 4 * col);
    const bool has_extra = tid < EXTRA_COLS * T1_TR;
    const int ey = T1_COLS + tid % EXTRA_COLS; /* tile column */
    const int ex = tid / EXTRA_COLS;           /* tile row */
    const int4 elut = has_extra
                          ? *reinterpret_cast<const int4 *>(p.lut + 4 * ey)
                          : make_int4(0, 0, 0, 0);
    double v[T1_TR];
#pragma unroll
    for (int r = 0; r < T1_TR; r++) {
        const bool row_ok = i0 + r < p.lim_y;
        v[r] = (gx < p.lim_x && row_ok) ? src[r * p.in_pitch] : 0.0;
    }
    double ev = 0.0;
    const ptrdiff_t egx = j0 - (T1_P - 1) / 2 + ey;
    if (has_extra && i0 + ex < p.lim_y && egx < p.lim_x) {
        ev = p.in[(i0 + ex) * p.in_pitch + egx];
    }

    /* ---- row tails P*in_rows .. ld-1: read by the last k-step of the
       last row (times zero weights), never loaded ---- */
    for (int e = T1_P * T1_TR + (tid & 15); e < p.ld; e += 16) {
        sA[(tid >> 4) * p.ld + e] = 0.0;
        sB[(tid >> 4) * p.ld + e] = 0.0;
    }

#pragma unroll
    for (int r = 0; r < T1_TR; r++) {
        sA[lut.x + r * lut.y] = v[r];
        sB[lut.z + r * lut.w] = v[r];
    }
    if (has_extra) {
        sA[elut.x + ex * elut.y] = ev;
        sB[elut.z + ex * elut.w] = ev;
    }
    __syncthreads();

    /* ---- dual tessellation, rows warp + 8q; MMA row m computes group
       4 (m % 4) + m / 4 (conflict-free operand loads, as in tc2d) ---- */
    const int g_lo = 4 * (gq & 3) + (gq >> 2);
    const int g_hi = g_lo + 2;
    const double *a_lo = sA + g_lo * p.ld + kq;
    const double *a_hi = sA + g_hi * p.ld + kq;
    const double *b_lo = sB + g_lo * p.ld + kq;
    const double *b_hi = sB + g_hi * p.ld + kq;
    double acc[T1_ROWS_PER_WARP][2][4];
#pragma unroll
    for (int q = 0; q < T1_ROWS_PER_WARP; q++) {
#pragma unroll
        for (int n = 0; n < 2; n++) {
            acc[q][n][0] = acc[q][n][1] = acc[q][n][2] = acc[q][n][3] = 0.0;
        }
    }
#pragma unroll
    for (int s = 0; s < T1_KSTEPS; s++) {
#pragma unroll
        for (int q = 0; q < T1_ROWS_PER_WARP; q++) {
            const int off = T1_P * (warp + T1_WARPS * q) + 4 * s;
            const double a0 = a_lo[off], a1 = a_hi[off];
            const double b0 = b_lo[off], b1 = b_hi[off];
#pragma unroll
            for (int n = 0; n < 2; n++) {
                cs_dmma_16x8x4(acc[q][n], a0, a1, fa[s][n]);
                cs_dmma_16x8x4(acc[q][n], b0, b1, fb[s][n]);
            }
        }
    }

    /* ---- store: C[m][c] of n-block n is output (i, 16 g + 8 n + c) ---- */
#pragma unroll
    for (int q = 0; q < T1_ROWS_PER_WARP; q++) {
        const ptrdiff_t i = i0 + warp + T1_WARPS * q;
        if (i < p.ny) {
            double *row = p.out + i * p.out_pitch;
#pragma unroll
            for (int n = 0; n < 2; n++) {
                const ptrdiff_t j_lo = j0 + T1_G * g_lo + 8 * n + 2 * kq;
                const ptrdiff_t j_hi = j0 + T1_G * g_hi + 8 * n + 2 * kq;
                cs_store_pair(row, j_lo, p.nx, acc[q][n][0], acc[q][n][1]);
                cs_store_pair(row, j_hi, p.nx, acc[q][n][2], acc[q][n][3]);
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

size_t
cs_cuda_tc1d_smem_bytes(const cs_layout2d *layout)
{
    return 2 * (size_t)layout->matrix_size * sizeof(double);
}

/* Where layout.h puts real element (x, y) of the tile (-1: dirty). */
static ptrdiff_t
expected_slot(int matrix, int x, int y, int ld)
{
    int u = matrix == 0 ? y : y - T1_P;
    if (u < 0 || u % T1_G == T1_G - 1 || u / T1_G >= T1_GROUPS) {
        return -1;
    }
    return (ptrdiff_t)(u / T1_G) * ld + T1_P * x + u % T1_G;
}

cs_status
cs_cuda_tc1d_check_layout(cs_cuda_ctx *ctx, const cs_layout2d *L,
                          size_t smem_optin)
{
    const char *bad = NULL;
    if (L->ky != 1 || L->kx < 9 || L->kx > 15 || L->kx % 2 == 0) {
        bad = "not a 1D kernel of 9 to 15 points";
    } else if (L->payload != T1_P || L->group != T1_G || L->halo_x != 7
               || L->halo_y != 0 || L->kdim != T1_P
               || L->kpad != 4 * T1_KSTEPS) {
        bad = "kernel geometry is not P = 15";
    } else if (L->tile_groups != T1_GROUPS || L->tile_rows != T1_TR
               || L->tile_cols != T1_COLS || L->in_rows != T1_TR
               || L->in_cols != T1_IN_COLS) {
        bad = "tile plan is not 16 groups x 16 rows";
    } else if (L->ld < T1_P * (T1_TR - 1) + L->kpad || L->ld < T1_P * T1_TR
               || L->ld % 16 != 7 || L->dump_base != T1_GROUPS * L->ld
               || L->matrix_size < L->dump_base) {
        bad = "matrix stride (>= the rows, 7 mod 16) or dump area";
    } else if (L->weight_a == NULL || L->weight_b == NULL || L->lut == NULL) {
        bad = "missing weight matrices or lookup table";
    } else if (cs_cuda_tc1d_smem_bytes(L) > smem_optin) {
        bad = "shared memory per block exceeds the device's limit";
    }
    if (bad != NULL) {
        cs_cuda_message(ctx, "tensor-core 1D layout (kx=%d): %s", L->kx, bad);
        return CS_ERR_UNSUPPORTED;
    }
    unsigned char *used = (unsigned char *)calloc(2 * (size_t)L->matrix_size, 1);
    if (used == NULL) {
        cs_cuda_message(ctx, "tensor-core 1D layout: out of host memory");
        return CS_ERR_NOMEM;
    }
    for (int y = 0; y < L->in_cols && bad == NULL; y++) {
        for (int m = 0; m < 2 && bad == NULL; m++) {
            const ptrdiff_t off = L->lut[4 * y + 2 * m];
            const ptrdiff_t stride = L->lut[4 * y + 2 * m + 1];
            for (int x = 0; x < L->in_rows; x++) {
                const ptrdiff_t slot = off + x * stride;
                const ptrdiff_t want = expected_slot(m, x, y, L->ld);
                if (want >= 0 ? slot != want
                              : slot < L->dump_base || slot >= L->matrix_size) {
                    bad = "an element is not where layout.h puts it";
                    break;
                }
                if (used[m * (size_t)L->matrix_size + slot]++) {
                    bad = "two elements share a shared-memory slot";
                    break;
                }
            }
        }
    }
    free(used);
    if (bad != NULL) {
        cs_cuda_message(ctx, "tensor-core 1D layout (kx=%d): %s", L->kx, bad);
        return CS_ERR_UNSUPPORTED;
    }
    return CS_OK;
}

cs_status
cs_cuda_tc1d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_tc2d_plan *plan)
{
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && plan->lut != NULL
             && plan->wa != NULL && plan->wb != NULL && plan->ky == 1
             && in->n[0] == 1 && in->halo[2] >= 7
             && ((uintptr_t)out->origin % 16) == 0 && out->pitch % 2 == 0
             && ((uintptr_t)plan->lut % 16) == 0;
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= 1;
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_tc1d_pass: invalid grids or plan");
        return CS_ERR_INVALID;
    }
    tc1d_params p;
    p.in = in->origin;
    p.out = out->origin;
    p.in_pitch = in->pitch;
    p.out_pitch = out->pitch;
    p.ny = in->n[1];
    p.nx = in->n[2];
    p.lim_y = in->n[1] + in->halo[1];
    p.lim_x = in->n[2] + in->halo[2];
    p.ld = plan->ld;
    p.matrix_size = plan->matrix_size;
    p.lut = plan->lut;
    p.wa = plan->wa;
    p.wb = plan->wb;
    const ptrdiff_t tiles_x = CEIL_DIV(p.nx, (ptrdiff_t)T1_COLS);
    const ptrdiff_t tiles_y = CEIL_DIV(p.ny, (ptrdiff_t)T1_TR);
    if (tiles_x * tiles_y > INT_MAX) {
        cs_cuda_message(ctx, "tc1d_kernel: %td rows of %td are too many",
                        p.ny, p.nx);
        return CS_ERR_UNSUPPORTED;
    }
    p.tiles_x = tiles_x;
    const size_t smem = 2 * (size_t)plan->matrix_size * sizeof(double);
    CS_CUDA_CHECK(ctx,
                  cudaFuncSetAttribute(tc1d_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem),
                  "cudaFuncSetAttribute(tc1d_kernel, max dynamic shared memory)");
    CS_CUDA_CHECK(ctx,
                  cudaFuncSetAttribute(tc1d_kernel,
                                       cudaFuncAttributePreferredSharedMemoryCarveout,
                                       (int)cudaSharedmemCarveoutMaxShared),
                  "cudaFuncSetAttribute(tc1d_kernel, shared memory carveout)");
    const unsigned blocks = (unsigned)(tiles_x * tiles_y);
    tc1d_kernel<<<blocks, T1_THREADS, smem, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "tc1d_kernel");
}
