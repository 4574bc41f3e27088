/*
 * scheme_cpu.h -- the CPU engine of PDE schemes (scheme.h): K fields
 * advanced together, one step a sequence of stages, OpenMP across cores.
 */
#ifndef CS_SCHEME_CPU_H
#define CS_SCHEME_CPU_H

#include "../scheme.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * How the engine runs a scheme's steps: whole-grid passes, one a stage
 * (blocked 0, depth 1), or blocked passes of `depth` steps over tiles of
 * up to tile[0] x tile[1] rows along axes 0 and 1 (count[0] x count[1]
 * of them) with margins of margin[0] and margin[1] rows (depth times a
 * step's reach along a cut axis, 0 along a whole one), rows whole along
 * axis 2 (scheme_blocked.c).
 */
typedef struct cs_scheme_cpu_plan {
    int blocked;
    int depth;
    ptrdiff_t tile[2];
    ptrdiff_t count[2];
    ptrdiff_t margin[2];     /* rows a tile loads beyond its own, a side */
    double tile_bytes;       /* one thread's tile buffers (0: not planned) */
    int tile_spills;         /* they exceed the L2 budget the planner prices */
} cs_scheme_cpu_plan;

/*
 * The engine's plan for `steps` steps of scheme s on `shape` under
 * `mode` with nt threads: blocked where its cost model prices the
 * blocked passes below the whole-grid ones.  CS_ERR_NOMEM only.
 */
cs_status
cs_cpu_scheme_plan(const cs_scheme *s, const ptrdiff_t shape[3],
                   cs_mode mode, long steps, int nt,
                   cs_scheme_cpu_plan *plan);

/*
 * The plan and the threads cs_cpu_scheme_apply would run `steps` steps
 * of scheme s with (num_threads as it takes it; like it, this reads the
 * machine's load now): for explain().  CS_ERR_NOMEM only.
 */
cs_status
cs_cpu_scheme_choose(const cs_scheme *s, const ptrdiff_t shape[3],
                     cs_mode mode, long steps, int num_threads,
                     cs_scheme_cpu_plan *plan, int *threads);

/*
 * A blocked plan of `depth` steps a pass over count[0] x count[1] tiles,
 * as a test or a benchmark forces it; CS_ERR_INVALID where the grid
 * cannot be cut so (a tile of fewer than r + 1 rows, or an axis of 2 r
 * rows or fewer cut at all).
 */
cs_status
cs_cpu_scheme_plan_forced(const cs_scheme *s, const ptrdiff_t shape[3],
                          int depth, const ptrdiff_t count[2],
                          cs_scheme_cpu_plan *plan);

/*
 * out[k] = field k after `steps` steps of scheme s, from in[k], for the
 * s->field_count fields; params[p] are its s->param_count parameter
 * fields.  Every array is C-contiguous float64 with extents shape[0..2]
 * (leading 1s for 1D and 2D; axis 2 contiguous).  The ins and params
 * are only read; an out may be any in (out[i] == in[i], or the fields
 * swapped), or overlap one: every in is read before any out is written.
 * The outs must not overlap each other.  steps == 0 copies.  Every
 * boundary mode, any radius (one larger than the grid included).
 * num_threads <= 0 uses the OpenMP default.  `intr` (may be NULL) is
 * polled between steps (between blocked passes): CS_ERR_INTERRUPTED, the
 * outs unwritten.  `force` (NULL: the engine's own plan,
 * cs_cpu_scheme_plan) fixes the plan.  `info` (may be NULL): backend
 * "cpu", path "scheme" or "scheme-blocked" with its depth and passes.
 * CS_ERR_INVALID, with no message, for what cs_scheme_check rejects.  No
 * Python in here: the caller releases the GIL.
 */
cs_status
cs_cpu_scheme_apply(const cs_scheme *s, const double *const *in,
                    double *const *out, const double *const *params,
                    const ptrdiff_t shape[3], cs_mode mode, double cval,
                    long steps, int num_threads,
                    const cs_scheme_cpu_plan *force, cs_run_info *info,
                    const cs_interrupt *intr);

/*
 * The blocked passes of plan p (cs_cpu_scheme_apply's contract, on nt
 * threads; the caller has checked the arguments): scheme_blocked.c.
 */
cs_status
cs_cpu_scheme_run_blocked(const cs_scheme *s, const cs_scheme_cpu_plan *p,
                          const double *const *in, double *const *out,
                          const double *const *params,
                          const ptrdiff_t shape[3], cs_mode mode, double cval,
                          long steps, int nt, const cs_interrupt *intr);

#ifdef __cplusplus
}
#endif

#endif /* CS_SCHEME_CPU_H */
