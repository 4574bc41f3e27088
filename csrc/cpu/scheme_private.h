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

/* Buffers of a run at most: one per field and parameter field, and one
   more per target of a stage. */
#define MAX_BUFFERS (2 * CS_SCHEME_MAX_FIELDS + CS_SCHEME_MAX_PARAMS)

/* Buffers start at, and interior rows are aligned to, a cache line. */
#define ALIGN_DOUBLES 8

/*
 * Buffers of a pool lie whole pages and STAGGER_DOUBLES apart: the same
 * point of two buffers would otherwise share its address modulo 4 KiB,
 * so that every load of one after a store to the other waits for the
 * store (4K aliasing).  17 lines: distinct offsets within a page for 64
 * buffers.
 */
#define STAGGER_DOUBLES (17 * ALIGN_DOUBLES)

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* Padded buffers' geometry: point (z, y, x) of extents n, with a halo
   of r[a] on each side of axis a, is at origin + z * plane + y * row + x. */
typedef struct geom {
    ptrdiff_t n[3];
    ptrdiff_t r[3];          /* halo width per axis */
    ptrdiff_t row;
    ptrdiff_t plane;
    ptrdiff_t origin;
    size_t size;             /* doubles per buffer */
} geom;

/* The halo of one axis: halo indices (beyond 0 .. n - 1) and the index
   whose copy each holds (its source); count 0 where nothing is copied
   (the constant mode, whose halo is filled once). */
typedef struct axis_halo {
    int count;
    ptrdiff_t *index;
    ptrdiff_t *source;
} axis_halo;

/* What the row kernels read for buffers of one geometry: each term, its
   taps' offsets and weights, and per update the field it merely copies
   (-1: none). */
typedef struct scheme_tables {
    prep_term *terms;
    ptrdiff_t *tap_off;
    double *tap_w;
    int *copy_of;
} scheme_tables;

/* The geometry for extents `shape` and halo r (rows start on a cache
   line); 0 when a buffer's size overflows. */
CS_SCHEME_PRIVATE int
cs_scheme_geom_init(geom *g, const ptrdiff_t shape[3], const ptrdiff_t r[3]);

/* Offset of row (z, y) from a buffer's origin (z, y may lie in the halo). */
static inline ptrdiff_t
cs_scheme_row_at(const geom *g, ptrdiff_t z, ptrdiff_t y)
{
    return z * g->plane + y * g->row;
}

/* The halo of an axis of n points with r halo points a side under
   `mode` (allocated: free with cs_scheme_axis_halo_free, also after a
   failure); CS_ERR_NOMEM. */
CS_SCHEME_PRIVATE cs_status
cs_scheme_axis_halo_init(axis_halo *h, ptrdiff_t n, ptrdiff_t r,
                         cs_mode mode);

CS_SCHEME_PRIVATE void
cs_scheme_axis_halo_free(axis_halo *h);

/* The tables of scheme s for buffers of geometry g; free with
   cs_scheme_tables_free (also after a failure). */
CS_SCHEME_PRIVATE cs_status
cs_scheme_tables_init(scheme_tables *t, const cs_scheme *s, const geom *g);

CS_SCHEME_PRIVATE void
cs_scheme_tables_free(scheme_tables *t);

/* Buffers a run needs besides the fields': one per non-copy update of
   the stage that has most. */
CS_SCHEME_PRIVATE int
cs_scheme_targets_most(const cs_scheme *s, const int *copy_of);

/*
 * The buffers stage `stage` writes, from the fields' buffers fb (of
 * nbuf): dst[j] for its update j (-1: a plain copy, nothing written),
 * each one no field points at; and next, the fields' buffers after it.
 */
CS_SCHEME_PRIVATE void
cs_scheme_assign_stage(const cs_scheme *s, const int *copy_of,
                       const cs_stage *stage, const int *fb, int *dst,
                       int *next);

/*
 * Cells [x0, x1) of row (z, y) of a buffer of geometry g (base: its
 * origin) were just written: write their copies, the x halo cells of the
 * row whose sources they are, and the same cells of every halo row and
 * plane that maps to row (z, y) (halo[0], halo[1], halo[2]: z, y, x).
 */
CS_SCHEME_PRIVATE void
cs_scheme_write_copies(const geom *g, const axis_halo *halo, double *base,
                       ptrdiff_t z, ptrdiff_t y, ptrdiff_t x0, ptrdiff_t x1);

/* The work of one stage at a point, on average over the stages, in
   point-factors (each term's taps or factors, and one for the term). */
CS_SCHEME_PRIVATE double
cs_scheme_point_work(const cs_scheme *s, const scheme_tables *t);

/* The doubles a block needs to hold `count` buffers of `size` doubles,
   each aligned to a cache line and staggered (cs_scheme_carve); 0 when
   that overflows. */
CS_SCHEME_PRIVATE size_t
cs_scheme_pool_doubles(int count, size_t size);

/* Carve `count` buffers of `size` doubles out of `block` into buf[0 ..
   count); returns the first double after them (aligned). */
CS_SCHEME_PRIVATE double *
cs_scheme_carve(double *block, int count, size_t size, double **buf);

#endif /* CS_SCHEME_PRIVATE_H */
