/*
 * tb2d_rank1_wide.cu -- tb2d's instances for outer products of sides 5
 * and 7 (box2d49p), as many steps per pass as the pluses of those sides
 * (tb2d.cuh says why they are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(2, 1, CS_CC2D_RANK1);
TBS_INSTANCES(2, 2, CS_CC2D_RANK1);
TBS_INSTANCES(2, 3, CS_CC2D_RANK1);
TBS_INSTANCES(2, 4, CS_CC2D_RANK1);
TBS_INSTANCES(3, 1, CS_CC2D_RANK1);
TBS_INSTANCES(3, 2, CS_CC2D_RANK1);
TBS_INSTANCES(3, 3, CS_CC2D_RANK1);
