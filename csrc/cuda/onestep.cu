/*
 * onestep.cu -- which of onestep.cuh's kernels takes a single step
 * between device arrays, and its launch parameters, built on the host.
 *
 * Taken: float64 arrays with unit x stride and positive row and plane
 * strides of whole elements (C-contiguous arrays, and views of their
 * rows), and a kernel of one of the shapes the kernels are built for,
 * with every tap of that shape a nonzero weight (so that, as in
 * direct.cu, no zero weight meets a NaN or an infinity):
 *
 *   1D grid, {1, 1, k} kernel, k = 3, 5, 7     every tap
 *   planar {1, k, k} kernel, k = 3, 5, 7       the box, or the plus (the
 *                                              centre row and column);
 *                                              a box of side 5 or 7 that
 *                                              is an outer product col
 *                                              (x) row as that product
 *   3 x 3 x 3 kernel                           the box, or the 7-point star
 *
 * Anything else (other dtypes, strides or kernels, a zero weight among
 * the taps) takes direct.cu's generic kernel.  CONVSTENCIL_ONESTEP picks
 * a variant for measuring: "generic" (direct.cu's kernel always),
 * "persist" (the tile kernels' persistent blocks; 3D: a ring of three
 * plane tiles, two blocks per SM, cc3d.cu's), "blocks" (a block per
 * tile, several resident, 1D grids read as tiles too; 3D: three blocks
 * per SM), "l1" (1D grids through the L1 cache), "deep" (3D: a ring of
 * four plane tiles, three blocks per SM).  Unset: "blocks" for 1D and
 * planar grids, "persist" for 3D, the fastest measured
 * (benchmarks/results/h100_onestep.md, h200_onestep_variants.md).
 */
#include "onestep.cuh"

#include <stdint.h>
#include <string.h>

/* The stride of an axis of `extent` elements, in doubles: 1 when it is a
   positive whole number of doubles (or the axis has one element). */
static int
pitch_of(ptrdiff_t stride, ptrdiff_t extent, ptrdiff_t *pitch)
{
    if (extent == 1) {
        *pitch = 0;
        return 1;
    }
    if (stride <= 0 || stride % (ptrdiff_t)sizeof(double) != 0) {
        return 0;
    }
    *pitch = stride / (ptrdiff_t)sizeof(double);
    return 1;
}

static int
all_nonzero(const double *w, int count)
{
    for (int i = 0; i < count; i++) {
        if (!(w[i] != 0.0)) {
            return 0;
        }
    }
    return 1;
}

/* The shape of a planar k x k kernel the tile kernels take (its factors
   into taps->col and ->row for CS_OS_RANK1), or -1. */
static int
planar_shape(int k, const double *w, cs_os_taps *taps)
{
    if (all_nonzero(w, k * k)) {
        if (k >= 5 && cs_outer_factors(k, k, w, taps->col, taps->row)
            && all_nonzero(taps->col, k) && all_nonzero(taps->row, k)) {
            return CS_OS_RANK1;
        }
        return CS_OS_BOX;
    }
    if (cs_taps_plus(k, w)) {
        const int r = (k - 1) / 2;
        for (int i = 0; i < k; i++) {
            if (!(w[r * k + i] != 0.0) || !(w[i * k + r] != 0.0)) {
                return -1;
            }
        }
        return CS_OS_PLUS;
    }
    return -1;
}

/* The shape of a 3 x 3 x 3 kernel the 3D kernel takes, or -1. */
static int
cube_shape(const double *w)
{
    if (all_nonzero(w, 27)) {
        return CS_OS_BOX;
    }
    for (int e = 0; e < 27; e++) {
        const int dz = e / 9, dy = e / 3 % 3, dx = e % 3;
        const int star = (dz == 1) + (dy == 1) + (dx == 1) >= 2;
        if (star != (w[e] != 0.0)) {
            return -1;
        }
    }
    return CS_OS_STAR;
}

/* CONVSTENCIL_ONESTEP as a variant, -1 for "generic", -2 when unset. */
static cs_status
variant_of_env(cs_cuda_ctx *ctx, int *variant)
{
    const char *env = getenv("CONVSTENCIL_ONESTEP");
    *variant = -2;
    if (env == NULL || env[0] == '\0') {
        return CS_OK;
    }
    static const struct {
        const char *name;
        int variant;
    } names[] = {{"generic", -1},
                 {"persist", CS_OS_PERSIST},
                 {"blocks", CS_OS_BLOCKS},
                 {"l1", CS_OS_L1},
                 {"deep", CS_OS_DEEP}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(env, names[i].name) == 0) {
            *variant = names[i].variant;
            return CS_OK;
        }
    }
    cs_cuda_message(ctx, "CONVSTENCIL_ONESTEP must be generic, persist, "
                         "blocks, l1 or deep, not \"%s\"",
                    env);
    return CS_ERR_INVALID;
}

cs_status
cs_onestep_plan(cs_cuda_ctx *ctx, const cs_darray *in, const cs_darray *out,
                const ptrdiff_t shape[3], const cs_kernel *k, cs_mode mode,
                double cval, cs_onestep *call)
{
    memset(call, 0, sizeof(*call));
    int variant;
    CS_TRY(variant_of_env(ctx, &variant));
    if (variant == -1 || in->dtype != CS_DTYPE_FLOAT64
        || out->dtype != CS_DTYPE_FLOAT64
        || in->strides[2] != (ptrdiff_t)sizeof(double)
        || out->strides[2] != (ptrdiff_t)sizeof(double)
        || (uintptr_t)in->data % sizeof(double) != 0
        || (uintptr_t)out->data % sizeof(double) != 0) {
        return CS_OK;
    }
    cs_os_params *p = &call->p;
    if (!pitch_of(in->strides[1], shape[1], &p->in_pitch)
        || !pitch_of(in->strides[0], shape[0], &p->in_plane)
        || !pitch_of(out->strides[1], shape[1], &p->out_pitch)
        || !pitch_of(out->strides[0], shape[0], &p->out_plane)) {
        return CS_OK;
    }
    const ptrdiff_t *ks = k->size;
    int dims = 0;
    if (ks[0] == 3 && ks[1] == 3 && ks[2] == 3) {
        call->shape = cube_shape(k->weights);
        dims = 3;
        call->ky = call->kx = 3;
    } else if (ks[0] == 1 && ks[1] == ks[2] && ks[2] >= 3 && ks[2] <= 7) {
        call->shape = planar_shape((int)ks[2], k->weights, &p->taps);
        dims = 2;
        call->ky = call->kx = (int)ks[2];
    } else if (ks[0] == 1 && ks[1] == 1 && ks[2] >= 3 && ks[2] <= 7
               && shape[0] == 1 && shape[1] == 1) {
        call->shape = all_nonzero(k->weights, (int)ks[2]) ? CS_OS_BOX : -1;
        dims = 1;
        call->ky = 1;
        call->kx = (int)ks[2];
    }
    if (dims == 0 || call->shape < 0) {
        return CS_OK;
    }
    const int aligned16 = (uintptr_t)in->data % 16 == 0
                          && (uintptr_t)out->data % 16 == 0;
    if (variant == -2) { /* the default of each kind of grid */
        variant = dims == 3 ? CS_OS_PERSIST : CS_OS_BLOCKS;
    }
    if (variant == CS_OS_L1 && (dims != 1 || !aligned16)) {
        variant = dims == 3 ? CS_OS_PERSIST : CS_OS_BLOCKS;
    }
    call->dims = dims;
    call->variant = variant;
    call->taken = 1;
    p->in = (const double *)in->data;
    p->out = (double *)out->data;
    for (int a = 0; a < 3; a++) {
        p->n[a] = shape[a];
    }
    p->mode = mode;
    p->cval = cval;
    memcpy(p->taps.w, k->weights,
           (size_t)cs_kernel_count(k) * sizeof(double));
    return CS_OK;
}

cs_status
cs_cuda_onestep(cs_cuda_ctx *ctx, const cs_onestep *call, int *nonfinite)
{
    if (!call->taken || (int)call->p.mode < 0
        || (int)call->p.mode >= CS_MODE_COUNT) {
        cs_cuda_message(ctx, "cs_cuda_onestep: invalid arguments");
        return CS_ERR_INVALID;
    }
    cs_os_params p = call->p;
    p.nonfinite = nonfinite;
    if (call->dims == 3) {
        return cs_os_launch_3d(ctx, &p, call->kx, call->shape,
                               call->variant);
    }
    if (call->dims == 1 && call->variant == CS_OS_L1) {
        return cs_os_launch_1d_l1(ctx, &p, call->kx);
    }
    return cs_os_launch_tiles(ctx, &p, call->ky, call->kx, call->shape,
                              call->dims == 1, call->variant);
}
