/*
 * bands.cuh -- halo refresh before a step or pass, and the band fix-up
 * of a fused tensor-core pass in edge strips (bands.cu).
 */
#ifndef CS_CUDA_BANDS_CUH
#define CS_CUDA_BANDS_CUH

#include "kernels.cuh"
#include "resources.cuh"

/*
 * Refresh g's halo for the next step or pass: a folded 1D grid's
 * (fold_points > 0: its x-halos copy the neighbouring rows, the mode past
 * the ends) every time; otherwise per mode, constant halos once per
 * buffer (`*filled`: nothing else writes them).
 */
cs_status
cs_refresh_halo(cs_cuda_ctx *ctx, const cs_dgrid *g, ptrdiff_t fold_points,
                cs_mode mode, double cval, int *filled);

/* A scratch pair for the band fix-up along one axis. */
typedef struct cs_band_job {
    int active;
    cs_dgrid buf[2];
    int filled[2];
} cs_band_job;

/*
 * Start the band fix-ups of the pass reading src: once src is ready on
 * ctx->stream, the lane's band stream gathers every active axis's two
 * edge strips and runs plan->depth unfused steps of k on them.
 */
cs_status
cs_bands_start(cs_cuda_ctx *ctx, const cs_lane *lane, cs_band_job jobs[3],
               const cs_dgrid *src, const cs_fusion_plan *plan,
               const cs_dkernel *k, cs_mode mode, double cval);

/* Finish them after the pass's main kernel: ctx->stream waits for the
   band stream, then scatters the bands into dst. */
cs_status
cs_bands_finish(cs_cuda_ctx *ctx, const cs_lane *lane,
                const cs_band_job jobs[3], const cs_dgrid *dst,
                const cs_fusion_plan *plan);

#endif /* CS_CUDA_BANDS_CUH */
