/*
 * scheme_stream3.cu -- streamed passes of a 3D scheme: tb3d's streaming
 * down the planes (tb3d.cu has the method) carried over to the fields of
 * a scheme, for the 3D tables sch_stream_tables_make takes: one stage,
 * up to SST_FIELDS fields, stencils within the 7-point star, wrap or
 * constant (the rest run the one-step passes).
 *
 * A block of 512 threads owns a tile of 64 x 32 cells of a plane (a
 * thread 2 columns x 2 rows) and streams down a segment of planes with
 * `depth` levels in flight.  Plane rin of the fields after t steps
 * arrives at level t, which completes plane rin - 1 after t + 1 steps:
 *   - a sum is its partial plane (started when plane rin - 1 arrived)
 *     plus its +z taps times the arriving plane; a scaled sum is that
 *     times its parameter at rin - 1; then the constant and the
 *     pointwise terms, which read the fields at rin - 1 (the level's
 *     previous plane);
 *   - a copy (the wave's up <- u) is the copied field's previous plane;
 *   - the partial plane of rin starts: the centre coefficients and the
 *     in-plane taps times the arriving plane, the -z taps times the
 *     previous plane.
 * The x neighbours come by shuffles; the rows above and below and the
 * previous plane from shared planes, where each level leaves the fields
 * that need them (sch_stream3_shared), a pair of planes a level and
 * field in turn.  Only the rows above a thread's first row and below its
 * last wait for the block: every level of a plane writes before one
 * barrier and adds those rows after it, as tb3d's star does.
 *
 * Keeping the previous plane in shared memory, rather than a second
 * partial plane for the -z taps as tb3d does, leaves one partial plane a
 * level and sum in registers and none for a copy: the wave holds 6
 * levels where tb3d's star holds 3.  The compiled instances keep 4: on
 * the H100 depths 5 and 6 ran slower than 4 for the wave and than 3 for
 * one field (h100_schemes_stream3_tmax6.md), and each level costs nvcc
 * about 13 s (96 s for the file at 6, 51 s at 4).
 *
 * Each level is exact one cell further in: a tile stores its central
 * (64 - 2 depth) x (32 - 2 depth) cells, and a segment starts `depth`
 * planes early.  Under wrap every cell read is a real cell of the
 * periodic grid; under constant, cells outside the grid are cval at
 * every level (set where a plane arrives at a level).
 *
 * The sums are those of the one-step passes in another order (rounding
 * differs in the last bits; which taps multiply is the same, so NaN and
 * infinities land as there).
 */
#include "scheme_stream.cuh"

#include "kernels.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define S3_THREADS 512
#define S3_CY 2 /* rows of a thread */
#define S3_V 2  /* columns of a thread */
#define S3_TX SST3_TILE_COLS
#define S3_TY SST3_TILE_ROWS
#define S3_ROW2 (S3_TX / 2)             /* double2 of a shared row */
#define S3_PLANE ((S3_TY + 2) * S3_TX)  /* doubles of a shared plane */
#define S3_MAX_SEGMENTS 1024
#define S3_EXTRA_ROUNDS 0 /* tb3d's */

static_assert(S3_TY == S3_THREADS / 32 * S3_CY, "two tile rows a warp");
static_assert(S3_TX == 32 * S3_V, "a tile row a warp");
static_assert(S3_PLANE * 8 == SST3_PLANE_BYTES, "scheme_plan.h's plane");

#if defined(CS_CUDA_EMULATION)
#define S3_GRID_CONSTANT
#else
#define S3_GRID_CONSTANT __grid_constant__
#endif

typedef struct ss3_params {
    const double *src[SST_FIELDS]; /* in kernel field order */
    double *dst[SST_FIELDS];       /* NULL: not written */
    const double *par[CS_SCHEME_MAX_PARAMS];
    const double *spar[SST_FIELDS]; /* update i's scaled sum's parameter */
    ptrdiff_t nz, ny, nx;
    ptrdiff_t tiles_x, tiles_y, seg_planes;
    int depth;                 /* steps of this pass */
    cs_mode mode;
    double cval;
    sch_stream_tables t;
} ss3_params;

/* Where a thread's cells are: rows y0, y0 + 1 and columns x0, x0 + 1 of
   the tile, read where the mode maps them. */
struct ss3_cells {
    int y0, x0;
    ptrdiff_t row[S3_CY]; /* a row's offset in a plane (mapped or clamped) */
    ptrdiff_t col[S3_V];  /* a column (mapped or clamped) */
    unsigned outside;     /* bit c * S3_V + j: cell (c, j) outside the grid */
    unsigned own;         /* bit c * S3_V + j: cell (c, j) stored */
};

typedef double ss3_cells_of[S3_CY][S3_V];

/* A level's partial planes: a sum's, and a scaled sum's. */
template <int K, int KP>
struct ss3_level {
    ss3_cells_of P[K];
    ss3_cells_of S[KP > 0 ? KP : 1];
};

/* ---- what the instance knows while compiling (SIG, CP, SH), or reads
   from the tables ---- */

/* Whether group (i, c, f) has tap `bit`. */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ bool
has_tap(const ss3_params &p, int i, int c, int f, int bit)
{
    const int kind = sst_group_kind<K, SIG>(p.t, i, c, f);
    return kind == SST_STAR3    ? true
           : kind == SST_NONE   ? false
           : kind == SST_CENTRE ? bit == SST_TAP3_CENTRE
                                : ((p.t.mask[i][c][f] >> bit) & 1u) != 0;
}

/* Whether some group reads field f's x neighbours (known only from
   SIG: otherwise every field shuffles). */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ bool
reads_x(int f)
{
    bool any = SIG == 0;
#pragma unroll
    for (int g = 0; g < 2 * K; g++) {
        const int kind = (int)((SIG >> (5 * (g * K + f))) & 7u);
        any = any || kind == SST_STAR3 || kind == SST_MASK;
    }
    return any;
}

/* Whether update i adds its constant (run time: always, 0 or not). */
template <unsigned long long SIG>
static __device__ __forceinline__ constexpr bool
has_constant(int i)
{
    return SIG == 0 || (SIG & SST_CONSTANT(i)) != 0;
}

/* The kernel field update i copies, -1 for a sum: CP, 4 bits an update
   (the field plus one, 0 for a sum). */
template <unsigned CP>
static __device__ __forceinline__ constexpr int
copy_of(int i)
{
    return (int)((CP >> (4 * i)) & 15u) - 1;
}

/* Field f's shared plane among a level's (SH: a bit a shared field), -1
   for none. */
template <unsigned SH>
static __device__ __forceinline__ constexpr int
slot_of(int f)
{
    int below = 0;
    for (int g = 0; g < f; g++) {
        below += (int)((SH >> g) & 1u);
    }
    return (SH >> f) & 1u ? below : -1;
}

/* The fields through shared planes. */
template <unsigned SH>
static __host__ __device__ __forceinline__ constexpr int
shared_fields()
{
    int n = 0;
    for (int f = 0; f < SST_FIELDS; f++) {
        n += (int)((SH >> f) & 1u);
    }
    return n;
}

/* ---- memory ---- */

/* Plane r's index: outside the grid (GEN only) wrap's periodic plane or,
   under constant, the nearest (its values are replaced by cval). */
template <bool GEN>
static __device__ __forceinline__ ptrdiff_t
plane_index(const ss3_params &p, ptrdiff_t r)
{
    if (GEN && (r < 0 || r >= p.nz)) {
        return p.mode == CS_MODE_WRAP ? cs_positive_mod(r, p.nz)
                                      : (r < 0 ? 0 : p.nz - 1);
    }
    return r;
}

template <int K, bool GEN>
static __device__ __forceinline__ void
load_plane(const ss3_params &p, const ss3_cells &cl, ptrdiff_t r,
           ss3_cells_of (&v)[K])
{
    const ptrdiff_t z = plane_index<GEN>(p, r) * p.ny * p.nx;
#pragma unroll
    for (int f = 0; f < K; f++) {
#pragma unroll
        for (int c = 0; c < S3_CY; c++) {
#pragma unroll
            for (int j = 0; j < S3_V; j++) {
                v[f][c][j] = __ldg(p.src[f] + z + cl.row[c] + cl.col[j]);
            }
        }
    }
}

/* A parameter field at plane r and the thread's cells. */
template <bool GEN>
static __device__ __forceinline__ void
param_plane(const ss3_params &p, const ss3_cells &cl, const double *par,
            ptrdiff_t r, ss3_cells_of &v)
{
    const ptrdiff_t z = plane_index<GEN>(p, r) * p.ny * p.nx;
#pragma unroll
    for (int c = 0; c < S3_CY; c++) {
#pragma unroll
        for (int j = 0; j < S3_V; j++) {
            v[c][j] = __ldg(par + z + cl.row[c] + cl.col[j]);
        }
    }
}

/* The thread's cells of a shared plane, as double2 (row = tile row + 1). */
static __device__ __forceinline__ int
own_index(const ss3_cells &cl, int c)
{
    return (cl.y0 + c + 1) * S3_ROW2 + cl.x0 / S3_V;
}

/* ---- a level ---- */

/* Tap `bit` of group (i, c, f) times x, added to s.  Compiled (SIG), a
   tap the group lacks is no code; read at run time, its weight is 0 and
   x is replaced by 0 (no Inf x 0), a select rather than a branch: nvcc's
   optimiser did not finish on a kernel of branches on the taps. */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ void
tap_add(const ss3_params &p, int i, int c, int f, int bit, double x,
        double &s)
{
    if constexpr (SIG != 0) {
        if (has_tap<K, SIG>(p, i, c, f, bit)) {
            s = fma(p.t.w[i][c][f][bit], x, s);
        }
    } else {
        const bool has = ((p.t.mask[i][c][f] >> bit) & 1u) != 0;
        s = fma(p.t.w[i][c][f][bit], has ? x : 0.0, s);
    }
}

/* Group (i, c, f)'s taps that need no other thread's rows, on arriving
   plane a (x neighbours e, previous plane last), into partial plane q. */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ void
push(const ss3_params &p, int i, int c, int f, const ss3_cells_of &a,
     const double (&e)[S3_CY][S3_V + 2], const ss3_cells_of &last,
     ss3_cells_of &q)
{
    const int centres = sst_group_centres<K, SIG>(p.t, i, c, f);
#pragma unroll
    for (int y = 0; y < S3_CY; y++) {
#pragma unroll
        for (int j = 0; j < S3_V; j++) {
            double s = q[y][j];
#pragma unroll
            for (int k = 0; k < SST_CENTRES; k++) {
                if (SIG == 0 || k < centres) { /* unused ones are 0 */
                    s = fma(p.t.centre[i][c][f][k],
                            k < centres ? a[y][j] : 0.0, s);
                }
            }
            tap_add<K, SIG>(p, i, c, f, SST_TAP3_CENTRE, a[y][j], s);
            tap_add<K, SIG>(p, i, c, f, SST_TAP3_ZM, last[y][j], s);
            tap_add<K, SIG>(p, i, c, f, SST_TAP3_XM, e[y][j], s);
            tap_add<K, SIG>(p, i, c, f, SST_TAP3_XP, e[y][j + 2], s);
            q[y][j] = s;
        }
    }
    /* the thread's two rows, each the other's neighbour (written out:
       nvcc's optimiser did not finish on a[y - 1] behind y > 0) */
    static_assert(S3_CY == 2, "a thread's rows: one above the other");
#pragma unroll
    for (int j = 0; j < S3_V; j++) {
        tap_add<K, SIG>(p, i, c, f, SST_TAP3_YM, a[0][j], q[1][j]);
        tap_add<K, SIG>(p, i, c, f, SST_TAP3_YP, a[1][j], q[0][j]);
    }
}

/* Group (i, c, f)'s +z taps on the arriving plane, into output o. */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ void
push_up(const ss3_params &p, int i, int c, int f, const ss3_cells_of &a,
        ss3_cells_of &o)
{
#pragma unroll
    for (int y = 0; y < S3_CY; y++) {
#pragma unroll
        for (int j = 0; j < S3_V; j++) {
            tap_add<K, SIG>(p, i, c, f, SST_TAP3_ZP, a[y][j], o[y][j]);
        }
    }
}

/* Update i's pointwise terms at the completed plane (fields `last`,
   parameters at plane `done`), added to o. */
template <int K, bool GEN>
static __device__ __forceinline__ void
add_pointwise(const ss3_params &p, const ss3_cells &cl, int i,
              const ss3_cells_of (&last)[K], ptrdiff_t done,
              ss3_cells_of &o)
{
    for (int m = 0; m < p.t.npw[i]; m++) {
        const int q = p.t.pw_param[i][m];
        ss3_cells_of c;
        if (q >= 0) {
            param_plane<GEN>(p, cl, p.par[q], done, c);
        }
#pragma unroll
        for (int y = 0; y < S3_CY; y++) {
#pragma unroll
            for (int j = 0; j < S3_V; j++) {
                double v = 1.0;
#pragma unroll
                for (int f = 0; f < K; f++) {
                    const int n = p.t.pw_power[i][m][f];
#pragma unroll
                    for (int k = 0; k < CS_SCHEME_MAX_POWER; k++) {
                        v = k < n ? v * last[f][y][j] : v;
                    }
                }
                const double coef = q >= 0 ? p.t.pw_coef[i][m] * c[y][j]
                                           : p.t.pw_coef[i][m];
                o[y][j] = fma(coef, v, o[y][j]);
            }
        }
    }
}

/* Update i's output as a copy of field copy_of(i)'s previous plane. */
template <int K, unsigned CP>
static __device__ __forceinline__ void
copy_out(int i, const ss3_cells_of (&last)[K], ss3_cells_of &o)
{
#pragma unroll
    for (int f = 0; f < K; f++) {
        if (f == copy_of<CP>(i)) {
#pragma unroll
            for (int y = 0; y < S3_CY; y++) {
#pragma unroll
                for (int j = 0; j < S3_V; j++) {
                    o[y][j] = last[f][y][j];
                }
            }
        }
    }
}

/* Part c (0 plain, 1 scaled) of update i at the completed plane: its
   partial plane q, taken (q starts the arriving plane's), plus the +z
   taps on the arriving plane a, into o. */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ void
part_out(const ss3_params &p, int i, int c, const ss3_cells_of (&a)[K],
         const double (&e)[K][S3_CY][S3_V + 2],
         const ss3_cells_of (&last)[K], ss3_cells_of &q, ss3_cells_of &o)
{
#pragma unroll
    for (int y = 0; y < S3_CY; y++) {
#pragma unroll
        for (int j = 0; j < S3_V; j++) {
            o[y][j] = q[y][j];
            q[y][j] = 0.0;
        }
    }
#pragma unroll
    for (int f = 0; f < K; f++) {
        push_up<K, SIG>(p, i, c, f, a[f], o);
        push<K, SIG>(p, i, c, f, a[f], e[f], last[f], q);
    }
}

/* Update i's sum at plane `done` (its partial plane, the +z taps on the
   arriving plane a, the scaled sum, the constant, the pointwise terms)
   into o; its partial planes start plane done + 1. */
template <int K, int KP, bool PW, unsigned long long SIG, bool GEN>
static __device__ __forceinline__ void
sum_out(const ss3_params &p, const ss3_cells &cl, ss3_level<K, KP> &L,
        int i, const ss3_cells_of (&a)[K],
        const double (&e)[K][S3_CY][S3_V + 2],
        const ss3_cells_of (&last)[K], ptrdiff_t done, ss3_cells_of &o)
{
    part_out<K, SIG>(p, i, 0, a, e, last, L.P[i], o);
    if (i < KP) {
        ss3_cells_of sum, c;
        part_out<K, SIG>(p, i, 1, a, e, last, L.S[i], sum);
        param_plane<GEN>(p, cl, p.spar[i], done, c);
#pragma unroll
        for (int y = 0; y < S3_CY; y++) {
#pragma unroll
            for (int j = 0; j < S3_V; j++) {
                o[y][j] = fma(c[y][j], sum[y][j], o[y][j]);
            }
        }
    }
    if (has_constant<SIG>(i)) {
#pragma unroll
        for (int y = 0; y < S3_CY; y++) {
#pragma unroll
            for (int j = 0; j < S3_V; j++) {
                o[y][j] += p.t.constant[i];
            }
        }
    }
    if constexpr (PW) {
        add_pointwise<K, GEN>(p, cl, i, last, done, o);
    }
}

/*
 * A level before the barrier: plane `rin` after t steps arrives in a; on
 * return a holds plane rin - 1 after t + 1 steps, and the partial planes
 * L plane rin but for the rows of other threads.  cur: the level's shared
 * planes written now (one a shared field), prev: those written for the
 * plane before.  GEN: a cell or plane involved may lie outside the grid
 * (under constant its cells are set to cval as the plane arrives).
 */
template <int K, int KP, bool PW, unsigned long long SIG, unsigned CP,
          unsigned SH, bool GEN>
static __device__ __forceinline__ void
level_before(const ss3_params &p, const ss3_cells &cl, ss3_level<K, KP> &L,
             ss3_cells_of (&a)[K], ptrdiff_t rin, double *cur,
             const double *prev)
{
    if (GEN && p.mode == CS_MODE_CONSTANT) {
        const bool plane_out = rin < 0 || rin >= p.nz;
#pragma unroll
        for (int f = 0; f < K; f++) {
#pragma unroll
            for (int y = 0; y < S3_CY; y++) {
#pragma unroll
                for (int j = 0; j < S3_V; j++) {
                    const bool out = plane_out
                                     || ((cl.outside >> (y * S3_V + j)) & 1u);
                    a[f][y][j] = out ? p.cval : a[f][y][j];
                }
            }
        }
    }
    /* the previous plane back, the arriving one left */
    ss3_cells_of last[K];
#pragma unroll
    for (int f = 0; f < K; f++) {
        const int s = slot_of<SH>(f);
#pragma unroll
        for (int y = 0; y < S3_CY; y++) {
            last[f][y][0] = last[f][y][1] = 0.0;
            if (s >= 0) {
                const int at = s * (S3_PLANE / 2) + own_index(cl, y);
                const double2 v =
                    reinterpret_cast<const double2 *>(prev)[at];
                last[f][y][0] = v.x;
                last[f][y][1] = v.y;
                reinterpret_cast<double2 *>(cur)[at] =
                    make_double2(a[f][y][0], a[f][y][1]);
            }
        }
    }
    double e[K][S3_CY][S3_V + 2];
#pragma unroll
    for (int f = 0; f < K; f++) {
#pragma unroll
        for (int y = 0; y < S3_CY; y++) {
#pragma unroll
            for (int j = 0; j < S3_V; j++) {
                e[f][y][j + 1] = a[f][y][j];
            }
            if (reads_x<K, SIG>(f)) {
                e[f][y][0] =
                    __shfl_up_sync(0xffffffffu, a[f][y][S3_V - 1], 1);
                e[f][y][S3_V + 1] =
                    __shfl_down_sync(0xffffffffu, a[f][y][0], 1);
            } else {
                e[f][y][0] = e[f][y][S3_V + 1] = 0.0;
            }
        }
    }
    const ptrdiff_t done = rin - 1; /* the plane completed */
    ss3_cells_of out[K];
#pragma unroll
    for (int i = 0; i < K; i++) {
        if (copy_of<CP>(i) >= 0) {
            copy_out<K, CP>(i, last, out[i]);
        } else {
            sum_out<K, KP, PW, SIG, GEN>(p, cl, L, i, a, e, last, done,
                                         out[i]);
        }
    }
#pragma unroll
    for (int f = 0; f < K; f++) {
#pragma unroll
        for (int y = 0; y < S3_CY; y++) {
#pragma unroll
            for (int j = 0; j < S3_V; j++) {
                a[f][y][j] = out[f][y][j];
            }
        }
    }
}

/* After the barrier: the rows above the thread's first row and below its
   last, from the level's shared planes cur, into the partial planes. */
template <int K, unsigned long long SIG, unsigned SH>
static __device__ __forceinline__ void
rows_after(const ss3_params &p, const ss3_cells &cl, int i, int c,
           const double *cur, ss3_cells_of &q)
{
#pragma unroll
    for (int f = 0; f < K; f++) {
        const int s = slot_of<SH>(f);
        if (s < 0) {
            continue;
        }
        const double2 *plane =
            reinterpret_cast<const double2 *>(cur) + s * (S3_PLANE / 2);
        const double2 up = plane[cl.y0 * S3_ROW2 + cl.x0 / S3_V];
        const double2 down =
            plane[(cl.y0 + S3_CY + 1) * S3_ROW2 + cl.x0 / S3_V];
        tap_add<K, SIG>(p, i, c, f, SST_TAP3_YM, up.x, q[0][0]);
        tap_add<K, SIG>(p, i, c, f, SST_TAP3_YM, up.y, q[0][1]);
        tap_add<K, SIG>(p, i, c, f, SST_TAP3_YP, down.x, q[S3_CY - 1][0]);
        tap_add<K, SIG>(p, i, c, f, SST_TAP3_YP, down.y, q[S3_CY - 1][1]);
    }
}

template <int K, int KP, unsigned long long SIG, unsigned CP, unsigned SH>
static __device__ __forceinline__ void
level_after(const ss3_params &p, const ss3_cells &cl, ss3_level<K, KP> &L,
            const double *cur)
{
#pragma unroll
    for (int i = 0; i < K; i++) {
        if (copy_of<CP>(i) < 0) {
            rows_after<K, SIG, SH>(p, cl, i, 0, cur, L.P[i]);
            if (i < KP) {
                rows_after<K, SIG, SH>(p, cl, i, 1, cur, L.S[i]);
            }
        }
    }
}

/* ---- the stream ---- */

template <int K, int KP, int TMAX>
struct ss3_stream {
    ss3_level<K, KP> L[TMAX];
    ss3_cells_of next[K]; /* the plane read ahead */
    int buf;              /* the pair's plane written next */
};

/* Levels T .. depth - 1 of plane r, before the barrier and after it:
   expanded while compiling (a loop over the levels, even marked to
   unroll, was left a loop in the wave's instance, its partial planes in
   local memory). */
template <int T, int K, int KP, bool PW, int TMAX, unsigned long long SIG,
          unsigned CP, unsigned SH, bool GEN>
static __device__ __forceinline__ void
levels_before(const ss3_params &p, const ss3_cells &cl,
              ss3_stream<K, KP, TMAX> &st, ss3_cells_of (&a)[K],
              ptrdiff_t r, double *cur, const double *prev,
              int level_doubles)
{
    if constexpr (T < TMAX) {
        if (T < p.depth) {
            level_before<K, KP, PW, SIG, CP, SH, GEN>(
                p, cl, st.L[T], a, r - T, cur + T * level_doubles,
                prev + T * level_doubles);
            levels_before<T + 1, K, KP, PW, TMAX, SIG, CP, SH, GEN>(
                p, cl, st, a, r, cur, prev, level_doubles);
        }
    }
}

template <int T, int K, int KP, int TMAX, unsigned long long SIG,
          unsigned CP, unsigned SH>
static __device__ __forceinline__ void
levels_after(const ss3_params &p, const ss3_cells &cl,
             ss3_stream<K, KP, TMAX> &st, const double *cur,
             int level_doubles)
{
    if constexpr (T < TMAX) {
        if (T < p.depth) {
            level_after<K, KP, SIG, CP, SH>(p, cl, st.L[T],
                                            cur + T * level_doubles);
            levels_after<T + 1, K, KP, TMAX, SIG, CP, SH>(p, cl, st, cur,
                                                          level_doubles);
        }
    }
}

/* Plane r of level 0 (of a stream ending at `last`) through the levels;
   plane r - depth, if in z0 .. z1 - 1, stored. */
template <int K, int KP, bool PW, int TMAX, unsigned long long SIG,
          unsigned CP, unsigned SH, bool GEN>
static __device__ __forceinline__ void
stream_plane(const ss3_params &p, const ss3_cells &cl,
             ss3_stream<K, KP, TMAX> &st, ptrdiff_t r, ptrdiff_t last,
             ptrdiff_t z0, ptrdiff_t z1, double *smem)
{
    const int level_doubles = shared_fields<SH>() * S3_PLANE;
    {
        ss3_cells_of a[K];
#pragma unroll
        for (int f = 0; f < K; f++) {
#pragma unroll
            for (int y = 0; y < S3_CY; y++) {
#pragma unroll
                for (int j = 0; j < S3_V; j++) {
                    a[f][y][j] = st.next[f][y][j];
                }
            }
        }
        if (r + 1 <= last) {
            load_plane<K, GEN>(p, cl, r + 1, st.next);
        }
        double *cur = smem + st.buf * p.depth * level_doubles;
        double *prev = smem + (st.buf ^ 1) * p.depth * level_doubles;
        st.buf ^= 1;
        levels_before<0, K, KP, PW, TMAX, SIG, CP, SH, GEN>(
            p, cl, st, a, r, cur, prev, level_doubles);
        const ptrdiff_t zo = r - p.depth;
        if (zo >= z0 && zo < z1) {
            const ptrdiff_t z = zo * p.ny * p.nx;
#pragma unroll
            for (int f = 0; f < K; f++) {
                if (p.dst[f] == nullptr) {
                    continue;
                }
#pragma unroll
                for (int y = 0; y < S3_CY; y++) {
#pragma unroll
                    for (int j = 0; j < S3_V; j++) {
                        if ((cl.own >> (y * S3_V + j)) & 1u) {
                            p.dst[f][z + cl.row[y] + cl.col[j]] = a[f][y][j];
                        }
                    }
                }
            }
        }
        __syncthreads();
        levels_after<0, K, KP, TMAX, SIG, CP, SH>(p, cl, st, cur,
                                                  level_doubles);
    }
}

template <int K, int KP, bool PW, int TMAX, unsigned long long SIG,
          unsigned CP, unsigned SH>
static __device__ __forceinline__ void
ss3_body(const ss3_params &p)
{
    extern __shared__ double smem[];
    const int shared_doubles = 2 * p.depth * shared_fields<SH>() * S3_PLANE;
    for (int i = threadIdx.x; i < shared_doubles; i += S3_THREADS) {
        smem[i] = 0.0; /* the border rows: read by the margin, never
                          stored */
    }
    __syncthreads();
    const int M = p.depth;
    const ptrdiff_t tiles = p.tiles_x * p.tiles_y;
    const ptrdiff_t tile = (ptrdiff_t)blockIdx.x % tiles;
    const ptrdiff_t seg = (ptrdiff_t)blockIdx.x / tiles;
    const ptrdiff_t ox = cs_tile_origin(tile % p.tiles_x, S3_TX - 2 * M,
                                        p.nx) - M;
    const ptrdiff_t oy = cs_tile_origin(tile / p.tiles_x, S3_TY - 2 * M,
                                        p.ny) - M;
    const ptrdiff_t sx = cs_tile_first_stored(tile % p.tiles_x, S3_TX - 2 * M);
    const ptrdiff_t sy = cs_tile_first_stored(tile / p.tiles_x, S3_TY - 2 * M);
    ss3_cells cl;
    cl.x0 = (int)(threadIdx.x % 32) * S3_V;
    cl.y0 = (int)(threadIdx.x / 32) * S3_CY;
    cl.outside = cl.own = 0;
    const bool wrap = p.mode == CS_MODE_WRAP;
#pragma unroll
    for (int y = 0; y < S3_CY; y++) {
        const ptrdiff_t g = oy + cl.y0 + y;
        const bool out = g < 0 || g >= p.ny;
        cl.row[y] = (!out ? g : wrap ? cs_positive_mod(g, p.ny)
                                : (g < 0 ? 0 : p.ny - 1)) * p.nx;
    }
#pragma unroll
    for (int j = 0; j < S3_V; j++) {
        const ptrdiff_t g = ox + cl.x0 + j;
        const bool out = g < 0 || g >= p.nx;
        cl.col[j] = !out ? g : wrap ? cs_positive_mod(g, p.nx)
                                    : (g < 0 ? 0 : p.nx - 1);
    }
#pragma unroll
    for (int y = 0; y < S3_CY; y++) {
#pragma unroll
        for (int j = 0; j < S3_V; j++) {
            const int ty = cl.y0 + y, tx = cl.x0 + j;
            const ptrdiff_t gy = oy + ty, gx = ox + tx;
            const bool in = gy >= 0 && gy < p.ny && gx >= 0 && gx < p.nx;
            const int bit = y * S3_V + j;
            cl.outside |= in ? 0u : 1u << bit;
            if (in && ty >= M && ty < S3_TY - M && tx >= M && tx < S3_TX - M
                && gy >= sy && gx >= sx) {
                cl.own |= 1u << bit;
            }
        }
    }
    const bool edge = oy < 0 || oy + S3_TY > p.ny || ox < 0
                      || ox + S3_TX > p.nx;
    ss3_stream<K, KP, TMAX> st;
#pragma unroll
    for (int t = 0; t < TMAX; t++) {
#pragma unroll
        for (int y = 0; y < S3_CY; y++) {
#pragma unroll
            for (int j = 0; j < S3_V; j++) {
#pragma unroll
                for (int i = 0; i < K; i++) {
                    st.L[t].P[i][y][j] = 0.0;
                }
#pragma unroll
                for (int i = 0; i < (KP > 0 ? KP : 1); i++) {
                    st.L[t].S[i][y][j] = 0.0;
                }
            }
        }
    }
    st.buf = 0;
    const ptrdiff_t z0 = seg * p.seg_planes;
    const ptrdiff_t z1 = z0 + p.seg_planes < p.nz ? z0 + p.seg_planes : p.nz;
    const ptrdiff_t first = z0 - M, last = z1 - 1 + M;
    load_plane<K, true>(p, cl, first, st.next);
    /* plain planes [lo, hi): every level's plane and the plane read
       ahead inside the grid; under constant, edge tiles are never plain
       (their cells outside the grid are set at every level) */
    ptrdiff_t lo = first > M ? first : M;
    ptrdiff_t hi = p.nz - 1;
    if (edge && p.mode == CS_MODE_CONSTANT) {
        lo = hi = 0;
    }
    for (ptrdiff_t r = first; r <= last; r++) {
        if (r >= lo && r < hi) {
            stream_plane<K, KP, PW, TMAX, SIG, CP, SH, false>(
                p, cl, st, r, last, z0, z1, smem);
        } else {
            stream_plane<K, KP, PW, TMAX, SIG, CP, SH, true>(
                p, cl, st, r, last, z0, z1, smem);
        }
    }
}

template <int K, int KP, bool PW, int TMAX, unsigned long long SIG,
          unsigned CP, unsigned SH>
__global__ void __launch_bounds__(S3_THREADS, 1)
ss3_kernel(const S3_GRID_CONSTANT ss3_params p)
{
    if constexpr (CS_CHECKED_ONLY_IMAGE) {
        __trap(); /* streamed passes run on sm_90 images (kernels.cuh) */
    } else {
        ss3_body<K, KP, PW, TMAX, SIG, CP, SH>(p);
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

template <int K, int KP, bool PW, int TMAX, unsigned long long SIG = 0,
          unsigned CP = 0, unsigned SH = (1u << K) - 1u>
static cs_status
launch(cs_cuda_ctx *ctx, ss3_params *p)
{
    const auto kernel = ss3_kernel<K, KP, PW, TMAX, SIG, CP, SH>;
    const size_t smem = sch_stream3_smem_bytes(&p->t, p->depth);
    if (p->depth > TMAX || smem > (size_t)ctx->smem_optin
        || smem != 2 * (size_t)p->depth * shared_fields<SH>()
                        * SST3_PLANE_BYTES) {
        cs_cuda_message(ctx, "scheme stream 3D: %d steps a pass in %zu "
                             "bytes of shared memory, the kernel holds %d "
                             "levels of %d shared planes and the device %d "
                             "bytes (an engine error)",
                        p->depth, smem, TMAX, shared_fields<SH>(),
                        ctx->smem_optin);
        return CS_ERR_INVALID;
    }
    CS_TRY(cs_cuda_allow_smem(ctx, kernel, smem, "scheme stream 3D kernel"));
    int per_sm = 0;
    CS_CUDA_CHECK(ctx,
                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &per_sm, kernel, S3_THREADS, smem),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor (scheme "
                  "stream 3D)");
    const ptrdiff_t resident = (ptrdiff_t)ctx->sms * (per_sm > 0 ? per_sm : 1);
    p->tiles_x = CEIL_DIV(p->nx, (ptrdiff_t)(S3_TX - 2 * p->depth));
    p->tiles_y = CEIL_DIV(p->ny, (ptrdiff_t)(S3_TY - 2 * p->depth));
    const ptrdiff_t tiles = p->tiles_x * p->tiles_y;
    ptrdiff_t segs = 0;
    CS_TRY(cs_env_segments(ctx, "CONVSTENCIL_SCHEME_SEGMENTS", p->nz, &segs));
    if (segs == 0) {
        segs = cs_stream_segments(tiles, p->nz, p->depth, resident,
                                  S3_MAX_SEGMENTS, S3_EXTRA_ROUNDS);
    }
    p->seg_planes = CEIL_DIV(p->nz, segs);
    const ptrdiff_t items = tiles * CEIL_DIV(p->nz, p->seg_planes);
    if (items > INT_MAX) {
        cs_cuda_message(ctx, "scheme stream 3D: grid too large");
        return CS_ERR_INVALID;
    }
    kernel<<<(unsigned)items, S3_THREADS, smem, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "scheme stream 3D kernel");
}

/* The instance for the tables: its levels sch_stream_max_depth's; the
   patterns, the copy and the shared fields compiled in where
   sch_stream_compiled says so; otherwise the patterns read at run time,
   every field through shared planes and a copy run as a sum
   (sch_stream3_shared). */
static cs_status
dispatch(cs_cuda_ctx *ctx, ss3_params *p)
{
    const sch_stream_tables *t = &p->t;
    if (sch_stream_compiled(t)) {
        const unsigned long long sig = sch_stream_signature(t);
        if (sig == SST_SIG_WAVE3) { /* u: the star and up; up: u */
            return launch<2, 0, false, 4, SST_SIG_WAVE3, 1u << 4, 1u>(ctx,
                                                                      p);
        }
        return launch<1, 0, false, 4, SST_SIG_STAR3, 0u, 1u>(ctx, p);
    }
    if (t->fields == 1) {
        return t->scaled ? launch<1, 1, true, 4>(ctx, p)
                         : launch<1, 0, true, 4>(ctx, p);
    }
    return t->scaled ? launch<2, 1, true, 2>(ctx, p)
                     : launch<2, 0, true, 3>(ctx, p);
}

cs_status
sch_stream3_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
                 const sch_stream_tables *t, const double *const *src,
                 double *const *dst, int steps)
{
    if (t->ndim != 3 || steps < 1 || steps > sch_stream_max_depth(t)
        || call->planes < SST3_MIN_EXTENT || call->n[0] < SST3_MIN_EXTENT
        || call->n[1] < SST3_MIN_EXTENT || ctx->sms <= 0
        || cs_cuda_checked_only(ctx)) {
        cs_cuda_message(ctx, "sch_stream3_pass: invalid grid, depth or "
                             "device");
        return CS_ERR_INVALID;
    }
    ss3_params *p = (ss3_params *)calloc(1, sizeof(ss3_params));
    if (p == NULL) {
        cs_cuda_message(ctx, "out of host memory (scheme pass parameters)");
        return CS_ERR_NOMEM;
    }
    p->t = *t;
    for (int i = 0; i < t->fields; i++) {
        p->src[i] = src[t->order[i]];
        p->dst[i] = t->updated[i] ? dst[t->order[i]] : NULL;
    }
    for (int q = 0; q < call->nparams; q++) {
        p->par[q] = call->params[q];
    }
    for (int i = 0; i < t->scaled; i++) {
        p->spar[i] = call->params[t->scale_param[i]];
    }
    p->nz = call->planes;
    p->ny = call->n[0];
    p->nx = call->n[1];
    p->depth = steps;
    p->mode = call->mode;
    p->cval = call->cval;
    const cs_status st = dispatch(ctx, p);
    free(p);
    return st;
}
