/*
 * onestep_1d3d.cu -- the instances and launchers of onestep.cuh's 1D
 * kernel through the L1 cache and its 3D kernel.
 */
#include "onestep.cuh"

#include <limits.h>

template <int KX>
static cs_status
os_l1_launch(cs_cuda_ctx *ctx, const cs_os_params *p, const char *name)
{
    const ptrdiff_t blocks = CEIL_DIV(p->n[2], (ptrdiff_t)CS_OS_L1_SPAN);
    if (blocks > INT_MAX) {
        cs_cuda_message(ctx, "%s: grid too large", name);
        return CS_ERR_UNSUPPORTED;
    }
    const unsigned grid = (unsigned)blocks;
    cs_os_1d_l1_kernel<KX><<<grid, CS_OS_L1_THREADS, 0, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, name);
}

cs_status
cs_os_launch_1d_l1(cs_cuda_ctx *ctx, cs_os_params *p, int kx)
{
    switch (kx) {
    case 3: return os_l1_launch<3>(ctx, p, "cs_os_1d_l1_kernel<3>");
    case 5: return os_l1_launch<5>(ctx, p, "cs_os_1d_l1_kernel<5>");
    case 7: return os_l1_launch<7>(ctx, p, "cs_os_1d_l1_kernel<7>");
    default: break;
    }
    cs_cuda_message(ctx, "cs_os_launch_1d_l1: no instance for %d taps", kx);
    return CS_ERR_INVALID;
}

/* The 3D kernel over the grid's tiles and z blocks (p->tiles_x, p->zc
   and p->zb0 filled in here). */
template <int K, int SHAPE, int STAGES, int MINB>
static cs_status
os_3d_launch(cs_cuda_ctx *ctx, cs_os_params *p, const char *name)
{
    const ptrdiff_t tiles_x = CEIL_DIV(p->n[2], (ptrdiff_t)CS_OS3_BX);
    const ptrdiff_t tiles_xy =
        tiles_x * CEIL_DIV(p->n[1], (ptrdiff_t)CS_OS3_TY);
    if (tiles_xy > INT_MAX) {
        cs_cuda_message(ctx, "%s: grid plane of %td x %td is too large", name,
                        p->n[1], p->n[2]);
        return CS_ERR_UNSUPPORTED;
    }
    p->tiles_x = tiles_x;
    /* planes per block as cc3d.cu takes them: about 2048 blocks in all,
       between 8 and 64 planes, so that the 2r planes a block reads
       beyond its own stay a small share */
    ptrdiff_t zc = CEIL_DIV(p->n[0] * tiles_xy, (ptrdiff_t)2048);
    zc = zc < 8 ? 8 : (zc > 64 ? 64 : zc);
    p->zc = zc < p->n[0] ? zc : p->n[0];
    const ptrdiff_t zblocks = CEIL_DIV(p->n[0], p->zc);
    const cudaStream_t st = ctx->stream;
    constexpr int T = CS_OS3_THREADS;
    for (p->zb0 = 0; p->zb0 < zblocks; p->zb0 += 65535) {
        const ptrdiff_t nb =
            zblocks - p->zb0 < 65535 ? zblocks - p->zb0 : 65535;
        dim3 grid((unsigned)tiles_xy, (unsigned)nb);
        cs_os_3d_kernel<K, SHAPE, STAGES, MINB><<<grid, T, 0, st>>>(*p);
        CS_TRY(cs_cuda_check_launch(ctx, name));
    }
    return CS_OK;
}

template <int K, int SHAPE>
static cs_status
os_3d_variant(cs_cuda_ctx *ctx, cs_os_params *p, int variant,
              const char *name)
{
    switch (variant) {
    case CS_OS_BLOCKS: return os_3d_launch<K, SHAPE, 3, 3>(ctx, p, name);
    case CS_OS_DEEP: return os_3d_launch<K, SHAPE, 4, 3>(ctx, p, name);
    default: return os_3d_launch<K, SHAPE, 3, 2>(ctx, p, name);
    }
}

cs_status
cs_os_launch_3d(cs_cuda_ctx *ctx, cs_os_params *p, int k, int shape,
                int variant)
{
    if (k == 3 && shape == CS_OS_BOX) {
        return os_3d_variant<3, CS_OS_BOX>(ctx, p, variant,
                                           "cs_os_3d_kernel<3, box>");
    }
    if (k == 3 && shape == CS_OS_STAR) {
        return os_3d_variant<3, CS_OS_STAR>(ctx, p, variant,
                                            "cs_os_3d_kernel<3, star>");
    }
    cs_cuda_message(ctx, "cs_os_launch_3d: no instance for side %d, shape %d",
                    k, shape);
    return CS_ERR_INVALID;
}
