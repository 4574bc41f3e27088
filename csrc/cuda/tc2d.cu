/*
 * tc2d.cu -- the 2D stencil on FP64 tensor cores: stencil2row layout and
 * dual tessellation (ConvStencil), following csrc/layout.h exactly.
 *
 * A tile is 32 output rows x 128 output columns (16 column groups of
 * G = 8) of one plane.  Its input is 32+ky-1 rows x 134 columns of X (the
 * grid extended by ky/2 rows and 3 columns per side, i.e. grid rows
 * i0-ky/2.., grid columns j0-3..j0+130) from the padded device grid,
 * whose halo the engine has filled per boundary mode.
 *
 * Persistent blocks, two roles.  One block per SM (512 threads) loops
 * over the tiles t = blockIdx.x, + gridDim.x, ... of the launch; its
 * shared memory holds two tile buffers (sA and sB each).  Warps 8..15 are
 * loaders: they build tile t + gridDim.x in one buffer while warps 0..7
 * run the MMAs of tile t on the other; one barrier per tile hands the
 * buffers over.  A block that loaded and then computed its own tile (two
 * blocks per SM, as before) left the SM's tensor cores idle while both
 * blocks waited on global memory; here the loads of the next tile are in
 * flight during the MMAs of this one.
 *
 * Loading (stencil2row in shared memory): loader thread t owns tile
 * column y = t % 128 for the rows x = t / 128, +2, +4, ... (a warp reads
 * 32 consecutive doubles of a row: coalesced) and one element of the 6
 * columns past 128; it issues all its loads before its stores.  Its
 * lookup-table entries {offA, strideA, offB, strideB} stay in registers:
 * element (x, y) goes to sA[offA + x*7] and sB[offB + x*7], with no
 * branch and no division; elements that belong to no matrix row land in
 * distinct dump slots after the rows.  The row tails between 7*in_rows
 * and ld, which the last k-step of the last output row reads (times zero
 * weights), are zeroed once per buffer.  Rows and columns past the padded
 * grid (a tile hanging over the bottom or right edge) read as zero: they
 * feed only outputs outside the grid, which are not stored, so the grid
 * needs no margin beyond its halo.
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
 * Resources: two buffers of two matrices of layout.matrix_size doubles
 * (168 KB for a 7 x 7 kernel), 512 threads of at most 128 registers
 * (__launch_bounds__(512, 1)): one block per SM.  The plan may leave
 * SMs free (spare_sms) for the band fix-ups that run beside a fused pass.
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
#include <string.h>

#ifndef TC_QN
#define TC_QN 4                   /* rows a warp accumulates at once */
#endif

static_assert(TC_ROWS_PER_WARP % TC_QN == 0, "row groups per warp");

#define TC2D_THREADS (2 * TC_THREADS) /* 8 MMA warps, then 8 loader warps */
#define TC2D_BUFFERS 2                /* tile buffers (sA and sB each) */

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

typedef struct tc2d_params {
    const double *in; /* origins */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_y, lim_x; /* n + halo of `in`: first unreadable */
    ptrdiff_t tiles_x;      /* tile (ty, tx) of a plane: ty * tiles_x + tx */
    ptrdiff_t z0;           /* first plane of this launch */
    ptrdiff_t tiles_plane;  /* tiles of one plane */
    ptrdiff_t planes;       /* planes of this launch */
    unsigned blocks;        /* host: persistent blocks (one per SM) */
    int ld;
    int matrix_size;
    const int *lut;
    const double *wa;
    const double *wb;
} tc2d_params;

/* The barrier between the two roles, which reach it from different code
   (bar.sync over the whole block, as PTX allows for producer/consumer). */
static __device__ __forceinline__ void
tc2d_barrier()
{
#if defined(CS_CUDA_EMULATION)
    __syncthreads();
#else
    asm volatile("bar.sync 1;" : : : "memory");
#endif
}

/* Tile t of the launch: its plane z and its first output row and column. */
static __device__ __forceinline__ void
tc2d_tile_at(const tc2d_params &p, ptrdiff_t t, ptrdiff_t *z, ptrdiff_t *i0,
             ptrdiff_t *j0)
{
    const ptrdiff_t plane = t / p.tiles_plane;
    const ptrdiff_t rest = t - plane * p.tiles_plane;
    const ptrdiff_t ty = rest / p.tiles_x;
    *z = p.z0 + plane;
    *i0 = ty * TC_TR;
    *j0 = (rest - ty * p.tiles_x) * TC_COLS;
}

/* Buffer b's matrices: sA (returned), then sB at sA + matrix_size. */
static __device__ __forceinline__ double *
tc2d_buffer(double *smem, const tc2d_params &p, int b)
{
    return smem + (ptrdiff_t)b * 2 * p.matrix_size;
}

/*
 * Loader thread tid (0..255): stencil2row of tile t into the buffer at
 * sA, through its lookup-table entries (lut: column col; elut: its
 * element (ex, ey) of the columns past 128, when has_extra).
 */
template <int KY>
static __device__ __forceinline__ void
tc2d_load_tile(const tc2d_params &p, double *sA, ptrdiff_t t, int col,
               int half, const int4 &lut, bool has_extra, int ex, int ey,
               const int4 &elut)
{
    constexpr int RY = (KY - 1) / 2;
    ptrdiff_t z, i0, j0;
    tc2d_tile_at(p, t, &z, &i0, &j0);
    /* opaque: the row offsets are recomputed per tile, not kept live */
    const ptrdiff_t pitch = tc_opaque(p.in_pitch);
    const ptrdiff_t gx = j0 - 3 + col;
    const double *src = p.in + z * p.in_plane + (i0 - RY + half) * pitch + gx;
    double v[TC_HALF_ROWS(KY)];
    tc_fetch_column<KY>(v, src, i0, half, gx, p, pitch);
    double ev = 0.0;
    tc_fetch_extra<KY>(ev, has_extra, ex, ey, i0, j0, z, p);
    tc_store_tile<KY, TC_P>(sA, sA + p.matrix_size, v, half, lut, has_extra,
                            ex, ev, elut);
}

/* The loader warps: tile blockIdx.x into buffer 0, then tile t + gridDim.x
   into the other buffer while the MMA warps compute tile t. */
template <int KY>
static __device__ __forceinline__ void
tc2d_loader(const tc2d_params &p, double *smem, int tid, ptrdiff_t tiles)
{
    const int col = tid % TC_COLS;
    const int half = tid / TC_COLS;
    const int4 lut = *reinterpret_cast<const int4 *>(p.lut + 4 * col);
    const bool has_extra = tid < TC_EXTRA_COLS * TC_IN_ROWS(KY);
    const int ey = TC_COLS + tid % TC_EXTRA_COLS; /* tile column */
    const int ex = tid / TC_EXTRA_COLS;           /* tile row */
    const int4 elut = has_extra
                          ? *reinterpret_cast<const int4 *>(p.lut + 4 * ey)
                          : make_int4(0, 0, 0, 0);
    for (int b = 0; b < TC2D_BUFFERS; b++) {
        double *sA = tc2d_buffer(smem, p, b);
        tc_zero_tails<KY>(sA, sA + p.matrix_size, tid, p);
    }
    ptrdiff_t t = blockIdx.x;
    tc2d_load_tile<KY>(p, tc2d_buffer(smem, p, 0), t, col, half, lut,
                       has_extra, ex, ey, elut);
    tc2d_barrier();
    for (int b = 1; t < tiles; t += gridDim.x, b ^= 1) {
        if (t + gridDim.x < tiles) {
            tc2d_load_tile<KY>(p, tc2d_buffer(smem, p, b), t + gridDim.x,
                               col, half, lut, has_extra, ex, ey, elut);
        }
        tc2d_barrier();
    }
}

/* The MMA warps (tid 0..255): tile t from the buffer the loaders filled
   for it, rows warp + 8q, TC_QN at a time (independent accumulators). */
template <int KY>
static __device__ __forceinline__ void
tc2d_compute(const tc2d_params &p, double *smem, int tid, ptrdiff_t tiles)
{
    constexpr int KSTEPS = TC_KSTEPS(KY);
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int gq = lane >> 2;
    const int kq = lane & 3;
    double fa[KSTEPS], fb[KSTEPS];
    tc_load_fragments<KSTEPS>(fa, fb, p.wa, p.wb, gq, kq);
    const int g_lo = tc_group_of_row(gq); /* of MMA row gq */
    const int g_hi = g_lo + 2;            /* of MMA row gq + 8 */
    tc2d_barrier();
    int b = 0;
    for (ptrdiff_t t = blockIdx.x; t < tiles; t += gridDim.x, b ^= 1) {
        const double *sA = tc2d_buffer(smem, p, b);
        const double *sB = sA + p.matrix_size;
        const double *a_lo = sA + g_lo * p.ld + kq;
        const double *a_hi = sA + g_hi * p.ld + kq;
        const double *b_lo = sB + g_lo * p.ld + kq;
        const double *b_hi = sB + g_hi * p.ld + kq;
        ptrdiff_t z, i0, j0;
        tc2d_tile_at(p, t, &z, &i0, &j0);
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
        tc2d_barrier();
    }
}

template <int KY>
__global__ void __launch_bounds__(TC2D_THREADS, 1)
tc2d_kernel(const tc2d_params p)
{
    static_assert(TC_IN_ROWS(KY) % 2 == 0, "odd ky and even tile rows");
    extern __shared__ double smem[];
    const ptrdiff_t tiles = p.tiles_plane * p.planes;
    if (threadIdx.x < TC_THREADS) {
        tc2d_compute<KY>(p, smem, threadIdx.x, tiles);
    } else {
        tc2d_loader<KY>(p, smem, threadIdx.x - TC_THREADS, tiles);
    }
}

/* ------------------------------------------------------------------------
 * host: layout check
 * --------------------------------------------------------------------- */

/* Two tile buffers of two matrices of matrix_size doubles. */
static size_t
tc2d_smem_bytes(int matrix_size)
{
    return TC2D_BUFFERS * 2 * (size_t)matrix_size * sizeof(double);
}

size_t
cs_cuda_tc2d_smem_bytes(const cs_layout2d *layout)
{
    return tc2d_smem_bytes(layout->matrix_size);
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

/* Launches the KY instance for tc_launch_planes: p.blocks persistent
   blocks (fewer for fewer tiles) over the tiles of grid.y planes. */
struct tc2d_launcher {
    template <int KY>
    static cs_status
    run(cs_cuda_ctx *ctx, const tc2d_params &p, dim3 grid, size_t smem,
        const char *name)
    {
        tc2d_params q = p;
        q.planes = grid.y;
        const ptrdiff_t tiles = q.tiles_plane * q.planes;
        const unsigned n =
            tiles < (ptrdiff_t)q.blocks ? (unsigned)tiles : q.blocks;
        CS_TRY(tc_allow_smem(ctx, tc2d_kernel<KY>, smem, name));
        tc2d_kernel<KY><<<n, TC2D_THREADS, smem, ctx->stream>>>(q);
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
             && plan->spare_sms >= 0 && ctx->sms >= 1
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
    memset(&p, 0, sizeof(p));
    ptrdiff_t tiles = 0;
    CS_TRY(tc_params_fill(ctx, in, out, plan, TC_TR, TC_COLS, "tc2d_kernel",
                          &p, &tiles));
    p.tiles_plane = tiles;
    /* one block per SM, less the SMs left to the band fix-ups */
    p.blocks =
        (unsigned)(ctx->sms - plan->spare_sms >= 1 ? ctx->sms - plan->spare_sms
                                                   : 1);
    const size_t smem = tc2d_smem_bytes(plan->matrix_size);
    static const char *const names[4] = {
        "tc2d_kernel<ky=1>", "tc2d_kernel<ky=3>", "tc2d_kernel<ky=5>",
        "tc2d_kernel<ky=7>"};
    return tc_launch_planes<tc2d_launcher>(ctx, p, ky, tiles, smem, names);
}
