/*
 * cc3d.cu -- 3D stencils of side 3, 5 or 7 on CUDA cores, streaming along
 * z (the 2.5D blocking of the founding notes): every input plane is read
 * from global memory once per block and feeds every output plane that
 * needs it.
 *
 * A block of 256 threads owns an output column of 64 x 16 points (x, y)
 * and zc consecutive planes.  It walks the input planes z0 - r ..
 * z0 + zc - 1 + r in order through a ring of 3 shared-memory tiles
 * (16 + 2r) x (64 + 2r): the two planes after the one it computes are in
 * flight as asynchronous copies (cp.async, which need no registers to
 * hold them), so enough loads are outstanding to keep DRAM busy, and one
 * barrier per plane suffices.  (The 64 x 16 tile and the ring of 3, rather
 * than 2 or 4, were chosen by measurement on the H100 during development;
 * taller tiles of 8 rows per thread spill on side 5.)  Grids at most 16
 * columns wide take tiles of 8 x 128 instead.
 *
 * Thread (tx, ty) computes CY = 4 consecutive rows of column tx (register
 * tiling along y): for each input plane it reads the (CY + 2r) x (2r + 1)
 * neighbourhood once and adds it, times the weights, into the
 * accumulators of the K output planes the input plane feeds: acc[s][c]
 * holds output plane o (s = o mod K, a rotation fixed at compile time by
 * unrolling the plane loop K times), so an input plane is read once for
 * K outputs.  After input plane z_in the output plane z_in - r is
 * complete: it is stored, and its accumulators start the plane K later.
 *
 * Taps: every tap of the K^3 box (CC3D_BOX), or only those within
 * distance r in the 1-norm (CC3D_DIAMOND: a 7-point star and its powers,
 * the fused heat3d kernels), fixed at compile time so the loops have no
 * branch on the weights.  The weights travel in the launch parameters
 * (the constant bank: warp-uniform operands of the FMAs).
 *
 * Loads past the padded grid (a tile over the far edge in x, y or z)
 * read as zero; they feed only outputs outside the grid, not stored.
 */
#include "kernels.cuh"
#include "async_copy.cuh"

#include <limits.h>
#include <string.h>

#define CC3D_THREADS 256
#define CC3D_CY 4                       /* rows per thread */
#define CC3D_MINB 2                     /* blocks per SM (registers) */
#define CC3D_WIDE 64                    /* threads along x: 64 x 16 tiles */
#define CC3D_NARROW 8                   /* threads along x: 8 x 128 tiles */
#define CC3D_MAX_K 7
#define CC3D_MAX_STAGES 3               /* tiles in the ring (at most) */
#define CC3D_SMEM_STATIC (48 * 1024)    /* bytes of static shared memory */

/* output rows of a tile whose rows are BX threads wide */
#define CC3D_TY(BX) (CC3D_THREADS / (BX) * CC3D_CY)

typedef struct cc3d_params {
    const double *in; /* origins */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_z, lim_y, lim_x; /* n + halo of `in`: first unreadable */
    ptrdiff_t tiles_x;             /* blockIdx.x = tile_y * tiles_x + tile_x */
    ptrdiff_t zc;                  /* output planes per block */
    ptrdiff_t zb0;                 /* z block of blockIdx.y == 0 */
    double w[CC3D_MAX_K * CC3D_MAX_K * CC3D_MAX_K]; /* K^3, C order */
} cc3d_params;

static __host__ __device__ constexpr int
cc3d_abs(int v)
{
    return v < 0 ? -v : v;
}

/* Whether tap (dz, dy, dx) of a K^3 kernel is computed. */
template <int K, int SHAPE>
static __host__ __device__ constexpr bool
cc3d_tap(int dz, int dy, int dx)
{
    return SHAPE == CS_CC3D_BOX
           || cc3d_abs(dz - (K - 1) / 2) + cc3d_abs(dy - (K - 1) / 2)
                      + cc3d_abs(dx - (K - 1) / 2)
                  <= (K - 1) / 2;
}

/*
 * Start copying input plane z (whole plane index; may lie in the far
 * halo or past it) into `tile`: this thread's element k is tile entry
 * threadIdx.x + k * CC3D_THREADS, at offset goff[k] within a plane,
 * readable when ok bit k is set and z < lim_z (zero otherwise).
 */
template <int LOADS, int TILE>
static __device__ __forceinline__ void
cc3d_issue(double *tile, const cc3d_params &p, ptrdiff_t z,
           const ptrdiff_t (&goff)[LOADS], unsigned ok)
{
    const double *plane = p.in + z * p.in_plane;
    const bool z_ok = z < p.lim_z;
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        const int e = (int)threadIdx.x + k * CC3D_THREADS;
        if (TILE % CC3D_THREADS == 0 || e < TILE) {
            const bool readable = z_ok && ((ok >> k) & 1u);
            cs_copy_async8(tile + e, readable ? plane + goff[k] : p.in,
                           readable);
        }
    }
}

/*
 * One input plane (its shared tile at `t`, this thread's column and
 * first row) into the accumulators: acc[(U + 2r - dz) % K] receives
 * weight plane dz (the output plane that input plane feeds through dz).
 */
template <int K, int SHAPE, int BX, int U>
static __device__ __forceinline__ void
cc3d_plane(double (&acc)[K][CC3D_CY], const double *t, const cc3d_params &p)
{
    constexpr int R = (K - 1) / 2;
    constexpr int SX = BX + K - 1;
#pragma unroll
    for (int rr = 0; rr < CC3D_CY + K - 1; rr++) {
#pragma unroll
        for (int dx = 0; dx < K; dx++) {
            const double v = t[rr * SX + dx];
#pragma unroll
            for (int c = 0; c < CC3D_CY; c++) {
                const int dy = rr - c;
                if (dy < 0 || dy >= K) {
                    continue;
                }
#pragma unroll
                for (int dz = 0; dz < K; dz++) {
                    if (!cc3d_tap<K, SHAPE>(dz, dy, dx)) {
                        continue;
                    }
                    const int s = (U + 2 * R - dz) % K;
                    acc[s][c] = fma(p.w[(dz * K + dy) * K + dx], v, acc[s][c]);
                }
            }
        }
    }
}

/* Output plane o of this thread's rows from acc[S]; then acc[S] = 0. */
template <int K, int S>
static __device__ __forceinline__ void
cc3d_store(double (&acc)[K][CC3D_CY], const cc3d_params &p, ptrdiff_t o,
           ptrdiff_t y, ptrdiff_t x, bool store)
{
    double *row = p.out + o * p.out_plane + y * p.out_pitch + x;
#pragma unroll
    for (int c = 0; c < CC3D_CY; c++) {
        if (store && y + c < p.ny && x < p.nx) {
            row[c * p.out_pitch] = acc[S][c];
        }
        acc[S][c] = 0.0;
    }
}

/*
 * Input plane j of the block (z = z0 - r + j), in ring slot j % STAGES:
 * wait for it, barrier (every thread's copies of plane j have landed and
 * every thread is done with plane j - 1), start plane j + STAGES - 1 in
 * the slot plane j - 1 leaves, add plane j, store the output plane it
 * completes.  U = j % K, fixed by the caller's unrolling.
 */
template <int K, int SHAPE, int BX, int U, int LOADS, int TILE, int STAGES>
static __device__ __forceinline__ void
cc3d_step(double (&acc)[K][CC3D_CY], double *tiles, const cc3d_params &p,
          int j, int planes, ptrdiff_t z0, const ptrdiff_t (&goff)[LOADS],
          unsigned ok, int toff, ptrdiff_t y, ptrdiff_t x)
{
    constexpr int R = (K - 1) / 2;
    cs_copy_wait<STAGES - 2>();
    __syncthreads();
    const int ahead = j + STAGES - 1;
    if (ahead < planes) {
        cc3d_issue<LOADS, TILE>(tiles + (ahead % STAGES) * TILE, p,
                                z0 - R + ahead, goff, ok);
    }
    cs_copy_commit(); /* empty past the last plane: the count stays exact */
    cc3d_plane<K, SHAPE, BX, U>(acc, tiles + (j % STAGES) * TILE + toff, p);
    /* output plane z0 - 2r + j is complete; planes before z0 are not
       this block's (their inputs started mid-way) */
    cc3d_store<K, U>(acc, p, z0 - 2 * R + j, y, x, j >= 2 * R);
}

template <int K, int SHAPE, int BX>
__global__ void __launch_bounds__(CC3D_THREADS, CC3D_MINB)
cc3d_kernel(const cc3d_params p)
{
    constexpr int R = (K - 1) / 2;
    constexpr int TY = CC3D_TY(BX);
    constexpr int SY = TY + K - 1;
    constexpr int SX = BX + K - 1;
    constexpr int TILE = SY * SX;
    constexpr int LOADS = (TILE + CC3D_THREADS - 1) / CC3D_THREADS;
    static_assert(LOADS <= 32, "loader bits");
    /* as many tiles as static shared memory holds, up to the maximum */
    constexpr int FIT = CC3D_SMEM_STATIC / (TILE * (int)sizeof(double));
    constexpr int STAGES = FIT < CC3D_MAX_STAGES ? FIT : CC3D_MAX_STAGES;
    static_assert(STAGES >= 2, "two tiles at least");
    __shared__ double tiles[STAGES * TILE];

    const int tx = (int)threadIdx.x % BX;
    const int ty = (int)threadIdx.x / BX;
    const ptrdiff_t x0 = (ptrdiff_t)(blockIdx.x % p.tiles_x) * BX;
    const ptrdiff_t y0 = (ptrdiff_t)(blockIdx.x / p.tiles_x) * TY;
    const ptrdiff_t z0 = (p.zb0 + blockIdx.y) * p.zc;
    const ptrdiff_t z1 = z0 + p.zc < p.nz ? z0 + p.zc : p.nz;
    const int planes = (int)(z1 - z0) + K - 1;

    /* this thread's loader elements of a plane's tile */
    ptrdiff_t goff[LOADS];
    unsigned ok = 0;
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        const int e = (int)threadIdx.x + k * CC3D_THREADS;
        const int r = e / SX, c = e % SX;
        const ptrdiff_t gy = y0 - R + r, gx = x0 - R + c;
        goff[k] = gy * p.in_pitch + gx;
        if (e < TILE && gy < p.lim_y && gx < p.lim_x) {
            ok |= 1u << k;
        }
    }

    double acc[K][CC3D_CY];
#pragma unroll
    for (int s = 0; s < K; s++) {
#pragma unroll
        for (int c = 0; c < CC3D_CY; c++) {
            acc[s][c] = 0.0;
        }
    }
    for (int q = 0; q < STAGES - 1; q++) {
        if (q < planes) {
            cc3d_issue<LOADS, TILE>(tiles + q * TILE, p, z0 - R + q, goff,
                                    ok);
        }
        cs_copy_commit();
    }

    const int toff = ty * CC3D_CY * SX + tx;
    const ptrdiff_t y = y0 + ty * CC3D_CY, x = x0 + tx;
    for (int jb = 0; jb < planes; jb += K) {
        /* the rotation of acc needs j % K at compile time: K steps */
#define CC3D_STEP(U)                                                          \
    if (U < K && jb + U < planes) {                                           \
        cc3d_step<K, SHAPE, BX, U % K, LOADS, TILE, STAGES>(                  \
            acc, tiles, p, jb + U, planes, z0, goff, ok, toff, y, x);         \
    }
        CC3D_STEP(0)
        CC3D_STEP(1)
        CC3D_STEP(2)
        CC3D_STEP(3)
        CC3D_STEP(4)
        CC3D_STEP(5)
        CC3D_STEP(6)
#undef CC3D_STEP
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

/* Launch the <K, SHAPE, BX> instance over the grid's tiles and z blocks
   (p->tiles_x, p->zc and the rest of *p filled in here). */
template <int K, int SHAPE, int BX>
static cs_status
cc3d_launch(cs_cuda_ctx *ctx, cc3d_params *p, const char *name)
{
    const ptrdiff_t tiles_x = CEIL_DIV(p->nx, (ptrdiff_t)BX);
    const ptrdiff_t tiles_xy =
        tiles_x * CEIL_DIV(p->ny, (ptrdiff_t)CC3D_TY(BX));
    if (tiles_xy > INT_MAX) {
        cs_cuda_message(ctx, "%s: grid plane of %td x %td is too large", name,
                        p->ny, p->nx);
        return CS_ERR_UNSUPPORTED;
    }
    p->tiles_x = tiles_x;
    /* planes per block: about 2048 blocks in all (several waves of the
       H100's 132 SMs), between 8 and 64 planes so that the 2r planes a
       block reads beyond its own stay a small share */
    ptrdiff_t zc = CEIL_DIV(p->nz * tiles_xy, (ptrdiff_t)2048);
    zc = zc < 8 ? 8 : (zc > 64 ? 64 : zc);
    p->zc = zc < p->nz ? zc : p->nz;
    const ptrdiff_t zblocks = CEIL_DIV(p->nz, p->zc);
    for (p->zb0 = 0; p->zb0 < zblocks; p->zb0 += 65535) {
        const ptrdiff_t nb =
            zblocks - p->zb0 < 65535 ? zblocks - p->zb0 : 65535;
        dim3 grid((unsigned)tiles_xy, (unsigned)nb);
        cc3d_kernel<K, SHAPE, BX><<<grid, CC3D_THREADS, 0, ctx->stream>>>(*p);
        CS_TRY(cs_cuda_check_launch(ctx, name));
    }
    return CS_OK;
}

cs_status
cs_cuda_cc3d_step(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int shape)
{
    const int ks = k->size[0];
    cc3d_params p;
    memset(&p, 0, sizeof(p));
    cs_step_params_grids(&p, in, out);
    memcpy(p.w, k->host_weights, (size_t)ks * ks * ks * sizeof(double));
    /* grids a few columns wide (the band fix-up's strips along x) take
       tiles 8 columns wide rather than 64, most of which would be idle */
    const int narrow = p.nx <= 2 * CC3D_NARROW;
    switch (ks * 4 + 2 * (shape == CS_CC3D_DIAMOND) + narrow) {
    case 12: return cc3d_launch<3, CS_CC3D_BOX, CC3D_WIDE>(
                 ctx, &p, "cc3d_kernel<3, box>");
    case 13: return cc3d_launch<3, CS_CC3D_BOX, CC3D_NARROW>(
                 ctx, &p, "cc3d_kernel<3, box, narrow>");
    case 14: return cc3d_launch<3, CS_CC3D_DIAMOND, CC3D_WIDE>(
                 ctx, &p, "cc3d_kernel<3, diamond>");
    case 15: return cc3d_launch<3, CS_CC3D_DIAMOND, CC3D_NARROW>(
                 ctx, &p, "cc3d_kernel<3, diamond, narrow>");
    case 20: case 21: return cc3d_launch<5, CS_CC3D_BOX, CC3D_WIDE>(
                 ctx, &p, "cc3d_kernel<5, box>");
    case 22: case 23: return cc3d_launch<5, CS_CC3D_DIAMOND, CC3D_WIDE>(
                 ctx, &p, "cc3d_kernel<5, diamond>");
    case 30: case 31: return cc3d_launch<7, CS_CC3D_DIAMOND, CC3D_WIDE>(
                 ctx, &p, "cc3d_kernel<7, diamond>");
    default: break;
    }
    cs_cuda_message(ctx, "cs_cuda_cc3d_step: no instance for side %d", ks);
    return CS_ERR_UNSUPPORTED;
}
