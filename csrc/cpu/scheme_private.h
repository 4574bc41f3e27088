/*
 * scheme_private.h -- what the two files of the CPU scheme engine share,
 * and nothing its callers need (their interface is scheme_cpu.h):
 * scheme_cpu.c holds the entry point, setup, halos and the step loop,
 * scheme_rows.c the row kernels every output is computed by.
 */
#ifndef CS_SCHEME_PRIVATE_H
#define CS_SCHEME_PRIVATE_H

#include "scheme_cpu.h"

#include <stddef.h>

/* Functions one file defines for the other bind inside the module. */
#if defined(__GNUC__)
#define CS_SCHEME_PRIVATE __attribute__((visibility("hidden")))
#else
#define CS_SCHEME_PRIVATE
#endif

/* Points of a row computed at a time: the row loops' scratch row and
   the rows they read stay in L1. */
#define SEGMENT 1024

/* The most factors a monomial has: every field to the highest power. */
#define MAX_FACTORS (CS_SCHEME_MAX_FIELDS * CS_SCHEME_MAX_POWER)

/* A term as the row kernels take it. */
typedef struct prep_term {
    cs_term_kind kind;
    double coef;
    int param;               /* -1: none */
    int field;               /* STENCIL: the field read */
    int ntaps;               /* STENCIL: its non-zero weights, C order */
    const ptrdiff_t *off;    /* STENCIL: their offsets in a buffer */
    const double *w;         /* STENCIL: the weights */
    int nfactors;            /* MONOMIAL: the product's length */
    int factor[MAX_FACTORS]; /* MONOMIAL: the field of each, in order */
} prep_term;

/*
 * One update over n points of one row (n <= SEGMENT): d[0 .. n) = the
 * sum of its terms terms[u->first_term ..].  field[f] and param[p] point
 * at the same point of every field (in a padded buffer, which the taps'
 * offsets address) and parameter field; t is SEGMENT doubles of scratch.
 * No term may read d.
 */
CS_SCHEME_PRIVATE void
cs_scheme_update_row(const prep_term *terms, const cs_update *u, double *d,
                     const double *const *field, const double *const *param,
                     double *t, ptrdiff_t n);

#endif /* CS_SCHEME_PRIVATE_H */
