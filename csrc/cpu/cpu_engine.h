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
 * What cs_cpu_apply runs for a call: its path, team and passes, and what
 * a performance model needs to price them (cs_cpu_plan_make).  Extents
 * are the engine's: a 2D grid {1, ny, nx} runs as {ny, 1, nx}.
 */
typedef struct cs_cpu_plan {
    int blocked;             /* 0: "direct", 1: "direct-temporal-blocked" */
    int threads;
    int depth;               /* steps per blocked pass (the last may do
                                fewer); 1 on the direct path */
    long passes;             /* blocked passes; `steps` on the direct path */
    ptrdiff_t run_shape[3];  /* the engine's grid */
    ptrdiff_t radius[3];
    ptrdiff_t tile[3];       /* blocked: output points of a tile per axis */
    ptrdiff_t tiles[3];      /* blocked: tiles per axis */
    int ntaps;               /* the kernel's nonzero taps */
    int separable;           /* the x factor's width of a separable row
                                kernel (cs_cpu engine), 0 */
    double row_taps;         /* multiply-adds a point and step */
    double computed;         /* blocked: points a step computes per output
                                point (margins included); 1 direct */
    double loaded;           /* blocked: points a pass loads per output
                                point (margins included); 1 direct */
    double ring_bytes;       /* blocked: one thread's ring planes */
    int ring_spills;         /* blocked: the rings spill from L2 */
    double buffer_bytes;     /* direct: each of its two padded buffers */
    int temp_grid;           /* blocked: a temporary grid (more than one
                                pass, or in place) */
} cs_cpu_plan;

/*
 * The plan of cs_cpu_apply for the same arguments (`in_place`: in is
 * out), made by the function that cs_cpu_apply calls.  The team depends
 * on the machine's load at the time of the call (threads.h) unless
 * num_threads > 0.  steps == 0: a copy, reported as a direct plan of no
 * passes.
 */
cs_status
cs_cpu_plan_make(const ptrdiff_t shape[3], const cs_kernel *kernel,
                 cs_mode mode, long steps, int num_threads, int in_place,
                 cs_cpu_plan *plan);

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
