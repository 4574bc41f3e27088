/*
 * tb2d_kernel.cuh -- temporal blocking of planar stencils on CUDA cores, in
 * registers: each warp streams down a strip of the plane and carries T
 * time steps in flight, so the grid is read and written once per T steps
 * and the steps themselves touch no shared memory (the 2.5D blocking of
 * the blocking seed, as the streaming kernels of AN5D and EBISU do it).
 * It runs any 3 x 3 kernel, and pluses (nonzero weights on the centre
 * row and column, as star2d13p), outer products (box2d49p) and full-rank
 * boxes of sides 5 and 7: radius R = 1, 2, 3.
 *
 * A warp owns a strip of SW = 32 V columns (lane l holds columns
 * l V .. l V + V - 1) and a segment of rows.  It reads rows of level 0
 * from R T rows above its segment to R T rows below, one per iteration,
 * through a small per-warp ring of shared memory filled by asynchronous
 * copies a few rows ahead.  Each row read cascades through the T levels:
 * level t takes the row just completed at level t - 1 and completes the
 * row R above it.  The stencil is "pushed": the arriving row's 2 R + 1
 * row filters (the kernel's rows applied along x; a plus's off-centre
 * rows are one weight each) go to the output rows that read it, so a
 * level keeps 2 R partial rows (2 R V doubles per lane) and no old
 * input.  Neighbours along x come from the next lanes by shuffles; each
 * level is exact on R columns fewer at either side of the strip, so
 * after T levels the strip's central SW - 2M columns (M = R T rounded up
 * to whole lanes) are exact and stored.
 *
 * Boundary modes, exactly as repeated steps apply them:
 *  - wrap: rows and columns are read periodically; every cell is a real
 *    cell of the periodic grid and is stepped.
 *  - constant: an arriving row outside the grid, and columns outside it,
 *    read cval at every level.
 *  - nearest, reflect, mirror: cells outside the grid take, at every
 *    level, the value of the cell the mode maps them to.  Along x a lane
 *    near the edge substitutes that cell for each column beyond it;
 *    along y a row outside the grid adds nothing, and the row the mode
 *    maps the outside row to adds the kernel rows it would have met
 *    there to the edge rows that read it.
 * Strips away from the side edges and rows away from the top and bottom
 * run code without those tests (template flags).
 *
 * Measured on the H100 (10240^2, depth 8) against the kernel this one
 * replaced (shared-memory tiles of 128 x 64 stepped by 512 threads, one
 * block per SM, bound by shared-memory traffic and latency): heat2d 871
 * against 407 G stencils/s, box2d9p 640 against 337 (h100_2d_tb2d.md at
 * 1a6d56b; now heat2d 913, box2d9p 838 with its rows filtered once, and
 * star2d13p 305 and box2d49p 302 at depth 3: h100_2d_tb2d.md at
 * ffc986f).  Two columns
 * per lane beat four (registers: four spill at depth 8); for radius 1
 * the row loop is unrolled by two so that one row's later levels overlap
 * the next row's first ones (tbs_unroll).
 *
 * Between the caller's device arrays the first pass notes non-finite
 * input values and the last non-finite results (engine.cu); those checks
 * are a template flag, since testing for them at run time in every pass
 * cost about 5% (H100, 10240^2, depth 8: heat2d 860 against 900 G
 * stencils/s, box2d9p 620 against 641; h100_tb2d_flag_checks.md).
 */
#ifndef CS_TB2D_KERNEL_CUH
#define CS_TB2D_KERNEL_CUH

#include "tb2d.cuh"
#include "async_copy.cuh"

/* What a warp streams: its plane, strip and rows, and which edges of the
   grid the strip meets. */
template <int V>
struct tbs_strip {
    const double *src;
    double *dst;
    ptrdiff_t gx0;    /* the lane's first column */
    ptrdiff_t y0, y1; /* owned rows */
    bool stores;      /* the lane holds owned columns */
    int xsrc[V];      /* strips at a side edge (not wrap): where the lane's
                         column j lies outside the grid, the column of the
                         strip the mode maps it to (holding its value at
                         every level; constant mode: 0 or more, unused);
                         -1 inside */
};

/* Row `row` (inside the plane) of the strip's plane: the input's, or in
   a checked pass (FLAGS) the second input's for its rows. */
template <int V, bool FLAGS>
static __device__ __forceinline__ const double *
row_at(const tbs_params &p, const tbs_strip<V> &s, ptrdiff_t row)
{
    if (FLAGS && row >= p.box_lo && row < p.box_hi) {
        return p.box_in + (row - p.box_lo) * p.box_pitch;
    }
    return s.src + row * p.in_pitch;
}

/* Start reading level-0 row `row` into this lane's V cells of a ring
   slot.  GENERAL: the row or some column of the strip lies outside the
   grid, and is read as the mode maps it (constant: cval, written now);
   otherwise the plain addresses. */
template <int V, bool GENERAL, bool FLAGS>
static __device__ __forceinline__ void
read_row(const tbs_params &p, const tbs_strip<V> &s, ptrdiff_t row,
         double *slot)
{
    if (!GENERAL) {
        const double *r = row_at<V, FLAGS>(p, s, row) + s.gx0;
#pragma unroll
        for (int j = 0; j < V; j++) {
            cs_copy_async8(slot + j, r + j, true);
        }
        return;
    }
    const bool row_in = row >= 0 && row < p.ny;
    const ptrdiff_t m = row_in ? row : cs_extend_index(row, p.ny, p.mode);
    const double *r = row_at<V, FLAGS>(p, s, m >= 0 ? m : 0);
#pragma unroll
    for (int j = 0; j < V; j++) {
        const ptrdiff_t g = s.gx0 + j;
        const bool inside = g >= 0 && g < p.nx;
        const ptrdiff_t c = inside ? g : cs_extend_index(g, p.nx, p.mode);
        if (p.mode == CS_MODE_CONSTANT && !(inside && row_in)) {
            slot[j] = p.cval;
        } else {
            cs_copy_async8(slot + j, r + c, true);
        }
    }
}

/* Columns beyond a side edge (XEDGE strips, not wrap), at the level
   about to step: constant mode reads cval there; the others the value the
   column the mode maps them to holds (from the lane holding it), so the
   neighbours below see them as the mode says. */
template <int V>
static __device__ __forceinline__ void
edge_columns(const tbs_params &p, const tbs_strip<V> &s, double (&a)[V])
{
    if (p.mode == CS_MODE_CONSTANT) {
#pragma unroll
        for (int j = 0; j < V; j++) {
            a[j] = s.xsrc[j] >= 0 ? p.cval : a[j];
        }
        return;
    }
    double b[V]; /* every lane's a as it was: the shuffles read it */
#pragma unroll
    for (int j = 0; j < V; j++) {
        const int src = s.xsrc[j] < 0 ? 0 : s.xsrc[j];
        b[j] = a[j];
#pragma unroll
        for (int i = 0; i < V; i++) {
            const double h = __shfl_sync(0xffffffffu, a[i], src / V);
            b[j] = s.xsrc[j] >= 0 && src % V == i ? h : b[j];
        }
    }
#pragma unroll
    for (int j = 0; j < V; j++) {
        a[j] = b[j];
    }
}

/* The arriving row's neighbours along x: e[i] is column gx0 - R + i, so
   e[R .. R + V - 1] are the lane's own and the R on either side come
   from the next lanes by shuffles. */
template <int V, int R>
static __device__ __forceinline__ void
neighbours(const double (&a)[V], double (&e)[V + 2 * R])
{
#pragma unroll
    for (int i = 0; i < V + 2 * R; i++) {
        const int c = i - R; /* column relative to gx0 */
        if (c >= 0 && c < V) {
            e[i] = a[c];
        } else if (c < 0) {
            const int up = (-c + V - 1) / V; /* lanes to the left */
            e[i] = __shfl_up_sync(0xffffffffu, a[c + up * V], up);
        } else {
            const int down = c / V;
            e[i] = __shfl_down_sync(0xffffffffu, a[c - down * V], down);
        }
    }
}

/* An outer product's row filter (its `row` factor along x) at the
   output whose leftmost neighbour e points at. */
template <int R>
static __device__ __forceinline__ double
outer_row(const tbs_params &p, const double *e)
{
    double h = p.row[0] * e[0];
#pragma unroll
    for (int d = 1; d < 2 * R + 1; d++) {
        h = fma(p.row[d], e[d], h);
    }
    return h;
}

/* Kernel row k (0: the row R above the output, 2 R: R below) along x,
   added to acc; e points at the output's leftmost neighbour.  SHAPE
   (cs_cc2d_taps's): a plus's rows other than the centre one hold their
   centre weight alone; an outer product's row k is col[k] times h, the
   one row filter there (outer_row). */
template <int R, int SHAPE>
static __device__ __forceinline__ double
row_filter(const tbs_params &p, int k, const double *e, double h,
           double acc)
{
    constexpr int K = 2 * R + 1;
    if constexpr (SHAPE == CS_CC2D_RANK1) {
        return fma(p.col[k], h, acc);
    } else {
        if (SHAPE == CS_CC2D_PLUS && k != R) {
            return fma(p.w[k * K + R], e[R], acc);
        }
#pragma unroll
        for (int d = 0; d < K; d++) {
            acc = fma(p.w[k * K + d], e[d], acc);
        }
        return acc;
    }
}

/* The levels' partial sums, carried from row to row: P[t][i] is level t's
   output row rin - R + 1 + i (rin the row last arrived there), which has
   the kernel rows above 2 R - 1 - i added. */
template <int V, int R, int T>
struct tbs_levels {
    double P[T][2 * R][V];
};

/* Kernel row k of the arriving row (in e; h: an outer product's row
   filters) added to output row `slot` (-1: the row completed, in a; else
   P[slot]), a run-time index. */
template <int V, int R, int SHAPE>
static __device__ __forceinline__ void
add_to_slot(const tbs_params &p, int k, ptrdiff_t slot, const double *e,
            const double (&h)[V], double (&a)[V], double (&P)[2 * R][V])
{
#pragma unroll
    for (int s = -1; s < 2 * R; s++) {
        if (slot == s) {
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (s < 0) {
                    a[j] = row_filter<R, SHAPE>(p, k, e + j, h[j], a[j]);
                } else {
                    P[s][j] = row_filter<R, SHAPE>(p, k, e + j, h[j],
                                                   P[s][j]);
                }
            }
        }
    }
}

/*
 * Rows beyond the top and bottom edges (nearest, reflect, mirror) add
 * nothing when they arrive; the row the mode maps one to adds, to the
 * output rows inside that read it, the kernel rows they would have met
 * there.  The row d beyond an edge (d = 1 .. R) maps to the row
 * F_SCALE d + F_SHIFT inside it (nearest 0, reflect d - 1, mirror d),
 * and is read by the R - d + 1 rows nearest the edge, all still partial
 * (or complete, in a) when its image arrives.  With the mode a template
 * argument, every slot below is a constant.
 */
template <int V, int R, int SHAPE, int F_SCALE, int F_SHIFT>
static __device__ __forceinline__ void
edge_rows(const tbs_params &p, ptrdiff_t rin, const double *e,
          const double (&h)[V], double (&a)[V], double (&P)[2 * R][V])
{
#pragma unroll
    for (int d = 1; d <= R; d++) {
        const int f = F_SCALE * d + F_SHIFT;
        if (rin == f) { /* top: row -d, read by rows o = 0 .. R - d */
#pragma unroll
            for (int o = 0; o <= R - d; o++) {
                add_to_slot<V, R, SHAPE>(p, R - d - o, o - f + R - 1, e,
                                         h, a, P);
            }
        }
        if (rin == p.ny - 1 - f) { /* bottom: row ny - 1 + d, read by
                                      rows ny - 1 - o, o = 0 .. R - d */
#pragma unroll
            for (int o = 0; o <= R - d; o++) {
                add_to_slot<V, R, SHAPE>(p, R + d + o, R - 1 - o + f, e,
                                         h, a, P);
            }
        }
    }
}

/*
 * One level: row `rin` of level t - 1 arrives in a; on return a holds
 * output row rin - R of level t, complete, and P the partial rows below
 * it.  XEDGE: the strip meets a side edge (not wrap); YEDGE: some level
 * of this iteration meets a row at or beyond the top or bottom edge
 * (not wrap).  Rows beyond the edge read cval in constant mode; in the
 * others see edge_rows.
 */
template <int V, int R, int SHAPE, bool XEDGE, bool YEDGE>
static __device__ __forceinline__ void
level_step(const tbs_params &p, const tbs_strip<V> &s, double (&a)[V],
           double (&P)[2 * R][V], ptrdiff_t rin)
{
    if (YEDGE && (rin < 0 || rin >= p.ny)) {
        if (p.mode == CS_MODE_CONSTANT) {
#pragma unroll
            for (int j = 0; j < V; j++) {
                a[j] = p.cval;
            }
        } else { /* adds nothing: the row it maps to adds for it */
#pragma unroll
            for (int j = 0; j < V; j++) {
                a[j] = P[0][j];
#pragma unroll
                for (int i = 0; i + 1 < 2 * R; i++) {
                    P[i][j] = P[i + 1][j];
                }
                P[2 * R - 1][j] = 0.0;
            }
            return;
        }
    }
    if (XEDGE) {
        edge_columns<V>(p, s, a);
    }
    double e[V + 2 * R];
    neighbours<V, R>(a, e);
    double h[V]; /* an outer product: the one row filter, scaled per row */
#pragma unroll
    for (int j = 0; j < V; j++) {
        h[j] = SHAPE == CS_CC2D_RANK1 ? outer_row<R>(p, e + j) : 0.0;
        a[j] = row_filter<R, SHAPE>(p, 2 * R, e + j, h[j], P[0][j]);
#pragma unroll
        for (int i = 0; i + 1 < 2 * R; i++) {
            P[i][j] = row_filter<R, SHAPE>(p, 2 * R - 1 - i, e + j, h[j],
                                           P[i + 1][j]);
        }
        P[2 * R - 1][j] = SHAPE == CS_CC2D_RANK1
                              ? p.col[0] * h[j] /* a product: no sum yet */
                              : row_filter<R, SHAPE>(p, 0, e + j, h[j], 0.0);
    }
    if (!YEDGE) {
        return;
    }
    switch (p.mode) {
    case CS_MODE_NEAREST:
        edge_rows<V, R, SHAPE, 0, 0>(p, rin, e, h, a, P);
        break;
    case CS_MODE_REFLECT:
        edge_rows<V, R, SHAPE, 1, -1>(p, rin, e, h, a, P);
        break;
    case CS_MODE_MIRROR:
        edge_rows<V, R, SHAPE, 1, 0>(p, rin, e, h, a, P);
        break;
    default: /* constant: read cval above; wrap: no edge */
        break;
    }
}

/* Rows r0 .. r1 - 1 of level 0: each is read TS_RING - 1 rows ahead,
   cascades through the T levels (level t meets row r - t R), and row
   r - R T of level T is stored.  GENERAL_READ, XEDGE, YEDGE: as read_row
   and level_step say, for every row of the range; XREAD: some column of
   the strip lies outside the grid (not stored). */
template <int V, int R, int T, int SHAPE, bool FLAGS, bool XEDGE,
          bool XREAD, bool YEDGE, bool GENERAL_READ, int U>
static __device__ __forceinline__ void
stream_rows(const tbs_params &p, const tbs_strip<V> &s,
            tbs_levels<V, R, T> &L, double *ring, int &slot, ptrdiff_t r0,
            ptrdiff_t r1, ptrdiff_t last, unsigned &bad)
{
    constexpr int SW = 32 * V;
#pragma unroll U
    for (ptrdiff_t r = r0; r < r1; r++) {
        const ptrdiff_t ahead = r + TS_RING - 1;
        if (ahead <= last) {
            read_row<V, GENERAL_READ, FLAGS>(p, s, ahead,
                                      ring + ((slot + TS_RING - 1) % TS_RING)
                                                 * SW);
        }
        cs_copy_commit();
        cs_copy_wait<TS_RING - 1>(); /* row r's copies (this lane's) */
        double a[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            a[j] = ring[slot * SW + j];
        }
        if constexpr (FLAGS) { /* every cell of the grid arrives */
#pragma unroll
            for (int j = 0; j < V; j++) {
                bad |= isfinite(a[j]) ? 0u : 1u;
            }
        }
        slot = (slot + 1) % TS_RING;
#pragma unroll
        for (int t = 0; t < T; t++) {
            level_step<V, R, SHAPE, XEDGE, YEDGE>(p, s, a, L.P[t], r - t * R);
        }
        const ptrdiff_t row = r - R * T; /* completed at level T */
        if (s.stores && row >= s.y0 && row < s.y1) {
            double *out = s.dst + row * p.out_pitch + s.gx0;
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (!XREAD || s.gx0 + j < p.nx) { /* >= 0: a storing lane */
                    out[j] = a[j];
                    if constexpr (FLAGS) {
                        bad |= isfinite(a[j]) ? 0u : 2u;
                    }
                }
            }
        }
    }
}

/* Rows first .. last of level 0: the plain rows [lo, hi) unrolled by U,
   the rows before and after them once each (YEDGE: with the edge tests,
   which wrap does not need). */
template <int V, int R, int T, int SHAPE, bool FLAGS, bool XEDGE,
          bool XREAD, bool YEDGE, int U>
static __device__ __forceinline__ void
stream_ranges(const tbs_params &p, const tbs_strip<V> &s,
              tbs_levels<V, R, T> &L, double *ring, ptrdiff_t first,
              ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t last, unsigned &bad)
{
    int slot = 0;
    stream_rows<V, R, T, SHAPE, FLAGS, XEDGE, XREAD, YEDGE, true, 1>(
        p, s, L, ring, slot, first, lo, last, bad);
    stream_rows<V, R, T, SHAPE, FLAGS, XEDGE, XREAD, false, XREAD, U>(
        p, s, L, ring, slot, lo, hi, last, bad);
    stream_rows<V, R, T, SHAPE, FLAGS, XEDGE, XREAD, YEDGE, true, 1>(
        p, s, L, ring, slot, hi, last + 1, last, bad);
}

/* A warp's whole stream: the rows near the grid's top and bottom edges
   (or read from beyond them) with the edge tests, the rest without.
   XEDGE: as level_step says; XREAD: some column of the strip lies
   outside the grid (its reads are mapped). */
template <int V, int R, int T, int SHAPE, bool FLAGS, bool XEDGE,
          bool XREAD, int U>
static __device__ __forceinline__ void
stream_strip(const tbs_params &p, const tbs_strip<V> &s, double *ring,
             unsigned &bad)
{
    tbs_levels<V, R, T> L;
#pragma unroll
    for (int t = 0; t < T; t++) {
#pragma unroll
        for (int i = 0; i < 2 * R; i++) {
#pragma unroll
            for (int j = 0; j < V; j++) {
                L.P[t][i][j] = 0.0;
            }
        }
    }
    const ptrdiff_t first = s.y0 - R * T, last = s.y1 - 1 + R * T;
#pragma unroll
    for (int i = 0; i < TS_RING - 1; i++) {
        if (first + i <= last) {
            read_row<V, true, FLAGS>(p, s, first + i,
                                     ring + i * (32 * V));
        }
        cs_copy_commit();
    }
    /* plain rows [lo, hi): every level's row inside the grid and off the
       rows the edge tests touch (rin from r - (T - 1) R to r, in R + 1 ..
       ny - R - 2), and the row read ahead inside too */
    ptrdiff_t lo = R * T + 1 > first ? R * T + 1 : first;
    lo = lo < last + 1 ? lo : last + 1;
    ptrdiff_t hi = p.ny - (R + 1 > TS_RING - 1 ? R + 1 : TS_RING - 1);
    hi = hi < last + 1 ? hi : last + 1;
    hi = hi > lo ? hi : lo;
    if (p.mode == CS_MODE_WRAP) { /* every row a real row: no edge tests */
        stream_ranges<V, R, T, SHAPE, FLAGS, XEDGE, XREAD, false, U>(
            p, s, L, ring, first, lo, hi, last, bad);
    } else {
        stream_ranges<V, R, T, SHAPE, FLAGS, XEDGE, XREAD, true, U>(
            p, s, L, ring, first, lo, hi, last, bad);
    }
}

/* A warp's strip, segment and plane.  The first and last strips of every
   segment and plane go first: their columns beyond the side edges cost
   more per level (edge_columns), and started first they end within the
   interior strips' rounds instead of after the last one (H100, depth 8
   on 10240^2: heat2d 986 G stencils/s, box2d9p 679, against 886 and 634
   for the kernel before, which launched the strips in order;
   h100_tb2d_edge_order.md). */
static __device__ __forceinline__ void
item_place(const tbs_params &p, ptrdiff_t item, ptrdiff_t *strip,
           ptrdiff_t *seg, ptrdiff_t *z)
{
    const ptrdiff_t edges = p.strips > 1 ? 2 : 1;
    const ptrdiff_t lead = edges * p.segs * p.nz;
    ptrdiff_t rest;
    if (item < lead) {
        *strip = item % edges == 0 ? 0 : p.strips - 1;
        rest = item / edges;
    } else {
        const ptrdiff_t inner = p.strips - edges;
        *strip = 1 + (item - lead) % inner;
        rest = (item - lead) / inner;
    }
    *seg = rest % p.segs;
    *z = rest / p.segs;
}

/* Rows per turn of the row loop: two for radius 1 (one row's later levels
   overlap the next row's first ones), one for the wider pluses (their
   2 R partial rows per level leave no registers for two: star2d13p at
   depth 3 ran at 283 G stencils/s with one, 278 with two). */
static constexpr __host__ __device__ int
tbs_unroll(int radius)
{
    return radius == 1 ? TS_UNROLL : 1;
}

/* A full-rank 5 x 5 box's weights into registers, in q (the parameters
   the row loop reads, a copy of p).  From the constant bank every
   multiply-add of the row loop takes a load of its own (ULDC.64, 49 of
   the 7 x 7's 214 instructions a row); a shuffle's result is one ptxas
   cannot load again.  H100, 10240^2, depth 3: 318 against 288 G
   stencils/s; the 7 x 7's 49 weights ran slower so (147 against 158:
   h100_tb2d_box_weights.md), and other kernels have few weights.  Every
   lane of the warp calls it. */
template <int R, int SHAPE>
static __device__ __forceinline__ void
weights_in_registers(const tbs_params &p, int lane, tbs_params &q)
{
    if constexpr (SHAPE == CS_CC2D_BOX && R == 2) {
        constexpr int K = 2 * R + 1;
        const double mine = p.w[lane < K * K ? lane : 0];
#pragma unroll
        for (int i = 0; i < K * K; i++) {
            q.w[i] = __shfl_sync(0xffffffffu, mine, i);
        }
    }
}

template <int V, int R, int T, int SHAPE, bool FLAGS>
__global__ void __launch_bounds__(TS_WARPS * 32, TS_MIN_BLOCKS)
tbs_kernel(tbs_params p)
{
    if constexpr (CS_CHECKED_ONLY_IMAGE && !FLAGS) {
        __trap(); /* never launched there (kernels.cuh) */
    } else {
        constexpr int SW = 32 * V;
        constexpr int M = (R * T + V - 1) / V * V; /* margin, whole lanes */
        constexpr int OWN = SW - 2 * M;
        static_assert(OWN > 0, "tb2d: margins wider than the strip");
        extern __shared__ double smem[];
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        const ptrdiff_t item = (ptrdiff_t)blockIdx.x * TS_WARPS + warp;
        if (item >= p.items) {
            return; /* the whole warp: nothing below waits on other
                       warps */
        }
        double *ring = smem + (warp * TS_RING * SW + lane * V);
        /* a split pass's bands first: a warp each per strip and plane */
        const ptrdiff_t per_band = p.strips * p.nz;
        const bool band = item < p.lead_count * per_band;
        ptrdiff_t strip, z;
        tbs_strip<V> s;
        if (band) {
            const ptrdiff_t b = item / per_band, at = item % per_band;
            strip = at % p.strips;
            z = at / p.strips;
            s.y0 = p.lead[b][0];
            s.y1 = p.lead[b][1];
        } else {
            ptrdiff_t seg;
            item_place(p, item - p.lead_count * per_band, &strip, &seg, &z);
            s.y0 = p.y_lo + seg * p.seg_rows;
            s.y1 = s.y0 + p.seg_rows < p.y_hi ? s.y0 + p.seg_rows : p.y_hi;
        }
        const ptrdiff_t ox = cs_tile_origin(strip, OWN, p.nx) - M;
        s.src = p.in + z * p.in_plane;
        s.dst = p.out + z * p.out_plane;
        s.gx0 = ox + lane * V;
        s.stores = lane >= M / V && lane < (SW - M) / V;
        unsigned bad = 0; /* bit 0: an input value, bit 1: a result value
                             is not finite (checked where the flags are
                             given) */
        tbs_params q = p;
        weights_in_registers<R, SHAPE>(p, lane, q);
        if (ox >= 0 && ox + SW <= p.nx) {
            stream_strip<V, R, T, SHAPE, FLAGS, false, false, tbs_unroll(R)>(
                q, s, ring, bad);
        } else if (p.mode == CS_MODE_WRAP) {
            /* columns read mapped, all real */
            stream_strip<V, R, T, SHAPE, FLAGS, false, true, tbs_unroll(R)>(
                q, s, ring, bad);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++) {
                const ptrdiff_t g = s.gx0 + j;
                const ptrdiff_t m = cs_extend_index(g, p.nx, p.mode) - ox;
                s.xsrc[j] = g >= 0 && g < p.nx ? -1
                            : (int)(m < 0 ? 0 : m < SW ? m : SW - 1);
            }
            stream_strip<V, R, T, SHAPE, FLAGS, true, true, tbs_unroll(R)>(
                q, s, ring, bad);
        }
        cs_copy_wait<0>();
        /* every writer writes 1: no ordering needed, and none in the
           common, finite case */
        if ((bad & 1u) && p.in_flag != nullptr) {
            *p.in_flag = 1;
        }
        if ((bad & 2u) && p.out_flag != nullptr) {
            *p.out_flag = 1;
        }
        if (band) {
            /* every lane's stores before the count (a copy engine or a
               peer reads them once it passes) */
            __threadfence_system();
            __syncwarp();
            if (lane == 0) {
                atomicAdd(p.lead_done, 1u);
            }
        }
    }
}

template <int R, int T, int SHAPE, bool FLAGS>
cs_status
tbs_launch(cs_cuda_ctx *ctx, tbs_params *p)
{
    constexpr int V = TS_V;
    constexpr int SW = 32 * V;
    constexpr int M = (R * T + V - 1) / V * V;
    constexpr int threads = TS_WARPS * 32;
    const size_t smem = (size_t)TS_WARPS * TS_RING * SW * sizeof(double);
    int per_sm = 0;
    CS_CUDA_CHECK(ctx,
                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &per_sm, tbs_kernel<V, R, T, SHAPE, FLAGS>, threads,
                      smem),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor (tb2d)");
    const ptrdiff_t resident = (ptrdiff_t)ctx->sms * (per_sm > 0 ? per_sm : 1)
                               * TS_WARPS;
    unsigned grid = 0;
    const cs_status st = cs_tb2d_layout(ctx, p, SW - 2 * M, R * T, resident,
                                        &grid);
    if (st != CS_OK) {
        return st;
    }
    tbs_kernel<V, R, T, SHAPE, FLAGS><<<grid, threads, smem, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "tb2d kernel");
}

#endif
