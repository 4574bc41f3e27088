/*
 * cpu_engine.h -- the direct CPU engine: `steps` applications of a
 * stencil to a float64 grid, OpenMP across cores, vectorized inner loops,
 * spatial (and, where it pays, temporal) blocking.
 */
#ifndef CS_CPU_ENGINE_H
#define CS_CPU_ENGINE_H

#include "../stencil.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * out = stencil applied `steps` times to `in`, both C-contiguous with
 * extents shape[0..2] (leading 1s for 1D/2D).  `in` and `out` may be the
 * same buffer.  steps == 0 copies.  num_threads <= 0 uses the OpenMP
 * default.  Runs without touching Python: the caller releases the GIL.
 * `intr` (may be NULL) is polled between steps (CS_ERR_INTERRUPTED).
 * Every kernel extent must be odd; any radius is accepted (radius larger
 * than the grid included).
 */
cs_status
cs_cpu_apply(const double *in, double *out, const ptrdiff_t shape[3],
             const cs_kernel *kernel, cs_mode mode, double cval, long steps,
             int num_threads, cs_run_info *info, const cs_interrupt *intr);

/*
 * Recompute, step by step, the outputs of one fused pass that lie within
 * plan->band of an edge.  `in` is the grid before the pass, `out` holds
 * the fused result (interior exact) and is corrected in place.  `kernel`
 * is the unfused kernel; plan->depth steps are replayed on edge strips.
 */
cs_status
cs_cpu_fix_bands(const double *in, double *out, const ptrdiff_t shape[3],
                 const cs_kernel *kernel, const cs_fusion_plan *plan,
                 cs_mode mode, double cval, int num_threads);

#ifdef __cplusplus
}
#endif

#endif /* CS_CPU_ENGINE_H */
