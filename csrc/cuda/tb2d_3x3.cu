/*
 * tb2d_3x3.cu -- tb2d's instances for 3 x 3 kernels (boxes and pluses), 1 to 4 steps per pass
 * (tb2d.cuh says why they are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(1, 1, false);
TBS_INSTANCES(1, 1, true);
TBS_INSTANCES(1, 2, false);
TBS_INSTANCES(1, 2, true);
TBS_INSTANCES(1, 3, false);
TBS_INSTANCES(1, 3, true);
TBS_INSTANCES(1, 4, false);
TBS_INSTANCES(1, 4, true);
