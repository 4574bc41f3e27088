/*
 * tb2d_box_wide.cu -- tb2d's instances for full-rank boxes of sides 5
 * (1 to 3 steps per pass) and 7 (1), every one of the k x k taps a cell
 * and level (tb2d.cuh says why the instances are split).
 */
#include "tb2d_kernel.cuh"

TBS_INSTANCES(2, 1, CS_CC2D_BOX);
TBS_INSTANCES(2, 2, CS_CC2D_BOX);
TBS_INSTANCES(2, 3, CS_CC2D_BOX);
TBS_INSTANCES(3, 1, CS_CC2D_BOX);
