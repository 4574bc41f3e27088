/*
 * tc3d.cu -- the 3D stencil on FP64 tensor cores: a 3D kernel is a sum of
 * 2D kernels over its z-planes,
 *     out[z] = sum over dz of W_dz (*) in[z + dz - rz],
 * each dense plane W_dz computed with tc2d's stencil2row tile and dual
 * tessellation (tc_tile.cuh), all accumulated in the same MMA
 * accumulators.
 *
 * Planes are classified on the host (cs_cuda_tc3d_classify): all-zero
 * planes are skipped; a plane with one nonzero weight (a "point plane",
 * e.g. the outer planes of a star stencil and of its fused powers) costs
 * one fused multiply-add per output on CUDA cores instead of a tile load
 * and 2*kpad/4 MMAs per row; the other planes are dense.  Every dense
 * plane has the layout of the kernel's ky x kx (csrc/layout.h), so the
 * lookup table and the shared-memory geometry are tc2d's, checked by
 * cs_cuda_tc2d_check_layout; each plane has its own weight matrices WA /
 * WB (kpad x 8, cs_layout2d_weights), one after another in device memory.
 *
 * One block (256 threads) computes the tc2d tile of 32 output rows x 128
 * output columns of one output plane z.  For each dense plane dz it
 * issues the loads of input plane z + dz - rz into registers (before the
 * barrier, so they overlap the other warps' MMAs on the previous plane),
 * waits until every warp is done reading sA/sB, stores the tile through
 * the lookup table, waits again, loads that plane's weight fragments
 * (__ldg: the same few KB for every block, cache-resident) and runs the
 * MMAs of its 4 rows per warp into the 4 accumulators, which live across
 * planes.  The point planes are added from global memory (each thread
 * reads the inputs of exactly the outputs it stores), then the outputs
 * are stored as in tc2d.  The padded input grid has a halo of rz planes,
 * so plane z + dz - rz always exists: the boundary modes come from the
 * halo fill, as in 2D.  Loop bounds and plane offsets come from the
 * parameters: no integer division in the loop over planes.
 *
 * The fragments of a plane are loaded after its tile, not before: with
 * the tile's values (19 doubles for ky = 7) and the accumulators live,
 * another 26 doubles of fragments would not fit the 128 registers that
 * __launch_bounds__(256, 2) allows (two blocks of 84 KB of shared memory
 * per SM, as in 2D).
 */
#include "tc_params.cuh"
#include "tc_tile.cuh"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

/* Field names as tc2d_params: the tc_tile.cuh functions read them. */
typedef struct tc3d_params {
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
    const double *wa;       /* the dense planes' WA, kpad x 8 each */
    const double *wb;       /* and their WB */
    int kz, rz;
    unsigned dense_mask;    /* bit dz: plane dz is dense */
    int points;             /* point planes */
    /* offset of each point tap from the output's own position in `in`:
       (dz - rz) * in_plane + (dy - ry) * in_pitch + dx - rx */
    ptrdiff_t point_off[CS_TC3D_MAX_KZ];
    double point_w[CS_TC3D_MAX_KZ];
} tc3d_params;

template <int KY>
__global__ void __launch_bounds__(TC_THREADS, 2)
tc3d_kernel(const tc3d_params p)
{
    constexpr int RY = (KY - 1) / 2;
    constexpr int IN_ROWS = TC_IN_ROWS(KY);
    constexpr int HALF_ROWS = TC_HALF_ROWS(KY);
    constexpr int KSTEPS = TC_KSTEPS(KY);
    constexpr int QN = TC_ROWS_PER_WARP; /* every row of a warp at once */
    static_assert(IN_ROWS % 2 == 0, "odd ky and even tile rows");

    extern __shared__ double smem[];
    double *sA = smem;
    double *sB = smem + p.matrix_size;

    const int tid = threadIdx.x;
    const ptrdiff_t j0 = (ptrdiff_t)(blockIdx.x % p.tiles_x) * TC_COLS;
    const ptrdiff_t i0 = (ptrdiff_t)(blockIdx.x / p.tiles_x) * TC_TR;
    const ptrdiff_t z = p.z0 + blockIdx.y; /* output plane */
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int gq = lane >> 2;
    const int kq = lane & 3;

    /* ---- the loader's columns (tc_tile.cuh): tile column tid % 128 for
       rows tid / 128, +2, ..., and one element of the 6 columns past 128;
       src0 is the thread's first element in input plane z - rz ---- */
    constexpr int EXTRA_COLS = TC_EXTRA_COLS;
    const int col = tid % TC_COLS;
    const int half = tid / TC_COLS;
    const ptrdiff_t gx = j0 - 3 + col; /* grid column of tile column col */
    const double *src0 =
        p.in + (z - p.rz) * p.in_plane + (i0 - RY + half) * p.in_pitch + gx;
    const int4 lut = *reinterpret_cast<const int4 *>(p.lut + 4 * col);
    const bool has_extra = tid < EXTRA_COLS * IN_ROWS;
    const int ey = TC_COLS + tid % EXTRA_COLS; /* tile column */
    const int ex = tid / EXTRA_COLS;           /* tile row */
    const int4 elut = has_extra
                          ? *reinterpret_cast<const int4 *>(p.lut + 4 * ey)
                          : make_int4(0, 0, 0, 0);

    /* the row tails are never loaded: zero them once, for every plane
       (the first plane's barriers order this before any MMA) */
    if (p.dense_mask != 0) {
        tc_zero_tails<KY>(sA, sB, tid, p);
    }

    /* ---- this thread's operand rows and output columns ---- */
    const int g_lo = tc_group_of_row(gq); /* of MMA row gq */
    const int g_hi = g_lo + 2;            /* of MMA row gq + 8 */
    const double *a_lo = sA + g_lo * p.ld + kq;
    const double *a_hi = sA + g_hi * p.ld + kq;
    const double *b_lo = sB + g_lo * p.ld + kq;
    const double *b_hi = sB + g_hi * p.ld + kq;
    const ptrdiff_t j_lo = j0 + TC_G * g_lo + 2 * kq;
    const ptrdiff_t j_hi = j0 + TC_G * g_hi + 2 * kq;

    double acc[QN][4];
#pragma unroll
    for (int q = 0; q < QN; q++) {
        acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0;
    }

    /* ---- dense planes on tensor cores ---- */
    const double *wa = p.wa;
    const double *wb = p.wb;
    const double *src = src0;
    for (int dz = 0; dz < p.kz; dz++, src += p.in_plane) {
        if (((p.dense_mask >> dz) & 1u) == 0) {
            continue;
        }
        /* the tile rows' bounds checks, recomputed per plane */
        const ptrdiff_t i0_ = tc_opaque(i0);
        double v[HALF_ROWS];
        tc_fetch_column<KY>(v, src, i0_, half, gx, p, p.in_pitch);
        double ev = 0.0;
        tc_fetch_extra<KY>(ev, has_extra, ex, ey, i0_, j0, z - p.rz + dz, p);
        __syncthreads(); /* every warp is done with the previous plane */
        tc_store_tile<KY, TC_P>(sA, sB, v, half, lut, has_extra, ex, ev, elut);
        __syncthreads();
        double fa[KSTEPS], fb[KSTEPS];
        tc_load_fragments<KSTEPS>(fa, fb, wa, wb, gq, kq);
        tc_mma_rows<KSTEPS, QN>(acc, a_lo, a_hi, b_lo, b_hi, warp, 0, fa, fb);
        wa += 4 * KSTEPS * TC_G;
        wb += 4 * KSTEPS * TC_G;
    }

    /* ---- point planes on CUDA cores: the inputs of this thread's own
       outputs, skipping those past the grid (not stored, and their
       inputs may lie past the padded grid) ---- */
#pragma unroll
    for (int t = 0; t < CS_TC3D_MAX_KZ; t++) {
        if (t < p.points) {
            const double w = p.point_w[t];
#pragma unroll
            for (int q = 0; q < QN; q++) {
                const ptrdiff_t i = i0 + warp + TC_WARPS * q;
                if (i < p.ny) {
                    const double *row = p.in + z * p.in_plane
                                        + i * p.in_pitch + p.point_off[t];
                    if (j_lo < p.nx) {
                        acc[q][0] = fma(w, __ldg(row + j_lo), acc[q][0]);
                    }
                    if (j_lo + 1 < p.nx) {
                        acc[q][1] = fma(w, __ldg(row + j_lo + 1), acc[q][1]);
                    }
                    if (j_hi < p.nx) {
                        acc[q][2] = fma(w, __ldg(row + j_hi), acc[q][2]);
                    }
                    if (j_hi + 1 < p.nx) {
                        acc[q][3] = fma(w, __ldg(row + j_hi + 1), acc[q][3]);
                    }
                }
            }
        }
    }

    tc_store_rows<QN>(acc, z, i0, warp, 0, j_lo, j_hi, p);
}

/* ------------------------------------------------------------------------
 * host: plane classification
 * --------------------------------------------------------------------- */

cs_status
cs_cuda_tc3d_classify(cs_cuda_ctx *ctx, const cs_kernel *k,
                      cs_tc3d_plan *plan)
{
    const ptrdiff_t kz = k->size[0], ky = k->size[1], kx = k->size[2];
    if (k->weights == NULL || kz < 1 || kz > CS_TC3D_MAX_KZ || kz % 2 == 0
        || ky < 1 || kx < 1) {
        cs_cuda_message(ctx, "cs_cuda_tc3d_classify: kernel of %td planes "
                             "(1 to %d, odd)",
                        kz, CS_TC3D_MAX_KZ);
        return CS_ERR_INVALID;
    }
    plan->kz = (int)kz;
    plan->dense = 0;
    plan->dense_mask = 0;
    plan->points = 0;
    for (int dz = 0; dz < (int)kz; dz++) {
        const double *w = k->weights + (size_t)dz * (size_t)(ky * kx);
        ptrdiff_t nonzero = 0, at = 0;
        for (ptrdiff_t e = 0; e < ky * kx; e++) {
            if (w[e] != 0.0) {
                nonzero++;
                at = e;
            }
        }
        if (nonzero == 1) {
            const int t = plan->points++;
            plan->point_dz[t] = dz;
            plan->point_y[t] = (int)(at / kx - (ky - 1) / 2);
            plan->point_x[t] = (int)(at % kx - (kx - 1) / 2);
            plan->point_w[t] = w[at];
        } else if (nonzero > 1) {
            plan->dense++;
            plan->dense_mask |= 1u << dz;
        }
    }
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * launcher
 * --------------------------------------------------------------------- */

/* Launches the KY instance for tc_launch_planes. */
struct tc3d_launcher {
    template <int KY>
    static cs_status
    run(cs_cuda_ctx *ctx, const tc3d_params &p, dim3 grid, size_t smem,
        const char *name)
    {
        CS_TRY(tc_allow_smem(ctx, tc3d_kernel<KY>, smem, name));
        tc3d_kernel<KY><<<grid, TC_THREADS, smem, ctx->stream>>>(p);
        return cs_cuda_check_launch(ctx, name);
    }
};

/* Are the plane classification's fields consistent (kz odd, bits and
   taps inside the kernel, dense = bits set)? */
static int
planes_ok(const cs_tc3d_plan *plan)
{
    if (plan->kz < 1 || plan->kz > CS_TC3D_MAX_KZ || plan->kz % 2 == 0
        || plan->points < 0 || plan->dense < 0
        || plan->dense + plan->points > plan->kz
        || (plan->dense_mask >> plan->kz) != 0) {
        return 0;
    }
    int bits = 0;
    for (int dz = 0; dz < plan->kz; dz++) {
        bits += (int)((plan->dense_mask >> dz) & 1u);
    }
    for (int t = 0; t < plan->points; t++) {
        if (plan->point_dz[t] < 0 || plan->point_dz[t] >= plan->kz
            || 2 * abs(plan->point_y[t]) > plan->tile.ky - 1
            || 2 * abs(plan->point_x[t]) > TC_P - 1) {
            return 0;
        }
    }
    return bits == plan->dense;
}

cs_status
cs_cuda_tc3d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_tc3d_plan *plan)
{
    const cs_tc2d_plan *tile = &plan->tile;
    const int ky = tile->ky;
    const int rz = (plan->kz - 1) / 2;
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && tile->lut != NULL
             && (plan->dense == 0 || (tile->wa != NULL && tile->wb != NULL))
             && (ky == 1 || ky == 3 || ky == 5 || ky == 7) && planes_ok(plan)
             && in->halo[0] >= rz && in->halo[1] >= (ky - 1) / 2
             && in->halo[2] >= 3
             /* double2 stores: 16-byte aligned rows */
             && ((uintptr_t)out->origin % 16) == 0 && out->pitch % 2 == 0
             && out->plane % 2 == 0
             /* int4 lookup-table loads */
             && ((uintptr_t)tile->lut % 16) == 0;
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= 1;
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_tc3d_pass: invalid grids or plan");
        return CS_ERR_INVALID;
    }
    tc3d_params p;
    memset(&p, 0, sizeof(p));
    ptrdiff_t tiles = 0;
    CS_TRY(tc_params_fill(ctx, in, out, tile, TC_TR, TC_COLS, "tc3d_kernel",
                          &p, &tiles));
    p.kz = plan->kz;
    p.rz = rz;
    p.dense_mask = plan->dense_mask;
    p.points = plan->points;
    for (int t = 0; t < plan->points; t++) {
        p.point_off[t] = (ptrdiff_t)(plan->point_dz[t] - rz) * in->plane
                         + (ptrdiff_t)plan->point_y[t] * in->pitch
                         + plan->point_x[t];
        p.point_w[t] = plan->point_w[t];
    }
    const size_t smem = 2 * (size_t)tile->matrix_size * sizeof(double);
    static const char *const names[4] = {
        "tc3d_kernel<ky=1>", "tc3d_kernel<ky=3>", "tc3d_kernel<ky=5>",
        "tc3d_kernel<ky=7>"};
    return tc_launch_planes<tc3d_launcher>(ctx, p, ky, tiles, smem, names);
}
