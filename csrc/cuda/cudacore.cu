/*
 * cudacore.cu -- the direct stencil on CUDA cores: any odd 3D box kernel
 * (1D and 2D as thin boxes), any radius.  It runs the "cuda-core" path,
 * the unfused remainder steps of the tensor-core path, and the step-by-
 * step recomputation of the boundary band on edge strips.
 *
 * Tiling (PMPP ch. 8): a block of 256 threads computes an output tile of
 * BX columns x BY*CY rows x CZ planes.  Each thread owns one column x and
 * CY consecutive rows (coarsening along y, the slow axis of a plane) for
 * each of CZ consecutive planes (coarsening along z, the slow axis of a
 * volume): CY*CZ accumulators in registers.  The block streams the input
 * planes z0-rz .. z0+CZ-1+rz through one shared-memory tile (with its
 * halo), so every input plane is loaded once per block and feeds up to CZ
 * output planes.  Kernels wider than the tile's halo allowance are cut
 * into chunks of at most CKY x CKX taps per plane, each loaded as its own
 * tile, so shared memory is a fixed 32 KB whatever the radius.
 *
 * Weights are read from a device array with warp-uniform addresses
 * (cached, one transaction per warp); zero weights are skipped (star
 * stencils cost their nonzero taps only).  Loads past the input's padded
 * box (whole tiles hanging over the right/bottom edge) read zero; those
 * values feed only outputs outside the grid, which are not stored.
 *
 * Variants: 1D rows (256 x 1 x 1 tile), 2D planes (32 x 32 x 1), 3D
 * volumes (32 x 32 x 4).
 */
#include "kernels.cuh"

#include <limits.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

typedef struct cc_params {
    const double *in; /* origins */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_z, lim_y, lim_x; /* n + halo of `in`: first unreadable */
    int kz, ky, kx;
    int rz, ry, rx;
    const double *w;               /* kz*ky*kx, device */
    ptrdiff_t tiles_x;             /* blockIdx.x = tile_y * tiles_x + tile_x */
    ptrdiff_t tz0;                 /* z tile of blockIdx.y == 0 */
} cc_params;

template <int BX, int BY, int CY, int CZ, int SROWS, int SCOLS>
__global__ void __launch_bounds__(BX * BY)
cudacore_kernel(const cc_params p)
{
    constexpr int TY = BY * CY;         /* output rows per block */
    constexpr int CKY = SROWS - TY + 1; /* kernel rows per chunk */
    constexpr int CKX = SCOLS - BX + 1; /* kernel columns per chunk */
    static_assert(CKY >= 1 && CKX >= 1, "tile smaller than the output");
    __shared__ double tile[SROWS][SCOLS];

    const int tx = threadIdx.x % BX;
    const int ty = threadIdx.x / BX;
    const ptrdiff_t x0 = (ptrdiff_t)(blockIdx.x % p.tiles_x) * BX;
    const ptrdiff_t y0 = (ptrdiff_t)(blockIdx.x / p.tiles_x) * TY;

    const ptrdiff_t z0 = (p.tz0 + blockIdx.y) * CZ;
    double acc[CZ][CY];
#pragma unroll
    for (int cz = 0; cz < CZ; cz++) {
#pragma unroll
        for (int c = 0; c < CY; c++) {
            acc[cz][c] = 0.0;
        }
    }
    for (int dy0 = 0; dy0 < p.ky; dy0 += CKY) {
        const int cky = min(CKY, p.ky - dy0);
        const int rows = TY + cky - 1;
        for (int dx0 = 0; dx0 < p.kx; dx0 += CKX) {
            const int ckx = min(CKX, p.kx - dx0);
            const int cols = BX + ckx - 1;
            for (int pl = 0; pl < CZ + p.kz - 1; pl++) {
                const ptrdiff_t gz = z0 - p.rz + pl;
                /* the previous tile's readers are done */
                __syncthreads();
                for (int r = ty; r < rows; r += BY) {
                    const ptrdiff_t gy = y0 - p.ry + dy0 + r;
                    const bool row_ok = gz < p.lim_z && gy < p.lim_y;
                    const double *src =
                        p.in + gz * p.in_plane + gy * p.in_pitch;
                    for (int c = tx; c < cols; c += BX) {
                        const ptrdiff_t gx = x0 - p.rx + dx0 + c;
                        tile[r][c] =
                            (row_ok && gx < p.lim_x) ? src[gx] : 0.0;
                    }
                }
                __syncthreads();
#pragma unroll
                for (int cz = 0; cz < CZ; cz++) {
                    /* input plane pl feeds output plane cz via tap dz */
                    const int dz = pl - cz;
                    if (dz < 0 || dz >= p.kz) {
                        continue;
                    }
                    const double *w =
                        p.w + ((ptrdiff_t)dz * p.ky + dy0) * p.kx + dx0;
                    for (int dy = 0; dy < cky; dy++) {
                        for (int dx = 0; dx < ckx; dx++) {
                            const double wv = __ldg(w + dy * p.kx + dx);
                            if (wv == 0.0) {
                                continue;
                            }
#pragma unroll
                            for (int c = 0; c < CY; c++) {
                                acc[cz][c] = fma(
                                    wv, tile[ty * CY + c + dy][tx + dx],
                                    acc[cz][c]);
                            }
                        }
                    }
                }
            }
        }
    }
    const ptrdiff_t x = x0 + tx;
#pragma unroll
    for (int cz = 0; cz < CZ; cz++) {
        const ptrdiff_t z = z0 + cz;
#pragma unroll
        for (int c = 0; c < CY; c++) {
            const ptrdiff_t y = y0 + ty * CY + c;
            if (z < p.nz && y < p.ny && x < p.nx) {
                p.out[z * p.out_plane + y * p.out_pitch + x] = acc[cz][c];
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * launcher
 * --------------------------------------------------------------------- */

template <int BX, int BY, int CY, int CZ, int SROWS, int SCOLS>
static cs_status
launch_cudacore(cs_cuda_ctx *ctx, cc_params p, const char *name)
{
    const ptrdiff_t tiles_x = CEIL_DIV(p.nx, (ptrdiff_t)BX);
    const ptrdiff_t tiles_y = CEIL_DIV(p.ny, (ptrdiff_t)(BY * CY));
    const ptrdiff_t tiles_z = CEIL_DIV(p.nz, (ptrdiff_t)CZ);
    if (tiles_x * tiles_y > INT_MAX) {
        cs_cuda_message(ctx, "%s: grid plane of %td x %td is too large", name,
                        p.ny, p.nx);
        return CS_ERR_UNSUPPORTED;
    }
    p.tiles_x = tiles_x;
    /* grid.y: one z tile per block, at most 65535 per launch */
    for (p.tz0 = 0; p.tz0 < tiles_z; p.tz0 += 65535) {
        const ptrdiff_t nt = tiles_z - p.tz0 < 65535 ? tiles_z - p.tz0 : 65535;
        dim3 grid((unsigned)(tiles_x * tiles_y), (unsigned)nt);
        cudacore_kernel<BX, BY, CY, CZ, SROWS, SCOLS><<<grid, BX * BY, 0, ctx->stream>>>(p);
        CS_TRY(cs_cuda_check_launch(ctx, name));
    }
    return CS_OK;
}

/* Whether cc2d may run a kernel of this side and tap set into `out`: its
   rows 16-byte aligned, and the device's shared memory large enough. */
static int
cc2d_fits(const cs_cuda_ctx *ctx, const cs_dgrid *out, int side, int shape)
{
    return (uintptr_t)out->origin % 16 == 0 && out->pitch % 2 == 0
           && out->plane % 2 == 0
           && cs_cuda_cc2d_smem_bytes(side, shape) <= (size_t)ctx->smem_optin;
}

cs_status
cs_cuda_core_step(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k)
{
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && k->weights != NULL;
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= 1 && k->size[a] >= 1
             && k->size[a] % 2 == 1 && in->halo[a] >= (k->size[a] - 1) / 2;
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_core_step: invalid grids or kernel");
        return CS_ERR_INVALID;
    }
    const int shape =
        in->n[0] > 1 ? cs_cc3d_taps(k->size, k->host_weights) : -1;
    if (shape >= 0) {
        return cs_cuda_cc3d_step(ctx, in, out, k, shape); /* streams in z */
    }
    double col[CS_CC2D_MAX_SIDE], row[CS_CC2D_MAX_SIDE];
    const int shape2 =
        cs_cc2d_taps_factored(k->size, k->host_weights, col, row);
    if (shape2 >= 0 && cc2d_fits(ctx, out, k->size[1], shape2)) {
        /* planar */
        return cs_cuda_cc2d_step(ctx, in, out, k, shape2, col, row);
    }
    cc_params p;
    cs_step_params_grids(&p, in, out);
    p.kz = k->size[0];
    p.ky = k->size[1];
    p.kx = k->size[2];
    p.rz = (p.kz - 1) / 2;
    p.ry = (p.ky - 1) / 2;
    p.rx = (p.kx - 1) / 2;
    p.w = k->weights;
    p.tiles_x = 0;
    p.tz0 = 0;
    /* tile shapes: 32 KB of shared memory each (see the top comment) */
    if (p.nz > 1) {
        return launch_cudacore<32, 8, 4, 4, 64, 64>(ctx, p,
                                                    "cudacore_kernel<3d>");
    }
    if (p.ny > 1) {
        return launch_cudacore<32, 8, 4, 1, 64, 64>(ctx, p,
                                                    "cudacore_kernel<2d>");
    }
    return launch_cudacore<256, 1, 1, 1, 4, 1024>(ctx, p,
                                                  "cudacore_kernel<1d>");
}
