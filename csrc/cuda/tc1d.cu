/*
 * tc1d.cu -- long 1D kernels (9 to 31 points) on FP64 tensor cores: the
 * stencil2row layout of csrc/layout.h with payload P = 15 or 31 and
 * groups of G = P + 1 outputs, for 1D grids folded into rows (fold1d.cu).
 *
 * The same method as tc2d.cu for a kernel of one row (ky = 1), on a wider
 * payload, so that heat1d fuses 15 steps and 1d5p 7 into one pass.  What
 * differs from tc2d:
 *
 *   - a column group holds G outputs, NB = G / 8 MMA n-blocks; a warp
 *     computes two of them (NT = 2), so every A operand it loads (16
 *     groups x 4 entries of a stencil2row row) feeds two MMAs, and its
 *     weight fragments (K / 4 k-steps x 2 n-blocks x A and B) stay in
 *     registers; for P = 31 the 8 warps split into 2 n-teams x 4 row
 *     teams;
 *   - a block computes TR rows x 16 G columns (TR = 16 for P = 15, 8 for
 *     P = 31: 4096 outputs either way) from an input tile of TR rows x
 *     (16 G + P - 1) columns; no row halo, since the kernel has one row;
 *   - K = P is padded to G: G / 4 k-steps of m16n8k4.
 *
 * The loader, the dump slots of dirty columns, the zeroed row tails and
 * the bank plan (ld % 16 == 7, MMA row m computing group 4 (m % 4) +
 * m / 4) are tc2d's, see there and layout.c: the operand addresses of a
 * half-warp differ only in their group row and k-entry, as in tc2d, so
 * the same permutation makes them conflict-free.
 *
 * Shared memory: two matrices of layout.matrix_size doubles (about 36 KB
 * each), so two or three blocks fit an H100 SM.
 */
#include "kernels.cuh"
#include "tc_mma.cuh"
#include "tc_params.cuh"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#define T1_THREADS 256
#define T1_WARPS (T1_THREADS / 32)
#define T1_GROUPS CS_TC2D_GROUPS /* column groups per tile (= MMA M) */
#define T1_NT 2                  /* n-blocks per warp */

/* The tile geometry of payload P. */
template <int P>
struct tc1d_geometry {
    static constexpr int G = P + 1;
    static constexpr int NB = G / 8;             /* n-blocks per group */
    static constexpr int KSTEPS = G / 4;         /* K = P padded to G */
    static constexpr int TR = P == 15 ? 16 : 8;  /* output rows per tile */
    static constexpr int COLS = T1_GROUPS * G;   /* output columns */
    static constexpr int IN_COLS = COLS + P - 1; /* input columns */
    static constexpr int COLS_PER_THREAD = COLS / T1_THREADS;
    static constexpr int N_TEAMS = NB / T1_NT;   /* warps per row team */
    static constexpr int ROW_TEAMS = T1_WARPS / N_TEAMS;
    static constexpr int ROWS_PER_WARP = TR / ROW_TEAMS;
    static_assert(P == 15 || P == 31, "payloads 15 and 31");
    static_assert(COLS % T1_THREADS == 0, "whole tile columns per thread");
    static_assert(NB % T1_NT == 0 && T1_WARPS % N_TEAMS == 0
                      && TR % ROW_TEAMS == 0, "warps split the tile");
    static_assert((IN_COLS - COLS) * TR <= T1_THREADS,
                  "one element of the extra columns per thread");
};

static int
tc1d_tile_rows(int payload)
{
    return payload == 15 ? tc1d_geometry<15>::TR : tc1d_geometry<31>::TR;
}

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

typedef struct tc1d_params {
    const double *in; /* origins of the folded grids */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;   /* 1, rows of the fold, points per row */
    ptrdiff_t lim_y, lim_x; /* first unreadable row and column of `in` */
    ptrdiff_t tiles_x;      /* blockIdx.x = tile_y * tiles_x + tile_x */
    int ld;
    int matrix_size;
    const int *lut;
    const double *wa; /* kpad x G, row-major */
    const double *wb;
    /* FLAT: `in` is the caller's 1D array of `points` doubles, rows of
       in_pitch = nx points one after another with no halo (tc1d_flat) */
    ptrdiff_t points;
    cs_mode mode;
    double cval;
    int *in_flag; /* set to 1 where a point is not finite */
} tc1d_params;

/*
 * FLAT: the value cell (row, col) of the fold's padded grid would hold
 * (fold1d.cu) read from the caller's flat array: point row * w + col,
 * or beyond either end the point the mode maps it to (constant: cval);
 * 0 past the cells the padded grid has, as the plain load reads there.
 * `bad` notes a point of the grid that is not finite.
 */
static __device__ __forceinline__ double
tc1d_flat_cell(const tc1d_params &p, ptrdiff_t row, ptrdiff_t col,
               bool &bad)
{
    if (row >= p.lim_y || col >= p.lim_x) {
        return 0.0;
    }
    const ptrdiff_t q = row * p.in_pitch + col;
    if (q >= 0 && q < p.points) {
        const double v = p.in[q];
        bad |= !isfinite(v);
        return v;
    }
    if (p.mode == CS_MODE_CONSTANT) {
        return p.cval;
    }
    return p.in[cs_extend_index(q, p.points, p.mode)];
}

/*
 * FLAT: whether every cell a tile loads (rows i0 .. i0 + rows - 1,
 * columns c0 .. c0 + cols - 1 of the fold's padded grid) lies inside the
 * padded grid's limits and maps to a point of the caller's array (every
 * tile but those at the array's two ends): the tile then loads them as
 * plain, unconditional reads, which the compiler issues all at once.
 * Cell (row, col) is point row * in_pitch + col, increasing in both.
 */
static __device__ __forceinline__ bool
tc1d_flat_inside(const tc1d_params &p, ptrdiff_t i0, int rows, ptrdiff_t c0,
                 int cols)
{
    const ptrdiff_t last_row = i0 + rows - 1, last_col = c0 + cols - 1;
    return last_row < p.lim_y && last_col < p.lim_x
           && i0 * p.in_pitch + c0 >= 0
           && last_row * p.in_pitch + last_col < p.points;
}

template <int P, bool FLAT>
__global__ void __launch_bounds__(T1_THREADS, 2)
tc1d_kernel(const tc1d_params p)
{
    typedef tc1d_geometry<P> T;
    constexpr int HALO = (P - 1) / 2;
    extern __shared__ double smem[];
    double *sA = smem;
    double *sB = smem + p.matrix_size;

    const int tid = threadIdx.x;
    const ptrdiff_t j0 = (ptrdiff_t)(blockIdx.x % p.tiles_x) * T::COLS;
    const ptrdiff_t i0 = (ptrdiff_t)(blockIdx.x / p.tiles_x) * T::TR;

    /* ---- this warp's rows and n-blocks, and its weight fragments
       b0 = W[4s + kq][8n + gq] of those n-blocks ---- */
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int gq = lane >> 2;
    const int kq = lane & 3;
    const int n_team = warp % T::N_TEAMS;
    const int row_team = warp / T::N_TEAMS;
    const int nb0 = T1_NT * n_team; /* first n-block of this warp */
    double fa[T::KSTEPS][T1_NT], fb[T::KSTEPS][T1_NT];
#pragma unroll
    for (int s = 0; s < T::KSTEPS; s++) {
#pragma unroll
        for (int n = 0; n < T1_NT; n++) {
            const int at = (4 * s + kq) * T::G + 8 * (nb0 + n) + gq;
            fa[s][n] = __ldg(p.wa + at);
            fb[s][n] = __ldg(p.wb + at);
        }
    }

    /* ---- load the input tile through the LUT: thread t owns tile
       columns t + 256 c for every row (a warp reads 32 consecutive
       doubles of a row), plus one element of the P - 1 columns past the
       tile's outputs; all loads first, then the stores ---- */
    constexpr int EXTRA_COLS = T::IN_COLS - T::COLS;
    const ptrdiff_t gx0 = j0 - HALO + tid; /* grid column of column tid */
    const bool has_extra = tid < EXTRA_COLS * T::TR;
    const int ey = T::COLS + tid % EXTRA_COLS; /* tile column */
    const int ex = tid / EXTRA_COLS;           /* tile row */
    double v[T::COLS_PER_THREAD][T::TR];
    bool bad = false; /* FLAT: a point that is not finite */
    /* FLAT tiles inside the array read as the plain layout is read (the
       same addresses: the fold's rows one after another); the tiles at
       its ends map each cell */
    const bool flat_cells =
        FLAT && !tc1d_flat_inside(p, i0, T::TR, j0 - HALO, T::IN_COLS);
#pragma unroll
    for (int c = 0; c < T::COLS_PER_THREAD; c++) {
        const ptrdiff_t gx = gx0 + T1_THREADS * c;
        const double *src = p.in + i0 * p.in_pitch + gx;
#pragma unroll
        for (int r = 0; r < T::TR; r++) {
            if (flat_cells) {
                v[c][r] = tc1d_flat_cell(p, i0 + r, gx, bad);
            } else { /* FLAT here: every cell inside the limits */
                const bool ok = FLAT || (gx < p.lim_x && i0 + r < p.lim_y);
                v[c][r] = ok ? src[r * p.in_pitch] : 0.0;
            }
        }
    }
    double ev = 0.0;
    const ptrdiff_t egx = j0 - HALO + ey;
    if (flat_cells && has_extra) {
        ev = tc1d_flat_cell(p, i0 + ex, egx, bad);
    } else if (has_extra
               && (FLAT || (i0 + ex < p.lim_y && egx < p.lim_x))) {
        ev = p.in[(i0 + ex) * p.in_pitch + egx];
    }
    if (FLAT && !flat_cells) {
#pragma unroll
        for (int c = 0; c < T::COLS_PER_THREAD; c++) {
#pragma unroll
            for (int r = 0; r < T::TR; r++) {
                bad |= !isfinite(v[c][r]);
            }
        }
        bad |= has_extra && !isfinite(ev);
    }
    if (FLAT && bad) {
        *p.in_flag = 1; /* every writer writes 1: no ordering needed */
    }

    /* ---- row tails P*TR .. ld-1: read by the last k-step of the last
       row (times zero weights), never loaded ---- */
    for (int e = P * T::TR + (tid & 15); e < p.ld; e += 16) {
        sA[(tid >> 4) * p.ld + e] = 0.0;
        sB[(tid >> 4) * p.ld + e] = 0.0;
    }

#pragma unroll
    for (int c = 0; c < T::COLS_PER_THREAD; c++) {
        const int4 lut =
            *reinterpret_cast<const int4 *>(p.lut + 4 * (tid + T1_THREADS * c));
#pragma unroll
        for (int r = 0; r < T::TR; r++) {
            sA[lut.x + r * lut.y] = v[c][r];
            sB[lut.z + r * lut.w] = v[c][r];
        }
    }
    if (has_extra) {
        const int4 elut = *reinterpret_cast<const int4 *>(p.lut + 4 * ey);
        sA[elut.x + ex * elut.y] = ev;
        sB[elut.z + ex * elut.w] = ev;
    }
    __syncthreads();

    /* ---- dual tessellation, rows row_team + ROW_TEAMS q; MMA row m
       computes group 4 (m % 4) + m / 4 (conflict-free operand loads, as
       in tc2d) ---- */
    const int g_lo = 4 * (gq & 3) + (gq >> 2);
    const int g_hi = g_lo + 2;
    const double *a_lo = sA + g_lo * p.ld + kq;
    const double *a_hi = sA + g_hi * p.ld + kq;
    const double *b_lo = sB + g_lo * p.ld + kq;
    const double *b_hi = sB + g_hi * p.ld + kq;
    double acc[T::ROWS_PER_WARP][T1_NT][4];
#pragma unroll
    for (int q = 0; q < T::ROWS_PER_WARP; q++) {
#pragma unroll
        for (int n = 0; n < T1_NT; n++) {
            acc[q][n][0] = acc[q][n][1] = acc[q][n][2] = acc[q][n][3] = 0.0;
        }
    }
#pragma unroll
    for (int s = 0; s < T::KSTEPS; s++) {
#pragma unroll
        for (int q = 0; q < T::ROWS_PER_WARP; q++) {
            const int off = P * (row_team + T::ROW_TEAMS * q) + 4 * s;
            const double a0 = a_lo[off], a1 = a_hi[off];
            const double b0 = b_lo[off], b1 = b_hi[off];
#pragma unroll
            for (int n = 0; n < T1_NT; n++) {
                cs_dmma_16x8x4(acc[q][n], a0, a1, fa[s][n]);
                cs_dmma_16x8x4(acc[q][n], b0, b1, fb[s][n]);
            }
        }
    }

    /* ---- store: C[m][c] of n-block nb is output (i, G g + 8 nb + c) ---- */
#pragma unroll
    for (int q = 0; q < T::ROWS_PER_WARP; q++) {
        const ptrdiff_t i = i0 + row_team + T::ROW_TEAMS * q;
        if (i < p.ny) {
            double *row = p.out + i * p.out_pitch;
#pragma unroll
            for (int n = 0; n < T1_NT; n++) {
                const int c0 = 8 * (nb0 + n) + 2 * kq;
                const ptrdiff_t j_lo = j0 + T::G * g_lo + c0;
                const ptrdiff_t j_hi = j0 + T::G * g_hi + c0;
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

int
cs_cuda_tc1d_tile_rows(int kx)
{
    return tc1d_tile_rows(kx <= 15 ? 15 : 31);
}

cs_status
cs_cuda_tc1d_check_layout(cs_cuda_ctx *ctx, const cs_layout2d *L,
                          size_t smem_optin)
{
    const char *bad = NULL;
    const int P = L->payload;
    if (L->ky != 1 || L->kx < 9 || L->kx > 31 || L->kx % 2 == 0) {
        bad = "not a 1D kernel of 9 to 31 points";
    } else if ((P != 15 && P != 31) || P != (L->kx <= 15 ? 15 : 31)
               || L->group != P + 1 || L->halo_x != (P - 1) / 2
               || L->halo_y != 0 || L->kdim != P || L->kpad != P + 1) {
        bad = "kernel geometry is not P = 15 or 31";
    } else if (L->tile_groups != T1_GROUPS
               || L->tile_rows != tc1d_tile_rows(P)
               || L->tile_cols != T1_GROUPS * (P + 1)
               || L->in_rows != L->tile_rows
               || L->in_cols != L->tile_cols + P - 1) {
        bad = "tile plan is not tc1d's";
    } else if (L->ld < P * (L->tile_rows - 1) + L->kpad
               || L->ld < P * L->tile_rows || L->ld % 16 != 7
               || L->dump_base != T1_GROUPS * L->ld
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
    /* every element lands where layout.h says, or in its own dump slot */
    int nomem = 0;
    bad = tc_layout_slots_wrong(L, &nomem);
    if (bad != NULL) {
        cs_cuda_message(ctx, "tensor-core 1D layout (kx=%d): %s", L->kx, bad);
        return nomem ? CS_ERR_NOMEM : CS_ERR_UNSUPPORTED;
    }
    return CS_OK;
}

/* flat: the fields FLAT reads (`in` a flat view, see cs_cuda_tc1d_pass);
   NULL for a padded grid. */
template <int P, bool FLAT>
static cs_status
launch_tc1d(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
            const cs_tc2d_plan *plan, const cs_tc1d_flat *flat,
            const char *name)
{
    typedef tc1d_geometry<P> T;
    tc1d_params p;
    ptrdiff_t tiles = 0;
    CS_TRY(tc_params_fill(ctx, in, out, plan, T::TR, T::COLS, name, &p,
                          &tiles));
    p.points = 0;
    p.mode = CS_MODE_CONSTANT;
    p.cval = 0.0;
    p.in_flag = NULL;
    if (FLAT) {
        p.points = flat->points;
        p.mode = flat->mode;
        p.cval = flat->cval;
        p.in_flag = flat->in_flag;
        p.lim_x = p.nx + (P - 1) / 2; /* the padded grid's x-halo */
    }
    const size_t smem = 2 * (size_t)plan->matrix_size * sizeof(double);
    CS_TRY(tc_allow_smem(ctx, tc1d_kernel<P, FLAT>, smem, name));
    const unsigned blocks = (unsigned)tiles;
    tc1d_kernel<P, FLAT><<<blocks, T1_THREADS, smem, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, name);
}

cs_status
cs_cuda_tc1d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_tc2d_plan *plan, const cs_tc1d_flat *flat)
{
    const int P = plan->payload;
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && plan->lut != NULL
             && plan->wa != NULL && plan->wb != NULL && plan->ky == 1
             && (P == 15 || P == 31) && in->n[0] == 1
             && ((uintptr_t)out->origin % 16) == 0 && out->pitch % 2 == 0
             && ((uintptr_t)plan->lut % 16) == 0;
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= 1;
    }
    if (flat == NULL) {
        ok = ok && in->halo[2] >= (P - 1) / 2;
    } else { /* the points one after another, no halo, all of them read */
        ok = ok && in->pitch == in->n[2] && in->halo[1] == 0
             && in->halo[2] == 0 && flat->in_flag != NULL
             && flat->points >= 1 && flat->points <= in->n[1] * in->n[2]
             && flat->points > (in->n[1] - 1) * in->n[2]
             && (int)flat->mode >= 0 && (int)flat->mode < CS_MODE_COUNT;
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_tc1d_pass: invalid grids or plan");
        return CS_ERR_INVALID;
    }
    if (flat != NULL) {
        return P == 15 ? launch_tc1d<15, true>(ctx, in, out, plan, flat,
                                               "tc1d_kernel<P=15, flat>")
                       : launch_tc1d<31, true>(ctx, in, out, plan, flat,
                                               "tc1d_kernel<P=31, flat>");
    }
    return P == 15 ? launch_tc1d<15, false>(ctx, in, out, plan, NULL,
                                            "tc1d_kernel<P=15>")
                   : launch_tc1d<31, false>(ctx, in, out, plan, NULL,
                                            "tc1d_kernel<P=31>");
}
