/*
 * tb3d.cu -- temporal blocking of 3 x 3 x 3 stencils on CUDA cores (the
 * 3.5D blocking of the blocking seed): a block of 256 threads owns a
 * tile of 64 x 32 cells of a plane (each thread 2 columns x 4 rows) and
 * streams down a segment of planes, carrying T time steps in flight, so
 * the grid is read and written once per T steps.
 *
 * Each arriving plane cascades through the T levels as tb2d's rows do
 * ("push": the plane's three in-plane filters, one per kernel plane, go
 * to the output planes that read it; a level keeps two partial planes in
 * registers).  The in-plane neighbours come from a shared plane per
 * level (double-buffered: one __syncthreads per level).  Each level is
 * exact one cell further in, so a tile stores its central
 * (64 - 2T) x (32 - 2T) cells; a segment starts T planes early.
 *
 * Tap sets: a 7-point star (heat3d) and an outer product of three
 * vectors (box3d27p: one 3 x 3 in-plane filter a plane, scaled per
 * kernel plane).
 *
 * Boundary modes, as repeated steps apply them: wrap reads periodically
 * (every cell real); constant reads cval outside the grid at every
 * level; nearest, reflect and mirror read, at every level, the cell the
 * mode maps an outside cell to (tiles at a side edge), and a plane
 * beyond the top or bottom adds nothing while the plane it maps to adds
 * the kernel plane it would have met (tb2d's edge rows).
 */
#include "kernels.cuh"

#include <limits.h>
#include <string.h>

#define T3_THREADS 256
#define T3_CY 4                      /* rows per thread */
#define T3_V 2                       /* columns per thread */
#define T3_TX (32 * T3_V)            /* tile columns */
#define T3_TY (T3_THREADS / 32 * T3_CY) /* tile rows */
#define T3_STAR CS_TB3D_STAR
#define T3_RANK1 CS_TB3D_RANK1

typedef struct tb3_params {
    const double *in; /* origins (interior element (0, 0, 0)) */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_y, lim_x; /* unused: cs_params_grids fills them */
    ptrdiff_t tiles_x, tiles_y, segs, seg_planes, items;
    cs_mode mode;
    double cval;
    double w[27];           /* the star's weights */
    double cz[3], cy[3], cx[3]; /* an outer product's factors */
    int *in_flag;
    int *out_flag;
} tb3_params;

/* A tile's first owned cell along an axis of n cells: tiles of `own`,
   the last one moved back to end at the edge. */
static __device__ __forceinline__ ptrdiff_t
tile_origin(ptrdiff_t index, ptrdiff_t own, ptrdiff_t n)
{
    const ptrdiff_t start = index * own;
    const ptrdiff_t last = n - own;
    return start < last ? start : (last > 0 ? last : 0);
}

/* What a block streams, and where this thread's cells and reads are. */
struct tb3_tile {
    ptrdiff_t ox, oy;  /* grid coordinates of tile cell (0, 0) */
    ptrdiff_t z0, z1;  /* owned planes */
    int x0, y0;        /* this thread's first cell, tile coordinates */
    int my[T3_CY + 2]; /* edge tiles: the tile row each row of the read
                          window stands for (-2: outside, constant) */
    int mx[T3_V + 2];  /* ... and column */
};

/* The grid cell an index along an axis of n cells stands for (-1:
   constant mode, outside). */
static __device__ __forceinline__ ptrdiff_t
map_index(ptrdiff_t g, ptrdiff_t n, cs_mode mode)
{
    if (g >= 0 && g < n) {
        return g;
    }
    return cs_extend_index(g, n, mode);
}

/* Level-0 plane r into this thread's cells.  MAPPED: some cell or the
   plane lies outside the grid (read as the mode maps it; constant:
   cval). */
template <bool MAPPED>
static __device__ __forceinline__ void
load_plane(const tb3_params &p, const tb3_tile &tl, ptrdiff_t r,
           double (&v)[T3_CY][T3_V])
{
    ptrdiff_t z = r;
    if (r < 0 || r >= p.nz) {
        /* wrap: the periodic plane; otherwise any plane (a plane beyond
           the edge is replaced by cval or adds nothing) */
        z = p.mode == CS_MODE_WRAP ? cs_positive_mod(r, p.nz)
                                   : (r < 0 ? 0 : p.nz - 1);
    }
    const double *plane = p.in + z * p.in_plane;
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            const ptrdiff_t gy = tl.oy + tl.y0 + c, gx = tl.ox + tl.x0 + j;
            if (!MAPPED) {
                v[c][j] = plane[gy * p.in_pitch + gx];
                continue;
            }
            const ptrdiff_t my = map_index(gy, p.ny, p.mode);
            const ptrdiff_t mx = map_index(gx, p.nx, p.mode);
            v[c][j] = my < 0 || mx < 0 ? p.cval
                                       : plane[my * p.in_pitch + mx];
        }
    }
}

/* The arriving plane's 3 x 3 neighbourhoods of this thread's cells:
   n[i][k] is tile cell (y0 - 1 + i, x0 - 1 + k).  XYEDGE: every read goes
   through the mode's map (constant: cval outside); otherwise the own
   cells come from registers and the rest from the shared plane. */
template <bool XYEDGE>
static __device__ __forceinline__ void
gather(const tb3_params &p, const tb3_tile &tl, const double (*S)[T3_TX + 2],
       const double (&a)[T3_CY][T3_V], double (&n)[T3_CY + 2][T3_V + 2])
{
#pragma unroll
    for (int i = 0; i < T3_CY + 2; i++) {
#pragma unroll
        for (int k = 0; k < T3_V + 2; k++) {
            if (XYEDGE) {
                n[i][k] = tl.my[i] == -2 || tl.mx[k] == -2
                              ? p.cval
                              : S[tl.my[i] + 1][tl.mx[k] + 1];
            } else if (i >= 1 && i <= T3_CY && k >= 1 && k <= T3_V) {
                n[i][k] = a[i - 1][k - 1];
            } else {
                n[i][k] = S[tl.y0 + i][tl.x0 + k];
            }
        }
    }
}

/* The three in-plane filters (kernel planes 0, 1, 2) at cell (c, j). */
template <int SHAPE>
static __device__ __forceinline__ void
plane_filters(const tb3_params &p, const double (&n)[T3_CY + 2][T3_V + 2],
              int c, int j, double f[3])
{
    const double v = n[c + 1][j + 1];
    if (SHAPE == T3_STAR) {
        f[0] = p.w[4] * v;
        f[2] = p.w[22] * v;
        double s = p.w[13] * v;
        s = fma(p.w[12], n[c + 1][j], s);
        s = fma(p.w[14], n[c + 1][j + 2], s);
        s = fma(p.w[10], n[c][j + 1], s);
        f[1] = fma(p.w[16], n[c + 2][j + 1], s);
    } else {
        double h = 0.0;
#pragma unroll
        for (int dy = 0; dy < 3; dy++) {
            double row = p.cx[0] * n[c + dy][j];
            row = fma(p.cx[1], n[c + dy][j + 1], row);
            row = fma(p.cx[2], n[c + dy][j + 2], row);
            h = dy == 0 ? p.cy[0] * row : fma(p.cy[dy], row, h);
        }
        f[0] = p.cz[0] * h;
        f[1] = p.cz[1] * h;
        f[2] = p.cz[2] * h;
    }
}

/*
 * One level: plane `rin` of level t - 1 arrives in a; on return a holds
 * output plane rin - 1 of level t, complete, and P the partial planes
 * rin and rin + 1.  ZEDGE: the mode has edges along z (not wrap).
 * `buf` alternates the shared planes, one per write.
 */
template <int SHAPE, bool XYEDGE>
static __device__ __forceinline__ void
level_step(const tb3_params &p, const tb3_tile &tl, double (&a)[T3_CY][T3_V],
           double (&P)[2][T3_CY][T3_V], ptrdiff_t rin, bool zedge,
           double (*S)[T3_TY + 2][T3_TX + 2], int &buf)
{
    if (zedge && (rin < 0 || rin >= p.nz)) {
        if (p.mode == CS_MODE_CONSTANT) {
#pragma unroll
            for (int c = 0; c < T3_CY; c++) {
#pragma unroll
                for (int j = 0; j < T3_V; j++) {
                    a[c][j] = p.cval;
                }
            }
        } else { /* adds nothing: the plane it maps to adds for it */
#pragma unroll
            for (int c = 0; c < T3_CY; c++) {
#pragma unroll
                for (int j = 0; j < T3_V; j++) {
                    a[c][j] = P[0][c][j];
                    P[0][c][j] = P[1][c][j];
                    P[1][c][j] = 0.0;
                }
            }
            return;
        }
    }
    double (*plane)[T3_TX + 2] = S[buf];
    buf ^= 1;
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            plane[tl.y0 + c + 1][tl.x0 + j + 1] = a[c][j];
        }
    }
    __syncthreads();
    double n[T3_CY + 2][T3_V + 2];
    gather<XYEDGE>(p, tl, plane, a, n);
    /* the z edges of nearest, reflect, mirror: plane -1 maps to plane f
       and plane nz to nz - 1 - f (f: 0, 0, 1) */
    const int f = p.mode == CS_MODE_MIRROR ? 1 : 0;
    const bool top = zedge && p.mode != CS_MODE_CONSTANT && rin == f;
    const bool bottom = zedge && p.mode != CS_MODE_CONSTANT
                        && rin == p.nz - 1 - f;
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            double fk[3];
            plane_filters<SHAPE>(p, n, c, j, fk);
            a[c][j] = fk[2] + P[0][c][j];
            P[0][c][j] = fk[1] + P[1][c][j];
            P[1][c][j] = fk[0];
            if (top) { /* plane -1, read with kernel plane 0 by plane 0 */
                if (f == 0) {
                    P[0][c][j] += fk[0];
                } else {
                    a[c][j] += fk[0];
                }
            }
            if (bottom) { /* plane nz, read with kernel plane 2 by nz - 1 */
                if (f == 0) {
                    P[0][c][j] += fk[2];
                } else {
                    P[1][c][j] += fk[2];
                }
            }
        }
    }
}

/* A block's whole stream: planes z0 - T .. z1 - 1 + T of level 0. */
template <int T, int SHAPE, bool FLAGS, bool XYEDGE, bool MAPPED>
static __device__ __forceinline__ void
stream_tile(const tb3_params &p, const tb3_tile &tl,
            double (*S)[T3_TY + 2][T3_TX + 2], unsigned &bad)
{
    constexpr int M = T;
    double P[T][2][T3_CY][T3_V];
#pragma unroll
    for (int t = 0; t < T; t++) {
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                P[t][0][c][j] = P[t][1][c][j] = 0.0;
            }
        }
    }
    const bool zedge = p.mode != CS_MODE_WRAP;
    const ptrdiff_t first = tl.z0 - T, last = tl.z1 - 1 + T;
    double nxt[T3_CY][T3_V];
    load_plane<true>(p, tl, first, nxt);
    int buf = 0;
    for (ptrdiff_t r = first; r <= last; r++) {
        double a[T3_CY][T3_V];
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                a[c][j] = nxt[c][j];
            }
        }
        if (r + 1 <= last) {
            if (MAPPED || r + 1 < 0 || r + 1 >= p.nz) {
                load_plane<true>(p, tl, r + 1, nxt);
            } else {
                load_plane<false>(p, tl, r + 1, nxt);
            }
        }
        if (FLAGS) {
#pragma unroll
            for (int c = 0; c < T3_CY; c++) {
#pragma unroll
                for (int j = 0; j < T3_V; j++) {
                    bad |= isfinite(a[c][j]) ? 0u : 1u;
                }
            }
        }
#pragma unroll
        for (int t = 0; t < T; t++) {
            level_step<SHAPE, XYEDGE>(p, tl, a, P[t], r - t, zedge, S, buf);
        }
        const ptrdiff_t zo = r - T;
        if (zo < tl.z0 || zo >= tl.z1) {
            continue;
        }
        double *out = p.out + zo * p.out_plane;
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                const int ty = tl.y0 + c, tx = tl.x0 + j;
                const ptrdiff_t gy = tl.oy + ty, gx = tl.ox + tx;
                if (ty >= M && ty < T3_TY - M && tx >= M && tx < T3_TX - M
                    && gy >= 0 && gy < p.ny && gx >= 0 && gx < p.nx) {
                    out[gy * p.out_pitch + gx] = a[c][j];
                    if (FLAGS) {
                        bad |= isfinite(a[c][j]) ? 0u : 2u;
                    }
                }
            }
        }
    }
}

/* Tiles at a side edge of the grid (interior tiles: tb3d_inner_kernel;
   here they return at once). */
template <int T, int SHAPE, bool FLAGS>
__global__ void __launch_bounds__(T3_THREADS, 1)
tb3d_edge_kernel(const tb3_params p)
{
    constexpr int M = T;
    constexpr int OWNX = T3_TX - 2 * M, OWNY = T3_TY - 2 * M;
    __shared__ double S[2][T3_TY + 2][T3_TX + 2];
    double *flat = &S[0][0][0];
    for (int i = threadIdx.x; i < 2 * (T3_TY + 2) * (T3_TX + 2);
         i += T3_THREADS) {
        flat[i] = 0.0; /* the border rows and columns: read, never used */
    }
    __syncthreads();
    const ptrdiff_t tiles = p.tiles_x * p.tiles_y;
    const ptrdiff_t tile = (ptrdiff_t)blockIdx.x % tiles;
    const ptrdiff_t seg = (ptrdiff_t)blockIdx.x / tiles;
    tb3_tile tl;
    tl.ox = tile_origin(tile % p.tiles_x, OWNX, p.nx) - M;
    tl.oy = tile_origin(tile / p.tiles_x, OWNY, p.ny) - M;
    tl.z0 = seg * p.seg_planes;
    tl.z1 = tl.z0 + p.seg_planes < p.nz ? tl.z0 + p.seg_planes : p.nz;
    tl.x0 = (int)(threadIdx.x % 32) * T3_V;
    tl.y0 = (int)(threadIdx.x / 32) * T3_CY;
    unsigned bad = 0;
    const bool inside = tl.ox >= 0 && tl.ox + T3_TX <= p.nx && tl.oy >= 0
                        && tl.oy + T3_TY <= p.ny;
    if (inside) {
        return; /* the whole block: tb3d_inner_kernel's */
    }
    if (p.mode == CS_MODE_WRAP) { /* read mapped, every cell real */
        stream_tile<T, SHAPE, FLAGS, false, true>(p, tl, S, bad);
    } else {
        for (int i = 0; i < T3_CY + 2; i++) {
            const ptrdiff_t g = tl.oy + tl.y0 - 1 + i;
            const ptrdiff_t m = map_index(g, p.ny, p.mode);
            const ptrdiff_t t = m - tl.oy;
            tl.my[i] = m < 0 ? -2 : (int)(t < -1 ? -1 : t > T3_TY ? T3_TY : t);
        }
        for (int k = 0; k < T3_V + 2; k++) {
            const ptrdiff_t g = tl.ox + tl.x0 - 1 + k;
            const ptrdiff_t m = map_index(g, p.nx, p.mode);
            const ptrdiff_t t = m - tl.ox;
            tl.mx[k] = m < 0 ? -2 : (int)(t < -1 ? -1 : t > T3_TX ? T3_TX : t);
        }
        stream_tile<T, SHAPE, FLAGS, true, true>(p, tl, S, bad);
    }
    if ((bad & 1u) && p.in_flag != nullptr) {
        *p.in_flag = 1;
    }
    if ((bad & 2u) && p.out_flag != nullptr) {
        *p.out_flag = 1;
    }
}

/* ------------------------------------------------------------------------
 * interior tiles: 512 threads, each 2 columns x 2 rows; x neighbours by
 * shuffles, y neighbours through the shared plane
 * --------------------------------------------------------------------- */

#define T3I_THREADS 512
#define T3I_CY 2 /* rows per thread: T3_TY = 16 warps x 2 */

/* Plane r's cells of this thread (rows y0, y0 + 1, columns x0, x0 + 1
   of a tile inside the grid); a plane beyond the top or bottom as
   load_plane reads it. */
static __device__ __forceinline__ void
load_inner(const tb3_params &p, ptrdiff_t oy, ptrdiff_t ox, int y0, int x0,
           ptrdiff_t r, double (&v)[T3I_CY][T3_V])
{
    ptrdiff_t z = r;
    if (r < 0 || r >= p.nz) {
        z = p.mode == CS_MODE_WRAP ? cs_positive_mod(r, p.nz)
                                   : (r < 0 ? 0 : p.nz - 1);
    }
    const double *src = p.in + z * p.in_plane + (oy + y0) * p.in_pitch
                        + ox + x0;
#pragma unroll
    for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            v[c][j] = src[c * p.in_pitch + j];
        }
    }
}

/* One level of an interior tile (level_step's contract): the x
   neighbours by shuffles (the outer lanes' are the margin's, never
   stored), the rows above and below from the shared plane, where every
   thread leaves its own rows (an outer product: its rows filtered along
   x). */
template <int SHAPE>
static __device__ __forceinline__ void
inner_step(const tb3_params &p, double (&a)[T3I_CY][T3_V],
           double (&P)[2][T3I_CY][T3_V], ptrdiff_t rin, bool zedge,
           double2 (*S)[T3_TY + 2][T3_TX / 2], int &buf, int y0, int x0)
{
    if (zedge && (rin < 0 || rin >= p.nz)) {
        if (p.mode == CS_MODE_CONSTANT) {
#pragma unroll
            for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
                for (int j = 0; j < T3_V; j++) {
                    a[c][j] = p.cval;
                }
            }
        } else { /* adds nothing: the plane it maps to adds for it */
#pragma unroll
            for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
                for (int j = 0; j < T3_V; j++) {
                    a[c][j] = P[0][c][j];
                    P[0][c][j] = P[1][c][j];
                    P[1][c][j] = 0.0;
                }
            }
            return;
        }
    }
    /* x: e[c][0] is column x0 - 1, e[c][1..2] the own, e[c][3] x0 + 2 */
    double e[T3I_CY][T3_V + 2];
#pragma unroll
    for (int c = 0; c < T3I_CY; c++) {
        e[c][0] = __shfl_up_sync(0xffffffffu, a[c][T3_V - 1], 1);
        e[c][T3_V + 1] = __shfl_down_sync(0xffffffffu, a[c][0], 1);
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            e[c][j + 1] = a[c][j];
        }
    }
    /* what the rows above and below need of this row: the star its
       values, an outer product its filter along x */
    double x[T3I_CY][T3_V];
#pragma unroll
    for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            if (SHAPE == T3_STAR) {
                x[c][j] = a[c][j];
            } else {
                double h = p.cx[0] * e[c][j];
                h = fma(p.cx[1], e[c][j + 1], h);
                x[c][j] = fma(p.cx[2], e[c][j + 2], h);
            }
        }
    }
    double2 (*plane)[T3_TX / 2] = S[buf];
    buf ^= 1;
    const int col = x0 / T3_V;
#pragma unroll
    for (int c = 0; c < T3I_CY; c++) {
        plane[y0 + c + 1][col] = make_double2(x[c][0], x[c][1]);
    }
    __syncthreads();
    const double2 up = plane[y0][col];
    const double2 down = plane[y0 + T3I_CY + 1][col];
    const bool top = zedge && p.mode != CS_MODE_CONSTANT
                     && rin == (p.mode == CS_MODE_MIRROR ? 1 : 0);
    const bool bottom = zedge && p.mode != CS_MODE_CONSTANT
                        && rin == p.nz - 1 - (p.mode == CS_MODE_MIRROR ? 1 : 0);
    const int f = p.mode == CS_MODE_MIRROR ? 1 : 0;
#pragma unroll
    for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            const double above = c > 0 ? x[c - 1][j]
                                       : (j == 0 ? up.x : up.y);
            const double below = c + 1 < T3I_CY ? x[c + 1][j]
                                                : (j == 0 ? down.x : down.y);
            double fk[3];
            if (SHAPE == T3_STAR) {
                const double v = a[c][j];
                fk[0] = p.w[4] * v;
                fk[2] = p.w[22] * v;
                double s = p.w[13] * v;
                s = fma(p.w[12], e[c][j], s);
                s = fma(p.w[14], e[c][j + 2], s);
                s = fma(p.w[10], above, s);
                fk[1] = fma(p.w[16], below, s);
            } else {
                double h = p.cy[0] * above;
                h = fma(p.cy[1], x[c][j], h);
                h = fma(p.cy[2], below, h);
                fk[0] = p.cz[0] * h;
                fk[1] = p.cz[1] * h;
                fk[2] = p.cz[2] * h;
            }
            a[c][j] = fk[2] + P[0][c][j];
            P[0][c][j] = fk[1] + P[1][c][j];
            P[1][c][j] = fk[0];
            if (top) {
                if (f == 0) {
                    P[0][c][j] += fk[0];
                } else {
                    a[c][j] += fk[0];
                }
            }
            if (bottom) {
                if (f == 0) {
                    P[0][c][j] += fk[2];
                } else {
                    P[1][c][j] += fk[2];
                }
            }
        }
    }
}

template <int T, int SHAPE, bool FLAGS>
__global__ void __launch_bounds__(T3I_THREADS, 1)
tb3d_inner_kernel(const tb3_params p)
{
    constexpr int M = T;
    constexpr int OWNX = T3_TX - 2 * M, OWNY = T3_TY - 2 * M;
    __shared__ double2 S[2][T3_TY + 2][T3_TX / 2];
    const ptrdiff_t tiles = p.tiles_x * p.tiles_y;
    const ptrdiff_t tile = (ptrdiff_t)blockIdx.x % tiles;
    const ptrdiff_t seg = (ptrdiff_t)blockIdx.x / tiles;
    const ptrdiff_t ox = tile_origin(tile % p.tiles_x, OWNX, p.nx) - M;
    const ptrdiff_t oy = tile_origin(tile / p.tiles_x, OWNY, p.ny) - M;
    if (!(ox >= 0 && ox + T3_TX <= p.nx && oy >= 0
          && oy + T3_TY <= p.ny)) {
        return; /* the whole block: tb3d_edge_kernel's */
    }
    for (int i = threadIdx.x; i < 2 * (T3_TY + 2) * (T3_TX / 2);
         i += T3I_THREADS) {
        (&S[0][0][0])[i] = make_double2(0.0, 0.0); /* the border rows:
                                                       read, never used */
    }
    __syncthreads();
    const ptrdiff_t z0 = seg * p.seg_planes;
    const ptrdiff_t z1 = z0 + p.seg_planes < p.nz ? z0 + p.seg_planes : p.nz;
    const int x0 = (int)(threadIdx.x % 32) * T3_V;
    const int y0 = (int)(threadIdx.x / 32) * T3I_CY;
    double P[T][2][T3I_CY][T3_V];
#pragma unroll
    for (int t = 0; t < T; t++) {
#pragma unroll
        for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                P[t][0][c][j] = P[t][1][c][j] = 0.0;
            }
        }
    }
    const bool zedge = p.mode != CS_MODE_WRAP;
    const ptrdiff_t first = z0 - T, last = z1 - 1 + T;
    unsigned bad = 0;
    double nxt[T3I_CY][T3_V];
    load_inner(p, oy, ox, y0, x0, first, nxt);
    int buf = 0;
    for (ptrdiff_t r = first; r <= last; r++) {
        double a[T3I_CY][T3_V];
#pragma unroll
        for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                a[c][j] = nxt[c][j];
            }
        }
        if (r + 1 <= last) {
            load_inner(p, oy, ox, y0, x0, r + 1, nxt);
        }
        if (FLAGS) {
#pragma unroll
            for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
                for (int j = 0; j < T3_V; j++) {
                    bad |= isfinite(a[c][j]) ? 0u : 1u;
                }
            }
        }
#pragma unroll
        for (int t = 0; t < T; t++) {
            inner_step<SHAPE>(p, a, P[t], r - t, zedge, S, buf, y0, x0);
        }
        const ptrdiff_t zo = r - T;
        if (zo < z0 || zo >= z1) {
            continue;
        }
        double *out = p.out + zo * p.out_plane;
#pragma unroll
        for (int c = 0; c < T3I_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                const int ty = y0 + c, tx = x0 + j;
                if (ty >= M && ty < T3_TY - M && tx >= M && tx < T3_TX - M) {
                    out[(oy + ty) * p.out_pitch + ox + tx] = a[c][j];
                    if (FLAGS) {
                        bad |= isfinite(a[c][j]) ? 0u : 2u;
                    }
                }
            }
        }
    }
    if ((bad & 1u) && p.in_flag != nullptr) {
        *p.in_flag = 1;
    }
    if ((bad & 2u) && p.out_flag != nullptr) {
        *p.out_flag = 1;
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

/* Segments of planes per tile: each segment's 2 T extra planes weighed
   against the rounds of blocks the launch takes, plus one (tb2d's
   choice, along z). */
static ptrdiff_t
tb3_segments(ptrdiff_t tiles, ptrdiff_t nz, int halo, ptrdiff_t resident)
{
    ptrdiff_t best = 1;
    double best_cost = 0.0;
    const ptrdiff_t top = nz < 1024 ? nz : 1024;
    for (ptrdiff_t s = 1; s <= top; s++) {
        const ptrdiff_t planes = CEIL_DIV(nz, s);
        const ptrdiff_t rounds = CEIL_DIV(tiles * s, resident);
        const double cost =
            (double)(rounds + 1) * (double)(planes + 2 * halo);
        if (s == 1 || cost < best_cost) {
            best = s;
            best_cost = cost;
        }
    }
    return best;
}

template <int T, int SHAPE, bool FLAGS>
static cs_status
tb3_launch(cs_cuda_ctx *ctx, tb3_params *p)
{
    constexpr int M = T;
    int per_sm = 0;
    CS_CUDA_CHECK(ctx,
                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &per_sm, tb3d_inner_kernel<T, SHAPE, FLAGS>,
                      T3I_THREADS, 0),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor (tb3d)");
    const ptrdiff_t resident = (ptrdiff_t)ctx->sms * (per_sm > 0 ? per_sm : 1);
    p->tiles_x = CEIL_DIV(p->nx, (ptrdiff_t)(T3_TX - 2 * M));
    p->tiles_y = CEIL_DIV(p->ny, (ptrdiff_t)(T3_TY - 2 * M));
    p->segs = tb3_segments(p->tiles_x * p->tiles_y, p->nz, T, resident);
    p->seg_planes = CEIL_DIV(p->nz, p->segs);
    p->items = p->tiles_x * p->tiles_y * p->segs;
    if (p->items > INT_MAX) {
        cs_cuda_message(ctx, "tb3d: grid too large");
        return CS_ERR_INVALID;
    }
    const unsigned blocks = (unsigned)p->items;
    tb3d_inner_kernel<T, SHAPE, FLAGS><<<blocks, T3I_THREADS, 0, ctx->stream>>>(*p);
    CS_TRY(cs_cuda_check_launch(ctx, "tb3d inner kernel"));
    tb3d_edge_kernel<T, SHAPE, FLAGS><<<blocks, T3_THREADS, 0, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "tb3d edge kernel");
}

template <int SHAPE, bool FLAGS, int TOP>
static cs_status
tb3_depth(cs_cuda_ctx *ctx, tb3_params *p, int depth)
{
    if constexpr (TOP > 1) {
        if (depth < TOP) {
            return tb3_depth<SHAPE, FLAGS, TOP - 1>(ctx, p, depth);
        }
    }
    return tb3_launch<TOP, SHAPE, FLAGS>(ctx, p);
}

cs_status
cs_cuda_tb3d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int depth, cs_mode mode, double cval,
                  int *in_flag, int *out_flag)
{
    tb3_params p;
    memset(&p, 0, sizeof(p));
    const int shape = cs_tb3d_taps(k->size, k->host_weights, p.cz, p.cy,
                                   p.cx);
    int ok = in->origin != NULL && out->origin != NULL
             && in->origin != out->origin && shape >= 0 && depth >= 1
             && depth <= CS_TB3D_MAX_DEPTH && ctx->sms > 0;
    for (int a = 0; a < 3 && ok; a++) {
        ok = in->n[a] == out->n[a] && in->n[a] >= CS_TB3D_MIN_EXTENT;
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_tb3d_pass: invalid grids, kernel or "
                             "depth");
        return CS_ERR_INVALID;
    }
    cs_params_grids(&p, in, out);
    p.mode = mode;
    p.cval = cval;
    p.in_flag = in_flag;
    p.out_flag = out_flag;
    memcpy(p.w, k->host_weights, sizeof(p.w));
    const bool flags = in_flag != NULL || out_flag != NULL;
    if (shape == T3_STAR) {
        return flags ? tb3_depth<T3_STAR, true, CS_TB3D_MAX_DEPTH>(ctx, &p, depth)
                     : tb3_depth<T3_STAR, false, CS_TB3D_MAX_DEPTH>(ctx, &p, depth);
    }
    return flags ? tb3_depth<T3_RANK1, true, CS_TB3D_MAX_DEPTH>(ctx, &p, depth)
                 : tb3_depth<T3_RANK1, false, CS_TB3D_MAX_DEPTH>(ctx, &p, depth);
}
