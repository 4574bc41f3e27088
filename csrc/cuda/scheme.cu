/*
 * scheme.cu -- PDE schemes (csrc/scheme.h) on device arrays:
 * cs_cuda_scheme_apply_device.
 *
 * The planner (csrc/scheme_plan.c, sch_choose_passes) picks one of three
 * kinds of passes: streamed passes of several steps in registers
 * (scheme_stream.cu in 2D, scheme_stream3.cu in 3D), blocked passes of several steps in shared memory
 * (scheme_tb.cu), both driven by run_blocked below, or the one-step
 * passes this file holds, described next.
 *
 * Every stage of every step is one launch of scheme_stage_kernel, which
 * reads the values its updates need as they were when the stage began
 * and writes the stage's targets, one pass over the grid.  A field no
 * update of the stage targets keeps its buffer: nothing is copied.
 *
 * Buffers.  A field's values live in one of the call's buffers: the
 * caller's arrays (an `in` that is no out is read, never written) and up
 * to K + 1 scratch arrays of the engine's cached device memory.  Before
 * each stage the host picks, for every target, a buffer that nothing
 * still needs: not the buffer of a field the stage reads through a
 * stencil (its neighbours are read by other threads), not the buffer of
 * a field the stage leaves alone, and not a buffer a rename keeps.  The
 * buffer of a target that the stage reads only at the point itself may
 * be overwritten in place: each thread reads all of its points' values
 * before it writes any.  An update that is one other field, coefficient
 * 1 and no parameter (a time level's shift, `up <- u`) is a rename: the
 * target takes the source's buffer and no byte moves (the one
 * difference from the sum 0 + 1 * u: a -0.0 stays -0.0).  In the last
 * stage of the last step each sum goes to its field's out where it can,
 * and a rename that would end in the wrong buffer is written by the
 * kernel into the field's out instead (8 bytes a point, where a copy
 * after the run costs 16); whatever still sits elsewhere is copied at
 * the end.  The choice is a function of the buffers' state alone, so
 * the host follows the run without launching (a state repeats within a
 * few steps, which makes long runs cheap to follow) in each of three
 * orders of preference, keeps the order whose run ends with the fewest
 * copies, and learns how many scratch arrays it needs; then it runs it
 * with the launches.  A leapfrog wave whose outs are its ins swapped, or
 * fresh arrays, ends with no copy at any step count.
 *
 * The kernel.  Its parameters (CUTLASS style, built on the host: the
 * buffers, the terms, the nonzero weights with their offsets as element
 * counts and as coordinates) travel in the launch's parameter space
 * (tables of 32 taps and terms, 2.3 KB, or of 512 taps and 128 terms,
 * 19 KB; a stage with more is CS_ERR_UNSUPPORTED).  A block of 256 threads takes a tile: 32 columns x 32
 * rows of a plane (2D), 32 x 8 x 4 planes (3D, walking z), 1024 points
 * (1D); each thread computes 4 points, one tap at a time for the 4
 * together, so that 4 loads are in flight per tap.  Neighbours come
 * through the L1 cache (a shared-memory tile would move no fewer bytes
 * from memory for one step; it is the place to start for several steps
 * per pass).  A tile whose reach lies inside the grid takes the loads
 * without a test; the tiles at the edges map every tap with
 * cs_extend_index (constant mode reads cval), for any radius.  The
 * evaluation of a stage at a thread's points (sch_eval) reads through a
 * policy (sch_inside, sch_edge): a tile in shared memory is one more
 * policy, for temporal blocking later.
 */
#include "engine.cuh"
#include "../scheme.h"
#include "../scheme_plan.h"
#include "scheme_stream.cuh"
#include "scheme_tb.cuh"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(CS_CUDA_EMULATION)
#define SCH_GRID_CONSTANT
#else
/* the kernel takes its parameters' address: read them where they are */
#define SCH_GRID_CONSTANT __grid_constant__
#endif

#define SCH_THREADS 256  /* threads of a block */
#define SCH_ROWS 4       /* points of a thread, along the walk axis */
#define SCH_WARP_X 32    /* threads along x (2D and 3D tiles) */

/* the two sizes of table a launch carries: taps and terms of a stage */
#define SCH_SMALL_TAPS 32
#define SCH_SMALL_TERMS 32

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

template <int TAPS, int TERMS>
struct sch_params {
    /* the grid: extents z, y, x; element strides of a row and a plane */
    ptrdiff_t n[3];
    ptrdiff_t sy, sz;
    /* tiles: box[a] points along axis a; a thread's first point is at
       (0, (t >> tpx_log) * ay, t & (tpx - 1)) in its tile, point i at
       i * walk[a] beyond it (walk_lin elements) */
    ptrdiff_t tiles[3];
    int box[3];
    int tpx_log;
    int ay;
    int walk[3];
    ptrdiff_t walk_lin;
    /* the stage */
    int r[3];         /* the largest radius of its stencils, per axis */
    int mode;
    double cval;
    const double *src[CS_SCHEME_MAX_FIELDS]; /* stencil fields, by field */
    const double *pw[CS_SCHEME_MAX_FIELDS];  /* pointwise slots */
    int npw;
    const double *par[CS_SCHEME_MAX_PARAMS];
    double *dst[CS_SCHEME_MAX_FIELDS];       /* by output */
    int nout;
    sch_out out[CS_SCHEME_MAX_FIELDS];
    sch_term term[TERMS];
    double tap_w[TAPS];        /* nonzero weights */
    ptrdiff_t tap_off[TAPS];   /* dz * sz + dy * sy + dx */
    int tap_d[TAPS][3];        /* dz, dy, dx */
};

/* Reads and writes of a tile that lies, with its reach, inside the
   grid: no test. */
template <class P>
struct sch_inside {
    const P &p;
    ptrdiff_t base; /* the thread's first point */

    __device__ __forceinline__ bool
    active(int) const
    {
        return true;
    }
    /* field f (a buffer no thread writes in this launch) at tap q */
    __device__ __forceinline__ double
    tap(const double *f, int i, int q) const
    {
        return __ldg(f + base + i * p.walk_lin + p.tap_off[q]);
    }
    /* a buffer at the point itself (it may be written afterwards) */
    __device__ __forceinline__ double
    at(const double *f, int i) const
    {
        return f[base + i * p.walk_lin];
    }
    __device__ __forceinline__ double
    param(const double *f, int i) const
    {
        return __ldg(f + base + i * p.walk_lin);
    }
    __device__ __forceinline__ void
    store(double *f, int i, double v) const
    {
        f[base + i * p.walk_lin] = v;
    }
};

/* Reads and writes of one point of a tile at an edge (inside the grid):
   taps outside the grid map through the boundary mode. */
template <class P>
struct sch_edge {
    const P &p;
    ptrdiff_t c[3]; /* the point */

    __device__ __forceinline__ bool
    active(int) const
    {
        return true;
    }
    __device__ __forceinline__ ptrdiff_t
    index() const
    {
        return c[0] * p.sz + c[1] * p.sy + c[2];
    }
    __device__ __forceinline__ double
    tap(const double *f, int, int q) const
    {
        ptrdiff_t at[3];
        bool inside = true;
        for (int a = 0; a < 3; a++) {
            at[a] = c[a] + p.tap_d[q][a];
            inside = inside && at[a] >= 0 && at[a] < p.n[a];
        }
        if (!inside) {
            if (p.mode == CS_MODE_CONSTANT) {
                return p.cval;
            }
            for (int a = 0; a < 3; a++) {
                at[a] = cs_extend_index(at[a], p.n[a], (cs_mode)p.mode);
            }
        }
        return __ldg(f + at[0] * p.sz + at[1] * p.sy + at[2]);
    }
    __device__ __forceinline__ double
    at(const double *f, int) const
    {
        return f[index()];
    }
    __device__ __forceinline__ double
    param(const double *f, int) const
    {
        return __ldg(f + index());
    }
    __device__ __forceinline__ void
    store(double *f, int, double v) const
    {
        f[index()] = v;
    }
};

/*
 * The stage at R points of a thread, read and written through `s`:
 * first every pointwise value (so that an output may overwrite a buffer
 * read at the point), then each output, its terms in order:
 * acc = 0; acc += (coef * param) * value, a stencil's value the sum of
 * its taps in order, a monomial's the product of its factors in slot
 * order (power 0: no factor; the empty product is 1).
 */
template <int NP, int R, class P, class S>
static __device__ __forceinline__ void
sch_eval(const P &p, const S &s)
{
    double x[NP][R];
#pragma unroll
    for (int j = 0; j < NP; j++) {
#pragma unroll
        for (int i = 0; i < R; i++) {
            x[j][i] = j < p.npw && s.active(i) ? s.at(p.pw[j], i) : 0.0;
        }
    }
    for (int o = 0; o < p.nout; o++) {
        const sch_out out = p.out[o];
        double acc[R];
#pragma unroll
        for (int i = 0; i < R; i++) {
            acc[i] = 0.0;
        }
        if (out.copy >= 0) {
#pragma unroll
            for (int j = 0; j < NP; j++) {
#pragma unroll
                for (int i = 0; i < R; i++) {
                    acc[i] = j == out.copy ? x[j][i] : acc[i];
                }
            }
        }
        const int end = out.first_term + out.term_count;
#pragma unroll 1
        for (int t = out.first_term; t < end; t++) {
            const sch_term &term = p.term[t];
            double v[R];
            if (term.kind == CS_TERM_STENCIL) {
                const double *f = p.src[term.field];
#pragma unroll
                for (int i = 0; i < R; i++) {
                    v[i] = 0.0;
                }
                const int qend = term.tap0 + term.ntaps;
                /* the points' loads of one tap in flight together: more
                   loads a thread (two taps at a time, 8 points) cost the
                   registers that keep warps resident and ran slower
                   (h100_schemes.md) */
#pragma unroll 1
                for (int q = term.tap0; q < qend; q++) {
                    const double w = p.tap_w[q];
#pragma unroll
                    for (int i = 0; i < R; i++) {
                        if (s.active(i)) {
                            v[i] += w * s.tap(f, i, q);
                        }
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < R; i++) {
                    v[i] = 1.0;
                }
#pragma unroll
                for (int j = 0; j < NP; j++) {
                    const int e = (int)((term.pow >> (4 * j)) & 15u);
#pragma unroll 1
                    for (int k = 0; k < e; k++) {
#pragma unroll
                        for (int i = 0; i < R; i++) {
                            v[i] *= x[j][i];
                        }
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < R; i++) {
                double c = term.coef;
                if (term.param >= 0 && s.active(i)) {
                    c *= s.param(p.par[term.param], i);
                }
                acc[i] += c * v[i];
            }
        }
#pragma unroll
        for (int i = 0; i < R; i++) {
            if (s.active(i)) {
                s.store(p.dst[o], i, acc[i]);
            }
        }
    }
}

/* Blocks resident per SM that the registers must allow: a memory-bound
   pass needs many warps in flight (32 a SM, 64 registers, for up to 2
   pointwise slots); the values of 8 slots need twice the registers of
   2. */
static constexpr int
sch_min_blocks(int np)
{
    return np <= 2 ? 4 : np <= 4 ? 3 : 2;
}

/* One stage over the grid, R points a thread: blocks walk the tiles
   (grid.y and grid.z stride over theirs when the grid has more than a
   launch holds). */
template <int NP, int R, int TAPS, int TERMS>
__global__ void __launch_bounds__(SCH_THREADS, sch_min_blocks(NP))
scheme_stage_kernel(const SCH_GRID_CONSTANT sch_params<TAPS, TERMS> p)
{
    typedef sch_params<TAPS, TERMS> P;
    const int t = (int)threadIdx.x;
    const int tx = t & ((1 << p.tpx_log) - 1);
    const int ty = t >> p.tpx_log;
    const ptrdiff_t lx = (ptrdiff_t)blockIdx.x * p.box[2];
    const bool inside_x = lx >= p.r[2] && lx + p.box[2] + p.r[2] <= p.n[2];
    for (ptrdiff_t bz = blockIdx.z; bz < p.tiles[0]; bz += gridDim.z) {
        const ptrdiff_t lz = bz * p.box[0];
        const bool inside_z =
            lz >= p.r[0] && lz + p.box[0] + p.r[0] <= p.n[0];
        for (ptrdiff_t by = blockIdx.y; by < p.tiles[1]; by += gridDim.y) {
            const ptrdiff_t ly = by * p.box[1];
            const ptrdiff_t c[3] = {lz, ly + (ptrdiff_t)ty * p.ay, lx + tx};
            if (inside_x && inside_z && ly >= p.r[1]
                && ly + p.box[1] + p.r[1] <= p.n[1]) {
                const sch_inside<P> s = {p, c[0] * p.sz + c[1] * p.sy + c[2]};
                sch_eval<NP, R>(p, s);
                continue;
            }
            /* at an edge: point by point, which keeps the registers of
               the mapped taps few (a sliver of the tiles of a large
               grid) */
#pragma unroll 1
            for (int i = 0; i < R; i++) {
                const sch_edge<P> s = {p, {c[0] + i * p.walk[0],
                                           c[1] + i * p.walk[1],
                                           c[2] + i * p.walk[2]}};
                if (s.c[0] < p.n[0] && s.c[1] < p.n[1] && s.c[2] < p.n[2]) {
                    sch_eval<NP, 1>(p, s);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * the plan of a stage (host): its terms and taps, built once
 * --------------------------------------------------------------------- */


/* The geometry every launch of a call shares. */
typedef struct sch_geom {
    ptrdiff_t n[3], sy, sz;
    ptrdiff_t tiles[3];
    int box[3];
    int tpx_log, ay;
    int walk[3];
    ptrdiff_t walk_lin;
} sch_geom;

/*
 * Tiles of the grid: planes walked along z when there are several, else
 * rows walked along y, else one line; SCH_ROWS points a thread.  For
 * measuring, CONVSTENCIL_SCHEME_TILE picks another layout:
 * "interleaved" (a thread's rows 8 apart in 2D), "wide" (64 threads
 * along x, 4 rows of them), "planes" (3D grids as planes, each walked
 * along y); anything else is CS_ERR_INVALID.
 */
static cs_status
geom_make(cs_cuda_ctx *ctx, const ptrdiff_t shape[3], sch_geom *g)
{
    memset(g, 0, sizeof(*g));
    for (int a = 0; a < 3; a++) {
        g->n[a] = shape[a];
    }
    g->sy = shape[2];
    g->sz = shape[1] * shape[2];
    const char *env = getenv("CONVSTENCIL_SCHEME_TILE");
    const char *tile = env != NULL ? env : "";
    const int wide = strcmp(tile, "wide") == 0;
    if (!wide && strcmp(tile, "") != 0 && strcmp(tile, "interleaved") != 0
        && strcmp(tile, "planes") != 0) {
        cs_cuda_message(ctx, "CONVSTENCIL_SCHEME_TILE must be interleaved, "
                             "wide or planes, not \"%s\"",
                        tile);
        return CS_ERR_INVALID;
    }
    const int R = SCH_ROWS;
    const int tpx = wide ? 2 * SCH_WARP_X : SCH_WARP_X;
    const int rows = SCH_THREADS / tpx;
    g->tpx_log = wide ? 6 : 5;
    if (shape[0] > 1 && strcmp(tile, "planes") != 0) {
        g->box[0] = R;
        g->box[1] = rows;
        g->box[2] = tpx;
        g->ay = 1;
        g->walk[0] = 1;
        g->walk_lin = g->sz;
    } else if (shape[1] > 1 || shape[0] > 1) {
        const int interleaved = strcmp(tile, "interleaved") == 0;
        g->box[0] = 1;
        g->box[1] = rows * R;
        g->box[2] = tpx;
        g->ay = interleaved ? 1 : R;
        g->walk[1] = interleaved ? rows : 1;
        g->walk_lin = g->walk[1] * g->sy;
    } else {
        g->box[0] = 1;
        g->box[1] = 1;
        g->box[2] = SCH_THREADS * R;
        g->tpx_log = 8;
        g->ay = 0;
        g->walk[2] = SCH_THREADS;
        g->walk_lin = SCH_THREADS;
    }
    for (int a = 0; a < 3; a++) {
        g->tiles[a] = CEIL_DIV(shape[a], (ptrdiff_t)g->box[a]);
    }
    if (g->tiles[2] > INT32_MAX) {
        cs_cuda_message(ctx, "a grid of %td points along x is too long for "
                             "the GPU scheme engine",
                        shape[2]);
        return CS_ERR_UNSUPPORTED;
    }
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * launcher
 * --------------------------------------------------------------------- */

/* The parameters of stage sp's launch, as assigned by `a`. */
template <int TAPS, int TERMS>
static void
fill_params(const sch_geom *g, const sch_stage_plan *sp,
            const sch_assign *a, const sch_buffers *B,
            const double *const *params, int nparams, cs_mode mode,
            double cval, sch_params<TAPS, TERMS> *p)
{
    memset(p, 0, sizeof(*p));
    for (int k = 0; k < 3; k++) {
        p->n[k] = g->n[k];
        p->tiles[k] = g->tiles[k];
        p->box[k] = g->box[k];
        p->walk[k] = g->walk[k];
        p->r[k] = sp->r[k];
    }
    p->sy = g->sy;
    p->sz = g->sz;
    p->tpx_log = g->tpx_log;
    p->ay = g->ay;
    p->walk_lin = g->walk_lin;
    p->mode = (int)mode;
    p->cval = cval;
    for (int f = 0; f < B->fields; f++) {
        if ((sp->stencil_read >> f) & 1u) {
            p->src[f] = B->ptr[a->from[f]];
        }
    }
    int pw_field[CS_SCHEME_MAX_FIELDS];
    int npw = sp->npw;
    memcpy(pw_field, sp->pw_field, sizeof(pw_field));
    for (int q = 0; q < nparams; q++) {
        p->par[q] = params[q];
    }
    for (int j = 0; j < sp->count; j++) {
        if (a->how[j] == SCH_RENAME) {
            continue;
        }
        sch_out out = sp->out[j];
        if (a->how[j] == SCH_COPY) {
            out.first_term = 0;
            out.term_count = 0;
            out.copy = sch_pw_slot(&npw, pw_field, sp->rename[j]);
        }
        p->out[p->nout] = out;
        p->dst[p->nout++] = B->ptr[a->dst[j]];
    }
    p->npw = npw;
    for (int j = 0; j < npw; j++) {
        p->pw[j] = B->ptr[a->from[pw_field[j]]];
    }
    memcpy(p->term, sp->terms, (size_t)sp->nterms * sizeof(sch_term));
    memcpy(p->tap_w, sp->tap_w, (size_t)sp->ntaps * sizeof(double));
    memcpy(p->tap_off, sp->tap_off, (size_t)sp->ntaps * sizeof(ptrdiff_t));
    memcpy(p->tap_d, sp->tap_d, (size_t)sp->ntaps * sizeof(int[3]));
}

/* Launch stage sp with the table size TAPS x TERMS. */
template <int TAPS, int TERMS>
static cs_status
launch_stage(cs_cuda_ctx *ctx, const sch_geom *g, const sch_stage_plan *sp,
             const sch_assign *a, const sch_buffers *B,
             const double *const *params, int nparams, cs_mode mode,
             double cval)
{
    sch_params<TAPS, TERMS> *p =
        (sch_params<TAPS, TERMS> *)malloc(sizeof(sch_params<TAPS, TERMS>));
    if (p == NULL) {
        cs_cuda_message(ctx, "out of host memory (scheme parameters)");
        return CS_ERR_NOMEM;
    }
    fill_params(g, sp, a, B, params, nparams, mode, cval, p);
    const dim3 grid((unsigned)g->tiles[2],
                    (unsigned)(g->tiles[1] < SCH_GRID_YZ ? g->tiles[1]
                                                         : SCH_GRID_YZ),
                    (unsigned)(g->tiles[0] < SCH_GRID_YZ ? g->tiles[0]
                                                         : SCH_GRID_YZ));
    const int npw = p->npw;
    if (npw <= 1) {
        scheme_stage_kernel<1, SCH_ROWS, TAPS, TERMS><<<grid, SCH_THREADS, 0, ctx->stream>>>(*p);
    } else if (npw <= 2) {
        scheme_stage_kernel<2, SCH_ROWS, TAPS, TERMS><<<grid, SCH_THREADS, 0, ctx->stream>>>(*p);
    } else if (npw <= 4) {
        scheme_stage_kernel<4, SCH_ROWS, TAPS, TERMS><<<grid, SCH_THREADS, 0, ctx->stream>>>(*p);
    } else {
        scheme_stage_kernel<8, SCH_ROWS, TAPS, TERMS><<<grid, SCH_THREADS, 0, ctx->stream>>>(*p);
    }
    free(p);
    return cs_cuda_check_launch(ctx, "scheme_stage_kernel");
}

/* ------------------------------------------------------------------------
 * the call
 * --------------------------------------------------------------------- */

/* What one call holds; released by run_release on every path. */
typedef struct sch_run {
    cs_apply_state apply;  /* the lane and the block of scratch arrays */
    sch_stage_plan *plans;
    int stages;
    int *tap0;
    sch_passes passes;     /* the kind of passes and their depth */
} sch_run;

static void
run_release(cs_cuda_ctx *ctx, sch_run *run)
{
    cs_engine_release(ctx, &run->apply);
    for (int g = 0; g < run->stages && run->plans != NULL; g++) {
        sch_stage_plan_free(&run->plans[g]);
    }
    free(run->plans);
    free(run->tap0);
    memset(run, 0, sizeof(*run));
}

/* [p, p + bytes) and [q, q + bytes): the same array, or apart? */
static int
same_or_apart(const double *p, const double *q, size_t bytes)
{
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a == b || a + bytes <= b || b + bytes <= a;
}

static int
apart(const double *p, const double *q, size_t bytes)
{
    return p != q && same_or_apart(p, q, bytes);
}

/* The call's arguments, before anything is asked of the device. */
static cs_status
check_call(cs_cuda_ctx *ctx, const cs_scheme *s, double *const *in,
           double *const *out, const double *const *params,
           const ptrdiff_t shape[3], cs_mode mode, long steps)
{
    char msg[256] = "";
    if (cs_scheme_check(s, msg, sizeof(msg)) != CS_OK) {
        cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: %s", msg);
        return CS_ERR_INVALID;
    }
    if (in == NULL || out == NULL || shape == NULL
        || (s->param_count > 0 && params == NULL) || steps < 0
        || (int)mode < 0 || (int)mode >= CS_MODE_COUNT) {
        cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: NULL arrays, "
                             "steps < 0 or an unknown mode");
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < 3; a++) {
        if (shape[a] < 0) {
            cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: negative "
                                 "extent");
            return CS_ERR_INVALID;
        }
    }
    if (shape[1] > 0 && shape[2] > 0
        && (shape[1] > PTRDIFF_MAX / 8 / shape[2]
            || (shape[0] > 0
                && shape[0] > PTRDIFF_MAX / 8 / (shape[1] * shape[2])))) {
        cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: grid too large");
        return CS_ERR_INVALID;
    }
    for (int k = 0; k < s->stencil_count; k++) {
        for (int a = 0; a < 3; a++) {
            if (s->stencils[k].size[a] > INT32_MAX / 2) {
                cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: stencil "
                                     "%d is too large",
                                k);
                return CS_ERR_UNSUPPORTED;
            }
        }
    }
    const size_t bytes =
        (size_t)(shape[0] * shape[1] * shape[2]) * sizeof(double);
    if (bytes == 0) {
        return CS_OK;
    }
    const int K = s->field_count;
    for (int f = 0; f < K; f++) {
        if (in[f] == NULL || out[f] == NULL) {
            cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: field %d has "
                                 "a NULL array",
                            f);
            return CS_ERR_INVALID;
        }
        for (int g = 0; g < K; g++) {
            /* outs apart; an out is an in or apart from it */
            if ((g < f && !apart(out[f], out[g], bytes))
                || !same_or_apart(out[f], in[g], bytes)) {
                cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: out %d "
                                     "overlaps %s %d",
                                f, g < f && !apart(out[f], out[g], bytes)
                                       ? "out" : "in",
                                g);
                return CS_ERR_INVALID;
            }
        }
        for (int q = 0; q < s->param_count; q++) {
            if (params[q] == NULL || !apart(params[q], out[f], bytes)) {
                cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: "
                                     "parameter %d is NULL or overlaps out "
                                     "%d",
                                q, f);
                return CS_ERR_INVALID;
            }
        }
    }
    return CS_OK;
}

/* Is p memory of the current device? */
static cs_status
check_device_array(cs_cuda_ctx *ctx, const void *p, const char *what,
                   int index)
{
    cudaPointerAttributes attr;
    memset(&attr, 0, sizeof(attr));
    const cudaError_t e = cudaPointerGetAttributes(&attr, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cs_cuda_message(ctx, "%s %d is not memory CUDA knows (%s)", what,
                        index, cudaGetErrorString(e));
        return CS_ERR_INVALID;
    }
    if ((attr.type != cudaMemoryTypeDevice
         && attr.type != cudaMemoryTypeManaged)
        || attr.device != ctx->device) {
        cs_cuda_message(ctx, "%s %d is not memory of the current CUDA "
                             "device %d (memory type %d, device %d)",
                        what, index, ctx->device, (int)attr.type,
                        attr.device);
        return CS_ERR_INVALID;
    }
    return CS_OK;
}

/* The buffers and their state before the first step. */
static void
buffers_make(const cs_scheme *s, double *const *in, double *const *out,
             sch_buffers *B, sch_state *init)
{
    memset(B, 0, sizeof(*B));
    memset(init, 0, sizeof(*init));
    B->fields = s->field_count;
    for (int f = 0; f < s->field_count; f++) {
        B->out[f] = sch_buffer_of(B, out[f], 1);
    }
    for (int f = 0; f < s->field_count; f++) {
        init->cur[f] = sch_buffer_of(B, in[f], 0);
    }
    for (int k = 0; k < SCH_MAX_SCRATCH; k++) {
        B->writable[B->count + k] = 1;
    }
}

static cs_status
launch(cs_cuda_ctx *ctx, const sch_geom *g, const sch_stage_plan *sp,
       const sch_assign *a, const sch_buffers *B, const cs_scheme *s,
       const double *const *params, cs_mode mode, double cval)
{
    int writes = 0;
    for (int j = 0; j < sp->count; j++) {
        writes += a->how[j] != SCH_RENAME;
    }
    if (writes == 0) {
        return CS_OK; /* renames only: nothing moves */
    }
    if (sp->nterms <= SCH_SMALL_TERMS && sp->ntaps <= SCH_SMALL_TAPS) {
        return launch_stage<SCH_SMALL_TAPS, SCH_SMALL_TERMS>(
            ctx, g, sp, a, B, params, s->param_count, mode, cval);
    }
    return launch_stage<SCH_LARGE_TAPS, SCH_LARGE_TERMS>(
        ctx, g, sp, a, B, params, s->param_count, mode, cval);
}

/* Where the call waits (timed: on the lane's own stream), the device
   time of its steps into info. */
static cs_status
finish_timing(cs_cuda_ctx *ctx, sch_run *run, int timed, cs_run_info *info)
{
    if (!timed) {
        return CS_OK;
    }
    CS_CUDA_CHECK(ctx, cudaEventRecord(run->apply.lane->loop_stop,
                                       ctx->stream),
                  "cudaEventRecord (scheme end)");
    CS_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream),
                  "cudaStreamSynchronize (end of the scheme)");
    float ms = 0.0f;
    CS_CUDA_CHECK(ctx,
                  cudaEventElapsedTime(&ms, run->apply.lane->loop_start,
                                       run->apply.lane->loop_stop),
                  "cudaEventElapsedTime (scheme)");
    if (info != NULL) {
        info->device_seconds = 1e-3 * (double)ms;
    }
    return CS_OK;
}

/* Can the blocked passes end in these outs?  Not where an out is the
   in of another field that no stage updates: the final copies would
   clobber that in before it is copied. */
static int
blocked_outs_fit(const cs_scheme *s, const sch_stage_plan *plans,
                 double *const *in, double *const *out)
{
    unsigned updated = 0;
    for (int g = 0; g < s->stage_count; g++) {
        updated |= plans[g].targets;
    }
    for (int g = 0; g < s->field_count; g++) {
        for (int f = 0; f < s->field_count && !((updated >> g) & 1u); f++) {
            if (f != g && out[f] == in[g]) {
                return 0;
            }
        }
    }
    return 1;
}

/* Where a field's values are between blocked passes: the caller's
   array, or scratch set 0 or 1. */
typedef struct tb_place {
    int set; /* -1: the caller's array `ptr` */
    double *ptr;
} tb_place;

/*
 * The destination of each updated field in pass i of `passes`: its out
 * in the passes whose parity ends the run there, when no field is read
 * from it in the pass; else the scratch set of the pass's parity (never
 * the one the pass reads).  *sets gets the scratch sets used.
 */
static void
tb_destinations(int K, unsigned updated, double *const *out,
                const tb_place *cur, long i, long passes, tb_place *dst,
                int *sets)
{
    for (int f = 0; f < K; f++) {
        dst[f].set = -1;
        dst[f].ptr = NULL;
        if (!((updated >> f) & 1u)) {
            continue;
        }
        int busy = 0;
        for (int g = 0; g < K; g++) {
            busy |= cur[g].set < 0 && cur[g].ptr == out[f];
        }
        if ((passes - 1 - i) % 2 == 0 && !busy) {
            dst[f].ptr = out[f];
        } else {
            dst[f].set = (int)(i % 2);
            *sets |= 1 << dst[f].set;
        }
    }
}

/* The blocked passes of a call, then the copies into the outs. */
static cs_status
run_blocked(cs_cuda_ctx *ctx, sch_run *run, const cs_scheme *s,
            double *const *in, double *const *out,
            const double *const *params, const ptrdiff_t shape[3],
            cs_mode mode, double cval, long steps, uintptr_t stream,
            cs_run_info *info, const sch_passes *plan)
{
    const sch_tb_schedule *sc = &plan->sc;
    const int depth = plan->depth;
    const int streamed = plan->kind == SCH_PASSES_STREAMED;
    const int K = s->field_count;
    unsigned updated = 0;
    for (int g = 0; g < s->stage_count; g++) {
        updated |= run->plans[g].targets;
    }
    const long passes = CEIL_DIV(steps, (long)depth);
    tb_place cur[CS_SCHEME_MAX_FIELDS], dst[CS_SCHEME_MAX_FIELDS];
    int sets = 0;
    for (int f = 0; f < K; f++) {
        cur[f] = (tb_place){-1, in[f]};
    }
    for (long i = 0; i < passes; i++) { /* which scratch sets, first */
        tb_destinations(K, updated, out, cur, i, passes, dst, &sets);
        for (int f = 0; f < K; f++) {
            cur[f] = (updated >> f) & 1u ? dst[f] : cur[f];
        }
    }
    const cs_cuda_streams streams = {{stream == 0 ? (uintptr_t)1 : 0, 0},
                                     stream};
    int timed = 1;
    CS_TRY(cs_engine_begin(ctx, &run->apply, &streams, &timed));
    const size_t count = (size_t)(shape[0] * shape[1] * shape[2]);
    const size_t stride = CEIL_DIV(count * sizeof(double), (size_t)256) * 256;
    double *scratch[2] = {NULL, NULL};
    if (sets != 0) {
        const size_t nsets = (size_t)__builtin_popcount((unsigned)sets);
        CS_TRY(cs_block_take(ctx, nsets * (size_t)K * stride,
                             "a scheme's scratch fields", &run->apply.block));
        if (ctx->poison_memory) {
            CS_CUDA_CHECK(ctx,
                          cudaMemsetAsync(run->apply.block->ptr, 0xff,
                                          nsets * (size_t)K * stride,
                                          ctx->stream),
                          "cudaMemsetAsync (poison device memory)");
        }
        char *base = run->apply.block->ptr;
        for (int k = 0; k < 2; k++) {
            if ((sets >> k) & 1) {
                scratch[k] = (double *)base;
                base += (size_t)K * stride;
            }
        }
    }
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaEventRecord(run->apply.lane->loop_start,
                                           ctx->stream),
                      "cudaEventRecord (scheme start)");
    }
    const sch_tb_call call = {run->plans, s->stage_count, K, s->param_count,
                              params, {shape[1], shape[2]}, shape[0], mode,
                              cval};
    for (int f = 0; f < K; f++) {
        cur[f] = (tb_place){-1, in[f]};
    }
    for (long i = 0; i < passes; i++) {
        CS_TRY(cs_cuda_check_interrupt(ctx, i * depth));
        int unused = 0;
        tb_destinations(K, updated, out, cur, i, passes, dst, &unused);
        const double *src_ptr[CS_SCHEME_MAX_FIELDS];
        double *dst_ptr[CS_SCHEME_MAX_FIELDS];
        for (int f = 0; f < K; f++) {
            for (int pass_end = 0; pass_end < 2; pass_end++) {
                tb_place *pl = pass_end ? &dst[f] : &cur[f];
                if (pl->set >= 0) {
                    pl->ptr = (double *)((char *)scratch[pl->set]
                                         + (size_t)f * stride);
                }
            }
            src_ptr[f] = cur[f].ptr;
            dst_ptr[f] = (updated >> f) & 1u ? dst[f].ptr : NULL;
        }
        const long left = steps - i * depth;
        const int n = (int)(left < depth ? left : depth);
        if (!streamed) {
            CS_TRY(sch_tb_pass(ctx, &call, sc, src_ptr, dst_ptr, n));
        } else if (plan->stream.ndim == 3) {
            CS_TRY(sch_stream3_pass(ctx, &call, &plan->stream, src_ptr,
                                    dst_ptr, n));
        } else {
            CS_TRY(sch_stream_pass(ctx, &call, &plan->stream, src_ptr,
                                   dst_ptr, n));
        }
        for (int f = 0; f < K; f++) {
            cur[f] = (updated >> f) & 1u ? dst[f] : cur[f];
        }
    }
    /* fields no stage updates first: their ins are no other field's out
       (blocked_outs_fit), and the updated fields' values are apart from
       them */
    for (int pass_updated = 0; pass_updated < 2; pass_updated++) {
        for (int f = 0; f < K; f++) {
            if ((int)((updated >> f) & 1u) != pass_updated
                || cur[f].ptr == out[f]) {
                continue;
            }
            CS_CUDA_CHECK(ctx,
                          cudaMemcpyAsync(out[f], cur[f].ptr,
                                          count * sizeof(double),
                                          cudaMemcpyDeviceToDevice,
                                          ctx->stream),
                          "cudaMemcpyAsync (a field into its out)");
        }
    }
    if (info != NULL) {
        info->path = streamed ? "scheme-streamed" : "scheme-blocked";
        info->fused_depth = depth;
        info->fused_passes = passes;
        info->unfused_steps = 0;
    }
    return finish_timing(ctx, run, timed, info);
}

/* Plan, take a lane and the scratch arrays, run the steps, copy what is
   not in its out. */
static cs_status
run_scheme(cs_cuda_ctx *ctx, sch_run *run, const cs_scheme *s,
           double *const *in, double *const *out,
           const double *const *params, const ptrdiff_t shape[3],
           cs_mode mode, double cval, long steps, uintptr_t stream,
           cs_run_info *info)
{
    sch_geom g;
    CS_TRY(geom_make(ctx, shape, &g));
    run->plans = (sch_stage_plan *)calloc((size_t)s->stage_count,
                                          sizeof(sch_stage_plan));
    run->tap0 = (int *)malloc((size_t)(s->stencil_count > 0
                                           ? s->stencil_count : 1)
                              * sizeof(int));
    if (run->plans == NULL || run->tap0 == NULL) {
        cs_cuda_message(ctx, "out of host memory (a scheme's plan)");
        return CS_ERR_NOMEM;
    }
    const sch_grid grid = {{g.n[0], g.n[1], g.n[2]}, g.sy, g.sz};
    char msg[256] = "";
    for (int gi = 0; gi < s->stage_count; gi++) {
        run->stages = gi + 1;
        const cs_status made = sch_stage_plan_make(
            s, gi, &grid, run->tap0, &run->plans[gi], msg, sizeof(msg));
        if (made != CS_OK) {
            cs_cuda_message(ctx, "%s", msg);
            return made;
        }
    }
    sch_passes *plan = &run->passes;
    /* streamed passes run on sm_90 images (kernels.cuh) */
    const cs_status chose = sch_choose_passes(
        s, run->plans, shape, mode, steps, ctx->smem_optin,
        !cs_cuda_checked_only(ctx), getenv("CONVSTENCIL_SCHEME_BLOCK"), plan,
        msg, sizeof(msg));
    if (chose != CS_OK) {
        cs_cuda_message(ctx, "%s", msg);
        return chose;
    }
    if (plan->kind != SCH_PASSES_ONESTEP
        && blocked_outs_fit(s, run->plans, in, out)) {
        return run_blocked(ctx, run, s, in, out, params, shape, mode, cval,
                           steps, stream, info, plan);
    }
    sch_buffers B;
    sch_state st;
    buffers_make(s, in, out, &B, &st);
    int scratch = 0;
    const int order =
        sch_choose_order(&B, &st, run->plans, s->stage_count, steps, &scratch);
    if (order < 0) {
        cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: no buffer left "
                             "for a stage (an engine error)");
        return CS_ERR_INVALID;
    }

    /* the stream: the caller's, or the lane's after the legacy default
       stream's work so far (where CuPy and PyTorch queue by default) */
    const cs_cuda_streams streams = {{stream == 0 ? (uintptr_t)1 : 0, 0},
                                     stream};
    int timed = 1;
    CS_TRY(cs_engine_begin(ctx, &run->apply, &streams, &timed));
    const size_t count = (size_t)(shape[0] * shape[1] * shape[2]);
    const size_t stride = CEIL_DIV(count * sizeof(double), (size_t)256) * 256;
    if (scratch > 0) {
        CS_TRY(cs_block_take(ctx, (size_t)scratch * stride,
                             "a scheme's scratch fields", &run->apply.block));
        if (ctx->poison_memory) {
            CS_CUDA_CHECK(ctx,
                          cudaMemsetAsync(run->apply.block->ptr, 0xff,
                                          (size_t)scratch * stride,
                                          ctx->stream),
                          "cudaMemsetAsync (poison device memory)");
        }
        for (int k = 0; k < scratch; k++) {
            B.ptr[B.count + k] =
                (double *)(run->apply.block->ptr + (size_t)k * stride);
        }
    }
    if (timed) {
        CS_CUDA_CHECK(ctx, cudaEventRecord(run->apply.lane->loop_start,
                                           ctx->stream),
                      "cudaEventRecord (scheme start)");
    }
    for (long step = 0; step < steps; step++) {
        CS_TRY(cs_cuda_check_interrupt(ctx, step));
        for (int gi = 0; gi < s->stage_count; gi++) {
            sch_assign a;
            const int final = step == steps - 1 && gi == s->stage_count - 1;
            if (sch_assign_stage(&B, &st, &run->plans[gi], final, order, &a) < 0
                || st.scratch > scratch) {
                cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: the run "
                                     "left its plan (an engine error)");
                return CS_ERR_INVALID;
            }
            CS_TRY(launch(ctx, &g, &run->plans[gi], &a, &B, s, params, mode,
                          cval));
        }
    }
    sch_move moves[2 * CS_SCHEME_MAX_FIELDS];
    int nmoves = 0;
    if (sch_plan_moves(&B, &st, moves, &nmoves) < 0 || st.scratch > scratch) {
        cs_cuda_message(ctx, "cs_cuda_scheme_apply_device: the final copies "
                             "left their plan (an engine error)");
        return CS_ERR_INVALID;
    }
    for (int m = 0; m < nmoves; m++) {
        CS_CUDA_CHECK(ctx,
                      cudaMemcpyAsync(B.ptr[moves[m].to], B.ptr[moves[m].from],
                                      count * sizeof(double),
                                      cudaMemcpyDeviceToDevice, ctx->stream),
                      "cudaMemcpyAsync (a field into its out)");
    }
    return finish_timing(ctx, run, timed, info);
}

cs_status
cs_cuda_scheme_apply_device(const cs_scheme *s, double *const *in,
                            double *const *out, const double *const *params,
                            const ptrdiff_t shape[3], cs_mode mode,
                            double cval, long steps, uintptr_t stream,
                            cs_run_info *info, const cs_interrupt *intr,
                            char *err, size_t err_len)
{
    cs_cuda_ctx ctx;
    cs_engine_ctx_init(&ctx, intr, err, err_len);
    cs_engine_info_init(info, steps);
    if (info != NULL) {
        info->path = "scheme";
    }
    CS_TRY(check_call(&ctx, s, in, out, params, shape, mode, steps));
    CS_TRY(cs_cuda_device_facts(&ctx));
    if (shape[0] * shape[1] * shape[2] == 0) {
        return CS_OK;
    }
    for (int f = 0; f < s->field_count; f++) {
        CS_TRY(check_device_array(&ctx, in[f], "fields_in", f));
        CS_TRY(check_device_array(&ctx, out[f], "fields_out", f));
    }
    for (int q = 0; q < s->param_count; q++) {
        CS_TRY(check_device_array(&ctx, params[q], "params", q));
    }
    sch_run run;
    memset(&run, 0, sizeof(run));
    const cs_status st = run_scheme(&ctx, &run, s, in, out, params, shape,
                                    mode, cval, steps, stream, info);
    run_release(&ctx, &run);
    return st;
}
