/*
 * scheme_stream.cuh -- streamed passes of a scheme: in 2D
 * (scheme_stream.cu) tb2d's streaming in registers (tb2d_kernel.cuh), in
 * 3D (scheme_stream3.cu) tb3d's down the planes, carried over to the
 * fields of a scheme, for the schemes sch_stream_tables_make takes.
 */
#pragma once
#include "scheme_tb.cuh"

/* The pattern of group (i, c, f) of tables t: from a kernel instance's
   signature SIG (sch_stream_signature's; 0: read from the tables at run
   time).  Known while compiling, each group's taps are specialised. */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ int
sst_group_kind(const sch_stream_tables &t, int i, int c, int f)
{
    return SIG != 0 ? (int)((SIG >> (5 * ((i * 2 + c) * K + f))) & 7u)
                    : t.kind[i][c][f];
}

/* Its centre coefficients' count, the same way. */
template <int K, unsigned long long SIG>
static __device__ __forceinline__ int
sst_group_centres(const sch_stream_tables &t, int i, int c, int f)
{
    return SIG != 0 ? (int)((SIG >> (5 * ((i * 2 + c) * K + f) + 3)) & 3u)
                    : t.ncentre[i][c][f];
}

/* One pass of `steps` steps (1 .. sch_stream_max_depth(t)): fields from
   src[f], updated fields to dst[f] (NULL: a field no update sets, not
   written); every dst apart from every src; the grid at least
   CS_TB2D_MIN_EXTENT rows and columns. */
cs_status
sch_stream_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
                const sch_stream_tables *t, const double *const *src,
                double *const *dst, int steps);

/* The same for tables of a 3D scheme (t->ndim == 3): the grid at least
   SST3_MIN_EXTENT planes, rows and columns. */
cs_status
sch_stream3_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
                 const sch_stream_tables *t, const double *const *src,
                 double *const *dst, int steps);
