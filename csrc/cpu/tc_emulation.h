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
 * Same contract as cs_cpu_apply.  Kernels wider than the layout allows
 * (kx > 15, or ky > 15, or kz any size with a plane that does not fit)
 * return CS_ERR_UNSUPPORTED.  Fuses time steps by the same plan as the
 * GPU (cs_fusion_plan_make with max side 7 per axis in 2D/3D, 15 in 1D)
 * and fixes the boundary band with cs_cpu_fix_bands.  `intr` is polled
 * between passes.
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
