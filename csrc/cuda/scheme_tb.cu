/*
 * scheme_tb.cu -- several steps of a 2D scheme per trip through memory
 * (the schedule and its rules: scheme_tb.cuh).
 *
 * A block of 512 threads (32 columns x 16 rows of them) loads its region
 * of every field and parameter field into shared memory, each cell
 * outside the grid as the boundary mode maps it (constant: cval), and
 * runs the pass's stages in it.  A stage computes the cells that are
 * still exact: per axis, those at least c from the region's sides, c the
 * radii of the stages so far summed, and never a cell outside the grid
 * unless the mode is wrap (there a cell outside is a cell inside, moved
 * by a period, and is computed like one).  Under the other modes the
 * cells outside the grid are filled again after every stage from the
 * cells they map to (constant: they keep cval), so a side of the region
 * at the grid's edge loses nothing and the band along the edge stays
 * exact, as apply's does.  A thread takes its cells four at a time and
 * computes every update of those four before it writes any, so that an
 * update written in place (into the slot of a field the stage reads only
 * at the point) never feeds another; one barrier ends each stage.  The
 * sums follow the one-step kernel's order exactly (scheme.cu's sch_eval):
 * acc = 0, acc += (coef * param) * value, a stencil's taps in order.
 */
#include "engine.cuh"
#include "scheme_tb.cuh"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(CS_CUDA_EMULATION)
#define SCH_TB_GRID_CONSTANT
#else
#define SCH_TB_GRID_CONSTANT __grid_constant__
#endif

#define SCH_TB_GROUP 4 /* cells a thread computes together */

/* The launch's parameters, built on the host for each pass. */
typedef struct sch_tb_params {
    ptrdiff_t n[2];        /* rows, columns */
    int halo[2];
    int tile[2];           /* rows and columns a block writes */
    int steps, stages, fields, slots, nparams;
    int mode;
    double cval;
    const double *src[CS_SCHEME_MAX_FIELDS];
    double *dst[CS_SCHEME_MAX_FIELDS];
    const double *par[CS_SCHEME_MAX_PARAMS];
    /* per stage */
    int r[SCH_TB_STAGES][2];
    int count[SCH_TB_STAGES];     /* updates */
    int writes[SCH_TB_STAGES];    /* updates that are sums */
    int npw[SCH_TB_STAGES];
    int pw_field[SCH_TB_STAGES][CS_SCHEME_MAX_FIELDS];
    int target[SCH_TB_STAGES][CS_SCHEME_MAX_FIELDS];
    sch_out out[SCH_TB_STAGES][CS_SCHEME_MAX_FIELDS]; /* terms: global */
    int tap_base[SCH_TB_STAGES];
    unsigned char from[SCH_TB_INSTANCES + 1][CS_SCHEME_MAX_FIELDS];
    signed char dst_slot[SCH_TB_INSTANCES][CS_SCHEME_MAX_FIELDS];
    sch_term term[SCH_TB_TERMS];
    double tap_w[SCH_TB_TAPS];
    int tap_off[SCH_TB_TAPS]; /* dy x 64 + dx */
} sch_tb_params;

/* A global index along an axis of n points as the mode reads it; -1:
   constant mode, outside. */
static __device__ __forceinline__ ptrdiff_t
tb_extend(ptrdiff_t i, ptrdiff_t n, int mode)
{
    return cs_extend_index(i, n, (cs_mode)mode);
}

/* Fill the region: field f into slot f, parameter q into slot
   slots + q, scratch slots with cval (their cells outside the grid are
   never computed: under constant mode they must read cval). */
template <int ROWS>
static __device__ __forceinline__ void
tb_load(const sch_tb_params &p, double *smem, ptrdiff_t y0, ptrdiff_t x0)
{
    constexpr int AREA = ROWS * SCH_TB_COLUMNS;
    constexpr int CELLS = AREA / SCH_TB_THREADS;
    /* where each of the thread's cells reads (-1: cval) */
    ptrdiff_t at[CELLS];
#pragma unroll
    for (int c = 0; c < CELLS; c++) {
        const int i = (int)threadIdx.x + c * SCH_TB_THREADS;
        const ptrdiff_t gy = y0 + i / SCH_TB_COLUMNS;
        const ptrdiff_t gx = x0 + i % SCH_TB_COLUMNS;
        at[c] = -1;
        if (gy >= 0 && gy < p.n[0] && gx >= 0 && gx < p.n[1]) {
            at[c] = gy * p.n[1] + gx;
        } else if (p.mode != CS_MODE_CONSTANT) {
            at[c] = tb_extend(gy, p.n[0], p.mode) * p.n[1]
                    + tb_extend(gx, p.n[1], p.mode);
        }
    }
    /* every load of an array in flight before the stores (a store to
       shared memory would otherwise wait for each load) */
    for (int f = 0; f < p.fields + p.nparams; f++) {
        const double *src = f < p.fields ? p.src[f] : p.par[f - p.fields];
        /* outside the grid a parameter is read only under wrap */
        const double other = f < p.fields ? p.cval : 0.0;
        const int slot = f < p.fields ? f : p.slots + f - p.fields;
        double v[CELLS];
#pragma unroll
        for (int c = 0; c < CELLS; c++) {
            v[c] = at[c] >= 0 ? __ldg(src + at[c]) : other;
        }
#pragma unroll
        for (int c = 0; c < CELLS; c++) {
            smem[slot * AREA + (int)threadIdx.x + c * SCH_TB_THREADS] = v[c];
        }
    }
    for (int f = p.fields; f < p.slots; f++) {
        for (int i = (int)threadIdx.x; i < AREA; i += SCH_TB_THREADS) {
            smem[f * AREA + i] = p.cval;
        }
    }
}

/* Cell c of a thread (0 .. cells - 1), from the thread's first cell
   (row ty, column tx): two columns 32 apart, rows 16 apart.  A
   compile-time constant wherever c is, so that a cell's reads are one
   shared-memory load with an immediate offset. */
static __device__ __forceinline__ constexpr int
tb_cell(int c)
{
    return (c >> 1) * 16 * SCH_TB_COLUMNS + (c & 1) * 32;
}

/*
 * Stage g (instance `inst`) at the cells of [lo, hi) a thread holds:
 * four cells at a time, their values at the point read once, every
 * update of the four computed before any is written.  NO bounds the
 * stage's updates and its values at the point.  A cell outside [lo, hi)
 * reads and writes nothing (its loads are predicated off): its taps may
 * reach past the region, and its stand-ins may be written in place.
 */
template <int ROWS, int NO>
static __device__ __forceinline__ void
tb_stage(const sch_tb_params &p, double *smem, int g, int inst,
         const int lo[2], const int hi[2])
{
    constexpr int AREA = ROWS * SCH_TB_COLUMNS;
    constexpr int CELLS = AREA / SCH_TB_THREADS;
    const int tx = (int)threadIdx.x & 31;
    const int ty = (int)threadIdx.x >> 5;
    const int first = ty * SCH_TB_COLUMNS + tx;
    const unsigned char *from = p.from[inst];
    const int count = p.count[g];
#pragma unroll
    for (int c0 = 0; c0 < CELLS; c0 += SCH_TB_GROUP) {
        bool active[SCH_TB_GROUP];
#pragma unroll
        for (int i = 0; i < SCH_TB_GROUP; i++) {
            const int c = c0 + i;
            const int ly = ty + 16 * (c >> 1);
            const int lx = tx + 32 * (c & 1);
            active[i] = ly >= lo[0] && ly < hi[0] && lx >= lo[1] && lx < hi[1];
        }
        /* the group's cells: at cell + tb_cell(c0 + i) - tb_cell(c0) */
        const int cell = first + tb_cell(c0);
#define SCH_TB_AT(i) (tb_cell(c0 + (i)) - tb_cell(c0))
        /* the values at the point, read once for every monomial */
        double x[NO][SCH_TB_GROUP];
#pragma unroll
        for (int j = 0; j < NO; j++) {
            const double *f =
                smem + (j < p.npw[g] ? from[p.pw_field[g][j]] : 0) * AREA
                + cell;
#pragma unroll
            for (int i = 0; i < SCH_TB_GROUP; i++) {
                x[j][i] = 0.0;
                if (j < p.npw[g] && active[i]) {
                    x[j][i] = f[SCH_TB_AT(i)];
                }
            }
        }
        double val[NO][SCH_TB_GROUP];
#pragma unroll
        for (int j = 0; j < NO; j++) {
            if (j >= count || p.dst_slot[inst][j] < 0) {
                continue;
            }
            const sch_out out = p.out[g][j];
            double acc[SCH_TB_GROUP];
#pragma unroll
            for (int i = 0; i < SCH_TB_GROUP; i++) {
                acc[i] = 0.0;
            }
            const int end = out.first_term + out.term_count;
#pragma unroll 1
            for (int t = out.first_term; t < end; t++) {
                const sch_term &term = p.term[t];
                double v[SCH_TB_GROUP];
                if (term.kind == CS_TERM_STENCIL) {
                    const double *f =
                        smem + from[term.field] * AREA + cell;
#pragma unroll
                    for (int i = 0; i < SCH_TB_GROUP; i++) {
                        v[i] = 0.0;
                    }
                    const int q0 = p.tap_base[g] + term.tap0;
#pragma unroll 1
                    for (int q = q0; q < q0 + term.ntaps; q++) {
                        const double w = p.tap_w[q];
                        const double *fq = f + p.tap_off[q];
#pragma unroll
                        for (int i = 0; i < SCH_TB_GROUP; i++) {
                            if (active[i]) {
                                v[i] += w * fq[SCH_TB_AT(i)];
                            }
                        }
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < SCH_TB_GROUP; i++) {
                        v[i] = 1.0;
                    }
#pragma unroll
                    for (int s = 0; s < NO; s++) {
                        const int e = (int)((term.pow >> (4 * s)) & 15u);
#pragma unroll 1
                        for (int k = 0; k < e; k++) {
#pragma unroll
                            for (int i = 0; i < SCH_TB_GROUP; i++) {
                                v[i] *= x[s][i];
                            }
                        }
                    }
                }
                /* parameter slots are never written: any cell may read */
                const double *par =
                    term.param >= 0
                        ? smem + (p.slots + term.param) * AREA + cell
                        : NULL;
#pragma unroll
                for (int i = 0; i < SCH_TB_GROUP; i++) {
                    const double c = par != NULL
                                         ? term.coef * par[SCH_TB_AT(i)]
                                         : term.coef;
                    acc[i] += c * v[i];
                }
            }
#pragma unroll
            for (int i = 0; i < SCH_TB_GROUP; i++) {
                val[j][i] = acc[i];
            }
        }
#pragma unroll
        for (int j = 0; j < NO; j++) {
            const int slot = j < count ? p.dst_slot[inst][j] : -1;
            if (slot < 0) {
                continue;
            }
#pragma unroll
            for (int i = 0; i < SCH_TB_GROUP; i++) {
                if (active[i]) {
                    smem[slot * AREA + cell + SCH_TB_AT(i)] = val[j][i];
                }
            }
        }
#undef SCH_TB_AT
    }
}

/* After stage g (instance inst), under nearest, reflect and mirror: the
   cells outside the grid of each slot it wrote, from the cells they map
   to (where those lie in the region; the others are read by no exact
   cell). */
template <int ROWS>
static __device__ __forceinline__ void
tb_refresh(const sch_tb_params &p, double *smem, int g, int inst,
           ptrdiff_t y0, ptrdiff_t x0)
{
    constexpr int AREA = ROWS * SCH_TB_COLUMNS;
    for (int i = (int)threadIdx.x; i < AREA; i += SCH_TB_THREADS) {
        const ptrdiff_t gy = y0 + i / SCH_TB_COLUMNS;
        const ptrdiff_t gx = x0 + i % SCH_TB_COLUMNS;
        if (gy >= 0 && gy < p.n[0] && gx >= 0 && gx < p.n[1]) {
            continue;
        }
        const ptrdiff_t my = tb_extend(gy, p.n[0], p.mode) - y0;
        const ptrdiff_t mx = tb_extend(gx, p.n[1], p.mode) - x0;
        if (my < 0 || my >= ROWS || mx < 0 || mx >= SCH_TB_COLUMNS) {
            continue;
        }
        const int m = (int)my * SCH_TB_COLUMNS + (int)mx;
        for (int j = 0; j < p.count[g]; j++) {
            const int slot = p.dst_slot[inst][j];
            if (slot >= 0) {
                smem[slot * AREA + i] = smem[slot * AREA + m];
            }
        }
    }
}

/* One pass over the grid: a block per tile of tile[0] x tile[1]. */
template <int ROWS, int NO>
__global__ void __launch_bounds__(SCH_TB_THREADS)
scheme_tb2d_kernel(const SCH_TB_GRID_CONSTANT sch_tb_params p)
{
    extern __shared__ double smem[];
    constexpr int AREA = ROWS * SCH_TB_COLUMNS;
    const ptrdiff_t y0 = (ptrdiff_t)blockIdx.y * p.tile[0] - p.halo[0];
    const ptrdiff_t x0 = (ptrdiff_t)blockIdx.x * p.tile[1] - p.halo[1];
    /* the region's cells inside the grid, per axis (wrap: all) */
    int in_lo[2] = {0, 0}, in_hi[2] = {ROWS, SCH_TB_COLUMNS};
    const ptrdiff_t origin[2] = {y0, x0};
    if (p.mode != CS_MODE_WRAP) {
        for (int a = 0; a < 2; a++) {
            const ptrdiff_t lo = -origin[a];
            const ptrdiff_t hi = p.n[a] - origin[a];
            in_lo[a] = lo > 0 ? (int)lo : 0;
            in_hi[a] = hi < in_hi[a] ? (int)hi : in_hi[a];
        }
    }
    const bool refresh = p.mode != CS_MODE_WRAP
                         && p.mode != CS_MODE_CONSTANT
                         && (in_lo[0] > 0 || in_lo[1] > 0
                             || in_hi[0] < ROWS
                             || in_hi[1] < SCH_TB_COLUMNS);
    tb_load<ROWS>(p, smem, y0, x0);
    __syncthreads();
    int spent[2] = {0, 0};
    int inst = 0;
    for (int s = 0; s < p.steps; s++) {
        for (int g = 0; g < p.stages; g++, inst++) {
            spent[0] += p.r[g][0];
            spent[1] += p.r[g][1];
            if (p.writes[g] == 0) {
                continue; /* renames only: the schedule moved the slots */
            }
            const int lo[2] = {max(spent[0], in_lo[0]),
                               max(spent[1], in_lo[1])};
            const int hi[2] = {min(ROWS - spent[0], in_hi[0]),
                               min(SCH_TB_COLUMNS - spent[1], in_hi[1])};
            tb_stage<ROWS, NO>(p, smem, g, inst, lo, hi);
            __syncthreads();
            if (refresh) {
                tb_refresh<ROWS>(p, smem, g, inst, y0, x0);
                __syncthreads();
            }
        }
    }
    /* the tile: the updated fields from their slots after the pass */
    const unsigned char *from = p.from[inst];
    for (int i = (int)threadIdx.x; i < AREA; i += SCH_TB_THREADS) {
        const int ly = i / SCH_TB_COLUMNS, lx = i % SCH_TB_COLUMNS;
        const ptrdiff_t gy = y0 + ly, gx = x0 + lx;
        if (ly < p.halo[0] || ly >= p.halo[0] + p.tile[0]
            || lx < p.halo[1] || lx >= p.halo[1] + p.tile[1]
            || gy >= p.n[0] || gx >= p.n[1]) {
            continue;
        }
        for (int f = 0; f < p.fields; f++) {
            if (p.dst[f] != NULL) {
                p.dst[f][gy * p.n[1] + gx] = smem[from[f] * AREA + i];
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

/* The launch's parameters: the stages' tables, the schedule, the
   pass's arrays. */
static void
fill_params(const sch_tb_call *call, const sch_tb_schedule *sc,
            const double *const *src, double *const *dst, int steps,
            sch_tb_params *p)
{
    memset(p, 0, sizeof(*p));
    p->n[0] = call->n[0];
    p->n[1] = call->n[1];
    p->halo[0] = sc->halo[0];
    p->halo[1] = sc->halo[1];
    p->tile[0] = sc->rows - 2 * sc->halo[0];
    p->tile[1] = SCH_TB_COLUMNS - 2 * sc->halo[1];
    p->steps = steps;
    p->stages = call->stages;
    p->fields = call->fields;
    p->slots = sc->slots;
    p->nparams = call->nparams;
    p->mode = (int)call->mode;
    p->cval = call->cval;
    for (int f = 0; f < call->fields; f++) {
        p->src[f] = src[f];
        p->dst[f] = dst[f];
    }
    for (int q = 0; q < call->nparams; q++) {
        p->par[q] = call->params[q];
    }
    int terms = 0, taps = 0;
    for (int g = 0; g < call->stages; g++) {
        const sch_stage_plan *sp = &call->plans[g];
        p->r[g][0] = sp->r[1];
        p->r[g][1] = sp->r[2];
        p->count[g] = sp->count;
        p->npw[g] = sp->npw;
        p->tap_base[g] = taps;
        memcpy(p->pw_field[g], sp->pw_field, sizeof(sp->pw_field));
        for (int j = 0; j < sp->count; j++) {
            p->target[g][j] = sp->target[j];
            p->out[g][j] = sp->out[j];
            p->out[g][j].first_term += terms;
            p->writes[g] += sp->rename[j] < 0;
        }
        memcpy(p->term + terms, sp->terms,
               (size_t)sp->nterms * sizeof(sch_term));
        for (int q = 0; q < sp->ntaps; q++) {
            p->tap_w[taps + q] = sp->tap_w[q];
            p->tap_off[taps + q] =
                sp->tap_d[q][1] * SCH_TB_COLUMNS + sp->tap_d[q][2];
        }
        terms += sp->nterms;
        taps += sp->ntaps;
    }
    memcpy(p->from, sc->from, sizeof(p->from));
    memcpy(p->dst_slot, sc->dst, sizeof(p->dst_slot));
}

template <int ROWS, int NO>
static cs_status
launch(cs_cuda_ctx *ctx, const sch_tb_params *p, size_t smem)
{
    CS_TRY(cs_cuda_allow_smem(ctx, scheme_tb2d_kernel<ROWS, NO>, smem,
                              "scheme_tb2d_kernel"));
    const dim3 grid((unsigned)CEIL_DIV(p->n[1], (ptrdiff_t)p->tile[1]),
                    (unsigned)CEIL_DIV(p->n[0], (ptrdiff_t)p->tile[0]), 1);
    /* one line: tests/cuda_emu's rewrite converts launches line by line */
    scheme_tb2d_kernel<ROWS, NO><<<grid, SCH_TB_THREADS, smem, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "scheme_tb2d_kernel");
}

cs_status
sch_tb_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
            const sch_tb_schedule *sc, const double *const *src,
            double *const *dst, int steps)
{
    sch_tb_params *p = (sch_tb_params *)malloc(sizeof(sch_tb_params));
    if (p == NULL) {
        cs_cuda_message(ctx, "out of host memory (scheme pass parameters)");
        return CS_ERR_NOMEM;
    }
    fill_params(call, sc, src, dst, steps, p);
    /* NO bounds a stage's updates and its values at the point */
    int most = 0;
    for (int g = 0; g < call->stages; g++) {
        const sch_stage_plan *sp = &call->plans[g];
        most = sp->count > most ? sp->count : most;
        most = sp->npw > most ? sp->npw : most;
    }
    const size_t smem = sch_tb_smem(sc, call->nparams);
    cs_status st;
    if (sc->rows == 32) {
        st = most <= 2   ? launch<32, 2>(ctx, p, smem)
             : most <= 4 ? launch<32, 4>(ctx, p, smem)
                         : launch<32, 8>(ctx, p, smem);
    } else {
        st = most <= 2   ? launch<64, 2>(ctx, p, smem)
             : most <= 4 ? launch<64, 4>(ctx, p, smem)
                         : launch<64, 8>(ctx, p, smem);
    }
    free(p);
    return st;
}
