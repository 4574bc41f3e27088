/*
 * tb3d.cu -- temporal blocking of 3 x 3 x 3 stencils on CUDA cores (the
 * 3.5D blocking of the blocking seed): a block of 512 threads owns a
 * tile of 64 x 32 cells of a plane (each thread 2 columns x 2 rows) and
 * streams down a segment of planes, carrying T time steps in flight, so
 * the grid is read and written once per T steps.
 *
 * Each arriving plane cascades through the T levels as tb2d's rows do
 * ("push": the plane's three in-plane filters, one per kernel plane, go
 * to the output planes that read it; a level keeps two partial planes in
 * registers).  The x neighbours come by warp shuffles, the rows above
 * and below through shared planes.  A star's level output needs only
 * the centre tap of the arriving plane, so all T levels of a plane pass
 * one barrier (a shared plane per level, double-buffered); an outer
 * product's levels take one barrier each (two shared planes in turn).
 * Each level is exact one cell further in, so a tile stores its central
 * (64 - 2T) x (32 - 2T) cells; a segment starts T planes early.
 *
 * Tap sets: a 7-point star (heat3d) and an outer product of three
 * vectors (box3d27p: one 3 x 3 in-plane filter a plane, scaled per
 * kernel plane; the shared plane carries rows filtered along x).
 *
 * Boundary modes, as repeated steps apply them: wrap reads periodically
 * (every cell real).  In tiles at a side edge the cells outside the grid
 * are kept at every level, so the step itself needs no maps: constant
 * resets them to cval; nearest, reflect and mirror keep columns -1 and
 * nx equal to the cells the mode maps them to (one shuffle pair a row:
 * those cells lie at most two columns in), and in-grid rows read the
 * rows that outside rows map to.  A plane beyond the top or bottom is
 * cval (constant) or adds nothing while the plane it maps to adds the
 * kernel plane it would have met (tb2d's edge rows).
 */
#include "kernels.cuh"

#include <limits.h>
#include <string.h>

#define T3_THREADS 512
#define T3_CY 2                         /* rows per thread */
#define T3_V 2                          /* columns per thread */
#define T3_TX (32 * T3_V)               /* tile columns: a warp's row */
#define T3_TY (T3_THREADS / 32 * T3_CY) /* tile rows */
#define T3_MAX_SEGMENTS 1024 /* per tile (the model's TB3D_MAX_SEGMENTS) */
#define T3_EXTRA_ROUNDS 0    /* cs_stream_segments' (TB3D_EXTRA_ROUNDS) */
#define T3_STAR CS_TB3D_STAR
#define T3_RANK1 CS_TB3D_RANK1

typedef struct tb3_params {
    const double *in; /* origins (interior element (0, 0, 0)) */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t lim_y, lim_x; /* unused: cs_params_grids fills them */
    ptrdiff_t tiles_x, tiles_y, seg_planes;
    ptrdiff_t z_lo, z_hi; /* the planes the pass writes (its segments') */
    /* a split pass's bands (cs_lead_bands): segment `lead_count` of
       every tile before the window's, each counted in *lead_done */
    int lead_count;
    ptrdiff_t lead[2][2];
    unsigned *lead_done;
    /* a second input (cs_box_input; FLAGS instances): planes box_lo ..
       box_hi - 1 from box_in */
    const double *box_in;
    ptrdiff_t box_pitch, box_plane, box_lo, box_hi;
    int shared_doubles; /* the block's shared planes (cs_tb3d_smem_bytes):
                           a star's levels share a barrier, so each has
                           its own pair; an outer product's levels take
                           turns on one pair */
    cs_mode mode;
    double cval;
    double w[27];           /* the star's weights */
    double cz[3], cy[3], cx[3]; /* an outer product's factors */
    int *in_flag;
    int *out_flag;
} tb3_params;

/*
 * Where a thread's cells are and, in a tile at a side edge, how its
 * cells outside the grid are kept.  A thread holds rows y0 .. y0 +
 * T3_CY - 1 and columns x0, x0 + 1 of the tile.
 */
#if T3_CY > 2
typedef unsigned long long t3_rows;
#else
typedef unsigned t3_rows;
#endif
struct tb3_cells {
    ptrdiff_t oy, ox; /* grid coordinates of tile cell (0, 0) */
    int y0, x0;
    /* edge tiles only (packed: the registers are scarce) */
    ptrdiff_t row[T3_CY]; /* offset of the row each own row loads (FLAGS
                             instances: its index, the pitch the
                             plane's: plane_at) */
    ptrdiff_t col[T3_V];  /* the column each own column loads */
    t3_rows rows;         /* byte c: the shared-plane row read above own
                             row c; byte T3_CY + c: below it */
    unsigned keep;        /* bit c * T3_V + j: cell (c, j) outside the
                             grid; from T3_GHOST_SHIFT, 2 bits: the own
                             column at grid column -1 or nx plus one (0:
                             none); T3_SRC_J_BIT: the column of the cell
                             it maps to; from T3_SRC_LANE_SHIFT, 5 bits:
                             that cell's lane */
};

/* A tile's kind: inside the grid; at a side edge, its rows reading the
   rows beside them (constant and wrap, whose outside rows hold their
   values, or a tile whose rows all lie in the grid); at a side edge,
   its in-grid rows reading the rows that outside rows map to
   (cl.rows). */
enum { T3_INSIDE = 0, T3_EDGE = 1, T3_EDGE_ROWS = 2 };

#define T3_GHOST_SHIFT (T3_CY * T3_V)
#define T3_SRC_J_BIT (1u << (T3_GHOST_SHIFT + 2))
#define T3_SRC_LANE_SHIFT (T3_GHOST_SHIFT + 3)
/* The shared-plane row (tile row + 1) an own row at grid row `reader`
   reads for grid row g, its neighbour: nearest, reflect and mirror read
   the mapped row where g is outside the grid and the reader inside
   (constant's and wrap's outside rows hold their values). */
static __device__ __forceinline__ int
neighbour_row(const tb3_params &p, const tb3_cells &cl, ptrdiff_t reader,
              ptrdiff_t g)
{
    const int plain = (int)(g - cl.oy) + 1;
    if (reader < 0 || reader >= p.ny || (g >= 0 && g < p.ny)
        || p.mode == CS_MODE_WRAP || p.mode == CS_MODE_CONSTANT) {
        return plain;
    }
    const ptrdiff_t t = cs_extend_index(g, p.ny, p.mode) - cl.oy;
    /* within the tile: mapped rows lie at most 2 rows inside */
    return t >= 0 && t < T3_TY ? (int)t + 1 : plain;
}

/*
 * An edge tile's maps.  Loads: the cell the mode maps an own cell to
 * (wrap: the periodic cell; constant: any, replaced by cval).  Then, at
 * every level, constant's outside cells are reset to cval; nearest,
 * reflect and mirror keep grid columns -1 and nx (the only outside
 * columns in-grid cells read) equal to the cells they map to, which lie
 * in this lane or the next, and in-grid rows read the rows that outside
 * rows map to.
 */
template <bool FLAGS>
static __device__ __forceinline__ void
edge_maps(const tb3_params &p, tb3_cells &cl)
{
    const bool mapped = p.mode != CS_MODE_CONSTANT
                        && p.mode != CS_MODE_WRAP;
    cl.rows = 0;
    cl.keep = (unsigned)(threadIdx.x % 32) << T3_SRC_LANE_SHIFT;
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
        const ptrdiff_t gy = cl.oy + cl.y0 + c;
        const ptrdiff_t m = cs_extend_index(gy, p.ny, p.mode);
        cl.row[c] = (m < 0 ? 0 : m) * (FLAGS ? 1 : p.in_pitch);
        cl.rows |= (t3_rows)neighbour_row(p, cl, gy, gy - 1) << (8 * c);
        cl.rows |= (t3_rows)neighbour_row(p, cl, gy, gy + 1)
                   << (8 * (T3_CY + c));
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            const ptrdiff_t gx = cl.ox + cl.x0 + j;
            if (gy < 0 || gy >= p.ny || gx < 0 || gx >= p.nx) {
                cl.keep |= 1u << (c * T3_V + j);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < T3_V; j++) {
        const ptrdiff_t gx = cl.ox + cl.x0 + j;
        const ptrdiff_t m = cs_extend_index(gx, p.nx, p.mode);
        cl.col[j] = m < 0 ? 0 : m;
        if ((gx == -1 || gx == p.nx) && mapped) {
            const int tx = (int)(m - cl.ox); /* 0 .. 2 columns inside */
            cl.keep = (cl.keep & ((1u << T3_SRC_LANE_SHIFT) - 1u))
                      | ((unsigned)(j + 1) << T3_GHOST_SHIFT)
                      | (tx % T3_V != 0 ? T3_SRC_J_BIT : 0u)
                      | ((unsigned)(tx / T3_V) << T3_SRC_LANE_SHIFT);
        }
    }
}

/* An edge tile's level output (or loaded plane), its outside cells kept
   as edge_maps says; every lane takes part in the shuffles. */
static __device__ __forceinline__ void
keep_outside(const tb3_params &p, const tb3_cells &cl,
             double (&a)[T3_CY][T3_V])
{
    if (p.mode == CS_MODE_CONSTANT) {
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                a[c][j] = (cl.keep >> (c * T3_V + j)) & 1u ? p.cval : a[c][j];
            }
        }
    } else if (p.mode != CS_MODE_WRAP) {
        const int lane = (int)(cl.keep >> T3_SRC_LANE_SHIFT) & 31;
        const unsigned ghost = (cl.keep >> T3_GHOST_SHIFT) & 3u;
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
            const double v0 = __shfl_sync(0xffffffffu, a[c][0], lane);
            const double v1 = __shfl_sync(0xffffffffu, a[c][1], lane);
            const double v = cl.keep & T3_SRC_J_BIT ? v1 : v0;
            a[c][0] = ghost == 1u ? v : a[c][0];
            a[c][1] = ghost == 2u ? v : a[c][1];
        }
    }
}

/* Plane z's first cell and *pitch its rows' pitch: the input's, or in
   a checked pass (FLAGS) the second input's for its planes. */
template <bool FLAGS>
static __device__ __forceinline__ const double *
plane_at(const tb3_params &p, ptrdiff_t z, ptrdiff_t *pitch)
{
    if (FLAGS && z >= p.box_lo && z < p.box_hi) {
        *pitch = p.box_pitch;
        return p.box_in + (z - p.box_lo) * p.box_plane;
    }
    *pitch = p.in_pitch;
    return p.in + z * p.in_plane;
}

/* Plane r's own cells (interior tiles: from in_off, the first one's
   offset in a plane of the input (FLAGS: found from the plane's pitch);
   edge tiles: as edge_maps says); a plane beyond the top or bottom:
   wrap's periodic plane, otherwise any (the step replaces it). */
template <int EDGE, bool FLAGS>
static __device__ __forceinline__ void
load_plane(const tb3_params &p, const tb3_cells &cl, ptrdiff_t in_off,
           ptrdiff_t r, double (&v)[T3_CY][T3_V])
{
    ptrdiff_t z = r;
    if (r < 0 || r >= p.nz) {
        z = p.mode == CS_MODE_WRAP ? cs_positive_mod(r, p.nz)
                                   : (r < 0 ? 0 : p.nz - 1);
    }
    ptrdiff_t pitch;
    const double *plane = plane_at<FLAGS>(p, z, &pitch);
    if constexpr (EDGE == T3_INSIDE) {
        const double *src =
            FLAGS ? plane + (cl.oy + cl.y0) * pitch + cl.ox + cl.x0
                  : plane + in_off;
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                v[c][j] = src[c * pitch + j];
            }
        }
    } else {
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                v[c][j] = plane[(FLAGS ? cl.row[c] * pitch : cl.row[c])
                                + cl.col[j]];
            }
        }
    }
}

/* A plane beyond the top or bottom in constant mode: every cell cval. */
static __device__ __forceinline__ void
fill_cval(const tb3_params &p, double (&a)[T3_CY][T3_V])
{
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            a[c][j] = p.cval;
        }
    }
}

/* A plane beyond the top or bottom that adds nothing: the level's output
   is the partial plane P[0], and the partial planes move up one. */
static __device__ __forceinline__ void
pass_through(double (&a)[T3_CY][T3_V], double (&P)[2][T3_CY][T3_V])
{
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            a[c][j] = P[0][c][j];
            P[0][c][j] = P[1][c][j];
            P[1][c][j] = 0.0;
        }
    }
}

/* Plane rin beyond the top or bottom (not wrap): constant's is cval
   and the level steps on it (false); in the other modes it adds
   nothing, since the plane it maps to adds for it, and the level's
   output is ready (true). */
template <int EDGE>
static __device__ __forceinline__ bool
beyond_z_edge(const tb3_params &p, const tb3_cells &cl,
              double (&a)[T3_CY][T3_V], double (&P)[2][T3_CY][T3_V])
{
    if (p.mode == CS_MODE_CONSTANT) {
        fill_cval(p, a);
        return false;
    }
    pass_through(a, P);
    if (EDGE != T3_INSIDE) {
        keep_outside(p, cl, a);
    }
    return true;
}

/* e[c][0] is column x0 - 1 of own row c (the lane before's), e[c][1..2]
   the own columns, e[c][3] column x0 + 2 (the lane after's); every lane
   takes part in the shuffles. */
static __device__ __forceinline__ void
row_neighbours(const double (&a)[T3_CY][T3_V], double (&e)[T3_CY][T3_V + 2])
{
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
        e[c][0] = __shfl_up_sync(0xffffffffu, a[c][T3_V - 1], 1);
        e[c][T3_V + 1] = __shfl_down_sync(0xffffffffu, a[c][0], 1);
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            e[c][j + 1] = a[c][j];
        }
    }
}

/* The thread's rows to the shared plane (row = tile row + 1). */
static __device__ __forceinline__ void
leave_rows(const tb3_cells &cl, double2 (*plane)[T3_TX / 2],
           const double (&x)[T3_CY][T3_V])
{
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
        plane[cl.y0 + c + 1][cl.x0 / T3_V] = make_double2(x[c][0], x[c][1]);
    }
}

/* An edge tile's rows above and below each own row, from the shared
   plane as cl.rows maps them. */
static __device__ __forceinline__ void
mapped_rows(const tb3_cells &cl, const double2 (*plane)[T3_TX / 2],
            double (&above)[T3_CY][T3_V], double (&below)[T3_CY][T3_V])
{
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
        const double2 u = plane[(cl.rows >> (8 * c)) & 0xffu][cl.x0 / T3_V];
        const double2 d = plane[(cl.rows >> (8 * (T3_CY + c))) & 0xffu]
                               [cl.x0 / T3_V];
        above[c][0] = u.x;
        above[c][1] = u.y;
        below[c][0] = d.x;
        below[c][1] = d.y;
    }
}

/*
 * The outer product's level: plane `rin` of level t - 1 arrives in a; on
 * return a holds output plane rin - 1 of level t, complete, and P the
 * partial planes rin and rin + 1 (each plane's in-plane filter, scaled
 * per kernel plane, goes to the output planes that read it).  The x
 * neighbours come by shuffles (the outer lanes' are the margin's, never
 * stored), the rows above and below, filtered along x, from the shared
 * plane, where every thread leaves its own.  A level's output needs the
 * rows above and below, so each level waits at its own barrier.  EDGE
 * (the tile's kind): at a side edge the tile's cells outside the grid
 * are kept as edge_maps says, and with T3_EDGE_ROWS in-grid rows read
 * the rows outside rows map to (cl.rows).  ZEDGE: rin
 * may be outside the grid or at a plane the z edges of nearest, reflect
 * and mirror touch (not wrap).  `buf` alternates the two shared planes,
 * one per write.
 */
template <int EDGE, bool ZEDGE>
static __device__ __forceinline__ void
outer_level(const tb3_params &p, const tb3_cells &cl, double (&a)[T3_CY][T3_V],
            double (&P)[2][T3_CY][T3_V], ptrdiff_t rin,
            double2 (*S)[T3_TY + 2][T3_TX / 2], int &buf)
{
    if (ZEDGE && (rin < 0 || rin >= p.nz)
        && beyond_z_edge<EDGE>(p, cl, a, P)) {
        return;
    }
    double e[T3_CY][T3_V + 2];
    row_neighbours(a, e);
    /* the rows filtered along x, for the rows above and below */
    double x[T3_CY][T3_V];
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            double h = p.cx[0] * e[c][j];
            h = fma(p.cx[1], e[c][j + 1], h);
            x[c][j] = fma(p.cx[2], e[c][j + 2], h);
        }
    }
    double2 (*plane)[T3_TX / 2] = S[buf];
    buf ^= 1;
    leave_rows(cl, plane, x);
    __syncthreads();
    double above[T3_CY][T3_V], below[T3_CY][T3_V];
    if (EDGE == T3_EDGE_ROWS) {
        mapped_rows(cl, plane, above, below);
    } else {
        const double2 u = plane[cl.y0][cl.x0 / T3_V];
        const double2 d = plane[cl.y0 + T3_CY + 1][cl.x0 / T3_V];
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                above[c][j] = c > 0 ? x[c - 1][j] : (j == 0 ? u.x : u.y);
                below[c][j] = c + 1 < T3_CY ? x[c + 1][j]
                                            : (j == 0 ? d.x : d.y);
            }
        }
    }
    /* the z edges of nearest, reflect, mirror: plane -1 maps to plane f
       and plane nz to nz - 1 - f (f: 0, 0, 1) */
    const int f = p.mode == CS_MODE_MIRROR ? 1 : 0;
    const bool top = ZEDGE && p.mode != CS_MODE_CONSTANT && rin == f;
    const bool bottom = ZEDGE && p.mode != CS_MODE_CONSTANT
                        && rin == p.nz - 1 - f;
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            double h = p.cy[0] * above[c][j];
            h = fma(p.cy[1], x[c][j], h);
            h = fma(p.cy[2], below[c][j], h);
            const double fk0 = p.cz[0] * h, fk1 = p.cz[1] * h,
                         fk2 = p.cz[2] * h;
            a[c][j] = fk2 + P[0][c][j];
            P[0][c][j] = fk1 + P[1][c][j];
            P[1][c][j] = fk0;
            if (top) { /* plane -1, read with kernel plane 0 by plane 0 */
                if (f == 0) {
                    P[0][c][j] += fk0;
                } else {
                    a[c][j] += fk0;
                }
            }
            if (bottom) { /* plane nz, read with kernel plane 2 by nz - 1 */
                if (f == 0) {
                    P[0][c][j] += fk2;
                } else {
                    P[1][c][j] += fk2;
                }
            }
        }
    }
    if (EDGE != T3_INSIDE) {
        keep_outside(p, cl, a);
    }
}

/*
 * The star's level, in two halves around one barrier that serves every
 * level of a plane.  Its output plane rin - 1 needs only the centre tap
 * of plane rin (a[c][j] = w22 v + P0), so it is complete before the
 * barrier, and the next level starts on it at once; only the partial
 * plane rin's in-plane filter waits for the rows above and below.
 *
 * Before: plane `rin` of level t - 1 arrives in a; a becomes output
 * plane rin - 1, P[1] partial plane rin + 1, and P[0] partial plane rin
 * but for the rows that come through the shared plane `plane`, where
 * every thread leaves its own rows.  Returns false where rin is a plane
 * beyond the top or bottom that adds nothing (its P[0] is then
 * complete).  EDGE, ZEDGE: as in outer_level.
 */
template <int EDGE, bool ZEDGE>
static __device__ __forceinline__ bool
star_level_before(const tb3_params &p, const tb3_cells &cl,
                  double (&a)[T3_CY][T3_V], double (&P)[2][T3_CY][T3_V],
                  ptrdiff_t rin, double2 (*plane)[T3_TX / 2])
{
    if (ZEDGE && (rin < 0 || rin >= p.nz)
        && beyond_z_edge<EDGE>(p, cl, a, P)) {
        return false;
    }
    double e[T3_CY][T3_V + 2];
    row_neighbours(a, e);
    leave_rows(cl, plane, a);
    const int f = p.mode == CS_MODE_MIRROR ? 1 : 0; /* as in outer_level */
    const bool top = ZEDGE && p.mode != CS_MODE_CONSTANT && rin == f;
    const bool bottom = ZEDGE && p.mode != CS_MODE_CONSTANT
                        && rin == p.nz - 1 - f;
    double out[T3_CY][T3_V];
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            const double v = a[c][j];
            double s = fma(p.w[13], v, P[1][c][j]);
            s = fma(p.w[12], e[c][j], s);
            s = fma(p.w[14], e[c][j + 2], s);
            if (EDGE != T3_EDGE_ROWS && c > 0) { /* the thread's own rows */
                s = fma(p.w[10], a[c - 1][j], s);
            }
            if (EDGE != T3_EDGE_ROWS && c + 1 < T3_CY) {
                s = fma(p.w[16], a[c + 1][j], s);
            }
            double o = fma(p.w[22], v, P[0][c][j]);
            double next = p.w[4] * v;
            if (top) { /* plane -1, read with kernel plane 0 by plane 0 */
                if (f == 0) {
                    s = fma(p.w[4], v, s);
                } else {
                    o = fma(p.w[4], v, o);
                }
            }
            if (bottom) { /* plane nz, read with kernel plane 2 by nz - 1 */
                if (f == 0) {
                    s = fma(p.w[22], v, s);
                } else {
                    next = fma(p.w[22], v, next);
                }
            }
            out[c][j] = o;
            P[0][c][j] = s;
            P[1][c][j] = next;
        }
    }
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            a[c][j] = out[c][j];
        }
    }
    if (EDGE != T3_INSIDE) {
        keep_outside(p, cl, a);
    }
    return true;
}

/* After the barrier: P[0] takes the rows above and below from the
   shared plane (the row above the thread's first row and below its
   last; T3_EDGE_ROWS: every row's, as cl.rows maps them). */
template <int EDGE>
static __device__ __forceinline__ void
star_level_after(const tb3_params &p, const tb3_cells &cl,
                 double (&P0)[T3_CY][T3_V],
                 const double2 (*plane)[T3_TX / 2])
{
    if (EDGE == T3_EDGE_ROWS) {
        double above[T3_CY][T3_V], below[T3_CY][T3_V];
        mapped_rows(cl, plane, above, below);
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                P0[c][j] = fma(p.w[16], below[c][j],
                               fma(p.w[10], above[c][j], P0[c][j]));
            }
        }
    } else {
        const double2 u = plane[cl.y0][cl.x0 / T3_V];
        const double2 d = plane[cl.y0 + T3_CY + 1][cl.x0 / T3_V];
        P0[0][0] = fma(p.w[10], u.x, P0[0][0]);
        P0[0][1] = fma(p.w[10], u.y, P0[0][1]);
        P0[T3_CY - 1][0] = fma(p.w[16], d.x, P0[T3_CY - 1][0]);
        P0[T3_CY - 1][1] = fma(p.w[16], d.y, P0[T3_CY - 1][1]);
    }
}

/* A star's plane r through all T levels with one barrier: the shared
   planes S[buf * T + t], double-buffered so that a plane's writes never
   meet the previous plane's reads. */
template <int T, int EDGE, bool ZEDGE>
static __device__ __forceinline__ void
star_plane(const tb3_params &p, const tb3_cells &cl, double (&a)[T3_CY][T3_V],
           double (&P)[T][2][T3_CY][T3_V], ptrdiff_t r,
           double2 (*S)[T3_TY + 2][T3_TX / 2], int &buf)
{
    double2 (*planes)[T3_TY + 2][T3_TX / 2] = S + buf * T;
    buf ^= 1;
    bool adds[T];
#pragma unroll
    for (int t = 0; t < T; t++) {
        adds[t] = star_level_before<EDGE, ZEDGE>(p, cl, a, P[t], r - t,
                                                 planes[t]);
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < T; t++) {
        if (adds[t]) {
            star_level_after<EDGE>(p, cl, P[t][0], planes[t]);
        }
    }
}

/* The exponent bits of v: all set (T3_NONFINITE) for an infinity or NaN;
   a running maximum of them notes one. */
#define T3_NONFINITE 0x7ff00000u
static __device__ __forceinline__ unsigned
exponent_bits(double v)
{
    return (unsigned)__double2hiint(v) & T3_NONFINITE;
}

/* plan.c sizes the shared planes (cs_tb3d_smem_bytes) from this tile */
static_assert(T3_TY == CS_TB3D_TILE_ROWS && T3_TX == CS_TB3D_TILE_COLS,
              "plan.h's tb3d tile");

/* What a block carries down its stream. */
template <int T>
struct tb3_stream {
    double P[T][2][T3_CY][T3_V]; /* each level's partial planes */
    double next[T3_CY][T3_V];    /* the plane read ahead */
    ptrdiff_t in_off, out_off;   /* the thread's first cell in a plane
                                    (interior tiles) */
    unsigned own;                /* bit c * T3_V + j: cell (c, j) stored */
    unsigned in_exp, out_exp;    /* exponent_bits' maxima (FLAGS) */
    int buf;                     /* the shared plane written next */
};

/* Planes r0 .. r1 - 1 of level 0 (of a stream ending at `last`): each
   arriving plane cascades through the T levels, and output plane r - T,
   if in z0 .. z1 - 1, is stored. */
template <int T, int SHAPE, bool FLAGS, int EDGE, bool ZEDGE>
static __device__ __forceinline__ void
stream_planes(const tb3_params &p, const tb3_cells &cl, tb3_stream<T> &st,
              ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t last, ptrdiff_t z0,
              ptrdiff_t z1, double2 (*S)[T3_TY + 2][T3_TX / 2])
{
    for (ptrdiff_t r = r0; r < r1; r++) {
        double a[T3_CY][T3_V];
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                a[c][j] = st.next[c][j];
            }
        }
        /* constant's outside cells take cval here, where the plane is
           used, not where its load is issued: a select on the loaded
           values there waited for the load (Nsight Compute's source
           counters: 10% of the stall samples at 512^3) */
        if (EDGE != T3_INSIDE && p.mode == CS_MODE_CONSTANT) {
            keep_outside(p, cl, a);
        }
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                if (FLAGS) {
                    st.in_exp = max(st.in_exp, exponent_bits(a[c][j]));
                }
            }
        }
        if (r + 1 <= last) {
            load_plane<EDGE, FLAGS>(p, cl, st.in_off, r + 1, st.next);
        }
        if constexpr (SHAPE == T3_STAR) {
            star_plane<T, EDGE, ZEDGE>(p, cl, a, st.P, r, S, st.buf);
        } else {
#pragma unroll
            for (int t = 0; t < T; t++) {
                outer_level<EDGE, ZEDGE>(p, cl, a, st.P[t], r - t, S,
                                         st.buf);
            }
        }
        const ptrdiff_t zo = r - T;
        if (zo < z0 || zo >= z1) {
            continue;
        }
        double *out = p.out + zo * p.out_plane + st.out_off;
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                if (st.own & (1u << (c * T3_V + j))) {
                    out[c * p.out_pitch + j] = a[c][j];
                    if (FLAGS) {
                        st.out_exp = max(st.out_exp, exponent_bits(a[c][j]));
                    }
                }
            }
        }
    }
}

/* A block's whole stream: planes z0 - T .. z1 - 1 + T of level 0; it
   stores the tile's central (T3_TX - 2T) x (T3_TY - 2T) cells of planes
   z0 .. z1 - 1 (at a side edge: those inside the grid), from row `sy`
   and column `sx` on (cs_tile_first_stored).  Only the planes near the
   top and bottom take the z edge tests. */
template <int T, int SHAPE, bool FLAGS, int EDGE>
static __device__ __forceinline__ void
stream_tile(const tb3_params &p, const tb3_cells &cl, ptrdiff_t z0,
            ptrdiff_t z1, ptrdiff_t sy, ptrdiff_t sx,
            double2 (*S)[T3_TY + 2][T3_TX / 2], unsigned &bad)
{
    constexpr int M = T;
    tb3_stream<T> st;
#pragma unroll
    for (int t = 0; t < T; t++) {
#pragma unroll
        for (int c = 0; c < T3_CY; c++) {
#pragma unroll
            for (int j = 0; j < T3_V; j++) {
                st.P[t][0][c][j] = st.P[t][1][c][j] = 0.0;
            }
        }
    }
    st.in_off = (cl.oy + cl.y0) * p.in_pitch + cl.ox + cl.x0;
    st.out_off = (cl.oy + cl.y0) * p.out_pitch + cl.ox + cl.x0;
    st.own = 0;
#pragma unroll
    for (int c = 0; c < T3_CY; c++) {
#pragma unroll
        for (int j = 0; j < T3_V; j++) {
            const int ty = cl.y0 + c, tx = cl.x0 + j;
            const ptrdiff_t gy = cl.oy + ty, gx = cl.ox + tx;
            if (ty >= M && ty < T3_TY - M && tx >= M && tx < T3_TX - M
                && gy >= sy && gy < p.ny && gx >= sx && gx < p.nx) {
                st.own |= 1u << (c * T3_V + j);
            }
        }
    }
    st.in_exp = st.out_exp = 0;
    st.buf = 0;
    const ptrdiff_t first = z0 - T, last = z1 - 1 + T;
    load_plane<EDGE, FLAGS>(p, cl, st.in_off, first, st.next);
    if (p.mode == CS_MODE_WRAP) { /* every plane a real plane */
        stream_planes<T, SHAPE, FLAGS, EDGE, false>(p, cl, st, first,
                                                    last + 1, last, z0, z1,
                                                    S);
    } else {
        /* plain planes [lo, hi): every level's plane rin (r - T + 1 .. r)
           in 2 .. nz - 3, off the planes the edge tests touch */
        ptrdiff_t lo = T + 1 > first ? T + 1 : first;
        lo = lo < last + 1 ? lo : last + 1;
        ptrdiff_t hi = p.nz - 2 < last + 1 ? p.nz - 2 : last + 1;
        hi = hi > lo ? hi : lo;
        stream_planes<T, SHAPE, FLAGS, EDGE, true>(p, cl, st, first, lo,
                                                   last, z0, z1, S);
        stream_planes<T, SHAPE, FLAGS, EDGE, false>(p, cl, st, lo, hi, last,
                                                    z0, z1, S);
        stream_planes<T, SHAPE, FLAGS, EDGE, true>(p, cl, st, hi, last + 1,
                                                   last, z0, z1, S);
    }
    if (FLAGS) {
        bad |= (st.in_exp == T3_NONFINITE ? 1u : 0u)
               | (st.out_exp == T3_NONFINITE ? 2u : 0u);
    }
}

/* One block per tile and segment of planes (LEAD: a split pass's bands
   first, each block of theirs counted once written); tiles at a side
   edge run the mapped variant. */
template <int T, int SHAPE, bool FLAGS, bool LEAD>
static __device__ __forceinline__ void
tb3d_body(const tb3_params p)
{
    constexpr int M = T;
    constexpr int OWNX = T3_TX - 2 * M, OWNY = T3_TY - 2 * M;
    extern __shared__ double smem[]; /* p.shared_doubles */
    double2 (*S)[T3_TY + 2][T3_TX / 2] =
        reinterpret_cast<double2 (*)[T3_TY + 2][T3_TX / 2]>(smem);
    for (int i = threadIdx.x; i < p.shared_doubles; i += T3_THREADS) {
        /* the border rows: read by the margin, never stored */
        smem[i] = 0.0;
    }
    __syncthreads();
    const ptrdiff_t tiles = p.tiles_x * p.tiles_y;
    const ptrdiff_t tile = (ptrdiff_t)blockIdx.x % tiles;
    const ptrdiff_t seg = (ptrdiff_t)blockIdx.x / tiles;
    tb3_cells cl;
    cl.ox = cs_tile_origin(tile % p.tiles_x, OWNX, p.nx) - M;
    cl.oy = cs_tile_origin(tile / p.tiles_x, OWNY, p.ny) - M;
    const ptrdiff_t sx = cs_tile_first_stored(tile % p.tiles_x, OWNX);
    const ptrdiff_t sy = cs_tile_first_stored(tile / p.tiles_x, OWNY);
    cl.x0 = (int)(threadIdx.x % 32) * T3_V;
    cl.y0 = (int)(threadIdx.x / 32) * T3_CY;
    /* (the bands' choice is LEAD's alone: in every instance it cost
       spills in some, the 7-point star's among them) */
    const bool band = LEAD && seg < p.lead_count;
    ptrdiff_t z0 = 0, z1 = 0;
    if (band) {
        z0 = p.lead[seg][0];
        z1 = p.lead[seg][1];
    } else {
        z0 = p.z_lo + (LEAD ? seg - p.lead_count : seg) * p.seg_planes;
        z1 = z0 + p.seg_planes < p.z_hi ? z0 + p.seg_planes : p.z_hi;
    }
    unsigned bad = 0;
    const bool rows_inside = cl.oy >= 0 && cl.oy + T3_TY <= p.ny;
    if (rows_inside && cl.ox >= 0 && cl.ox + T3_TX <= p.nx) {
        stream_tile<T, SHAPE, FLAGS, T3_INSIDE>(p, cl, z0, z1, sy, sx, S,
                                                bad);
    } else {
        edge_maps<FLAGS>(p, cl);
        const bool plain_rows = rows_inside || p.mode == CS_MODE_CONSTANT
                                || p.mode == CS_MODE_WRAP;
        /* the outer product keeps one edge variant: with a second its
           plane loops spilled (nvcc -Xptxas -v) */
        if constexpr (SHAPE == T3_STAR) {
            if (plain_rows) {
                stream_tile<T, SHAPE, FLAGS, T3_EDGE>(p, cl, z0, z1, sy, sx,
                                                      S, bad);
            } else {
                stream_tile<T, SHAPE, FLAGS, T3_EDGE_ROWS>(p, cl, z0, z1, sy,
                                                          sx, S, bad);
            }
        } else {
            stream_tile<T, SHAPE, FLAGS, T3_EDGE_ROWS>(p, cl, z0, z1, sy, sx,
                                                      S, bad);
        }
    }
    if ((bad & 1u) && p.in_flag != nullptr) {
        *p.in_flag = 1;
    }
    if ((bad & 2u) && p.out_flag != nullptr) {
        *p.out_flag = 1;
    }
    if (band) {
        /* every thread's stores before the count (a copy engine or a
           peer reads them once it passes) */
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            atomicAdd(p.lead_done, 1u);
        }
    }
}

template <int T, int SHAPE, bool FLAGS, bool LEAD>
__global__ void __launch_bounds__(T3_THREADS, 1)
tb3d_kernel(const tb3_params p)
{
    if constexpr (CS_CHECKED_ONLY_IMAGE && !FLAGS) {
        __trap(); /* never launched there (kernels.cuh) */
    } else {
        tb3d_body<T, SHAPE, FLAGS, LEAD>(p);
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

template <int T, int SHAPE, bool FLAGS, bool LEAD>
static cs_status
tb3_launch(cs_cuda_ctx *ctx, tb3_params *p)
{
    constexpr int M = T;
    const size_t smem = cs_tb3d_smem_bytes(SHAPE, T);
    if (smem > (size_t)ctx->smem_optin) { /* the plan's depth fits */
        cs_cuda_message(ctx, "tb3d: depth %d takes %zu bytes of shared "
                             "memory, the device %d", T, smem,
                        ctx->smem_optin);
        return CS_ERR_UNSUPPORTED;
    }
    p->shared_doubles = (int)(smem / sizeof(double));
    CS_TRY(cs_cuda_allow_smem(ctx, tb3d_kernel<T, SHAPE, FLAGS, LEAD>, smem,
                              "tb3d"));
    int per_sm = 0;
    CS_CUDA_CHECK(ctx,
                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &per_sm, tb3d_kernel<T, SHAPE, FLAGS, LEAD>, T3_THREADS,
                      smem),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor (tb3d)");
    const ptrdiff_t resident = (ptrdiff_t)ctx->sms * (per_sm > 0 ? per_sm : 1);
    p->tiles_x = CEIL_DIV(p->nx, (ptrdiff_t)(T3_TX - 2 * M));
    p->tiles_y = CEIL_DIV(p->ny, (ptrdiff_t)(T3_TY - 2 * M));
    /* segments of planes per tile: tb2d's choice, along z, but priced
       by the rounds alone: one block an SM has no other block's warps
       to stagger against, and tb2d's extra round for the first did not
       fit it (h100_tb3d_segments.md: at 512^3 the counts rank as the
       rounds alone rank them) */
    const ptrdiff_t tiles = p->tiles_x * p->tiles_y;
    const ptrdiff_t planes = p->z_hi - p->z_lo; /* those it writes */
    ptrdiff_t segs = 0;
    CS_TRY(cs_env_segments(ctx, "CONVSTENCIL_TB3D_SEGMENTS", planes, &segs));
    if (segs == 0) {
        segs = cs_stream_segments(tiles, planes, T, resident,
                                  T3_MAX_SEGMENTS, T3_EXTRA_ROUNDS);
    }
    p->seg_planes = CEIL_DIV(planes, segs);
    const ptrdiff_t items = tiles * (segs + p->lead_count);
    if (items > INT_MAX) {
        cs_cuda_message(ctx, "tb3d: grid too large");
        return CS_ERR_INVALID;
    }
    const unsigned blocks = (unsigned)items;
    tb3d_kernel<T, SHAPE, FLAGS, LEAD><<<blocks, T3_THREADS, smem, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "tb3d kernel");
}

template <int SHAPE, bool FLAGS, bool LEAD, int TOP>
static cs_status
tb3_depth(cs_cuda_ctx *ctx, tb3_params *p, int depth)
{
    if constexpr (TOP > 1) {
        if (depth < TOP) {
            return tb3_depth<SHAPE, FLAGS, LEAD, TOP - 1>(ctx, p, depth);
        }
    }
    return tb3_launch<TOP, SHAPE, FLAGS, LEAD>(ctx, p);
}

/* The instance for the tap set, the checks and a split pass's bands:
   the bands' instances have no checks (a split pass is never a run's
   first or last). */
template <int SHAPE>
static cs_status
tb3_dispatch(cs_cuda_ctx *ctx, tb3_params *p, int depth, bool flags)
{
    if (p->lead_count > 0) {
        return tb3_depth<SHAPE, false, true, CS_TB3D_MAX_DEPTH>(ctx, p,
                                                                depth);
    }
    return flags ? tb3_depth<SHAPE, true, false, CS_TB3D_MAX_DEPTH>(ctx, p,
                                                                   depth)
                 : tb3_depth<SHAPE, false, false, CS_TB3D_MAX_DEPTH>(ctx, p,
                                                                    depth);
}

cs_status
cs_cuda_tb3d_pass(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
                  const cs_dkernel *k, int depth, cs_mode mode, double cval,
                  int *in_flag, int *out_flag, const ptrdiff_t window[2],
                  cs_lead_bands *lead, const cs_box_input *box)
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
    p.z_lo = window != NULL ? window[0] : 0;
    p.z_hi = window != NULL ? window[1] : in->n[0];
    ok = ok && p.z_lo >= 0 && p.z_lo < p.z_hi && p.z_hi <= in->n[0];
    cs_lead_params(&p, lead, in->n[0], p.z_lo, p.z_hi, &ok);
    if (box != NULL) {
        cs_box_params(&p, box, box->grid.n[0], in->n[0], &ok);
        ok = ok && in_flag != NULL && box->grid.n[1] == in->n[1]
             && box->grid.n[2] == in->n[2];
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
    const bool flags = in_flag != NULL || out_flag != NULL
                       || cs_cuda_checked_only(ctx);
    if (lead != NULL && flags) {
        cs_cuda_message(ctx, "cs_cuda_tb3d_pass: a split pass's bands run "
                             "without checks (and on images for sm_90 on)");
        return CS_ERR_UNSUPPORTED;
    }
    const cs_status st = shape == T3_STAR
                             ? tb3_dispatch<T3_STAR>(ctx, &p, depth, flags)
                             : tb3_dispatch<T3_RANK1>(ctx, &p, depth, flags);
    if (lead != NULL) { /* a block per band and tile (tb3_launch) */
        lead->arrivals = st == CS_OK ? (unsigned)(p.tiles_x * p.tiles_y
                                                  * p.lead_count)
                                     : 0u;
    }
    return st;
}
