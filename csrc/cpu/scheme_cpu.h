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
 * out[k] = field k after `steps` steps of scheme s, from in[k], for the
 * s->field_count fields; params[p] are its s->param_count parameter
 * fields.  Every array is C-contiguous float64 with extents shape[0..2]
 * (leading 1s for 1D and 2D; axis 2 contiguous).  The ins and params
 * are only read; an out may be any in (out[i] == in[i], or the fields
 * swapped), or overlap one: every in is read before any out is written.
 * The outs must not overlap each other.  steps == 0 copies.  Every
 * boundary mode, any radius (one larger than the grid included).
 * num_threads <= 0 uses the OpenMP default.  `intr` (may be NULL) is
 * polled between steps: CS_ERR_INTERRUPTED, the outs unwritten.  `info`
 * (may be NULL): backend "cpu", path "scheme".  CS_ERR_INVALID, with no
 * message, for what cs_scheme_check rejects.  No Python in here: the
 * caller releases the GIL.
 */
cs_status
cs_cpu_scheme_apply(const cs_scheme *s, const double *const *in,
                    double *const *out, const double *const *params,
                    const ptrdiff_t shape[3], cs_mode mode, double cval,
                    long steps, int num_threads, cs_run_info *info,
                    const cs_interrupt *intr);

#ifdef __cplusplus
}
#endif

#endif /* CS_SCHEME_CPU_H */
