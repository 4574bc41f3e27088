/*
 * scheme_stream.cuh -- streamed passes of a 2D scheme (scheme_stream.cu):
 * tb2d's streaming in registers (tb2d_kernel.cuh) carried over to the
 * fields of a scheme, for the schemes sch_stream_tables_make takes.
 */
#pragma once
#include "scheme_tb.cuh"

/* One pass of `steps` steps (1 .. sch_stream_max_depth(t)): fields from
   src[f], updated fields to dst[f] (NULL: a field no update sets, not
   written); every dst apart from every src; the grid at least
   CS_TB2D_MIN_EXTENT rows and columns. */
cs_status
sch_stream_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
                const sch_stream_tables *t, const double *const *src,
                double *const *dst, int steps);
