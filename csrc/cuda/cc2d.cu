/*
 * cc2d.cu -- planar stencils of side 3, 5 or 7 on CUDA cores, with
 * register tiling in both x and y (PMPP ch. 8's thread coarsening) and
 * the taps fixed at compile time.
 *
 * A block of 512 threads (64 along x, 8 along y) computes output tiles of
 * 128 columns x 64 rows (256 threads and 32 rows for the 7 x 7 box of
 * 49 taps):
 * thread (tx, ty) owns CX = 2 adjacent columns and CY = 8 consecutive
 * rows, 16 accumulators.  For each input row of its
 * (CY + K - 1) x (CX + K - 1) neighbourhood it reads the values once, as
 * 16-byte shared loads (the 32 lanes of a warp read 512 contiguous bytes:
 * no bank conflict), and adds them, times the weights, into every
 * accumulator they feed: each shared value serves up to CX * CY outputs.
 *
 * The blocks are persistent (one or two per SM) and walk the tiles of every
 * plane; each tile's input, (rows + K - 1) x (128 + K - 1) doubles, comes
 * into one of two shared buffers by asynchronous copies (cp.async)
 * issued while the block computes the previous tile, so a whole tile of
 * loads per block is in flight without registers to hold them.
 *
 * Taps: every tap of the K x K box (CS_CC2D_BOX), or only the centre row
 * and column (CS_CC2D_PLUS: star2d13p and the 5-point star, whose outer
 * rows read just the two values of the centre column), so no loop tests
 * a weight.  A kernel that is an outer product col (x) row (CS_CC2D_RANK1:
 * box2d49p) takes the same loads, but each input row is first reduced
 * along x (K multiply-adds per column of the thread) and the row sums
 * are added down the columns (one multiply-add per output row they
 * feed): 7 * 14 / 8 + 7 = 19.25 multiply-adds per output of a 7 x 7
 * kernel instead of 49.  The weights are launch parameters (the constant
 * bank).
 *
 * Loads past the padded grid (a tile over the far edge in x or y) read
 * as zero; they feed only outputs outside the grid, not stored.
 */
#include "kernels.cuh"
#include "async_copy.cuh"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define CC2D_BX 64 /* threads along x */
#define CC2D_CX 2  /* columns per thread */
#define CC2D_CY 8  /* rows per thread */
#define CC2D_TX (CC2D_BX * CC2D_CX) /* 128 columns */
#define CC2D_MAX_K CS_CC2D_MAX_SIDE

/* Output rows of a tile of a block of T threads, and the blocks per SM
   it is built for: 256 threads, 2 blocks (the 7 x 7 box: its 49 taps need
   the registers) or 512 threads, 1 block (taller tiles, less halo). */
#define CC2D_TY(T) ((T) / CC2D_BX * CC2D_CY)
#define CC2D_MINB(T) ((T) == 256 ? 2 : 1)

typedef struct cc2d_params {
    const double *in; /* origins */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_y, lim_x; /* n + halo of `in`: first unreadable */
    ptrdiff_t tiles_x, tiles_plane, tiles; /* per row, per plane, in all */
    double w[CC2D_MAX_K * CC2D_MAX_K];     /* K x K, C order */
    double col[CC2D_MAX_K], row[CC2D_MAX_K]; /* CS_CC2D_RANK1: w's
                                                factors, by dy and dx */
} cc2d_params;

/* Shared-memory row length of a tile of a kernel of side K: even, so that
   every row starts 16-byte aligned. */
#define CC2D_SX(K) (CC2D_TX + (K) - 1)
#define CC2D_SY(K, T) (CC2D_TY(T) + (K) - 1)
#define CC2D_TILE(K, T) (CC2D_SX(K) * CC2D_SY(K, T))

/* Whether tap (dy, dx) of a K x K kernel is computed. */
template <int K, int SHAPE>
static __host__ __device__ constexpr bool
cc2d_tap(int dy, int dx)
{
    return SHAPE != CS_CC2D_PLUS || dy == (K - 1) / 2 || dx == (K - 1) / 2;
}

/* Whether input row rr of a thread's neighbourhood needs value i of its
   CX + K - 1 (some tap of some output row reads it). */
template <int K, int SHAPE>
static __host__ __device__ constexpr bool
cc2d_needed(int rr, int i)
{
    for (int c = 0; c < CC2D_CY; c++) {
        const int dy = rr - c;
        for (int cx = 0; cx < CC2D_CX; cx++) {
            const int dx = i - cx;
            if (dy >= 0 && dy < K && dx >= 0 && dx < K
                && cc2d_tap<K, SHAPE>(dy, dx)) {
                return true;
            }
        }
    }
    return false;
}

/* Tile t (TY rows): its plane and first output row and column. */
template <int TY>
static __device__ __forceinline__ void
cc2d_tile_at(const cc2d_params &p, ptrdiff_t t, ptrdiff_t *z, ptrdiff_t *y0,
             ptrdiff_t *x0)
{
    *z = t / p.tiles_plane;
    const ptrdiff_t rest = t - *z * p.tiles_plane;
    const ptrdiff_t ty = rest / p.tiles_x;
    *y0 = ty * TY;
    *x0 = (rest - ty * p.tiles_x) * CC2D_TX;
}

/* Start copying tile t's input (rows y0 - r .., columns x0 - r ..) into
   `buf`; the block's threads take consecutive elements of its rows. */
template <int K, int T>
static __device__ __forceinline__ void
cc2d_issue(double *buf, const cc2d_params &p, ptrdiff_t t)
{
    constexpr int R = (K - 1) / 2;
    constexpr int SX = CC2D_SX(K);
    constexpr int TILE = CC2D_TILE(K, T);
    ptrdiff_t z, y0, x0;
    cc2d_tile_at<CC2D_TY(T)>(p, t, &z, &y0, &x0);
    const double *src = p.in + z * p.in_plane + (y0 - R) * p.in_pitch
                        + (x0 - R);
#pragma unroll 4
    for (int e = (int)threadIdx.x; e < TILE; e += T) {
        const int r = e / SX, c = e - (e / SX) * SX;
        const bool ok = y0 - R + r < p.lim_y && x0 - R + c < p.lim_x;
        cs_copy_async8(buf + e, ok ? src + r * p.in_pitch + c : p.in, ok);
    }
}

/* Add input row rr of the thread's neighbourhood (its values v) into
   the accumulators of the output rows it feeds (kernel row dy = rr - c
   for output row c): tap by tap, or, for a kernel col (x) row, the row's
   sums along x times col[dy]. */
template <int K, int SHAPE>
static __device__ __forceinline__ void
cc2d_add_row(double (&acc)[CC2D_CY][CC2D_CX], const double *v,
             const cc2d_params &p, int rr)
{
    double h[CC2D_CX]; /* CS_CC2D_RANK1: v's sums along x, by row[] */
    if constexpr (SHAPE == CS_CC2D_RANK1) {
#pragma unroll
        for (int cx = 0; cx < CC2D_CX; cx++) {
            h[cx] = p.row[0] * v[cx];
#pragma unroll
            for (int dx = 1; dx < K; dx++) {
                h[cx] = fma(p.row[dx], v[dx + cx], h[cx]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < CC2D_CY; c++) {
        const int dy = rr - c;
        if (dy < 0 || dy >= K) {
            continue;
        }
        if constexpr (SHAPE == CS_CC2D_RANK1) {
#pragma unroll
            for (int cx = 0; cx < CC2D_CX; cx++) {
                acc[c][cx] = fma(p.col[dy], h[cx], acc[c][cx]);
            }
        } else {
#pragma unroll
            for (int dx = 0; dx < K; dx++) {
                if (!cc2d_tap<K, SHAPE>(dy, dx)) {
                    continue;
                }
                const double w = p.w[dy * K + dx];
#pragma unroll
                for (int cx = 0; cx < CC2D_CX; cx++) {
                    acc[c][cx] = fma(w, v[dx + cx], acc[c][cx]);
                }
            }
        }
    }
}

/* This thread's 8 rows x 2 columns of one tile from its input in `buf`. */
template <int K, int SHAPE>
static __device__ __forceinline__ void
cc2d_compute(double (&acc)[CC2D_CY][CC2D_CX], const double *buf,
             const cc2d_params &p, int tx, int ty)
{
    constexpr int SX = CC2D_SX(K);
    constexpr int NV = CC2D_CX + K - 1; /* values per input row: even */
    const double *base = buf + ty * CC2D_CY * SX + CC2D_CX * tx;
#pragma unroll
    for (int c = 0; c < CC2D_CY; c++) {
#pragma unroll
        for (int cx = 0; cx < CC2D_CX; cx++) {
            acc[c][cx] = 0.0;
        }
    }
#pragma unroll
    for (int rr = 0; rr < CC2D_CY + K - 1; rr++) {
        double v[NV];
        const double2 *row = (const double2 *)(base + rr * SX);
#pragma unroll
        for (int q = 0; q < NV / 2; q++) {
            if (cc2d_needed<K, SHAPE>(rr, 2 * q)
                || cc2d_needed<K, SHAPE>(rr, 2 * q + 1)) {
                const double2 d = row[q];
                v[2 * q] = d.x;
                v[2 * q + 1] = d.y;
            }
        }
        cc2d_add_row<K, SHAPE>(acc, v, p, rr);
    }
}

/* Store the thread's outputs of tile t (those inside the grid). */
template <int T>
static __device__ __forceinline__ void
cc2d_store(const double (&acc)[CC2D_CY][CC2D_CX], const cc2d_params &p,
           ptrdiff_t t, int tx, int ty)
{
    ptrdiff_t z, y0, x0;
    cc2d_tile_at<CC2D_TY(T)>(p, t, &z, &y0, &x0);
    const ptrdiff_t y = y0 + ty * CC2D_CY, x = x0 + CC2D_CX * tx;
    double *at = p.out + z * p.out_plane + y * p.out_pitch + x;
#pragma unroll
    for (int c = 0; c < CC2D_CY; c++) {
        if (y + c >= p.ny) {
            break;
        }
        double *o = at + c * p.out_pitch;
        if (x + 1 < p.nx) { /* x is even and rows 64-byte aligned */
            *(double2 *)o = make_double2(acc[c][0], acc[c][1]);
        } else if (x < p.nx) {
            o[0] = acc[c][0];
        }
    }
}

template <int K, int SHAPE, int T>
__global__ void __launch_bounds__(T, CC2D_MINB(T))
cc2d_kernel(const cc2d_params p)
{
    extern __shared__ double smem[]; /* two tiles' input buffers */
    const int tx = (int)threadIdx.x % CC2D_BX;
    const int ty = (int)threadIdx.x / CC2D_BX;
    ptrdiff_t t = blockIdx.x;
    if (t < p.tiles) {
        cc2d_issue<K, T>(smem, p, t);
    }
    cs_copy_commit();
    for (int i = 0; t < p.tiles; t += gridDim.x, i ^= 1) {
        /* the other buffer was read by the previous tile: all done with it
           before its next tile's copies start */
        __syncthreads();
        const ptrdiff_t next = t + gridDim.x;
        if (next < p.tiles) {
            cc2d_issue<K, T>(smem + (i ^ 1) * CC2D_TILE(K, T), p, next);
        }
        cs_copy_commit();
        cs_copy_wait<1>(); /* this tile's copies have landed ... */
        __syncthreads(); /* ... every thread's */
        double acc[CC2D_CY][CC2D_CX];
        cc2d_compute<K, SHAPE>(acc, smem + i * CC2D_TILE(K, T), p, tx, ty);
        cc2d_store<T>(acc, p, t, tx, ty);
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

/* Threads per block of the <K, SHAPE> instance: the 7 x 7 box in blocks
   of 256 threads, two per SM, the others in blocks of 512 (chosen by
   measurement on the H100 during development: the 7 x 7 box's 49 taps
   need the registers of the smaller blocks).  Blocks are persistent over
   all tiles (cc2d_launch). */
static constexpr int
cc2d_threads(int k, int shape)
{
    return k == 7 && shape == CS_CC2D_BOX ? 256 : 512;
}

size_t
cs_cuda_cc2d_smem_bytes(int side, int shape)
{
    return 2 * (size_t)CC2D_TILE(side, cc2d_threads(side, shape))
           * sizeof(double);
}

template <int K, int SHAPE>
static cs_status
cc2d_launch(cs_cuda_ctx *ctx, cc2d_params *p, const char *name)
{
    constexpr int T = cc2d_threads(K, SHAPE);
    if (ctx->sms < 1) {
        cs_cuda_message(ctx, "%s: the device's SM count is not known", name);
        return CS_ERR_INVALID;
    }
    p->tiles_plane = p->tiles_x * CEIL_DIV(p->ny, (ptrdiff_t)CC2D_TY(T));
    if (p->tiles_plane > PTRDIFF_MAX / p->nz) {
        cs_cuda_message(ctx, "%s: grid too large", name);
        return CS_ERR_UNSUPPORTED;
    }
    p->tiles = p->tiles_plane * p->nz;
    const size_t smem = cs_cuda_cc2d_smem_bytes(K, SHAPE);
    CS_TRY(cs_cuda_allow_smem(ctx, cc2d_kernel<K, SHAPE, T>, smem, name));
    const ptrdiff_t most = (ptrdiff_t)ctx->sms * CC2D_MINB(T);
    const ptrdiff_t blocks = p->tiles < most ? p->tiles : most;
    cc2d_kernel<K, SHAPE, T><<<(unsigned)blocks, T, smem, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, name);
}

cs_status
cs_cuda_cc2d_step(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int shape, const double *col,
                  const double *row)
{
    const int ks = k->size[1];
    cc2d_params p;
    memset(&p, 0, sizeof(p));
    cs_params_grids(&p, in, out);
    memcpy(p.w, k->host_weights, (size_t)ks * ks * sizeof(double));
    if (shape == CS_CC2D_RANK1) { /* the factors the caller's test found */
        memcpy(p.col, col, (size_t)ks * sizeof(double));
        memcpy(p.row, row, (size_t)ks * sizeof(double));
    }
    p.tiles_x = CEIL_DIV(p.nx, (ptrdiff_t)CC2D_TX);
    switch (ks * 4 + shape) {
    case 12: return cc2d_launch<3, CS_CC2D_BOX>(ctx, &p, "cc2d_kernel<3, box>");
    case 13: return cc2d_launch<3, CS_CC2D_PLUS>(ctx, &p,
                                                 "cc2d_kernel<3, plus>");
    case 14: return cc2d_launch<3, CS_CC2D_RANK1>(ctx, &p,
                                                  "cc2d_kernel<3, rank 1>");
    case 20: return cc2d_launch<5, CS_CC2D_BOX>(ctx, &p,
                                                "cc2d_kernel<5, box>");
    case 21: return cc2d_launch<5, CS_CC2D_PLUS>(ctx, &p,
                                                 "cc2d_kernel<5, plus>");
    case 22: return cc2d_launch<5, CS_CC2D_RANK1>(ctx, &p,
                                                  "cc2d_kernel<5, rank 1>");
    case 28: return cc2d_launch<7, CS_CC2D_BOX>(ctx, &p,
                                                "cc2d_kernel<7, box>");
    case 29: return cc2d_launch<7, CS_CC2D_PLUS>(ctx, &p,
                                                 "cc2d_kernel<7, plus>");
    case 30: return cc2d_launch<7, CS_CC2D_RANK1>(ctx, &p,
                                                  "cc2d_kernel<7, rank 1>");
    default: break;
    }
    cs_cuda_message(ctx, "cs_cuda_cc2d_step: no instance for side %d", ks);
    return CS_ERR_UNSUPPORTED;
}
