/*
 * tb2d_rank1.cu -- tb2d's instances for 3 x 3 outer products (box2d9p), 1
 * to 8 steps per pass (tb2d.cuh says why they are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(1, 1, CS_CC2D_RANK1);
TBS_INSTANCES(1, 2, CS_CC2D_RANK1);
TBS_INSTANCES(1, 3, CS_CC2D_RANK1);
TBS_INSTANCES(1, 4, CS_CC2D_RANK1);
TBS_INSTANCES(1, 5, CS_CC2D_RANK1);
TBS_INSTANCES(1, 6, CS_CC2D_RANK1);
TBS_INSTANCES(1, 7, CS_CC2D_RANK1);
TBS_INSTANCES(1, 8, CS_CC2D_RANK1);
