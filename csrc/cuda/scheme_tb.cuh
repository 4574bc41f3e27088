/*
 * scheme_tb.cuh -- several steps of a 2D scheme per trip through memory
 * (scheme_tb.cu): the schedule scheme.cu builds, the launch it calls.
 *
 * A pass takes each block's region of 64 columns x 32 or 64 rows into
 * shared memory, advances it `steps` steps (every stage of each), and
 * writes the middle of the region, where the values are still exact: a
 * halo of h = steps x (the stages' radii, summed) on each side is spent.
 * Fields live in shared-memory slots; which slot holds which field, and
 * where each update writes, follows from the same buffer rules as the
 * one-step passes (scheme.cu's assign_stage): a target read only at the
 * point may be overwritten in place, a rename moves no byte.  The
 * schedule lists those slots for every stage of every step of a pass.
 */
#pragma once
#include "check.cuh"
#include "../scheme_plan.h"

/* What a call hands the passes: the scheme's stage plans and the run. */
typedef struct sch_tb_call {
    const sch_stage_plan *plans;
    int stages;
    int fields;
    int nparams;
    const double *const *params;
    ptrdiff_t n[2]; /* rows, columns */
    ptrdiff_t planes; /* 1 in 2D */
    cs_mode mode;
    double cval;
} sch_tb_call;

/* One pass of `steps` (1..sc->steps) steps: fields from src[f], updated
   fields to dst[f] (NULL: a field no stage updates, not written); every
   dst apart from every src. */
cs_status
sch_tb_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
            const sch_tb_schedule *sc, const double *const *src,
            double *const *dst, int steps);
