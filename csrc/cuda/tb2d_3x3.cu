/*
 * tb2d_3x3.cu -- tb2d's instances for 3 x 3 boxes and pluses, 1 to 4 steps
 * per pass (tb2d.cuh says why they are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(1, 1, CS_CC2D_BOX);
TBS_INSTANCES(1, 1, CS_CC2D_PLUS);
TBS_INSTANCES(1, 2, CS_CC2D_BOX);
TBS_INSTANCES(1, 2, CS_CC2D_PLUS);
TBS_INSTANCES(1, 3, CS_CC2D_BOX);
TBS_INSTANCES(1, 3, CS_CC2D_PLUS);
TBS_INSTANCES(1, 4, CS_CC2D_BOX);
TBS_INSTANCES(1, 4, CS_CC2D_PLUS);
