/*
 * fused_band.cu -- the boundary band of a two-step fused pass, recomputed
 * in place on CUDA cores (the CUDA-core path's fused passes, engine.cu).
 *
 * A pass of the composed kernel k*k advances two steps of k at once and
 * is exact wherever the intermediate grid it implies is the real one:
 * everywhere but within r (k's radius, per axis) of an edge, where the
 * real first step's result is extended by the boundary mode instead
 * (wrap composes exactly and needs no band).  Each output point x of that
 * band is recomputed here from the pass's input as the two steps define
 * it:
 *     out(x) = sum_d k(d) * u1(ext(x + d)),
 *     u1(y)  = sum_e k(e) * in(y + e)       for y inside the grid,
 * d and e running over k's nonzero taps (offsets from its centre), ext
 * the mode's index mapping per axis (constant: a point outside stands for
 * cval), and in's halo, which the mode already filled, holding the first
 * step's reach past the edge.  The band is 6 boxes (both ends of z; of y
 * within z's interior; of x within both interiors), one thread per point.
 * It reads only the pass's input and overwrites only the band of its
 * output, so it runs right after the pass's main kernel.
 */
#include "kernels.cuh"

#include <string.h>

#define FB_THREADS 256
#define FB_BOXES 6

typedef struct fused_band_params {
    const double *in; /* origins */
    double *out;
    ptrdiff_t in_pitch, in_plane, out_pitch, out_plane;
    ptrdiff_t n[3];
    cs_mode mode;
    double cval;
    int taps;                            /* k's nonzero taps: */
    int tap_d[CS_FUSED_BAND_MAX_TAPS][3]; /* offset from the centre */
    ptrdiff_t tap_off[CS_FUSED_BAND_MAX_TAPS]; /* the same, in `in` */
    double tap_w[CS_FUSED_BAND_MAX_TAPS];      /* weight */
    ptrdiff_t box_at[FB_BOXES][3], box_ext[FB_BOXES][3];
    ptrdiff_t box_count[FB_BOXES]; /* points in each box */
} fused_band_params;

/* u1 at grid point c (inside): one step of k from `in`. */
static __device__ __forceinline__ double
fused_band_first_step(const fused_band_params &p, const ptrdiff_t c[3])
{
    const double *at = p.in + c[0] * p.in_plane + c[1] * p.in_pitch + c[2];
    double u1 = 0.0;
    for (int e = 0; e < p.taps; e++) {
        u1 = fma(p.tap_w[e], at[p.tap_off[e]], u1);
    }
    return u1;
}

__global__ void __launch_bounds__(FB_THREADS)
fused_band_kernel(const fused_band_params p)
{
    const int b = (int)blockIdx.y;
    const ptrdiff_t stride = (ptrdiff_t)gridDim.x * FB_THREADS;
    for (ptrdiff_t i = (ptrdiff_t)blockIdx.x * FB_THREADS + threadIdx.x;
         i < p.box_count[b]; i += stride) {
        /* point i of box b, x fastest */
        ptrdiff_t x[3], rest = i;
        for (int a = 2; a >= 0; a--) {
            x[a] = p.box_at[b][a] + rest % p.box_ext[b][a];
            rest /= p.box_ext[b][a];
        }
        double acc = 0.0;
        for (int d = 0; d < p.taps; d++) {
            ptrdiff_t c[3];
            bool outside = false;
            for (int a = 0; a < 3; a++) {
                c[a] = x[a] + p.tap_d[d][a];
                if (c[a] < 0 || c[a] >= p.n[a]) {
                    if (p.mode == CS_MODE_CONSTANT) {
                        outside = true;
                    } else {
                        c[a] = cs_extend_index(c[a], p.n[a], p.mode);
                    }
                }
            }
            const double u1 = outside ? p.cval : fused_band_first_step(p, c);
            acc = fma(p.tap_w[d], u1, acc);
        }
        p.out[x[0] * p.out_plane + x[1] * p.out_pitch + x[2]] = acc;
    }
}

/* ------------------------------------------------------------------------
 * host
 * --------------------------------------------------------------------- */

/* The band's boxes: both ends of z; of y within z's interior; of x within
   both.  An axis no wider than twice its band is band throughout (its
   far box starts where the near one ends), and its interior is empty. */
static void
fused_band_boxes(fused_band_params *p, const ptrdiff_t r[3])
{
    ptrdiff_t lo[3], hi[3]; /* the interior [lo, hi) per axis */
    for (int a = 0; a < 3; a++) {
        lo[a] = r[a] < p->n[a] ? r[a] : p->n[a];
        hi[a] = p->n[a] - r[a] > lo[a] ? p->n[a] - r[a] : lo[a];
    }
    for (int a = 0; a < 3; a++) {
        for (int end = 0; end < 2; end++) {
            const int b = 2 * a + end;
            p->box_count[b] = 1;
            for (int c = 0; c < 3; c++) {
                ptrdiff_t at = 0, ext = p->n[c];
                if (c < a) { /* an axis whose band an earlier box took */
                    at = lo[c];
                    ext = hi[c] - lo[c];
                } else if (c == a) {
                    at = end == 0 ? 0 : hi[c];
                    ext = end == 0 ? lo[c] : p->n[c] - hi[c];
                }
                p->box_at[b][c] = at;
                p->box_ext[b][c] = ext;
                p->box_count[b] *= ext;
            }
        }
    }
}

cs_status
cs_cuda_fused_band(cs_cuda_ctx *ctx, const cs_dgrid *src, const cs_dgrid *dst,
                   const cs_dkernel *k, cs_mode mode, double cval)
{
    fused_band_params p;
    memset(&p, 0, sizeof(p));
    ptrdiff_t r[3];
    int ok = src->origin != NULL && dst->origin != NULL
             && src->origin != dst->origin && k->host_weights != NULL
             && (int)mode >= 0 && (int)mode < CS_MODE_COUNT;
    for (int a = 0; a < 3 && ok; a++) {
        r[a] = (k->size[a] - 1) / 2;
        ok = k->size[a] >= 1 && k->size[a] % 2 == 1
             && src->n[a] == dst->n[a] && src->halo[a] >= r[a];
    }
    if (!ok) {
        cs_cuda_message(ctx, "cs_cuda_fused_band: invalid grids or kernel");
        return CS_ERR_INVALID;
    }
    const int kz = k->size[0], ky = k->size[1], kx = k->size[2];
    for (int dz = 0; dz < kz; dz++) {
        for (int dy = 0; dy < ky; dy++) {
            for (int dx = 0; dx < kx; dx++) {
                const double w = k->host_weights[(dz * ky + dy) * kx + dx];
                if (w == 0.0) {
                    continue;
                }
                if (p.taps == CS_FUSED_BAND_MAX_TAPS) {
                    cs_cuda_message(ctx, "cs_cuda_fused_band: more than %d "
                                         "nonzero taps",
                                    CS_FUSED_BAND_MAX_TAPS);
                    return CS_ERR_INVALID;
                }
                const int d[3] = {dz - (int)r[0], dy - (int)r[1],
                                  dx - (int)r[2]};
                memcpy(p.tap_d[p.taps], d, sizeof(d));
                p.tap_off[p.taps] =
                    d[0] * src->plane + d[1] * src->pitch + d[2];
                p.tap_w[p.taps] = w;
                p.taps++;
            }
        }
    }
    p.in = src->origin;
    p.out = dst->origin;
    p.in_pitch = src->pitch;
    p.in_plane = src->plane;
    p.out_pitch = dst->pitch;
    p.out_plane = dst->plane;
    memcpy(p.n, src->n, sizeof(p.n));
    p.mode = mode;
    p.cval = cval;
    fused_band_boxes(&p, r);
    ptrdiff_t most = 0;
    for (int b = 0; b < FB_BOXES; b++) {
        most = p.box_count[b] > most ? p.box_count[b] : most;
    }
    if (most == 0) {
        return CS_OK;
    }
    ptrdiff_t blocks = CEIL_DIV(most, (ptrdiff_t)FB_THREADS);
    blocks = blocks < 1024 ? blocks : 1024; /* grid-stride beyond */
    const dim3 grid((unsigned)blocks, FB_BOXES);
    fused_band_kernel<<<grid, FB_THREADS, 0, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "fused_band_kernel");
}
