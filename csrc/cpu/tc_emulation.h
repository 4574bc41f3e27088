/*
 * tc_emulation.h -- dual tessellation emulated on the CPU
 * (backend "cpu-tc"): the exact algorithm the tensor-core kernels run,
 * tile by tile, so it can be verified without a GPU.
 */
#ifndef CS_TC_EMULATION_H
#define CS_TC_EMULATION_H

#include "../stencil.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Same contract as cs_cpu_apply.  Runs the GPU's tensor-core plan
 * (cs_plan_make, plan.h): kernels the GPU's tensor cores do not run
 * (more than 7 per axis, or 31 points in 1D) return CS_ERR_UNSUPPORTED;
 * time steps are fused as the plan says and the boundary band fixed
 * with cs_cpu_fix_bands.  `intr` is polled between passes.
 */
cs_status
cs_tc_emulation_apply(const double *in, double *out, const ptrdiff_t shape[3],
                      const cs_kernel *kernel, cs_mode mode, double cval,
                      long steps, int num_threads, cs_run_info *info,
                      const cs_interrupt *intr);

#ifdef __cplusplus
}
#endif

#endif /* CS_TC_EMULATION_H */
