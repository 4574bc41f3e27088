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
#include "scheme_plan.cuh"

#define SCH_TB_COLUMNS 64     /* a region's width */
#define SCH_TB_THREADS 512    /* 32 x 16 */
#define SCH_TB_STAGES 4       /* stages of a scheme the pass takes */
#define SCH_TB_INSTANCES 64   /* steps x stages of a pass */
#define SCH_TB_TERMS 64       /* terms of all stages together */
#define SCH_TB_TAPS 256       /* nonzero weights of all stages together */

/* The slots of a pass, stage by stage (instance i = step x stages +
   stage).  from[i][f]: the slot holding field f as instance i begins
   (from[steps x stages]: after the pass); dst[i][j]: the slot update j
   of the instance writes, -1 for a rename (nothing is written). */
typedef struct sch_tb_schedule {
    int steps;   /* of a full pass */
    int rows;    /* the region's rows: 32 or 64 */
    int halo[2]; /* rows and columns spent on each side */
    int slots;   /* field slots in shared memory, K and scratch ones */
    unsigned char from[SCH_TB_INSTANCES + 1][CS_SCHEME_MAX_FIELDS];
    signed char dst[SCH_TB_INSTANCES][CS_SCHEME_MAX_FIELDS];
} sch_tb_schedule;

/* What a call hands the passes: the scheme's stage plans and the run. */
typedef struct sch_tb_call {
    const sch_stage_plan *plans;
    int stages;
    int fields;
    int nparams;
    const double *const *params;
    ptrdiff_t n[2]; /* rows, columns */
    cs_mode mode;
    double cval;
} sch_tb_call;

/* Bytes of shared memory a block of schedule `sc` takes. */
size_t
sch_tb_smem(const sch_tb_schedule *sc, int nparams);

/* Can the passes take these plans at all (sizes of their tables)? */
int
sch_tb_fits(const sch_stage_plan *plans, int stages);

/* One pass of `steps` (1..sc->steps) steps: fields from src[f], updated
   fields to dst[f] (NULL: a field no stage updates, not written); every
   dst apart from every src. */
cs_status
sch_tb_pass(cs_cuda_ctx *ctx, const sch_tb_call *call,
            const sch_tb_schedule *sc, const double *const *src,
            double *const *dst, int steps);
