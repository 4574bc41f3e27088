/*
 * tc_emulation.c -- dual tessellation emulated on the CPU (backend
 * "cpu-tc"): the tensor-core algorithm, step for step, so that it can be
 * verified anywhere.
 *
 * One pass (one application of a kernel of at most 15 columns and 7 or
 * 15 rows per plane; see layout.h for the conventions):
 *
 *   1. Extend every input plane by halo_y rows and halo_x = (P-1)/2
 *      columns, filled per boundary mode with cs_extend_index, and by a
 *      zero margin up to whole tiles, so a tile past the right or bottom
 *      edge of the grid reads finite values.  In constant mode one more
 *      plane, all cval, stands for the planes outside the grid along z.
 *   2. For each tile (tile_groups = 16 column groups by tile_rows output
 *      rows) and each live kernel plane dz, build stencil2row matrices A
 *      and B in a scratch array (the GPU's shared memory) by storing
 *      every input tile element (x, y) to A[lut...] and B[lut...]: dirty
 *      elements land in the dump area, never read.  The row tails that
 *      the loader never writes are zeroed once, when the scratch is made.
 *   3. Output row i of the tile is, per half of 8 column groups and per
 *      8-column half of the weight matrices, an 8 x 8 accumulator fed by
 *      two m8n8k4 products per k-step: the 8 x 4 block of A at column
 *      P*i + 4s times the 4 x 8 block of WA, then the same with B and WB
 *      (an m16n8k4 MMA is two such 8-row halves).  In 3D the planes of
 *      the kernel add into the same tile accumulator:
 *          out[z] = sum_dz 2D(in[z + dz - rz], W[dz]).
 *   4. Store the outputs that lie inside the grid.
 *
 * Time steps follow the GPU's plan (cs_plan_make for the tensor-core
 * path of a device with FP64 tensor cores): `passes` passes of the
 * composed kernel, each corrected near the edges by cs_cpu_fix_bands
 * when the plan needs it, then `remainder` single steps (emulated on
 * tensor cores too; the GPU runs them on CUDA cores).  The kernels the
 * plan refuses are the GPU's: more than 7 per axis, or 31 points in 1D.
 */
#include "tc_emulation.h"

#include "cpu_engine.h"
#include "threads.h"
#include "../layout.h"
#include "../plan.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define TC_TILE_GROUPS CS_MMA_M /* column groups per tile: one m16 MMA */
#define TC_TILE_ROWS 16         /* output rows per tile (fewer if ny is) */
#define TC_HALF 8               /* rows and columns of one m8n8k4 */

/* A kernel prepared for the emulation: one layout per plane along z. */
typedef struct tc_kernel {
    int kz;
    int rz;
    int *live;            /* plane dz has a nonzero weight */
    cs_layout2d *planes;  /* kz layouts sharing one geometry */
} tc_kernel;

/* The grid extended per boundary mode: one padded plane per z plane. */
typedef struct tc_extended {
    ptrdiff_t rows;
    ptrdiff_t cols;
    ptrdiff_t nplanes;    /* nz, plus a cval plane in constant mode */
    double *data;
} tc_extended;

/* The tiling of one grid for one kernel geometry. */
typedef struct tc_grid {
    ptrdiff_t nz, ny, nx;
    ptrdiff_t tiles_y, tiles_x;
} tc_grid;

/* One thread's "shared memory": matrices A and B, and the tile's sums. */
typedef struct tc_scratch {
    double *a;
    double *b;
    double *acc;          /* tile_rows x tile_cols */
} tc_scratch;

/* ---------------------------------------------------------------------
 * Arguments, threads, sizes
 * ------------------------------------------------------------------ */

static int
kernel_valid(const cs_kernel *k)
{
    if (k == NULL || k->weights == NULL || k->ndim < 1
        || k->ndim > CS_MAX_NDIM) {
        return 0;
    }
    for (int a = 0; a < CS_MAX_NDIM; a++) {
        if (k->size[a] < 1 || k->size[a] % 2 == 0) {
            return 0;
        }
    }
    return 1;
}

/* The GPU's tensor-core plan: a device with FP64 MMA, no depth cap. */
static cs_status
tc_plan(const cs_kernel *k, const ptrdiff_t shape[3], cs_mode mode,
        long steps, cs_fusion_plan *fusion)
{
    cs_caps caps;
    cs_plan plan;
    memset(&caps, 0, sizeof(caps));
    caps.cc_major = 9;
    cs_status st = cs_plan_make(k, shape, mode, steps,
                                CS_CUDA_PATH_TENSOR_CORE, &caps, &plan, NULL,
                                0);
    if (st == CS_OK) {
        *fusion = plan.fusion;
    }
    return st;
}

/* The team for a step over `count` points of `kernel` (threads.h). */
static int
resolve_threads(int num_threads, size_t count, const cs_kernel *kernel)
{
    double taps = kernel != NULL && kernel->weights != NULL
                  ? (double)cs_kernel_count(kernel) : 1.0;
    const double work = (double)count * (taps + CS_THREADS_POINT_TAPS);
    return cs_threads_for_steps(num_threads, work, 1, work);
}

/* *out = a * b * c doubles, or 0 when that overflows size_t bytes. */
static int
count_doubles(ptrdiff_t a, ptrdiff_t b, ptrdiff_t c, size_t *out)
{
    size_t limit = SIZE_MAX / sizeof(double);
    size_t n = (size_t)a;

    if ((size_t)b != 0 && n > limit / (size_t)b) {
        return 0;
    }
    n *= (size_t)b;
    if ((size_t)c != 0 && n > limit / (size_t)c) {
        return 0;
    }
    *out = n * (size_t)c;
    return 1;
}

/* ---------------------------------------------------------------------
 * Kernel planes
 * ------------------------------------------------------------------ */

static void
tc_kernel_free(tc_kernel *k)
{
    if (k->planes != NULL) {
        for (int dz = 0; dz < k->kz; dz++) {
            cs_layout2d_free(&k->planes[dz]);
        }
    }
    free(k->planes);
    free(k->live);
    k->planes = NULL;
    k->live = NULL;
}

static int
plane_is_live(const double *w, ptrdiff_t count)
{
    for (ptrdiff_t i = 0; i < count; i++) {
        if (w[i] != 0.0) {
            return 1;
        }
    }
    return 0;
}

/* One layout per plane of `k`; `out` zeroed, freed by the caller. */
static cs_status
tc_kernel_build(const cs_kernel *k, int tile_rows, tc_kernel *out)
{
    int ky = (int)k->size[1];
    int kx = (int)k->size[2];
    ptrdiff_t plane = k->size[1] * k->size[2];

    out->kz = (int)k->size[0];
    out->rz = (out->kz - 1) / 2;
    out->planes = calloc((size_t)out->kz, sizeof(cs_layout2d));
    out->live = calloc((size_t)out->kz, sizeof(int));
    if (out->planes == NULL || out->live == NULL) {
        return CS_ERR_NOMEM;
    }
    for (int dz = 0; dz < out->kz; dz++) {
        const double *w = k->weights + dz * plane;
        cs_status st = cs_layout2d_build(w, ky, kx, TC_TILE_GROUPS,
                                         tile_rows, &out->planes[dz]);
        if (st != CS_OK) {
            return st;
        }
        out->live[dz] = plane_is_live(w, plane);
    }
    return CS_OK;
}

/* ---------------------------------------------------------------------
 * Extended grid
 * ------------------------------------------------------------------ */

/*
 * Row r of an extended plane: the grid plane `src` (NULL: the cval
 * plane) read per mode inside the halo, zero in the margin beyond it.
 */
static void
fill_row(const double *src, const tc_grid *g, const cs_layout2d *l,
         cs_mode mode, double cval, ptrdiff_t r, double *row,
         ptrdiff_t cols)
{
    ptrdiff_t used_rows = g->ny + 2 * l->halo_y;
    ptrdiff_t used_cols = g->nx + 2 * l->halo_x;

    if (r >= used_rows) {
        memset(row, 0, (size_t)cols * sizeof(double));
        return;
    }
    ptrdiff_t sy = cs_extend_index(r - l->halo_y, g->ny, mode);
    for (ptrdiff_t c = 0; c < cols; c++) {
        if (c >= used_cols) {
            row[c] = 0.0;
            continue;
        }
        ptrdiff_t sx = cs_extend_index(c - l->halo_x, g->nx, mode);
        if (src == NULL || sy < 0 || sx < 0) {
            row[c] = cval;
        }
        else {
            row[c] = src[sy * g->nx + sx];
        }
    }
}

static void
tc_extended_free(tc_extended *e)
{
    free(e->data);
    e->data = NULL;
}

static cs_status
tc_extended_build(const double *src, const tc_grid *g, const cs_layout2d *l,
                  cs_mode mode, double cval, int nthreads, tc_extended *e)
{
    size_t count;

    e->rows = g->tiles_y * l->tile_rows + l->ky - 1;
    e->cols = g->tiles_x * l->tile_cols + l->payload - 1;
    e->nplanes = g->nz + (mode == CS_MODE_CONSTANT ? 1 : 0);
    if (!count_doubles(e->nplanes, e->rows, e->cols, &count)) {
        return CS_ERR_NOMEM;
    }
    e->data = malloc(count * sizeof(double));
    if (e->data == NULL) {
        return CS_ERR_NOMEM;
    }
    ptrdiff_t jobs = e->nplanes * e->rows;
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (ptrdiff_t job = 0; job < jobs; job++) {
        ptrdiff_t p = job / e->rows;
        ptrdiff_t r = job % e->rows;
        const double *plane = p < g->nz ? src + p * g->ny * g->nx : NULL;
        fill_row(plane, g, l, mode, cval, r, e->data + job * e->cols,
                 e->cols);
    }
    return CS_OK;
}

/* Extended plane read for input plane z (any integer) along z. */
static const double *
extended_plane(const tc_extended *e, const tc_grid *g, ptrdiff_t z,
               cs_mode mode)
{
    ptrdiff_t p = cs_extend_index(z, g->nz, mode);

    if (p < 0) {
        p = g->nz; /* the cval plane */
    }
    return e->data + p * e->rows * e->cols;
}

/* ---------------------------------------------------------------------
 * One tile: load through the lookup table, tessellate, store
 * ------------------------------------------------------------------ */

/*
 * stencil2row: every element of the in_rows x in_cols input tile at
 * `origin` goes to A and to B, through the lookup table only.
 */
static void
load_tile(const double *origin, ptrdiff_t cols, const cs_layout2d *l,
          double *a, double *b)
{
    for (int x = 0; x < l->in_rows; x++) {
        const double *row = origin + x * cols;
        for (int y = 0; y < l->in_cols; y++) {
            const int *lut = l->lut + 4 * y;
            a[lut[0] + x * lut[1]] = row[y];
            b[lut[2] + x * lut[3]] = row[y];
        }
    }
}

/* acc (8 x 8) += a (8 x 4, row stride lda) * w (4 x 8, row stride ldw) */
static void
mma_m8n8k4(const double *a, int lda, const double *w, int ldw,
           double acc[TC_HALF][TC_HALF])
{
    for (int r = 0; r < TC_HALF; r++) {
        const double *ar = a + (size_t)r * lda;
        for (int c = 0; c < TC_HALF; c++) {
            double sum = acc[r][c];
            for (int k = 0; k < CS_MMA_K; k++) {
                sum += ar[k] * w[k * ldw + c];
            }
            acc[r][c] = sum;
        }
    }
}

/*
 * Dual tessellation of output row i of the tile: for 8 column groups
 * (rows h*8.. of A and B) and 8 output columns (n*8.. of each group),
 * vitrolite A and vitrolite B summed in one accumulator, then added to
 * the tile's sums `out_row` (tile_cols values).
 */
static void
tessellate_row(const double *a, const double *b, const cs_layout2d *l,
               int i, double *out_row)
{
    int halves_m = l->tile_groups / TC_HALF;
    int halves_n = l->group / TC_HALF;

    for (int h = 0; h < halves_m; h++) {
        size_t base = (size_t)h * TC_HALF * l->ld + (size_t)l->payload * i;
        for (int n = 0; n < halves_n; n++) {
            double acc[TC_HALF][TC_HALF] = {{0.0}};
            for (int k0 = 0; k0 < l->kpad; k0 += CS_MMA_K) {
                size_t wk = (size_t)k0 * l->group + (size_t)n * TC_HALF;
                mma_m8n8k4(a + base + k0, l->ld, l->weight_a + wk,
                           l->group, acc);
                mma_m8n8k4(b + base + k0, l->ld, l->weight_b + wk,
                           l->group, acc);
            }
            for (int r = 0; r < TC_HALF; r++) {
                double *o = out_row + (size_t)(h * TC_HALF + r) * l->group
                            + (size_t)n * TC_HALF;
                for (int c = 0; c < TC_HALF; c++) {
                    o[c] += acc[r][c];
                }
            }
        }
    }
}

static void
store_tile(const double *acc, const cs_layout2d *l, const tc_grid *g,
           ptrdiff_t z, ptrdiff_t ty, ptrdiff_t tx, double *dst)
{
    ptrdiff_t y0 = ty * l->tile_rows;
    ptrdiff_t x0 = tx * l->tile_cols;
    ptrdiff_t rows = g->ny - y0 < l->tile_rows ? g->ny - y0 : l->tile_rows;
    ptrdiff_t cols = g->nx - x0 < l->tile_cols ? g->nx - x0 : l->tile_cols;

    for (ptrdiff_t i = 0; i < rows; i++) {
        memcpy(dst + (z * g->ny + y0 + i) * g->nx + x0,
               acc + i * l->tile_cols, (size_t)cols * sizeof(double));
    }
}

static void
run_tile(const tc_kernel *k, const tc_extended *e, const tc_grid *g,
         cs_mode mode, ptrdiff_t task, tc_scratch *s, double *dst)
{
    const cs_layout2d *l = &k->planes[0];
    ptrdiff_t tiles = g->tiles_y * g->tiles_x;
    ptrdiff_t z = task / tiles;
    ptrdiff_t ty = task % tiles / g->tiles_x;
    ptrdiff_t tx = task % g->tiles_x;
    size_t offset = (size_t)(ty * l->tile_rows * e->cols + tx * l->tile_cols);

    memset(s->acc, 0,
           (size_t)l->tile_rows * l->tile_cols * sizeof(double));
    for (int dz = 0; dz < k->kz; dz++) {
        if (!k->live[dz]) {
            continue;
        }
        const double *plane = extended_plane(e, g, z + dz - k->rz, mode);
        load_tile(plane + offset, e->cols, l, s->a, s->b);
        for (int i = 0; i < l->tile_rows; i++) {
            tessellate_row(s->a, s->b, &k->planes[dz], i,
                           s->acc + (size_t)i * l->tile_cols);
        }
    }
    store_tile(s->acc, l, g, z, ty, tx, dst);
}

/* ---------------------------------------------------------------------
 * One pass
 * ------------------------------------------------------------------ */

/*
 * Scratch for `nthreads` threads, zeroed: the row tails of A and B that
 * the loader never writes stay zero from here on.
 */
static double *
scratch_alloc(const cs_layout2d *l, int nthreads, size_t *per_thread)
{
    *per_thread = 2 * (size_t)l->matrix_size
                  + (size_t)l->tile_rows * l->tile_cols;
    return calloc((size_t)nthreads * *per_thread, sizeof(double));
}

/* dst = one application of `k` to src (dst may be src). */
static cs_status
tc_pass(const double *src, double *dst, const ptrdiff_t shape[3],
        const tc_kernel *k, cs_mode mode, double cval, int nthreads)
{
    const cs_layout2d *l = &k->planes[0];
    tc_grid g;
    tc_extended e = {0};
    size_t per_thread;

    g.nz = shape[0];
    g.ny = shape[1];
    g.nx = shape[2];
    g.tiles_y = (g.ny + l->tile_rows - 1) / l->tile_rows;
    g.tiles_x = (g.nx + l->tile_cols - 1) / l->tile_cols;
    cs_status st = tc_extended_build(src, &g, l, mode, cval, nthreads, &e);
    if (st != CS_OK) {
        return st;
    }
    ptrdiff_t tasks = g.nz * g.tiles_y * g.tiles_x;
    int workers = tasks < nthreads ? (int)tasks : nthreads;
    double *scratch = scratch_alloc(l, workers, &per_thread);
    if (scratch == NULL) {
        tc_extended_free(&e);
        return CS_ERR_NOMEM;
    }
    #pragma omp parallel num_threads(workers)
    {
        int id = 0;
#ifdef _OPENMP
        id = omp_get_thread_num();
#endif
        double *mine = scratch + (size_t)id * per_thread;
        tc_scratch s = {mine, mine + l->matrix_size,
                        mine + 2 * (size_t)l->matrix_size};
        #pragma omp for schedule(dynamic)
        for (ptrdiff_t task = 0; task < tasks; task++) {
            run_tile(k, &e, &g, mode, task, &s, dst);
        }
    }
    free(scratch);
    tc_extended_free(&e);
    return CS_OK;
}

/* ---------------------------------------------------------------------
 * Time stepping
 * ------------------------------------------------------------------ */

static void
fill_info(cs_run_info *info, const cs_fusion_plan *plan, int nthreads)
{
    if (info == NULL) {
        return;
    }
    info->backend = "cpu-tc";
    info->path = "dual-tessellation";
    info->fused_depth = plan->depth;
    info->fused_passes = plan->passes;
    info->unfused_steps = plan->remainder;
    info->threads = nthreads;
}

/* Build the fused kernel's planes: `kernel` composed plan->depth times. */
static cs_status
build_fused(const cs_kernel *kernel, const cs_fusion_plan *plan,
            int tile_rows, tc_kernel *fused)
{
    cs_kernel composed = {0};
    cs_status st = cs_kernel_compose(kernel, plan->depth, &composed);

    if (st == CS_OK) {
        st = tc_kernel_build(&composed, tile_rows, fused);
    }
    cs_kernel_free(&composed);
    return st;
}

/*
 * The step loop: fused passes (band-corrected), then single steps, each
 * after a look at `intr`.  `before` (one grid) holds the input of a
 * banded pass when that input is `out` itself; it may be NULL when no
 * pass needs a band.
 */
static cs_status
run_steps(const double *in, double *out, const ptrdiff_t shape[3],
          const cs_kernel *kernel, const tc_kernel *base,
          const tc_kernel *fused, const cs_fusion_plan *plan, cs_mode mode,
          double cval, int nthreads, double *before, size_t count,
          const cs_interrupt *intr)
{
    const double *src = in;
    cs_status st = CS_OK;

    for (long p = 0; p < plan->passes && st == CS_OK; p++) {
        if (cs_interrupt_requested(intr, p * plan->depth)) {
            return CS_ERR_INTERRUPTED;
        }
        const double *pass_in = src;
        if (plan->needs_band && src == out) {
            memcpy(before, src, count * sizeof(double));
            pass_in = before;
        }
        st = tc_pass(pass_in, out, shape, fused, mode, cval, nthreads);
        if (st == CS_OK && plan->needs_band) {
            st = cs_cpu_fix_bands(pass_in, out, shape, kernel, plan, mode,
                                  cval, nthreads);
        }
        src = out;
    }
    for (long r = 0; r < plan->remainder && st == CS_OK; r++) {
        if (cs_interrupt_requested(intr, plan->passes * plan->depth + r)) {
            return CS_ERR_INTERRUPTED;
        }
        st = tc_pass(src, out, shape, base, mode, cval, nthreads);
        src = out;
    }
    return st;
}

/* Does a[0..count) hold a NaN or an infinity? */
static int
has_nonfinite(const double *a, size_t count, int nthreads)
{
    int found = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) reduction(| : found) \
    schedule(static)
#endif
    for (size_t i = 0; i < count; i++) {
        found |= !isfinite(a[i]);
    }
    (void)nthreads;
    return found;
}

/*
 * The masked path, as on the GPU: the zeros of the padded weight
 * matrices and of the tiles' dump slots would turn a NaN or an infinity
 * into NaN across a whole tile, so a grid that holds one (or a result
 * that does: finite values can overflow) is run by the direct CPU
 * engine, which adds the nonzero weights only, as scipy.ndimage does.
 */
static cs_status
run_masked(const double *in, double *out, const ptrdiff_t shape[3],
           const cs_kernel *kernel, cs_mode mode, double cval, long steps,
           int num_threads, cs_run_info *info, const cs_interrupt *intr)
{
    cs_status st = cs_cpu_apply(in, out, shape, kernel, mode, cval, steps,
                                num_threads, info, intr);
    if (info != NULL) {
        info->backend = "cpu-tc";
        info->path = "direct";
        info->nonfinite = 1;
    }
    return st;
}

static cs_status
tc_emulation_run(const double *in, double *out, const ptrdiff_t shape[3],
                 const cs_kernel *kernel, cs_mode mode, double cval,
                 long steps, int num_threads, cs_run_info *info,
                 const cs_interrupt *intr);

cs_status
cs_tc_emulation_apply(const double *in, double *out, const ptrdiff_t shape[3],
                      const cs_kernel *kernel, cs_mode mode, double cval,
                      long steps, int num_threads, cs_run_info *info,
                      const cs_interrupt *intr)
{
    size_t count;
    if (in == NULL || out == NULL || shape == NULL || shape[0] < 1
        || shape[1] < 1 || shape[2] < 1
        || !count_doubles(shape[0], shape[1], shape[2], &count)) {
        return CS_ERR_INVALID;
    }
    const int nthreads = resolve_threads(num_threads, count, kernel);
    if (steps > 0 && has_nonfinite(in, count, nthreads)) {
        return run_masked(in, out, shape, kernel, mode, cval, steps,
                          num_threads, info, intr);
    }
    /* an overflow's rerun reads the input, which `out` may be */
    double *kept = NULL;
    if (steps > 0 && in == out) {
        kept = malloc(count * sizeof(double));
        if (kept == NULL) {
            return CS_ERR_NOMEM;
        }
        memcpy(kept, in, count * sizeof(double));
    }
    cs_status st = tc_emulation_run(in, out, shape, kernel, mode, cval,
                                    steps, num_threads, info, intr);
    if (st == CS_OK && info != NULL) {
        info->nonfinite = 0;
    }
    if (st == CS_OK && steps > 0 && has_nonfinite(out, count, nthreads)) {
        st = run_masked(kept != NULL ? kept : in, out, shape, kernel, mode,
                        cval, steps, num_threads, info, intr);
    }
    free(kept);
    return st;
}

/* The dual tessellation itself (the fast path). */
static cs_status
tc_emulation_run(const double *in, double *out, const ptrdiff_t shape[3],
                 const cs_kernel *kernel, cs_mode mode, double cval,
                 long steps, int num_threads, cs_run_info *info,
                 const cs_interrupt *intr)
{
    cs_fusion_plan plan;
    size_t count;

    if (in == NULL || out == NULL || shape == NULL || !kernel_valid(kernel)
        || (int)mode < 0 || (int)mode >= CS_MODE_COUNT || steps < 0
        || shape[0] < 1 || shape[1] < 1 || shape[2] < 1) {
        return CS_ERR_INVALID;
    }
    if (!count_doubles(shape[0], shape[1], shape[2], &count)) {
        return CS_ERR_INVALID;
    }
    int nthreads = resolve_threads(num_threads, count, kernel);
    cs_status st = tc_plan(kernel, shape, mode, steps, &plan);
    if (st != CS_OK) {
        return st;
    }
    fill_info(info, &plan, nthreads);
    if (steps == 0) {
        if (out != in) {
            memmove(out, in, count * sizeof(double));
        }
        return CS_OK;
    }

    int tile_rows = shape[1] < TC_TILE_ROWS ? (int)shape[1] : TC_TILE_ROWS;
    tc_kernel base = {0};
    tc_kernel fused = {0};
    double *before = NULL;
    st = tc_kernel_build(kernel, tile_rows, &base);
    if (st == CS_OK && plan.depth > 1) {
        st = build_fused(kernel, &plan, tile_rows, &fused);
    }
    if (st == CS_OK && plan.needs_band) {
        before = malloc(count * sizeof(double));
        st = before == NULL ? CS_ERR_NOMEM : CS_OK;
    }
    if (st == CS_OK) {
        st = run_steps(in, out, shape, kernel, &base,
                       plan.depth > 1 ? &fused : &base, &plan, mode, cval,
                       nthreads, before, count, intr);
    }
    free(before);
    tc_kernel_free(&fused);
    tc_kernel_free(&base);
    return st;
}
