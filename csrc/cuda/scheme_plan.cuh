/*
 * scheme_plan.cuh -- a scheme's stage as the GPU kernels read it: its
 * terms and the nonzero weights of its stencils, built once per call on
 * the host (scheme.cu) and read by the one-step kernel (scheme.cu) and
 * the temporally blocked one (scheme_tb.cu).
 */
#pragma once
#include "../scheme.h"

#include <stddef.h>

/* A term, as the kernel reads it. */
typedef struct sch_term {
    double coef;
    int kind;       /* CS_TERM_STENCIL or CS_TERM_MONOMIAL */
    int param;      /* the parameter field, -1: none */
    int field;      /* stencil: the field correlated */
    int tap0;       /* stencil: its taps, [tap0, tap0 + ntaps) */
    int ntaps;
    unsigned pow;   /* monomial: 4 bits of power per pointwise slot */
} sch_term;

/* An output of a launch: a sum of terms, or a copy of a pointwise slot
   (a rename the last stage writes). */
typedef struct sch_out {
    int first_term;
    int term_count;
    int copy;       /* the slot copied, or -1: the sum */
} sch_out;

/* The plan of a stage: its updates, which are renames, the fields its
   sums read through stencils and at the point, and its terms and taps. */
typedef struct sch_stage_plan {
    int count;                         /* its updates */
    int target[CS_SCHEME_MAX_FIELDS];  /* per update: the field it sets */
    int rename[CS_SCHEME_MAX_FIELDS];  /* per update: the field it copies
                                          (a rename), or -1 (a sum) */
    unsigned targets, stencil_read;    /* a bit per field */
    sch_out out[CS_SCHEME_MAX_FIELDS]; /* per update: a sum's terms */
    int npw;                           /* pointwise slots of its sums */
    int pw_field[CS_SCHEME_MAX_FIELDS];
    int r[3];
    int nterms, ntaps;
    sch_term *terms;                   /* nterms, host memory */
    double *tap_w;                     /* ntaps each */
    ptrdiff_t *tap_off;
    int (*tap_d)[3];
} sch_stage_plan;
