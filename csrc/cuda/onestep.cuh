/*
 * onestep.cuh -- one stencil step between the caller's float64 device
 * arrays with unit x stride (the arrays as they almost always come): the
 * kernels, their launch parameters, and the device functions a kernel of
 * several fields can reuse (onestep.cu says how the engine chooses them;
 * the generic kernel for any dtype and strides is direct.cu's).
 *
 * Each kernel reads every input element from DRAM once, into a tile in
 * shared memory (asynchronous copies, cp.async), and evaluates the
 * stencil from the tile with the taps fixed at compile time (the radius
 * and the shape are template parameters, the weights launch parameters,
 * which live in the constant bank), so no tap costs index arithmetic.
 * The boundary mode is applied where a tile is loaded, and only in the
 * tiles that reach past an edge of the grid: an element outside the grid
 * loads the element cs_extend_index maps it to (constant mode: cval).
 * Every tap of the chosen shape has a nonzero weight (onestep.cu checks
 * it), so, as in direct.cu and scipy.ndimage, a zero weight never
 * multiplies a NaN or an infinity: the result is exact for non-finite
 * values too, and the non-finite flag only reports that there were any.
 *
 *   planar and 1D grids   cs_os_tile_kernel: tiles of 128 columns x TY
 *                         rows (a 1D grid: TY rows of 128 points laid end
 *                         to end, read as one run); thread (tx, ty) owns
 *                         2 columns x CY rows; blocks either persistent
 *                         (the next tile's copies in flight while the
 *                         block computes this one) or one tile each.
 *   1D grids              cs_os_1d_l1_kernel: no tile; each thread reads
 *                         its pairs and their neighbour pairs as 16-byte
 *                         loads through the L1 cache.
 *   3D grids              cs_os_3d_kernel: a block streams a column of
 *                         64 x 16 points through its planes, a ring of
 *                         plane tiles in flight (cc3d.cu's scheme).
 *
 * What a kernel of several fields can reuse (csrc/scheme.h): the tile
 * loaders (cs_os_load_tile, cs_os_load_plane), which put any field's
 * tile, its boundary applied, into shared memory, and the evaluations
 * (cs_os_eval2d, cs_os_plane3d), which ADD one stencil of one field at
 * the thread's tile of points into accumulators in registers: a new
 * field's sum of coefficient x stencil(field) terms is one evaluation per
 * term into the same accumulators, the coefficient folded into the
 * term's cs_os_taps on the host.
 */
#ifndef CS_CUDA_ONESTEP_CUH
#define CS_CUDA_ONESTEP_CUH

#include "async_copy.cuh"
#include "cuda_engine.h"
#include "kernels.cuh"

#include <stdint.h>

/* ------------------------------------------------------------------------
 * parameters (built on the host, onestep.cu)
 * --------------------------------------------------------------------- */

#define CS_OS_MAX_K 7 /* the widest kernel side the kernels take */

/* The tap sets the kernels compute, each tap a nonzero weight. */
enum cs_os_shape {
    CS_OS_BOX = 0,   /* every tap of the box */
    CS_OS_PLUS = 1,  /* planar: the centre row and column */
    CS_OS_RANK1 = 2, /* planar: w[dy][dx] = col[dy] * row[dx], reduced
                        along x, then down the columns */
    CS_OS_STAR = 3   /* 3D: the centre and its 6 face neighbours */
};

/* One stencil's weights, as the evaluations read them. */
typedef struct cs_os_taps {
    double w[CS_OS_MAX_K * CS_OS_MAX_K]; /* KY x KX, or 3 x 3 x 3, C order */
    double col[CS_OS_MAX_K];             /* CS_OS_RANK1's factors */
    double row[CS_OS_MAX_K];
} cs_os_taps;

typedef struct cs_os_params {
    const double *in; /* element (0, 0, 0) */
    double *out;
    ptrdiff_t in_pitch, in_plane; /* doubles between rows, planes */
    ptrdiff_t out_pitch, out_plane;
    ptrdiff_t n[3];               /* extents z, y, x */
    ptrdiff_t tiles_x, tiles_plane, tiles; /* tile kernels */
    ptrdiff_t zc, zb0; /* 3D: planes per block, z block of blockIdx.y 0 */
    cs_mode mode;
    double cval;
    int *nonfinite; /* NULL, or set to 1 where a result is not finite */
    cs_os_taps taps;
} cs_os_params;

/* ------------------------------------------------------------------------
 * device functions
 * --------------------------------------------------------------------- */

/* Whether a value is NaN or infinite, from its exponent bits (integer
   instructions: the FP64 units stay free for the taps). */
static __device__ __forceinline__ bool
cs_os_nonfinite(double v)
{
    return (__double2hiint(v) & 0x7ff00000) == 0x7ff00000;
}

/* Whether tap (dy, dx) of a KY x KX kernel of shape SHAPE is computed. */
template <int KY, int KX, int SHAPE>
static __host__ __device__ constexpr bool
cs_os_tap(int dy, int dx)
{
    return SHAPE != CS_OS_PLUS || dy == (KY - 1) / 2 || dx == (KX - 1) / 2;
}

/* Whether value i of input row rr of a thread's CY x CX points is read
   by some tap of some point. */
template <int KY, int KX, int SHAPE, int CY, int CX>
static __host__ __device__ constexpr bool
cs_os_needed(int rr, int i)
{
    for (int c = 0; c < CY; c++) {
        for (int cx = 0; cx < CX; cx++) {
            const int dy = rr - c, dx = i - cx;
            if (dy >= 0 && dy < KY && dx >= 0 && dx < KX
                && cs_os_tap<KY, KX, SHAPE>(dy, dx)) {
                return true;
            }
        }
    }
    return false;
}

/*
 * Load the tile of rows gy0 .. gy0 + SY - 1 and columns gx0 .. gx0 + SX
 * - 1 of plane `z` of a grid (origin `in`, n[3] extents, pitches in
 * doubles) into `buf` (SY x SX doubles), by the block's T threads: start
 * the copies (the caller commits, waits and synchronizes).  A tile that
 * lies inside the grid is copied as it is; in one that reaches past an
 * edge each element reads the element the mode maps it to, or cval.
 * `z` must lie in the grid (cs_os_load_plane maps planes).
 */
template <int SY, int SX, int T>
static __device__ __forceinline__ void
cs_os_load_tile(double *buf, const double *in, ptrdiff_t pitch,
                ptrdiff_t plane, const ptrdiff_t (&n)[3], cs_mode mode,
                double cval, ptrdiff_t z, ptrdiff_t gy0, ptrdiff_t gx0)
{
    const double *base = in + z * plane;
    if (gy0 >= 0 && gx0 >= 0 && gy0 + SY <= n[1] && gx0 + SX <= n[2]) {
        const double *src = base + gy0 * pitch + gx0;
#pragma unroll 4
        for (int e = (int)threadIdx.x; e < SY * SX; e += T) {
            const int r = e / SX, c = e - (e / SX) * SX;
            cs_copy_async8(buf + e, src + r * pitch + c, true);
        }
        return;
    }
    for (int e = (int)threadIdx.x; e < SY * SX; e += T) {
        const int r = e / SX, c = e - (e / SX) * SX;
        const ptrdiff_t y = cs_extend_index(gy0 + r, n[1], mode);
        const ptrdiff_t x = cs_extend_index(gx0 + c, n[2], mode);
        if (y < 0 || x < 0) {
            buf[e] = cval; /* constant mode, outside */
        } else {
            cs_copy_async8(buf + e, base + y * pitch + x, true);
        }
    }
}

/*
 * ADD one stencil (KY x KX, shape SHAPE, weights w) at a thread's CY x CX
 * points into acc: acc[c][cx] += sum over the taps of
 * w[dy][dx] * t[(c + dy) * row + cx + dx], where t is the thread's first
 * input in a tile in shared memory (16-byte aligned, `row` even).  Each
 * input row's values are read once, as 16-byte loads where both halves
 * are needed, and feed every point they reach.
 */
template <int KY, int KX, int SHAPE, int CY, int CX>
static __device__ __forceinline__ void
cs_os_eval2d(double (&acc)[CY][CX], const double *t, int row,
             const cs_os_taps &w)
{
    constexpr int NV = CX + KX - 1; /* even: CX even, KX odd */
#pragma unroll
    for (int rr = 0; rr < CY + KY - 1; rr++) {
        double v[NV];
        const double *at = t + rr * row;
#pragma unroll
        for (int q = 0; q < NV / 2; q++) {
            const bool lo = cs_os_needed<KY, KX, SHAPE, CY, CX>(rr, 2 * q);
            const bool hi =
                cs_os_needed<KY, KX, SHAPE, CY, CX>(rr, 2 * q + 1);
            if (lo && hi) {
                const double2 d = *(const double2 *)(at + 2 * q);
                v[2 * q] = d.x;
                v[2 * q + 1] = d.y;
            } else if (lo) {
                v[2 * q] = at[2 * q];
            } else if (hi) {
                v[2 * q + 1] = at[2 * q + 1];
            }
        }
        double h[CX]; /* CS_OS_RANK1: the row's sums along x */
        if constexpr (SHAPE == CS_OS_RANK1) {
#pragma unroll
            for (int cx = 0; cx < CX; cx++) {
                h[cx] = w.row[0] * v[cx];
#pragma unroll
                for (int dx = 1; dx < KX; dx++) {
                    h[cx] = fma(w.row[dx], v[dx + cx], h[cx]);
                }
            }
        }
#pragma unroll
        for (int c = 0; c < CY; c++) {
            const int dy = rr - c;
            if (dy < 0 || dy >= KY) {
                continue;
            }
            if constexpr (SHAPE == CS_OS_RANK1) {
#pragma unroll
                for (int cx = 0; cx < CX; cx++) {
                    acc[c][cx] = fma(w.col[dy], h[cx], acc[c][cx]);
                }
            } else {
#pragma unroll
                for (int dx = 0; dx < KX; dx++) {
                    if (!cs_os_tap<KY, KX, SHAPE>(dy, dx)) {
                        continue;
                    }
                    const double wt = w.w[dy * KX + dx];
#pragma unroll
                    for (int cx = 0; cx < CX; cx++) {
                        acc[c][cx] = fma(wt, v[dx + cx], acc[c][cx]);
                    }
                }
            }
        }
    }
}

/* Whether tap (dz, dy, dx) of a K^3 kernel of shape SHAPE is computed. */
template <int K, int SHAPE>
static __host__ __device__ constexpr bool
cs_os_tap3d(int dz, int dy, int dx)
{
    return SHAPE == CS_OS_BOX
           || (dz == (K - 1) / 2) + (dy == (K - 1) / 2) + (dx == (K - 1) / 2)
                  >= 2;
}

/*
 * ADD one input plane of a 3D stencil (K^3, shape SHAPE, weights w) into
 * the accumulators of the K output planes it feeds, at a thread's CY
 * rows of one column: acc[(U + 2r - dz) % K][c] += the plane's taps of
 * weight plane dz, where t is the thread's first input in the plane's
 * tile in shared memory (rows `row` apart) and U the input plane's index
 * modulo K (fixed at compile time by the caller's unrolling, so that the
 * rotation of acc costs nothing).
 */
template <int K, int SHAPE, int CY, int U>
static __device__ __forceinline__ void
cs_os_plane3d(double (&acc)[K][CY], const double *t, int row,
              const cs_os_taps &w)
{
    constexpr int R = (K - 1) / 2;
#pragma unroll
    for (int rr = 0; rr < CY + K - 1; rr++) {
#pragma unroll
        for (int dx = 0; dx < K; dx++) {
            bool needed = false;
#pragma unroll
            for (int c = 0; c < CY; c++) {
#pragma unroll
                for (int dz = 0; dz < K; dz++) {
                    const int dy = rr - c;
                    needed = needed
                             || (dy >= 0 && dy < K
                                 && cs_os_tap3d<K, SHAPE>(dz, dy, dx));
                }
            }
            if (!needed) {
                continue;
            }
            const double v = t[rr * row + dx];
#pragma unroll
            for (int c = 0; c < CY; c++) {
                const int dy = rr - c;
                if (dy < 0 || dy >= K) {
                    continue;
                }
#pragma unroll
                for (int dz = 0; dz < K; dz++) {
                    if (!cs_os_tap3d<K, SHAPE>(dz, dy, dx)) {
                        continue;
                    }
                    const int s = (U + 2 * R - dz) % K;
                    acc[s][c] = fma(w.w[(dz * K + dy) * K + dx], v, acc[s][c]);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * planar and 1D grids: tiles of 128 columns
 * --------------------------------------------------------------------- */

/* The geometry of cs_os_tile_kernel<KY, KX, .., T, CY, .., FLAT>. */
template <int KY, int KX, int T, int CY, bool FLAT>
struct cs_os_geom {
    static constexpr int BX = 64;        /* threads along x */
    static constexpr int CX = 2;         /* columns per thread */
    static constexpr int TX = BX * CX;   /* 128 columns */
    static constexpr int TY = T / BX * CY; /* rows */
    static constexpr int RY = (KY - 1) / 2, RX = (KX - 1) / 2;
    /* the tile in shared memory: a 1D grid's TY x TX points are one run
       of TY * TX + 2 RX; a plane's are (TY + 2 RY) rows of TX + 2 RX.
       Both even, so that every thread's first input is 16-byte aligned */
    static constexpr int SX = FLAT ? TY * TX + 2 * RX : TX + 2 * RX;
    static constexpr int SY = FLAT ? 1 : TY + 2 * RY;
    static constexpr int TILE = SY * SX;
    static constexpr int ROW = FLAT ? TX : SX; /* input row to input row */
};

/* Tile t: its plane, first output row and first output column (a 1D
   grid: its first point, in x). */
template <class G, bool FLAT>
static __device__ __forceinline__ void
cs_os_tile_at(const cs_os_params &p, ptrdiff_t t, ptrdiff_t *z,
              ptrdiff_t *y0, ptrdiff_t *x0)
{
    if (FLAT) {
        *z = 0;
        *y0 = 0;
        *x0 = t * (ptrdiff_t)(G::TY * G::TX);
        return;
    }
    ptrdiff_t rest, ty;
    if (p.tiles <= (ptrdiff_t)UINT32_MAX) { /* 32-bit divisions: cheaper */
        const uint32_t tp = (uint32_t)p.tiles_plane, tx = (uint32_t)p.tiles_x;
        const uint32_t zz = (uint32_t)t / tp, r = (uint32_t)t - zz * tp;
        *z = zz;
        rest = r;
        ty = r / tx;
    } else {
        *z = t / p.tiles_plane;
        rest = t - *z * p.tiles_plane;
        ty = rest / p.tiles_x;
    }
    *y0 = ty * G::TY;
    *x0 = (rest - ty * p.tiles_x) * G::TX;
}

template <class G, int T, bool FLAT>
static __device__ __forceinline__ void
cs_os_issue(double *buf, const cs_os_params &p, ptrdiff_t t)
{
    ptrdiff_t z, y0, x0;
    cs_os_tile_at<G, FLAT>(p, t, &z, &y0, &x0);
    cs_os_load_tile<G::SY, G::SX, T>(buf, p.in, p.in_pitch, p.in_plane, p.n,
                                     p.mode, p.cval, z, y0 - G::RY,
                                     x0 - G::RX);
}

/* Store the thread's points of tile t that lie in the grid; true when one
   of them is not finite. */
template <class G, bool FLAT, int CY>
static __device__ __forceinline__ bool
cs_os_store(const double (&acc)[CY][2], const cs_os_params &p, ptrdiff_t t,
            int tx, int ty)
{
    ptrdiff_t z, y0, x0;
    cs_os_tile_at<G, FLAT>(p, t, &z, &y0, &x0);
    bool bad = false;
#pragma unroll
    for (int c = 0; c < CY; c++) {
        ptrdiff_t x, lim;
        double *o;
        if (FLAT) {
            x = x0 + (ptrdiff_t)(ty * CY + c) * G::TX + 2 * tx;
            lim = p.n[2];
            o = p.out + x;
        } else {
            const ptrdiff_t y = y0 + ty * CY + c;
            if (y >= p.n[1]) {
                break;
            }
            x = x0 + 2 * tx;
            lim = p.n[2];
            o = p.out + z * p.out_plane + y * p.out_pitch + x;
        }
        if (x + 1 < lim && ((uintptr_t)o & 15) == 0) {
            *(double2 *)o = make_double2(acc[c][0], acc[c][1]);
        } else {
            if (x < lim) {
                o[0] = acc[c][0];
            }
            if (x + 1 < lim) {
                o[1] = acc[c][1];
            }
        }
        if (x < lim) {
            bad = bad || cs_os_nonfinite(acc[c][0]);
        }
        if (x + 1 < lim) {
            bad = bad || cs_os_nonfinite(acc[c][1]);
        }
    }
    return bad;
}

/* The thread's CY x 2 points of the tile in `buf`. */
template <class G, int KY, int KX, int SHAPE, int CY>
static __device__ __forceinline__ void
cs_os_tile_points(double (&acc)[CY][2], const double *buf,
                  const cs_os_params &p, int tx, int ty)
{
#pragma unroll
    for (int c = 0; c < CY; c++) {
        acc[c][0] = 0.0;
        acc[c][1] = 0.0;
    }
    cs_os_eval2d<KY, KX, SHAPE, CY, 2>(acc, buf + ty * CY * G::ROW + 2 * tx,
                                       G::ROW, p.taps);
}

/*
 * One step over the tiles of a planar grid (every plane) or, C::FLAT, of
 * a 1D grid, in blocks of C::T threads, each thread C::CY x 2 points.
 * C::PERSIST: min(tiles, SMs x MINB) blocks walk the tiles, each
 * tile's copies issued into one of two buffers while the block computes
 * the other (cc2d.cu's scheme); otherwise a block per tile, MINB of them
 * resident per SM, the other blocks' copies in flight while one computes.
 */
template <int T_, int CY_, int MINB_, bool FLAT_, bool PERSIST_>
struct cs_os_config {
    static constexpr int T = T_;       /* threads */
    static constexpr int CY = CY_;     /* rows per thread */
    static constexpr int MINB = MINB_; /* resident blocks per SM */
    static constexpr bool FLAT = FLAT_, PERSIST = PERSIST_;
};

template <int KY, int KX, int SHAPE, class C>
__global__ void __launch_bounds__(C::T, C::MINB)
cs_os_tile_kernel(const cs_os_params p)
{
    constexpr int T = C::T, CY = C::CY;
    constexpr bool FLAT = C::FLAT, PERSIST = C::PERSIST;
    typedef cs_os_geom<KY, KX, T, CY, FLAT> G;
    extern __shared__ double smem[];
    const int tx = (int)threadIdx.x % G::BX;
    const int ty = (int)threadIdx.x / G::BX;
    bool bad = false;
    if (!PERSIST) {
        const ptrdiff_t t = blockIdx.x;
        cs_os_issue<G, T, FLAT>(smem, p, t);
        cs_copy_commit();
        cs_copy_wait<0>();
        __syncthreads();
        double acc[CY][2];
        cs_os_tile_points<G, KY, KX, SHAPE, CY>(acc, smem, p, tx, ty);
        bad = cs_os_store<G, FLAT, CY>(acc, p, t, tx, ty);
    } else {
        ptrdiff_t t = blockIdx.x;
        if (t < p.tiles) {
            cs_os_issue<G, T, FLAT>(smem, p, t);
        }
        cs_copy_commit();
        for (int i = 0; t < p.tiles; t += gridDim.x, i ^= 1) {
            /* the other buffer was read by the previous tile: every thread
               is done with it before its next copies start */
            __syncthreads();
            const ptrdiff_t next = t + gridDim.x;
            if (next < p.tiles) {
                cs_os_issue<G, T, FLAT>(smem + (i ^ 1) * G::TILE, p, next);
            }
            cs_copy_commit();
            cs_copy_wait<1>(); /* this tile's copies have landed ... */
            __syncthreads();   /* ... every thread's */
            double acc[CY][2];
            cs_os_tile_points<G, KY, KX, SHAPE, CY>(acc, smem + i * G::TILE,
                                                    p, tx, ty);
            bad = cs_os_store<G, FLAT, CY>(acc, p, t, tx, ty) || bad;
        }
    }
    if (bad && p.nonfinite != NULL) {
        *p.nonfinite = 1;
    }
}

/* ------------------------------------------------------------------------
 * 1D grids through the L1 cache
 * --------------------------------------------------------------------- */

#define CS_OS_L1_THREADS 256
#define CS_OS_L1_PAIRS 4 /* pairs of points per thread */
#define CS_OS_L1_SPAN (2 * CS_OS_L1_THREADS * CS_OS_L1_PAIRS)

/*
 * A 1D grid of n points, KX taps, in and out 16-byte aligned: thread j of
 * a block computes pairs j, j + 256, j + 512, j + 768 of the block's 2048
 * points, reading each pair and the H pairs on either side as 16-byte
 * loads, all issued before the first is used (the neighbours' loads hit
 * the L1 cache).  Blocks within reach of an end map every tap.
 */
template <int KX>
__global__ void __launch_bounds__(CS_OS_L1_THREADS)
cs_os_1d_l1_kernel(const cs_os_params p)
{
    constexpr int R = (KX - 1) / 2;
    constexpr int H = (R + 1) / 2;
    constexpr int U = CS_OS_L1_PAIRS;
    constexpr int T = CS_OS_L1_THREADS;
    const ptrdiff_t n = p.n[2];
    const ptrdiff_t b0 = (ptrdiff_t)blockIdx.x * CS_OS_L1_SPAN;
    const int j0 = (int)threadIdx.x;
    bool bad = false;
    if (b0 - 2 * H >= 0 && b0 + CS_OS_L1_SPAN + 2 * H <= n) {
        const double2 *in2 = (const double2 *)p.in + b0 / 2;
        double2 *out2 = (double2 *)p.out + b0 / 2;
        double2 v[U][2 * H + 1];
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int h = 0; h < 2 * H + 1; h++) {
                v[u][h] = __ldg(in2 + u * T + j0 - H + h);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            double a[4 * H + 2];
#pragma unroll
            for (int h = 0; h < 2 * H + 1; h++) {
                a[2 * h] = v[u][h].x;
                a[2 * h + 1] = v[u][h].y;
            }
            double s[2];
#pragma unroll
            for (int cx = 0; cx < 2; cx++) {
                s[cx] = 0.0;
#pragma unroll
                for (int dx = 0; dx < KX; dx++) {
                    s[cx] = fma(p.taps.w[dx], a[2 * H - R + cx + dx], s[cx]);
                }
                bad = bad || cs_os_nonfinite(s[cx]);
            }
            out2[u * T + j0] = make_double2(s[0], s[1]);
        }
    } else {
        for (int u = 0; u < U; u++) {
            for (int cx = 0; cx < 2; cx++) {
                const ptrdiff_t x = b0 + 2 * (u * T + j0) + cx;
                if (x >= n) {
                    continue;
                }
                double s = 0.0;
                for (int dx = 0; dx < KX; dx++) {
                    const ptrdiff_t i = cs_extend_index(x - R + dx, n, p.mode);
                    s = fma(p.taps.w[dx], i < 0 ? p.cval : p.in[i], s);
                }
                p.out[x] = s;
                bad = bad || cs_os_nonfinite(s);
            }
        }
    }
    if (bad && p.nonfinite != NULL) {
        *p.nonfinite = 1;
    }
}

/* ------------------------------------------------------------------------
 * 3D grids: columns of 64 x 16 points streamed along z
 * --------------------------------------------------------------------- */

#define CS_OS3_THREADS 256
#define CS_OS3_BX 64 /* threads along x */
#define CS_OS3_CY 4  /* rows per thread */
#define CS_OS3_TY (CS_OS3_THREADS / CS_OS3_BX * CS_OS3_CY) /* 16 rows */

/*
 * Start loading input plane z (any index: mapped here) into `tile`: this
 * thread's element k is entry threadIdx.x + k * 256 of the tile, at
 * offset goff[k] within a plane (its row and column already mapped), or
 * cval where bit k of `fill` is set (constant mode, outside in y or x).
 */
template <int LOADS, int TILE>
static __device__ __forceinline__ void
cs_os_load_plane(double *tile, const cs_os_params &p, ptrdiff_t z,
                 const ptrdiff_t (&goff)[LOADS], unsigned fill)
{
    const ptrdiff_t zz = cs_extend_index(z, p.n[0], p.mode);
    const double *plane = p.in + (zz < 0 ? 0 : zz) * p.in_plane;
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        const int e = (int)threadIdx.x + k * CS_OS3_THREADS;
        if (TILE % CS_OS3_THREADS == 0 || e < TILE) {
            if (zz < 0 || ((fill >> k) & 1u)) {
                tile[e] = p.cval;
            } else {
                cs_copy_async8(tile + e, plane + goff[k], true);
            }
        }
    }
}

/* Output plane o of the thread's rows from acc[S] (those in the grid),
   then acc[S] = 0; true when one of them is not finite. */
template <int K, int S>
static __device__ __forceinline__ bool
cs_os3_store(double (&acc)[K][CS_OS3_CY], const cs_os_params &p, ptrdiff_t o,
             ptrdiff_t y, ptrdiff_t x, bool store)
{
    bool bad = false;
    double *at = p.out + o * p.out_plane + y * p.out_pitch + x;
#pragma unroll
    for (int c = 0; c < CS_OS3_CY; c++) {
        if (store && y + c < p.n[1] && x < p.n[2]) {
            at[c * p.out_pitch] = acc[S][c];
            bad = bad || cs_os_nonfinite(acc[S][c]);
        }
        acc[S][c] = 0.0;
    }
    return bad;
}

/*
 * Input plane j of the block (z = z0 - r + j), in ring slot j % STAGES:
 * wait for it, barrier (every thread's copies of plane j have landed and
 * every thread is done with plane j - 1), start plane j + STAGES - 1 in
 * the slot plane j - 1 leaves, add plane j, store the output plane it
 * completes.  U = j % K, fixed by the caller's unrolling.
 */
template <int K, int SHAPE, int U, int LOADS, int TILE, int SX, int STAGES>
static __device__ __forceinline__ bool
cs_os3_step(double (&acc)[K][CS_OS3_CY], double *tiles, const cs_os_params &p,
            int j, int planes, ptrdiff_t z0, const ptrdiff_t (&goff)[LOADS],
            unsigned fill, int toff, ptrdiff_t y, ptrdiff_t x)
{
    constexpr int R = (K - 1) / 2;
    cs_copy_wait<STAGES - 2>();
    __syncthreads();
    const int ahead = j + STAGES - 1;
    if (ahead < planes) {
        cs_os_load_plane<LOADS, TILE>(tiles + (ahead % STAGES) * TILE, p,
                                      z0 - R + ahead, goff, fill);
    }
    cs_copy_commit(); /* empty past the last plane: the count stays exact */
    cs_os_plane3d<K, SHAPE, CS_OS3_CY, U>(
        acc, tiles + (j % STAGES) * TILE + toff, SX, p.taps);
    /* output plane z0 - 2r + j is complete; planes before z0 are not this
       block's (their inputs started mid-way) */
    return cs_os3_store<K, U>(acc, p, z0 - 2 * R + j, y, x, j >= 2 * R);
}

/*
 * STAGES plane tiles in the ring (STAGES - 1 planes in flight while the
 * block computes one), MINB blocks resident per SM.
 */
template <int K, int SHAPE, int STAGES, int MINB>
__global__ void __launch_bounds__(CS_OS3_THREADS, MINB)
cs_os_3d_kernel(const cs_os_params p)
{
    constexpr int R = (K - 1) / 2;
    constexpr int SX = CS_OS3_BX + K - 1;
    constexpr int SY = CS_OS3_TY + K - 1;
    constexpr int TILE = SY * SX;
    constexpr int LOADS = (TILE + CS_OS3_THREADS - 1) / CS_OS3_THREADS;
    static_assert(LOADS <= 32, "loader bits");
    static_assert(K <= 3, "the plane loop below unrolls 3 steps");
    static_assert(STAGES >= 2 && STAGES * TILE * 8 <= 48 * 1024, "ring");
    __shared__ double tiles[STAGES * TILE];

    const int tx = (int)threadIdx.x % CS_OS3_BX;
    const int ty = (int)threadIdx.x / CS_OS3_BX;
    const ptrdiff_t x0 = (ptrdiff_t)(blockIdx.x % p.tiles_x) * CS_OS3_BX;
    const ptrdiff_t y0 = (ptrdiff_t)(blockIdx.x / p.tiles_x) * CS_OS3_TY;
    const ptrdiff_t z0 = (p.zb0 + blockIdx.y) * p.zc;
    const ptrdiff_t z1 = z0 + p.zc < p.n[0] ? z0 + p.zc : p.n[0];
    const int planes = (int)(z1 - z0) + K - 1;

    /* this thread's loader elements of a plane's tile, mapped once */
    ptrdiff_t goff[LOADS];
    unsigned fill = 0;
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        const int e = (int)threadIdx.x + k * CS_OS3_THREADS;
        const int r = e / SX, c = e % SX;
        const ptrdiff_t gy = cs_extend_index(y0 - R + r, p.n[1], p.mode);
        const ptrdiff_t gx = cs_extend_index(x0 - R + c, p.n[2], p.mode);
        goff[k] = 0;
        if (e < TILE) {
            if (gy < 0 || gx < 0) {
                fill |= 1u << k;
            } else {
                goff[k] = gy * p.in_pitch + gx;
            }
        }
    }

    double acc[K][CS_OS3_CY];
#pragma unroll
    for (int s = 0; s < K; s++) {
#pragma unroll
        for (int c = 0; c < CS_OS3_CY; c++) {
            acc[s][c] = 0.0;
        }
    }
    for (int q = 0; q < STAGES - 1; q++) {
        if (q < planes) {
            cs_os_load_plane<LOADS, TILE>(tiles + q * TILE, p, z0 - R + q,
                                          goff, fill);
        }
        cs_copy_commit();
    }

    const int toff = ty * CS_OS3_CY * SX + tx;
    const ptrdiff_t y = y0 + ty * CS_OS3_CY, x = x0 + tx;
    bool bad = false;
    for (int jb = 0; jb < planes; jb += K) {
        /* the rotation of acc needs j % K at compile time: K steps */
#define CS_OS3_STEP(U)                                                        \
    if (U < K && jb + U < planes) {                                           \
        bad = cs_os3_step<K, SHAPE, U % K, LOADS, TILE, SX, STAGES>(          \
                  acc, tiles, p, jb + U, planes, z0, goff, fill, toff, y, x)  \
              || bad;                                                         \
    }
        CS_OS3_STEP(0)
        CS_OS3_STEP(1)
        CS_OS3_STEP(2)
#undef CS_OS3_STEP
    }
    if (bad && p.nonfinite != NULL) {
        *p.nonfinite = 1;
    }
}

/* ------------------------------------------------------------------------
 * launchers (onestep_*.cu), called by onestep.cu
 * --------------------------------------------------------------------- */

/* The kernel variants (CONVSTENCIL_ONESTEP selects one, for measuring). */
enum cs_os_variant {
    CS_OS_PERSIST = 0, /* tile kernels, persistent blocks */
    CS_OS_BLOCKS = 1,  /* tile kernels, a block per tile */
    CS_OS_L1 = 2,      /* 1D: cs_os_1d_l1_kernel */
    CS_OS_DEEP = 3     /* 3D: four plane tiles in the ring, three blocks
                          per SM (planar and 1D grids: as CS_OS_BLOCKS) */
};

/* Launch the tile kernel for a planar kernel (ky = 1 or kx, kx = 3, 5, 7)
   or, flat, a 1D grid (ky = 1); p's tile counts filled in here. */
cs_status
cs_os_launch_tiles(cs_cuda_ctx *ctx, cs_os_params *p, int ky, int kx,
                   int shape, int flat, int variant);

/* Launch cs_os_1d_l1_kernel (kx = 3, 5, 7). */
cs_status
cs_os_launch_1d_l1(cs_cuda_ctx *ctx, cs_os_params *p, int kx);

/* Launch the 3D kernel (k = 3, CS_OS_BOX or CS_OS_STAR): a ring of three
   plane tiles and two blocks per SM (CS_OS_PERSIST, cc3d.cu's), three
   blocks (CS_OS_BLOCKS), or four tiles and three blocks (CS_OS_DEEP). */
cs_status
cs_os_launch_3d(cs_cuda_ctx *ctx, cs_os_params *p, int k, int shape,
                int variant);

/* ------------------------------------------------------------------------
 * the engine's entry (onestep.cu)
 * --------------------------------------------------------------------- */

/* A call onestep.cu has chosen a kernel for. */
typedef struct cs_onestep {
    int taken;   /* 0: direct.cu's generic kernel takes the call */
    int dims;    /* 1 (a 1D grid), 2 (planar kernel), 3 */
    int ky, kx;  /* the kernel's rows and columns (3D: its side) */
    int shape;   /* cs_os_shape */
    int variant; /* cs_os_variant */
    cs_os_params p;
} cs_onestep;

/*
 * Whether one of the kernels here takes a step of k from `in` to `out`
 * (extents `shape`, arrays as cs_cuda_apply_device takes them, not
 * overlapping): call->taken, and its parameters.  CS_ERR_INVALID only
 * for a bad CONVSTENCIL_ONESTEP.  Host only: nothing is queued.
 */
cs_status
cs_onestep_plan(cs_cuda_ctx *ctx, const cs_darray *in, const cs_darray *out,
                const ptrdiff_t shape[3], const cs_kernel *k, cs_mode mode,
                double cval, cs_onestep *call);

/*
 * out = one step of the call's kernel applied to in, on ctx->stream;
 * `nonfinite` (device memory, may be NULL) is set to 1 where a result is
 * NaN or infinite.
 */
cs_status
cs_cuda_onestep(cs_cuda_ctx *ctx, const cs_onestep *call, int *nonfinite);

#endif /* CS_CUDA_ONESTEP_CUH */
