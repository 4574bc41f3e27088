/*
 * fold1d.cu -- 1D grids on the 2D kernels: the row fold.
 *
 * A 1D grid of n points is stored folded into rows of w points: point p
 * is element (0, p / w, p % w) of a padded grid {1, rows, w} with an
 * x-halo of h columns and no y-halo.  The 2D kernels (tc2d on tensor
 * cores, the CUDA-core step) then run a {1, 1, kx} kernel over it
 * unchanged, with whole tiles of rows to work on, provided every cell
 * they read beyond a row's interior holds the point it stands for:
 *
 *   - the x-halo of row i, columns -h..-1 and w..w+h-1, stands for
 *     points i*w - h .. i*w - 1 and (i+1)*w .. (i+1)*w + h - 1: copies of
 *     the neighbouring rows' edge points;
 *   - the tail of the last row, points n .. rows*w - 1, lies past the
 *     grid's end;
 *   - a point p outside [0, n) takes the boundary mode's value: cval, or
 *     point extend(p) (scipy.ndimage's index mapping).
 *
 * cs_cuda_fold1d_fill_halo writes exactly those cells, before every step
 * or fused pass (they change with the data).  Every cell it writes
 * stands for a point outside the rows' interiors or past n, and every
 * cell it reads for a point inside [0, n): one launch, no race.  The tail
 * is rewritten too, so what a pass computed there (outputs past n, never
 * downloaded) is never read as data, and never leaves NaN that a zero
 * weight of the tensor-core product would spread.
 *
 * cs_cuda_fold1d_fix_ends is the 1D band fix-up of fused passes: the
 * outputs within band = (depth-1)*r of either end are recomputed by
 * `depth` unfused steps over the edge strip of (2*depth-1)*r points of
 * the pass's input, the mode applied at the real end at every step (the
 * strip's inner side shrinks by r per step and what it leaves behind is
 * not used).  One block per end, the strip in shared memory.  It is the
 * method of engine.cu's band_compute and band_scatter, in one launch:
 * their gather, halo fill and CUDA-core step per fused step would cost
 * 2*depth + 4 launches per pass (34 for heat1d's 15 fused steps, more than the pass
 * itself on a 10^7-point grid), where a grid's edge strips in 2D and 3D
 * are a small share of a much longer pass.
 */
#include "kernels.cuh"

/* ------------------------------------------------------------------------
 * kernels
 * --------------------------------------------------------------------- */

typedef struct fold_params {
    double *origin;    /* point 0 */
    ptrdiff_t pitch;   /* doubles between rows */
    ptrdiff_t w, rows; /* the fold */
    ptrdiff_t h;       /* x-halo columns */
    ptrdiff_t n;       /* points */
    ptrdiff_t halo_cells, tail_cells;
    cs_mode mode;
    double cval;
} fold_params;

/* Where point p (0 <= p < rows * w) lives. */
static __device__ __forceinline__ ptrdiff_t
fold_offset(const fold_params &p, ptrdiff_t point)
{
    const ptrdiff_t row = point / p.w;
    return row * p.pitch + (point - row * p.w);
}

/* The value point `point` stands for under the boundary mode. */
static __device__ __forceinline__ double
fold_value(const fold_params &p, ptrdiff_t point)
{
    if (point >= 0 && point < p.n) {
        return p.origin[fold_offset(p, point)];
    }
    if (p.mode == CS_MODE_CONSTANT) {
        return p.cval;
    }
    return p.origin[fold_offset(p, cs_extend_index(point, p.n, p.mode))];
}

__global__ void
fold1d_halo_kernel(const fold_params p)
{
    const ptrdiff_t stride = (ptrdiff_t)gridDim.x * blockDim.x;
    const ptrdiff_t total = p.halo_cells + p.tail_cells;
    for (ptrdiff_t idx = (ptrdiff_t)blockIdx.x * blockDim.x + threadIdx.x;
         idx < total; idx += stride) {
        ptrdiff_t point, cell;
        if (idx < p.halo_cells) {
            /* the 2h halo cells of row i: columns -h..-1, then w..w+h-1 */
            const ptrdiff_t i = idx / (2 * p.h);
            const ptrdiff_t c = idx - i * 2 * p.h;
            const ptrdiff_t col = c < p.h ? c - p.h : p.w + c - p.h;
            point = i * p.w + col;
            cell = i * p.pitch + col;
        } else {
            point = p.n + (idx - p.halo_cells);
            cell = fold_offset(p, point);
        }
        p.origin[cell] = fold_value(p, point);
    }
}

typedef struct ends_params {
    fold_params src; /* the pass's input (read only) */
    double *dst;     /* the pass's output, point 0 */
    ptrdiff_t dst_pitch;
    const double *weights; /* k taps, device */
    int k, r;
    int depth;
    int strip, band; /* (2*depth-1)*r and (depth-1)*r points */
} ends_params;

/*
 * blockIdx.x = 0: the first `band` points, 1: the last `band`.  Shared:
 * two buffers of `strip` points, positions base .. base + strip - 1.
 */
__global__ void
fold1d_ends_kernel(const ends_params p)
{
    extern __shared__ double smem[];
    const ptrdiff_t n = p.src.n;
    const ptrdiff_t base = blockIdx.x == 0 ? 0 : n - p.strip;
    double *cur = smem;
    double *next = smem + p.strip;
    for (int q = threadIdx.x; q < p.strip; q += blockDim.x) {
        cur[q] = p.src.origin[fold_offset(p.src, base + q)];
    }
    __syncthreads();
    for (int t = 0; t < p.depth; t++) {
        for (int q = threadIdx.x; q < p.strip; q += blockDim.x) {
            double acc = 0.0;
            for (int d = 0; d < p.k; d++) {
                const ptrdiff_t point = base + q + d - p.r;
                double v;
                if (point >= base && point < base + p.strip) {
                    v = cur[point - base];
                } else if (point < 0 || point >= n) {
                    /* past the real end: the mode, at every step; the
                       point it maps to lies within r of that end, inside
                       the strip's valid part (n >= 2 * strip) */
                    v = p.src.mode == CS_MODE_CONSTANT
                            ? p.src.cval
                            : cur[cs_extend_index(point, n, p.src.mode)
                                  - base];
                } else {
                    v = 0.0; /* beyond the strip's inner side: feeds only
                                positions that are dropped */
                }
                acc += p.weights[d] * v;
            }
            next[q] = acc;
        }
        __syncthreads();
        double *swap = cur;
        cur = next;
        next = swap;
    }
    const int first = blockIdx.x == 0 ? 0 : p.strip - p.band;
    for (int q = threadIdx.x; q < p.band; q += blockDim.x) {
        const ptrdiff_t point = base + first + q;
        const ptrdiff_t row = point / p.src.w;
        p.dst[row * p.dst_pitch + (point - row * p.src.w)] = cur[first + q];
    }
}

typedef struct step_out_params {
    const double *src; /* point 0 of the fold (halo filled) */
    ptrdiff_t pitch, w, n;
    const double *weights; /* k taps, device */
    int k, r;
    double *out; /* the caller's n points */
    int *out_flag;
} step_out_params;

/*
 * One step of the kernel from the fold into the flat array: output q
 * from the fold's row q / w, whose halo holds the points beyond its
 * ends.  The taps are added in order, zero weights skipped, each with
 * one fused multiply-add from 0, as cs_cuda_core_step adds them: the
 * result is the one a step into the fold would give.
 */
__global__ void
fold1d_step_out_kernel(const step_out_params p)
{
    const ptrdiff_t stride = (ptrdiff_t)gridDim.x * blockDim.x;
    bool bad = false;
    for (ptrdiff_t q = (ptrdiff_t)blockIdx.x * blockDim.x + threadIdx.x;
         q < p.n; q += stride) {
        const ptrdiff_t row = q / p.w;
        const double *c = p.src + row * p.pitch + (q - row * p.w) - p.r;
        double acc = 0.0;
        for (int d = 0; d < p.k; d++) {
            const double wv = __ldg(p.weights + d);
            if (wv != 0.0) {
                acc = fma(wv, c[d], acc);
            }
        }
        p.out[q] = acc;
        bad |= !isfinite(acc);
    }
    if (bad) {
        *p.out_flag = 1; /* every writer writes 1: no ordering needed */
    }
}

/* ------------------------------------------------------------------------
 * launchers
 * --------------------------------------------------------------------- */

static int
fold_is_valid(const cs_dgrid *g, ptrdiff_t n)
{
    return g->origin != NULL && n >= 1 && g->n[0] == 1 && g->halo[0] == 0
           && g->halo[1] == 0 && g->n[1] >= 1 && g->n[2] >= 1
           && g->halo[2] >= 0 && g->pitch >= g->n[2] + 2 * g->halo[2]
           && CEIL_DIV(n, g->n[2]) == g->n[1];
}

static fold_params
fold_params_of(const cs_dgrid *g, ptrdiff_t n, cs_mode mode, double cval)
{
    fold_params p;
    p.origin = g->origin;
    p.pitch = g->pitch;
    p.w = g->n[2];
    p.rows = g->n[1];
    p.h = g->halo[2];
    p.n = n;
    p.halo_cells = p.rows * 2 * p.h;
    p.tail_cells = p.rows * p.w - n;
    p.mode = mode;
    p.cval = cval;
    return p;
}

cs_status
cs_cuda_fold1d_fill_halo(cs_cuda_ctx *ctx, const cs_dgrid *g, ptrdiff_t n,
                         cs_mode mode, double cval)
{
    if (!fold_is_valid(g, n) || (int)mode < 0 || (int)mode >= CS_MODE_COUNT) {
        cs_cuda_message(ctx, "cs_cuda_fold1d_fill_halo: invalid fold or mode");
        return CS_ERR_INVALID;
    }
    const fold_params p = fold_params_of(g, n, mode, cval);
    const ptrdiff_t total = p.halo_cells + p.tail_cells;
    if (total == 0) {
        return CS_OK;
    }
    fold1d_halo_kernel<<<cs_stride_blocks(total, 256), 256, 0, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "fold1d_halo_kernel");
}

cs_status
cs_cuda_fold1d_fix_ends(cs_cuda_ctx *ctx, const cs_dgrid *src,
                        const cs_dgrid *dst, ptrdiff_t n, const cs_dkernel *k,
                        int depth, cs_mode mode, double cval)
{
    const ptrdiff_t r = (ptrdiff_t)(k->size[2] - 1) / 2;
    const ptrdiff_t strip = (2 * (ptrdiff_t)depth - 1) * r;
    const ptrdiff_t band = ((ptrdiff_t)depth - 1) * r;
    const int ok = fold_is_valid(src, n) && fold_is_valid(dst, n)
                   && src->n[2] == dst->n[2] && src->origin != dst->origin
                   && k->weights != NULL && k->size[0] == 1 && k->size[1] == 1
                   && depth >= 2 && r >= 1 && n >= 2 * strip
                   && strip <= 2048 && (int)mode >= 0
                   && (int)mode < CS_MODE_COUNT && mode != CS_MODE_WRAP;
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_fold1d_fix_ends: invalid grids or plan");
        return CS_ERR_INVALID;
    }
    ends_params p;
    p.src = fold_params_of(src, n, mode, cval);
    p.dst = dst->origin;
    p.dst_pitch = dst->pitch;
    p.weights = k->weights;
    p.k = k->size[2];
    p.r = (int)r;
    p.depth = depth;
    p.strip = (int)strip;
    p.band = (int)band;
    /* <= 32 KB: under the 48 KB a launch may use without opting in */
    const size_t smem = 2 * (size_t)strip * sizeof(double);
    fold1d_ends_kernel<<<2, 128, smem, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "fold1d_ends_kernel");
}

cs_status
cs_cuda_fold1d_step_out(cs_cuda_ctx *ctx, const cs_dgrid *src, ptrdiff_t n,
                        const cs_dkernel *k, double *out, int *out_flag)
{
    const int r = (k->size[2] - 1) / 2;
    const int ok = fold_is_valid(src, n) && out != NULL && out_flag != NULL
                   && k->weights != NULL && k->size[0] == 1
                   && k->size[1] == 1 && k->size[2] % 2 == 1
                   && k->size[2] <= CS_FOLD1D_STEP_MAX_K
                   && src->halo[2] >= r;
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_fold1d_step_out: invalid grids or "
                             "kernel");
        return CS_ERR_INVALID;
    }
    step_out_params p;
    p.src = src->origin;
    p.pitch = src->pitch;
    p.w = src->n[2];
    p.n = n;
    p.weights = k->weights;
    p.k = k->size[2];
    p.r = r;
    p.out = out;
    p.out_flag = out_flag;
    fold1d_step_out_kernel<<<cs_stride_blocks(n, 256), 256, 0, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "fold1d_step_out_kernel");
}
