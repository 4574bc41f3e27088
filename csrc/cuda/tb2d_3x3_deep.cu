/*
 * tb2d_3x3_deep.cu -- tb2d's instances for 3 x 3 kernels (boxes and pluses), 5 to 8 steps per pass
 * (tb2d.cuh says why they are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(1, 5, false);
TBS_INSTANCES(1, 5, true);
TBS_INSTANCES(1, 6, false);
TBS_INSTANCES(1, 6, true);
TBS_INSTANCES(1, 7, false);
TBS_INSTANCES(1, 7, true);
TBS_INSTANCES(1, 8, false);
TBS_INSTANCES(1, 8, true);
