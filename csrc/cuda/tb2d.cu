/*
 * tb2d.cu -- temporal blocking of planar 3 x 3 stencils on CUDA cores:
 * T time steps per trip through device memory (the 2.5D idea of the
 * blocking seed, as overlapped tiles).
 *
 * A block owns an output tile of (TB_W - 2T) x (TB_ROWS - 2T) points of
 * one plane.  It reads the tile with T cells of margin on every side
 * (TB_W x TB_ROWS doubles) into shared memory, then steps T times between
 * two shared buffers: level t is exact on the cells at least t from the
 * buffer's border (each step reads one cell further), so after T steps
 * the owned tile is exact and goes back to the grid.  The margins are
 * computed by both neighbouring tiles: (TB_W x TB_ROWS) / owned of the
 * work is redundant, traded for one read and one write of the grid per
 * T steps instead of per step.
 *
 * Boundary modes, exactly as repeated steps apply them:
 *  - wrap: the margins are read periodically, and every cell of the
 *    buffer is a real cell of the periodic grid: each is stepped.
 *  - constant: cells outside the grid are set to cval at every level
 *    instead of stepped.
 *  - nearest, reflect, mirror: cells outside the grid are not stepped;
 *    after each step they are refilled from the cells of the same level
 *    that the mode maps them to (cs_extend_index), which lie within T of
 *    the edge, inside the tile (the planner takes this kernel only for
 *    grids at least TB_MIN_EXTENT wide, and the last tile along an axis
 *    is moved back to end at the grid's edge, so every tile holds T cells
 *    of the grid past each edge it touches).
 * Tiles that touch no edge (nearly all) skip those tests.
 *
 * Threads: TB_W columns x TB_SEGS row segments.  A thread steps its
 * column down its segment with the three input rows it needs in
 * registers (three shared loads per output instead of nine); a plus (the
 * 5-point star, heat2d) takes 5 multiply-adds per output, a box 9.
 * Blocks are persistent, one per SM, with three buffers (192 KB): while
 * the block steps one tile between two of them, the next tile's input
 * arrives in the third by asynchronous copies (cp.async), so the trip
 * through memory overlaps the steps.
 */
#include "kernels.cuh"
#include "async_copy.cuh"

#include <string.h>

#define TB_W 128                   /* buffer columns: the block's threads */
#define TB_ROWS 64                 /* buffer rows */
#define TB_SEGS 4                  /* row segments */
#define TB_SEG_ROWS (TB_ROWS / TB_SEGS)
#define TB_THREADS (TB_W * TB_SEGS) /* 512 */
#define TB_BUF (TB_W * TB_ROWS)   /* doubles per buffer */
#define TB_SMEM (3 * TB_BUF * sizeof(double))

typedef struct tb2d_params {
    const double *in; /* origins (interior element (0, 0, 0)) */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_y, lim_x; /* unused: cs_params_grids fills them */
    ptrdiff_t tiles_x, tiles_y, tiles;
    cs_mode mode;
    double cval;
    double w[9];
} tb2d_params;

/* The tile's first owned column or row along an axis of n cells: tiles
   of `own` cells, the last one moved back to end at the edge. */
static __device__ __forceinline__ ptrdiff_t
tile_origin(ptrdiff_t index, ptrdiff_t own, ptrdiff_t n)
{
    const ptrdiff_t start = index * own;
    const ptrdiff_t last = n - own;
    return start < last ? start : (last > 0 ? last : 0);
}

/* Start level 0 of a tile: the tile and its margins from the grid by
   asynchronous copies, the mode applied outside it (constant: cval,
   stored at once). */
static __device__ void
tb2d_load(const tb2d_params &p, const double *src, double *b, ptrdiff_t ox,
          ptrdiff_t oy)
{
    for (int i = threadIdx.x; i < TB_BUF; i += TB_THREADS) {
        const ptrdiff_t gx = ox + i % TB_W, gy = oy + i / TB_W;
        const bool inside = gx >= 0 && gx < p.nx && gy >= 0 && gy < p.ny;
        if (inside) {
            cs_copy_async8(b + i, src + gy * p.in_pitch + gx, true);
        } else if (p.mode == CS_MODE_CONSTANT) {
            b[i] = p.cval;
        } else {
            cs_copy_async8(b + i,
                           src + cs_extend_index(gy, p.ny, p.mode)
                                     * p.in_pitch
                               + cs_extend_index(gx, p.nx, p.mode),
                           true);
        }
    }
}

/* One step from `a` to `b` on this thread's column and segment, within
   the cells exact at level t; `edge`: skip cells outside the grid. */
template <bool PLUS>
static __device__ __forceinline__ void
tb2d_step(const tb2d_params &p, const double *a, double *b, int t,
          bool edge, ptrdiff_t ox, ptrdiff_t oy)
{
    const int c = threadIdx.x % TB_W;
    const int seg = threadIdx.x / TB_W;
    if (c < t || c >= TB_W - t) {
        return;
    }
    int y0 = seg * TB_SEG_ROWS, y1 = y0 + TB_SEG_ROWS;
    y0 = y0 > t ? y0 : t;
    y1 = y1 < TB_ROWS - t ? y1 : TB_ROWS - t;
    if (y0 >= y1) {
        return;
    }
    const ptrdiff_t gx = ox + c;
    const bool col_out = edge && (gx < 0 || gx >= p.nx);
    const double *r = a + (y0 - 1) * TB_W + c;
    double u0 = r[-1], u1 = r[0], u2 = r[1];
    r += TB_W;
    double m0 = r[-1], m1 = r[0], m2 = r[1];
    for (int y = y0; y < y1; y++) {
        r += TB_W;
        const double d0 = r[-1], d1 = r[0], d2 = r[1];
        double s;
        if (PLUS) {
            s = p.w[1] * u1 + p.w[3] * m0 + p.w[4] * m1 + p.w[5] * m2
                + p.w[7] * d1;
        } else {
            s = p.w[0] * u0 + p.w[1] * u1 + p.w[2] * u2 + p.w[3] * m0
                + p.w[4] * m1 + p.w[5] * m2 + p.w[6] * d0 + p.w[7] * d1
                + p.w[8] * d2;
        }
        const ptrdiff_t gy = oy + y;
        if (!edge || !(col_out || gy < 0 || gy >= p.ny)) {
            b[y * TB_W + c] = s;
        } else if (p.mode == CS_MODE_CONSTANT) {
            b[y * TB_W + c] = p.cval; /* outside: cval at every level */
        }
        u0 = m0, u1 = m1, u2 = m2;
        m0 = d0, m1 = d1, m2 = d2;
    }
}

/* nearest, reflect, mirror: the cells outside the grid at level t take
   the values of the cells the mode maps them to. */
static __device__ void
tb2d_refill(const tb2d_params &p, double *b, int t, ptrdiff_t ox,
            ptrdiff_t oy)
{
    for (int i = threadIdx.x; i < TB_W * TB_ROWS; i += TB_THREADS) {
        const int x = i % TB_W, y = i / TB_W;
        const ptrdiff_t gx = ox + x, gy = oy + y;
        if (x < t || x >= TB_W - t || y < t || y >= TB_ROWS - t
            || (gx >= 0 && gx < p.nx && gy >= 0 && gy < p.ny)) {
            continue;
        }
        const ptrdiff_t mx = cs_extend_index(gx, p.nx, p.mode) - ox;
        const ptrdiff_t my = cs_extend_index(gy, p.ny, p.mode) - oy;
        b[i] = b[my * TB_W + mx];
    }
}

/* Level T's owned cells inside the grid back to the output. */
template <int T>
static __device__ void
tb2d_store(const tb2d_params &p, const double *b, double *dst, ptrdiff_t ox,
           ptrdiff_t oy)
{
    constexpr int OWN_X = TB_W - 2 * T, OWN_Y = TB_ROWS - 2 * T;
    for (int i = threadIdx.x; i < OWN_X * OWN_Y; i += TB_THREADS) {
        const int x = T + i % OWN_X, y = T + i / OWN_X;
        const ptrdiff_t gx = ox + x, gy = oy + y;
        if (gx >= 0 && gx < p.nx && gy >= 0 && gy < p.ny) {
            dst[gy * p.out_pitch + gx] = b[y * TB_W + x];
        }
    }
}

/* The tile's origin (its first buffer cell: owned origin minus T). */
template <int T>
static __device__ __forceinline__ void
tb2d_origin(const tb2d_params &p, ptrdiff_t tile, ptrdiff_t *z,
            ptrdiff_t *ox, ptrdiff_t *oy)
{
    const ptrdiff_t per_plane = p.tiles_x * p.tiles_y;
    const ptrdiff_t rest = tile % per_plane;
    *z = tile / per_plane;
    *ox = tile_origin(rest % p.tiles_x, TB_W - 2 * T, p.nx) - T;
    *oy = tile_origin(rest / p.tiles_x, TB_ROWS - 2 * T, p.ny) - T;
}

template <int T, bool PLUS>
__global__ void __launch_bounds__(TB_THREADS, 1)
tb2d_kernel(tb2d_params p)
{
    extern __shared__ double smem[];
    /* level 0 of this tile, its partner, the next tile's level 0 */
    double *cur = smem, *alt = smem + TB_BUF, *nxt = smem + 2 * TB_BUF;
    ptrdiff_t z, ox, oy;
    if (blockIdx.x < p.tiles) {
        tb2d_origin<T>(p, blockIdx.x, &z, &ox, &oy);
        tb2d_load(p, p.in + z * p.in_plane, cur, ox, oy);
    }
    cs_copy_commit();
    for (ptrdiff_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
        tb2d_origin<T>(p, tile, &z, &ox, &oy);
        const ptrdiff_t next = tile + gridDim.x;
        if (next < p.tiles) {
            ptrdiff_t nz, nox, noy;
            tb2d_origin<T>(p, next, &nz, &nox, &noy);
            tb2d_load(p, p.in + nz * p.in_plane, nxt, nox, noy);
        }
        cs_copy_commit();
        cs_copy_wait<1>(); /* this tile's copies are done */
        __syncthreads();
        const bool edge = p.mode != CS_MODE_WRAP
                          && (ox < 0 || oy < 0 || ox + TB_W > p.nx
                              || oy + TB_ROWS > p.ny);
        const bool refill = edge && p.mode != CS_MODE_CONSTANT;
        for (int t = 1; t <= T; t++) {
            /* level t - 1 in cur (t odd) or alt; level t in the other */
            const double *from = (t & 1) ? cur : alt;
            double *to = (t & 1) ? alt : cur;
            tb2d_step<PLUS>(p, from, to, t, edge, ox, oy);
            __syncthreads();
            if (refill) {
                tb2d_refill(p, to, t, ox, oy);
                __syncthreads();
            }
        }
        tb2d_store<T>(p, (T & 1) ? alt : cur, p.out + z * p.out_plane, ox,
                      oy);
        __syncthreads(); /* cur and alt are free: rotate */
        double *done = cur;
        cur = nxt;
        nxt = alt;
        alt = done;
    }
    cs_copy_wait<0>();
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

template <int T, bool PLUS>
static cs_status
tb2d_launch(cs_cuda_ctx *ctx, tb2d_params *p)
{
    p->tiles_x = CEIL_DIV(p->nx, (ptrdiff_t)(TB_W - 2 * T));
    p->tiles_y = CEIL_DIV(p->ny, (ptrdiff_t)(TB_ROWS - 2 * T));
    p->tiles = p->tiles_x * p->tiles_y * p->nz;
    CS_CUDA_CHECK(ctx,
                  cudaFuncSetAttribute(
                      tb2d_kernel<T, PLUS>,
                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                      (int)TB_SMEM),
                  "cudaFuncSetAttribute (tb2d shared memory)");
    const unsigned grid = (unsigned)(p->tiles < ctx->sms ? p->tiles
                                                          : ctx->sms);
    tb2d_kernel<T, PLUS><<<grid, TB_THREADS, TB_SMEM, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "tb2d_kernel");
}

cs_status
cs_cuda_tb2d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int depth, cs_mode mode, double cval)
{
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && k->host_weights != NULL
             && k->size[0] == 1 && k->size[1] == 3 && k->size[2] == 3
             && depth >= 1 && depth <= CS_TB2D_MAX_DEPTH && ctx->sms > 0
             && (size_t)ctx->smem_optin >= TB_SMEM;
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= 1;
    }
    ok = ok && in->n[1] >= CS_TB2D_MIN_EXTENT
         && in->n[2] >= CS_TB2D_MIN_EXTENT;
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_tb2d_pass: invalid grids, kernel or "
                             "depth");
        return CS_ERR_INVALID;
    }
    tb2d_params p;
    memset(&p, 0, sizeof(p));
    cs_params_grids(&p, in, out);
    p.mode = mode;
    p.cval = cval;
    memcpy(p.w, k->host_weights, sizeof(p.w));
    const int plus = cs_taps_plus(3, p.w);
    switch (depth * 2 + plus) {
    case 2: return tb2d_launch<1, false>(ctx, &p);
    case 3: return tb2d_launch<1, true>(ctx, &p);
    case 4: return tb2d_launch<2, false>(ctx, &p);
    case 5: return tb2d_launch<2, true>(ctx, &p);
    case 6: return tb2d_launch<3, false>(ctx, &p);
    case 7: return tb2d_launch<3, true>(ctx, &p);
    case 8: return tb2d_launch<4, false>(ctx, &p);
    case 9: return tb2d_launch<4, true>(ctx, &p);
    case 10: return tb2d_launch<5, false>(ctx, &p);
    case 11: return tb2d_launch<5, true>(ctx, &p);
    case 12: return tb2d_launch<6, false>(ctx, &p);
    case 13: return tb2d_launch<6, true>(ctx, &p);
    case 14: return tb2d_launch<7, false>(ctx, &p);
    case 15: return tb2d_launch<7, true>(ctx, &p);
    case 16: return tb2d_launch<8, false>(ctx, &p);
    default: return tb2d_launch<8, true>(ctx, &p);
    }
}
