/*
 * tb2d_3x3_deep.cu -- tb2d's instances for 3 x 3 boxes and pluses, 5 to 8
 * steps per pass (tb2d.cuh says why they are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(1, 5, CS_CC2D_BOX);
TBS_INSTANCES(1, 5, CS_CC2D_PLUS);
TBS_INSTANCES(1, 6, CS_CC2D_BOX);
TBS_INSTANCES(1, 6, CS_CC2D_PLUS);
TBS_INSTANCES(1, 7, CS_CC2D_BOX);
TBS_INSTANCES(1, 7, CS_CC2D_PLUS);
TBS_INSTANCES(1, 8, CS_CC2D_BOX);
TBS_INSTANCES(1, 8, CS_CC2D_PLUS);
