/*
 * onestep_tiles.cu -- the instances and launcher of onestep.cuh's tile
 * kernel (planar grids, and 1D grids read as runs of tiles), compiled
 * apart from the other one-step kernels so that nvcc builds them in
 * parallel.
 */
#include "onestep.cuh"

#include <limits.h>

/* Threads, rows per thread and resident blocks per SM of an instance:
   persistent blocks of 512 threads, one per SM (the 7 x 7 box's 49 taps
   need the registers of blocks of 256, two per SM), as cc2d.cu's; a
   block per tile of 256 threads, as many resident as the registers of
   the wider kernels allow. */
static constexpr int
os_threads(int kx, int shape, int persist)
{
    return persist && !(kx == 7 && shape == CS_OS_BOX) ? 512 : 256;
}

static constexpr int
os_minb(int kx, int shape, int persist)
{
    return persist ? (os_threads(kx, shape, persist) == 512 ? 1 : 2)
                   : (kx == 3 ? 4 : (shape == CS_OS_BOX ? 2 : 3));
}

#define OS_CY 8

template <int KY, int KX, int SHAPE, bool FLAT, bool PERSIST>
static cs_status
os_launch(cs_cuda_ctx *ctx, cs_os_params *p, const char *name)
{
    constexpr int T = os_threads(KX, SHAPE, PERSIST);
    constexpr int MINB = os_minb(KX, SHAPE, PERSIST);
    typedef cs_os_config<T, OS_CY, MINB, FLAT, PERSIST> C;
    typedef cs_os_geom<KY, KX, T, OS_CY, FLAT> G;
    if (ctx->sms < 1) {
        cs_cuda_message(ctx, "%s: the device's SM count is not known", name);
        return CS_ERR_INVALID;
    }
    if (FLAT) {
        p->tiles_x = 1;
        p->tiles_plane = 1;
        p->tiles = CEIL_DIV(p->n[2], (ptrdiff_t)(G::TY * G::TX));
    } else {
        p->tiles_x = CEIL_DIV(p->n[2], (ptrdiff_t)G::TX);
        p->tiles_plane = p->tiles_x * CEIL_DIV(p->n[1], (ptrdiff_t)G::TY);
        if (p->tiles_plane > PTRDIFF_MAX / p->n[0]) {
            cs_cuda_message(ctx, "%s: grid too large", name);
            return CS_ERR_UNSUPPORTED;
        }
        p->tiles = p->tiles_plane * p->n[0];
    }
    const size_t smem = (PERSIST ? 2 : 1) * (size_t)G::TILE * sizeof(double);
    if (smem > 48 * 1024) { /* the opt-in; a block per tile needs none */
        CS_TRY(cs_cuda_allow_smem(ctx, cs_os_tile_kernel<KY, KX, SHAPE, C>,
                                  smem, name));
    }
    ptrdiff_t blocks = p->tiles;
    if (PERSIST) {
        const ptrdiff_t most = (ptrdiff_t)ctx->sms * MINB;
        blocks = blocks < most ? blocks : most;
    } else if (blocks > INT_MAX) {
        cs_cuda_message(ctx, "%s: grid too large", name);
        return CS_ERR_UNSUPPORTED;
    }
    const unsigned grid = (unsigned)blocks;
    cs_os_tile_kernel<KY, KX, SHAPE, C><<<grid, T, smem, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, name);
}

template <int KY, int KX, int SHAPE, bool FLAT>
static cs_status
os_variant(cs_cuda_ctx *ctx, cs_os_params *p, int variant, const char *name)
{
    if (variant == CS_OS_BLOCKS || variant == CS_OS_DEEP) {
        return os_launch<KY, KX, SHAPE, FLAT, false>(ctx, p, name);
    }
    return os_launch<KY, KX, SHAPE, FLAT, true>(ctx, p, name);
}

cs_status
cs_os_launch_tiles(cs_cuda_ctx *ctx, cs_os_params *p, int ky, int kx,
                   int shape, int flat, int variant)
{
    if (flat && ky == 1 && shape == CS_OS_BOX) {
        switch (kx) {
        case 3: return os_variant<1, 3, CS_OS_BOX, true>(
                    ctx, p, variant, "cs_os_tile_kernel<1d, 3>");
        case 5: return os_variant<1, 5, CS_OS_BOX, true>(
                    ctx, p, variant, "cs_os_tile_kernel<1d, 5>");
        case 7: return os_variant<1, 7, CS_OS_BOX, true>(
                    ctx, p, variant, "cs_os_tile_kernel<1d, 7>");
        default: break;
        }
    } else if (!flat && ky == kx) {
        switch (kx * 4 + shape) {
        case 12: return os_variant<3, 3, CS_OS_BOX, false>(
                     ctx, p, variant, "cs_os_tile_kernel<3, box>");
        case 13: return os_variant<3, 3, CS_OS_PLUS, false>(
                     ctx, p, variant, "cs_os_tile_kernel<3, plus>");
        case 20: return os_variant<5, 5, CS_OS_BOX, false>(
                     ctx, p, variant, "cs_os_tile_kernel<5, box>");
        case 21: return os_variant<5, 5, CS_OS_PLUS, false>(
                     ctx, p, variant, "cs_os_tile_kernel<5, plus>");
        case 22: return os_variant<5, 5, CS_OS_RANK1, false>(
                     ctx, p, variant, "cs_os_tile_kernel<5, rank 1>");
        case 28: return os_variant<7, 7, CS_OS_BOX, false>(
                     ctx, p, variant, "cs_os_tile_kernel<7, box>");
        case 29: return os_variant<7, 7, CS_OS_PLUS, false>(
                     ctx, p, variant, "cs_os_tile_kernel<7, plus>");
        case 30: return os_variant<7, 7, CS_OS_RANK1, false>(
                     ctx, p, variant, "cs_os_tile_kernel<7, rank 1>");
        default: break;
        }
    }
    cs_cuda_message(ctx, "cs_os_launch_tiles: no instance for %d x %d, "
                         "shape %d%s",
                    ky, kx, shape, flat ? ", 1D" : "");
    return CS_ERR_INVALID;
}
