/*
 * tb2d_plus.cu -- tb2d's instances for pluses of side 5 (1 to 4 steps per
 * pass) and 7 (1 to 3) (tb2d.cuh says why they are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(2, 1, CS_CC2D_PLUS);
TBS_INSTANCES(2, 2, CS_CC2D_PLUS);
TBS_INSTANCES(2, 3, CS_CC2D_PLUS);
TBS_INSTANCES(2, 4, CS_CC2D_PLUS);
TBS_INSTANCES(3, 1, CS_CC2D_PLUS);
TBS_INSTANCES(3, 2, CS_CC2D_PLUS);
TBS_INSTANCES(3, 3, CS_CC2D_PLUS);
