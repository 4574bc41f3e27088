/*
 * scheme_stream.cu -- streamed passes of a 2D scheme: several steps per
 * trip through memory, carried in registers as tb2d carries one stencil
 * (tb2d_kernel.cuh has the method).  For one-stage schemes of up to
 * SST_FIELDS fields whose stencils fit 3 x 3, under wrap or constant
 * (sch_stream_tables_make says which; the rest run scheme_tb.cu's
 * shared-memory passes or the one-step ones).
 *
 * A warp streams a strip of SW = 32 V columns down a segment of rows.
 * Each row read (every field's) cascades through the levels: level t
 * takes row rin of the fields after t steps and completes row rin - 1
 * after t + 1.  Every update's sum is regrouped on the host (scheme_plan.h):
 * a 3 x 3 correlation per field read, plain and scaled by the update's
 * parameter field, pushed into partial rows as tb2d pushes its kernel
 * rows (2 per update and group); a constant; and pointwise terms, which
 * read the fields at the completed row (the row that arrived before,
 * kept per level).  A field no update sets is its own centre tap.  The
 * scaled sums' parameter rows arrive with the fields' rows into a ring
 * of their own, each read once a pass and kept until the deepest level
 * has multiplied by it (level t reads the row level t - 1 read one row
 * before).
 *
 * The sums are those of the one-step passes in another order (rounding
 * differs in the last bits; which taps multiply is the same, so NaN and
 * infinities land as there).  Under wrap every row and column read is a
 * real cell of the periodic grid; under constant, rows and columns
 * outside the grid read cval at every level.
 */
#include "scheme_stream.cuh"

#include "async_copy.cuh"
#include "kernels.cuh"

#include <stdlib.h>
#include <string.h>

#define SST_WARPS 4  /* warps of a block, each streaming its own strip */
#define SST_RING 4   /* rows in flight or waiting, per warp */
/* Parameter rows a warp keeps (TMAX levels): a row arrives with the
   fields' and stays until the deepest level has read it. */
#define SST_PRING(tmax) ((tmax) + SST_RING)
#define SST_V 2      /* columns of a lane */
#define SST_SW (32 * SST_V)
#define SST_MIN_BLOCKS 3
#define SST_MAX_SEGMENTS 4096
#define SST_EXTRA_ROUNDS 1 /* tb2d's, measured there */

#if defined(CS_CUDA_EMULATION)
#define SST_GRID_CONSTANT
#else
#define SST_GRID_CONSTANT __grid_constant__
#endif

typedef struct sst_params {
    const double *src[SST_FIELDS]; /* in kernel field order */
    double *dst[SST_FIELDS];       /* NULL: not written */
    const double *par[CS_SCHEME_MAX_PARAMS];
    const double *spar[SST_FIELDS]; /* update i's scaled sum's parameter */
    ptrdiff_t ny, nx;
    ptrdiff_t strips, segs, seg_rows, items;
    int depth; /* steps of this pass */
    int margin; /* columns spent on each side: depth in whole lanes */
    cs_mode mode;
    double cval;
    sch_stream_tables t;
} sst_params;

/* A warp's strip. */
struct sst_strip {
    ptrdiff_t gx0;     /* the lane's first column (may lie outside) */
    ptrdiff_t y0, y1;  /* owned rows */
    bool stores;       /* the lane holds owned columns */
    bool side;         /* some column of the strip lies outside the grid */
    bool xout[SST_V];  /* the lane's column j lies outside */
    ptrdiff_t col[SST_V]; /* where column j reads: wrapped or clamped */
};

/* A level's state: partial rows of the plain and scaled sums (P[0]: the
   row that arrived last, P[1] the one below), and the row that arrived
   last (the pointwise terms' values at the row completed next). */
template <int K, int KP, bool PW>
struct sst_level {
    double plain[K][2][SST_V];
    double scaled[KP > 0 ? KP : 1][2][SST_V];
    double last[PW ? K : 1][SST_V];
};

/* The parameter ring of a warp: per scaled sum, 2 SST_PRING slots of SW
   doubles, each row in slot k and its mirror k + SST_PRING, so that the
   rows a level reads lie at fixed offsets below the newest (no wrap). */
template <int TMAX>
static __device__ __forceinline__ constexpr int
sst_pstride()
{
    return 2 * SST_PRING(TMAX) * SST_SW;
}

/* Start reading row `row` of the scaled sums' parameter fields into
   this lane's cells of a parameter ring slot and its mirror.  Rows and
   columns outside the grid wrap, or under constant clamp (what they
   scale there is replaced by cval at the next level). */
template <int KP, int TMAX, bool GENERAL>
static __device__ __forceinline__ void
read_params(const sst_params &p, const sst_strip &s, ptrdiff_t row,
            double *pslot)
{
    ptrdiff_t m = row;
    if (GENERAL && (row < 0 || row >= p.ny)) {
        m = p.mode == CS_MODE_WRAP ? cs_extend_index(row, p.ny, p.mode)
                                   : (row < 0 ? 0 : p.ny - 1);
    }
#pragma unroll
    for (int q = 0; q < KP; q++) {
        const double *r = p.spar[q] + m * p.nx;
        double *d = pslot + q * sst_pstride<TMAX>();
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            const double *from = r + (GENERAL ? s.col[j] : s.gx0 + j);
            cs_copy_async8(d + j, from, true);
            cs_copy_async8(d + SST_PRING(TMAX) * SST_SW + j, from, true);
        }
    }
}

/* Start reading row `row` of every field into this lane's cells of a
   ring slot (K x SW doubles), and of the parameter fields into the
   parameter ring's slot `pslot`.  GENERAL: the row or a column lies
   outside the grid. */
template <int K, int KP, int TMAX, bool GENERAL>
static __device__ __forceinline__ void
read_row(const sst_params &p, const sst_strip &s, ptrdiff_t row,
         double *slot, double *pslot)
{
    read_params<KP, TMAX, GENERAL>(p, s, row, pslot);
    if (!GENERAL) {
#pragma unroll
        for (int f = 0; f < K; f++) {
            const double *r = p.src[f] + row * p.nx + s.gx0;
#pragma unroll
            for (int j = 0; j < SST_V; j++) {
                cs_copy_async8(slot + f * SST_SW + j, r + j, true);
            }
        }
        return;
    }
    const bool row_in = row >= 0 && row < p.ny;
    const ptrdiff_t m = row_in ? row : cs_extend_index(row, p.ny, p.mode);
#pragma unroll
    for (int f = 0; f < K; f++) {
        const double *r = p.src[f] + (m >= 0 ? m : 0) * p.nx;
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            if (p.mode == CS_MODE_CONSTANT && (!row_in || s.xout[j])) {
                slot[f * SST_SW + j] = p.cval;
            } else {
                cs_copy_async8(slot + f * SST_SW + j, r + s.col[j], true);
            }
        }
    }
}

/* The arriving row's neighbours along x: e[c + 1] is column gx0 + c. */
inline __device__ void
neighbours(const double (&a)[SST_V], double (&e)[SST_V + 2])
{
#pragma unroll
    for (int j = 0; j < SST_V; j++) {
        e[j + 1] = a[j];
    }
    e[0] = __shfl_up_sync(0xffffffffu, a[SST_V - 1], 1);
    e[SST_V + 1] = __shfl_down_sync(0xffffffffu, a[0], 1);
}

/* One group's taps applied to the arriving row (neighbours e): its
   centre coefficients (each its own product) and its pattern's kernel
   row 1 into p0 (the arriving row's own), row 2 (the row below the
   output) into `done` (the row completed now), row 0 into p1 (the row
   below it).  kind, mask, centres: sch_stream_tables'. */
inline __device__ void
push(int kind, unsigned mask, const double *w, int centres, const double *cw,
     const double (&e)[SST_V + 2], double (&done)[SST_V],
     double (&p0)[SST_V], double (&p1)[SST_V])
{
#pragma unroll
    for (int k = 0; k < SST_CENTRES; k++) {
        if (k < centres) {
#pragma unroll
            for (int j = 0; j < SST_V; j++) {
                p0[j] = fma(cw[k], e[j + 1], p0[j]);
            }
        }
    }
    switch (kind) {
    case SST_NONE:
        return;
    case SST_CENTRE:
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            p0[j] = fma(w[4], e[j + 1], p0[j]);
        }
        return;
    case SST_PLUS:
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            done[j] = fma(w[7], e[j + 1], done[j]);
            p0[j] = fma(w[3], e[j], p0[j]);
            p0[j] = fma(w[4], e[j + 1], p0[j]);
            p0[j] = fma(w[5], e[j + 2], p0[j]);
            p1[j] = fma(w[1], e[j + 1], p1[j]);
        }
        return;
    case SST_BOX:
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
#pragma unroll
            for (int d = 0; d < 3; d++) {
                done[j] = fma(w[6 + d], e[j + d], done[j]);
                p0[j] = fma(w[3 + d], e[j + d], p0[j]);
                p1[j] = fma(w[d], e[j + d], p1[j]);
            }
        }
        return;
    default:
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
#pragma unroll
            for (int d = 0; d < 3; d++) {
                if ((mask >> (6 + d)) & 1u) {
                    done[j] = fma(w[6 + d], e[j + d], done[j]);
                }
                if ((mask >> (3 + d)) & 1u) {
                    p0[j] = fma(w[3 + d], e[j + d], p0[j]);
                }
                if ((mask >> d) & 1u) {
                    p1[j] = fma(w[d], e[j + d], p1[j]);
                }
            }
        }
        return;
    }
}

/* Whether every group reading field f takes its centre alone (known
   only from SIG). */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ bool
centre_only(int f)
{
    bool only = SIG != 0;
#pragma unroll
    for (int g = 0; g < 2 * K; g++) { /* update i = g / 2, part g % 2 */
        const int kind = (int)((SIG >> (5 * (g * K + f))) & 7u);
        only = only && (kind == SST_NONE || kind == SST_CENTRE);
    }
    return only;
}

/* Whether update i adds a constant: from SIG, the same way. */
template <unsigned long long SIG>
static __device__ __forceinline__ bool
has_constant(const sst_params &p, int i)
{
    return SIG != 0 ? (SIG & SST_CONSTANT(i)) != 0 : p.t.constant[i] != 0.0;
}

/* Parameter field q at row `row` (mapped or clamped: GENERAL) and the
   lane's columns. */
template <bool GENERAL>
static __device__ __forceinline__ void
param_row(const sst_params &p, const sst_strip &s, int q, ptrdiff_t row,
          double (&v)[SST_V])
{
    ptrdiff_t m = row;
    if (GENERAL && (row < 0 || row >= p.ny)) {
        m = p.mode == CS_MODE_WRAP ? cs_extend_index(row, p.ny, p.mode)
                                   : (row < 0 ? 0 : p.ny - 1);
    }
    const double *r = p.par[q] + m * p.nx;
#pragma unroll
    for (int j = 0; j < SST_V; j++) {
        v[j] = __ldg(r + (GENERAL ? s.col[j] : s.gx0 + j));
    }
}

/* Pointwise term m of update i added to `out`: its coefficient (times its
   parameter field at `row`) times the product of the fields' powers
   (power(f)) at the completed row, each field multiplied in one at a
   time as the reference does. */
template <int K, int KP, bool PW, unsigned long long PWSIG, bool GENERAL,
          class Powers>
static __device__ __forceinline__ void
add_pointwise(const sst_params &p, const sst_strip &s,
              const sst_level<K, KP, PW> &L, int i, int m, ptrdiff_t row,
              Powers power, double (&out)[SST_V])
{
    /* with the terms compiled in (PWSIG), whether a parameter scales
       the term is known too */
    const int q = PWSIG == 0 || (PWSIG & SST_PW_PARAM(i, m)) != 0
                      ? p.t.pw_param[i][m]
                      : -1;
    double c[SST_V];
    if (q >= 0) {
        param_row<GENERAL>(p, s, q, row, c);
    }
#pragma unroll
    for (int j = 0; j < SST_V; j++) {
        double v = 1.0;
#pragma unroll
        for (int f = 0; f < K; f++) {
            const int n = power(f);
#pragma unroll
            for (int k = 0; k < CS_SCHEME_MAX_POWER; k++) {
                v = k < n ? v * L.last[f][j] : v;
            }
        }
        const double coef =
            q >= 0 ? p.t.pw_coef[i][m] * c[j] : p.t.pw_coef[i][m];
        out[j] = fma(coef, v, out[j]);
    }
}

/*
 * One level: row `rin` of the fields after t steps arrives in a; on
 * return a holds row rin - 1 after t + 1 steps, complete, and L the
 * partial rows below it.  prow: row rin - 1 in the parameter ring.
 * GENERAL: some row or column involved lies outside the grid.
 */
template <int K, int KP, bool PW, int TMAX, unsigned long long SIG,
          unsigned long long PWSIG, bool GENERAL>
static __device__ __forceinline__ void
level_step(const sst_params &p, const sst_strip &s, sst_level<K, KP, PW> &L,
           double (&a)[K][SST_V], ptrdiff_t rin, const double *prow)
{
    if (GENERAL && p.mode == CS_MODE_CONSTANT) {
        const bool row_out = rin < 0 || rin >= p.ny;
#pragma unroll
        for (int f = 0; f < K; f++) {
#pragma unroll
            for (int j = 0; j < SST_V; j++) {
                a[f][j] = row_out || s.xout[j] ? p.cval : a[f][j];
            }
        }
    }
    double e[K][SST_V + 2];
#pragma unroll
    for (int f = 0; f < K; f++) {
        if (centre_only<K, SIG>(f)) {
            /* no shuffles: the compiler drops unused ones, but not the
               warp-convergence checks before them */
#pragma unroll
            for (int j = 0; j < SST_V; j++) {
                e[f][j + 1] = a[f][j];
            }
            e[f][0] = e[f][SST_V + 1] = 0.0;
        } else {
            neighbours(a[f], e[f]);
        }
    }
    double out[K][SST_V];
#pragma unroll
    for (int i = 0; i < K; i++) {
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            out[i][j] = L.plain[i][0][j];
            L.plain[i][0][j] = L.plain[i][1][j];
            L.plain[i][1][j] = 0.0;
        }
#pragma unroll
        for (int f = 0; f < K; f++) {
            push(sst_group_kind<K, SIG>(p.t, i, 0, f), p.t.mask[i][0][f],
                 p.t.w[i][0][f], sst_group_centres<K, SIG>(p.t, i, 0, f),
                 p.t.centre[i][0][f], e[f], out[i], L.plain[i][0],
                 L.plain[i][1]);
        }
    }
    const ptrdiff_t row = rin - 1; /* the row completed */
#pragma unroll
    for (int i = 0; i < KP; i++) {
        double sum[SST_V];
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            sum[j] = L.scaled[i][0][j];
            L.scaled[i][0][j] = L.scaled[i][1][j];
            L.scaled[i][1][j] = 0.0;
        }
#pragma unroll
        for (int f = 0; f < K; f++) {
            push(sst_group_kind<K, SIG>(p.t, i, 1, f), p.t.mask[i][1][f],
                 p.t.w[i][1][f], sst_group_centres<K, SIG>(p.t, i, 1, f),
                 p.t.centre[i][1][f], e[f], sum, L.scaled[i][0],
                 L.scaled[i][1]);
        }
        /* one 16-byte load: SST_V = 2, and lane * SST_V doubles from a
           slot's 16-byte aligned start */
        static_assert(SST_V == 2, "a lane's parameters as one double2");
        const double2 c = *reinterpret_cast<const double2 *>(
            prow + i * sst_pstride<TMAX>());
        out[i][0] = fma(c.x, sum[0], out[i][0]);
        out[i][1] = fma(c.y, sum[1], out[i][1]);
    }
#pragma unroll
    for (int i = 0; i < K; i++) {
        if (has_constant<SIG>(p, i)) {
#pragma unroll
            for (int j = 0; j < SST_V; j++) {
                out[i][j] += p.t.constant[i];
            }
        }
    }
    if constexpr (PW) {
#pragma unroll
        for (int i = 0; i < K; i++) {
            if constexpr (PWSIG != 0) { /* counts and powers compiled in */
#pragma unroll
                for (int m = 0; m < SST_PW_COMPILED; m++) {
                    if (m < (int)((PWSIG >> (20 * i)) & 3u)) {
                        add_pointwise<K, KP, PW, PWSIG, GENERAL>(
                            p, s, L, i, m, row,
                            [&](int f) {
                                return (int)((PWSIG >> (20 * i + 2
                                                        + 3 * (m * SST_FIELDS
                                                               + f)))
                                             & 7u);
                            },
                            out[i]);
                    }
                }
            } else {
                for (int m = 0; m < p.t.npw[i]; m++) {
                    add_pointwise<K, KP, PW, PWSIG, GENERAL>(
                        p, s, L, i, m, row,
                        [&](int f) { return (int)p.t.pw_power[i][m][f]; },
                        out[i]);
                }
            }
        }
#pragma unroll
        for (int f = 0; f < K; f++) {
#pragma unroll
            for (int j = 0; j < SST_V; j++) {
                L.last[f][j] = a[f][j];
            }
        }
    }
#pragma unroll
    for (int f = 0; f < K; f++) {
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            a[f][j] = out[f][j];
        }
    }
}

/* Row r of level 0 through the pass's levels, and row r - depth stored.
   `slot`: the ring slot row r is in; prow: row r - 1 in the parameter
   ring (level t reads row r - 1 - t, t slots below: the mirror keeps
   them unwrapped). */
template <int K, int KP, bool PW, int TMAX, unsigned long long SIG,
          unsigned long long PWSIG, bool GENERAL>
static __device__ __forceinline__ void
stream_row(const sst_params &p, const sst_strip &s,
           sst_level<K, KP, PW> (&L)[TMAX], const double *slot,
           const double *prow, ptrdiff_t r)
{
    double a[K][SST_V];
#pragma unroll
    for (int f = 0; f < K; f++) {
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            a[f][j] = slot[f * SST_SW + j];
        }
    }
#pragma unroll
    for (int t = 0; t < TMAX; t++) {
        if (t < p.depth) {
            level_step<K, KP, PW, TMAX, SIG, PWSIG, GENERAL>(
                p, s, L[t], a, r - t, prow - t * SST_SW);
        }
    }
    const ptrdiff_t row = r - p.depth; /* complete after depth steps */
    if (s.stores && row >= s.y0 && row < s.y1) {
#pragma unroll
        for (int f = 0; f < K; f++) {
            if (p.dst[f] == nullptr) {
                continue;
            }
            double *o = p.dst[f] + row * p.nx + s.gx0;
#pragma unroll
            for (int j = 0; j < SST_V; j++) {
                if (s.gx0 + j < p.nx) {
                    o[j] = a[f][j];
                }
            }
        }
    }
}

/* A warp's shared memory: the fields' ring, then the parameter ring. */
template <int K, int KP, int TMAX>
static __host__ __device__ constexpr int
sst_warp_doubles()
{
    return SST_RING * K * SST_SW + KP * 2 * SST_PRING(TMAX) * SST_SW;
}

template <int K, int KP, bool PW, int TMAX, unsigned long long SIG,
          unsigned long long PWSIG>
__global__ void __launch_bounds__(SST_WARPS * 32, SST_MIN_BLOCKS)
sst_kernel(const SST_GRID_CONSTANT sst_params p)
{
    if constexpr (CS_CHECKED_ONLY_IMAGE) {
        __trap(); /* streamed passes run on sm_90 images (kernels.cuh) */
    } else {
        extern __shared__ double smem[];
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        const ptrdiff_t item = (ptrdiff_t)blockIdx.x * SST_WARPS + warp;
        if (item >= p.items) {
            return; /* the whole warp */
        }
        double *ring = smem + warp * sst_warp_doubles<K, KP, TMAX>()
                       + lane * SST_V;
        double *pring = ring + SST_RING * K * SST_SW;
        const ptrdiff_t strip = item % p.strips;
        const ptrdiff_t seg = item / p.strips;
        const int M = p.margin;
        const ptrdiff_t own = SST_SW - 2 * M;
        const ptrdiff_t ox = cs_tile_origin(strip, own, p.nx) - M;
        sst_strip s;
        s.gx0 = ox + lane * SST_V;
        s.y0 = seg * p.seg_rows;
        s.y1 = s.y0 + p.seg_rows < p.ny ? s.y0 + p.seg_rows : p.ny;
        s.stores = lane >= M / SST_V && lane < (SST_SW - M) / SST_V;
        s.side = ox < 0 || ox + SST_SW > p.nx;
#pragma unroll
        for (int j = 0; j < SST_V; j++) {
            const ptrdiff_t g = s.gx0 + j;
            s.xout[j] = g < 0 || g >= p.nx;
            s.col[j] = !s.xout[j] ? g
                       : p.mode == CS_MODE_WRAP
                           ? cs_extend_index(g, p.nx, p.mode)
                           : (g < 0 ? 0 : p.nx - 1);
        }
        sst_level<K, KP, PW> L[TMAX];
#pragma unroll
        for (int t = 0; t < TMAX; t++) {
#pragma unroll
            for (int f = 0; f < K; f++) {
#pragma unroll
                for (int j = 0; j < SST_V; j++) {
                    L[t].plain[f][0][j] = L[t].plain[f][1][j] = 0.0;
                    if constexpr (PW) {
                        L[t].last[f][j] = 0.0;
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < (KP > 0 ? KP : 1); i++) {
#pragma unroll
                for (int j = 0; j < SST_V; j++) {
                    L[t].scaled[i][0][j] = L[t].scaled[i][1][j] = 0.0;
                }
            }
        }
        const ptrdiff_t first = s.y0 - p.depth, last = s.y1 - 1 + p.depth;
        /* row x in field slot (x - first) mod SST_RING and parameter
           slot (x - first) mod NP; first the parameter rows the levels
           read before row `first` (their results are not kept, but so
           every product is of real cells' values) */
        constexpr int NP = SST_PRING(TMAX);
        if constexpr (KP > 0) {
#pragma unroll 1
            for (int i = 0; i < p.depth; i++) {
                read_params<KP, TMAX, true>(
                    p, s, first - p.depth + i,
                    pring + (NP - p.depth + i) * SST_SW);
            }
        }
#pragma unroll
        for (int i = 0; i < SST_RING - 1; i++) {
            if (first + i <= last) {
                read_row<K, KP, TMAX, true>(p, s, first + i,
                                            ring + i * K * SST_SW,
                                            pring + i * SST_SW);
            }
            cs_copy_commit();
        }
        /* row r's field slot, and the parameter slot of the row read
           ahead (row r - 1 lies SST_RING slots below, the mirror's) */
        int slot = 0, pa = SST_RING - 1;
        for (ptrdiff_t r = first; r <= last; r++) {
            const ptrdiff_t ahead = r + SST_RING - 1;
            /* plain: every row a level meets, and the row read ahead,
               inside the grid, and every column */
            const bool plain = !s.side && r - p.depth >= 0 && r < p.ny
                               && ahead < p.ny;
            double *next = ring + ((slot + SST_RING - 1) % SST_RING)
                                      * K * SST_SW;
            double *pnext = pring + pa * SST_SW;
            if (ahead <= last) {
                if (plain) {
                    read_row<K, KP, TMAX, false>(p, s, ahead, next, pnext);
                } else {
                    read_row<K, KP, TMAX, true>(p, s, ahead, next, pnext);
                }
            }
            cs_copy_commit();
            cs_copy_wait<SST_RING - 1>(); /* row r's copies (this lane's) */
            const double *cur = ring + slot * K * SST_SW;
            const double *prow = pnext + (NP - SST_RING) * SST_SW;
            if (plain) {
                stream_row<K, KP, PW, TMAX, SIG, PWSIG, false>(p, s, L, cur,
                                                               prow, r);
            } else {
                stream_row<K, KP, PW, TMAX, SIG, PWSIG, true>(p, s, L, cur,
                                                              prow, r);
            }
            slot = (slot + 1) % SST_RING;
            pa = pa + 1 < NP ? pa + 1 : 0;
        }
        cs_copy_wait<0>();
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

template <int K, int KP, bool PW, int TMAX, unsigned long long SIG = 0,
          unsigned long long PWSIG = 0>
static cs_status
launch(cs_cuda_ctx *ctx, sst_params *p)
{
    constexpr int threads = SST_WARPS * 32;
    const size_t smem = (size_t)SST_WARPS * sst_warp_doubles<K, KP, TMAX>()
                        * sizeof(double);
    if (p->depth > TMAX) { /* sch_stream_max_depth and dispatch disagree */
        cs_cuda_message(ctx, "scheme stream: %d steps a pass, the kernel "
                             "holds %d (an engine error)",
                        p->depth, TMAX);
        return CS_ERR_INVALID;
    }
    CS_TRY(cs_cuda_allow_smem(ctx, sst_kernel<K, KP, PW, TMAX, SIG, PWSIG>,
                              smem, "scheme stream kernel"));
    int per_sm = 0;
    CS_CUDA_CHECK(ctx,
                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &per_sm, sst_kernel<K, KP, PW, TMAX, SIG, PWSIG>,
                      threads, smem),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor (scheme "
                  "stream)");
    const ptrdiff_t resident = (ptrdiff_t)ctx->sms * (per_sm > 0 ? per_sm : 1)
                               * SST_WARPS;
    const ptrdiff_t own = SST_SW - 2 * p->margin;
    p->strips = CEIL_DIV(p->nx, own);
    CS_TRY(cs_env_segments(ctx, "CONVSTENCIL_SCHEME_SEGMENTS", p->ny,
                           &p->segs));
    if (p->segs == 0) {
        p->segs = cs_stream_segments(p->strips, p->ny, p->depth, resident,
                                     SST_MAX_SEGMENTS, SST_EXTRA_ROUNDS);
    }
    p->seg_rows = CEIL_DIV(p->ny, p->segs);
    p->items = p->strips * p->segs;
    const ptrdiff_t blocks = CEIL_DIV(p->items, (ptrdiff_t)SST_WARPS);
    if (blocks > 0x7fffffff) {
        cs_cuda_message(ctx, "scheme stream: grid too large");
        return CS_ERR_INVALID;
    }
    const unsigned grid = (unsigned)blocks;
    const auto kernel = sst_kernel<K, KP, PW, TMAX, SIG, PWSIG>;
    kernel<<<grid, threads, smem, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "scheme stream kernel");
}

/* The instance for the tables: its levels sch_stream_max_depth's, its
   patterns and pointwise terms compiled in for the signatures
   scheme_plan.h lists. */
static cs_status
dispatch(cs_cuda_ctx *ctx, sst_params *p)
{
    const sch_stream_tables *t = &p->t;
    const bool pw = t->pointwise != 0;
    const unsigned long long sig = sch_stream_signature(t);
    const unsigned long long pwsig = sch_stream_pw_signature(t);
    if (t->fields == 1) {
        if (t->scaled) {
            return pw ? launch<1, 1, true, 3>(ctx, p)
                      : launch<1, 1, false, 4>(ctx, p);
        }
        if (pw) {
            if (sig == SST_SIG_PLUS && pwsig == SST_PWSIG_CUBE) {
                return launch<1, 0, true, 8, SST_SIG_PLUS, SST_PWSIG_CUBE>(
                    ctx, p);
            }
            if (sig == SST_SIG_PLUS_REACTING && pwsig == SST_PWSIG_CUBE) {
                return launch<1, 0, true, 8, SST_SIG_PLUS_REACTING,
                              SST_PWSIG_CUBE>(ctx, p);
            }
            return launch<1, 0, true, 6>(ctx, p);
        }
        if (sig == SST_SIG_PLUS) {
            return launch<1, 0, false, 8, SST_SIG_PLUS>(ctx, p);
        }
        if (sig == SST_SIG_PLUS_SOURCE) {
            return launch<1, 0, false, 8, SST_SIG_PLUS_SOURCE>(ctx, p);
        }
        return sig == SST_SIG_BOX
                   ? launch<1, 0, false, 8, SST_SIG_BOX>(ctx, p)
                   : launch<1, 0, false, 8>(ctx, p);
    }
    switch (t->scaled) {
    case 0:
        if (!pw) {
            return sig == SST_SIG_WAVE
                       ? launch<2, 0, false, 8, SST_SIG_WAVE>(ctx, p)
                       : launch<2, 0, false, 8>(ctx, p);
        }
        if (pwsig == SST_PWSIG_GRAY_SCOTT) {
            if (sig == SST_SIG_DIFFUSING_PAIR_MERGED) {
                return launch<2, 0, true, 5, SST_SIG_DIFFUSING_PAIR_MERGED,
                              SST_PWSIG_GRAY_SCOTT>(ctx, p);
            }
            if (sig == SST_SIG_DIFFUSING_PAIR) {
                return launch<2, 0, true, 5, SST_SIG_DIFFUSING_PAIR,
                              SST_PWSIG_GRAY_SCOTT>(ctx, p);
            }
        }
        return launch<2, 0, true, 4>(ctx, p);
    case 1:
        if (pw) {
            return launch<2, 1, true, 3>(ctx, p);
        }
        return sig == SST_SIG_WAVE_SCALED
                   ? launch<2, 1, false, 6, SST_SIG_WAVE_SCALED>(ctx, p)
                   : launch<2, 1, false, 4>(ctx, p);
    default:
        return launch<2, 2, true, 2>(ctx, p);
    }
}

cs_status
sch_stream_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
                const sch_stream_tables *t, const double *const *src,
                double *const *dst, int steps)
{
    if (steps < 1 || steps > sch_stream_max_depth(t)
        || call->n[0] < CS_TB2D_MIN_EXTENT || call->n[1] < CS_TB2D_MIN_EXTENT
        || ctx->sms <= 0 || cs_cuda_checked_only(ctx)) {
        cs_cuda_message(ctx, "sch_stream_pass: invalid grid, depth or "
                             "device");
        return CS_ERR_INVALID;
    }
    sst_params *p = (sst_params *)calloc(1, sizeof(sst_params));
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
    p->ny = call->n[0];
    p->nx = call->n[1];
    p->depth = steps;
    p->margin = CEIL_DIV(steps, SST_V) * SST_V;
    p->mode = call->mode;
    p->cval = call->cval;
    const cs_status st = dispatch(ctx, p);
    free(p);
    return st;
}
