/*
 * scheme_cpu.c -- the CPU engine of PDE schemes (scheme_cpu.h).
 *
 * Every field lives in a buffer of its own, padded by the scheme's
 * radius on each side of each axis, so that a stencil term reads its
 * taps with no boundary branch: before a stage reads a buffer through a
 * stencil, its halo is filled from the mode (x first, row by row, by the
 * thread that wrote the row where it wrote it whole; then the y halo
 * rows and the z halo planes are copied whole, so the corners follow, as
 * the modes extend each axis independently).  A constant halo is written
 * once per buffer: only interiors are ever written.
 *
 * A stage writes each target into a free buffer of a small pool (a
 * field's old values must stay readable until the stage ends) and the
 * field then points at it.  An update that merely copies a field
 * (u_prev <- u) writes nothing: its target points at the source's
 * buffer, shared and never written in place.  The ins are copied into
 * buffers before the first step and the outs written after the last, so
 * any aliasing between them gives the right result.
 *
 * OpenMP shares the rows of a stage among the threads in contiguous
 * blocks (pieces of rows where rows are few: 1D grids).  A row is
 * computed SEGMENT points at a time, all the stage's updates in turn, so
 * the fields' rows that several updates read are still in cache.  An
 * update sums its terms in order, acc = 0; acc += (coef * param) *
 * value: a stencil's value from its list of non-zero taps (offset,
 * weight) in the kernel's C order, a monomial's as the product of its
 * factors.  Blocks of BLOCK points keep every value and the sum in
 * vector registers (update_block); a shorter row, or a compiler without
 * GCC's vector types, takes loops over x into an L1 scratch row, one
 * pass per tap (update_row), which the compiler vectorizes.  Both do the
 * same operations in the same order: the same bits.
 */
#include "scheme_cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Points of a row computed at a time: the row loops' scratch row and
   the rows they read stay in L1. */
#define SEGMENT 1024

/* Fewest points per piece when rows are split among threads. */
#define MIN_PIECE 512

/* Point-factors per stage below which one more thread costs more than
   it saves. */
#define MIN_WORK_PER_THREAD (1 << 16)

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* The most factors a monomial has: every field to the highest power. */
#define MAX_FACTORS (CS_SCHEME_MAX_FIELDS * CS_SCHEME_MAX_POWER)

/* Buffers: one per field, and one more per target of a stage. */
#define MAX_BUFFERS (2 * CS_SCHEME_MAX_FIELDS)

/* Buffers start at, and interior rows are aligned to, a cache line. */
#define ALIGN_DOUBLES 8

/*
 * Buffer b starts b * STAGGER_DOUBLES past a cache line: large blocks
 * come page-aligned from the allocator, and the same point of two
 * buffers would otherwise share its address modulo 4 KiB, so that every
 * load of one after a store to the other waits for the store (4K
 * aliasing).  17 lines: distinct offsets within a page for 64 buffers.
 */
#define STAGGER_DOUBLES (17 * ALIGN_DOUBLES)

/* A term as the row loops take it. */
typedef struct prep_term {
    cs_term_kind kind;
    double coef;
    int param;               /* -1: none */
    int field;               /* STENCIL: the field read */
    int ntaps;               /* STENCIL: its non-zero weights */
    const ptrdiff_t *off;    /* STENCIL: their offsets in a buffer */
    const double *w;         /* STENCIL: the weights */
    int nfactors;            /* MONOMIAL: the product's length */
    int factor[MAX_FACTORS]; /* MONOMIAL: the field of each, in order */
} prep_term;

/* The padded buffers' geometry: point (z, y, x) of the grid is at
   origin + z * plane + y * row + x. */
typedef struct geom {
    ptrdiff_t n[3];
    ptrdiff_t r[3];          /* halo width per axis */
    ptrdiff_t row;
    ptrdiff_t plane;
    ptrdiff_t origin;
    size_t size;             /* doubles per buffer */
} geom;

/* Everything a run holds. */
typedef struct scheme_run {
    const cs_scheme *s;
    geom g;
    cs_mode mode;
    double cval;
    int nt;
    ptrdiff_t split;         /* pieces per row, one thread each */
    int x_at_write;          /* x halos filled as rows are written */
    prep_term *terms;        /* one per scheme term */
    ptrdiff_t *tap_off;      /* every stencil's non-zero taps */
    double *tap_w;
    int *copy_of;            /* per update: the field it copies, or -1 */
    double *scratch;         /* SEGMENT doubles per thread */
    void *raw[MAX_BUFFERS];  /* as allocated */
    double *buf[MAX_BUFFERS];/* aligned; NULL until first used */
    int stale[MAX_BUFFERS];  /* the halo needs filling (but for x halos
                                where x_at_write) */
    int field_buf[CS_SCHEME_MAX_FIELDS];
} scheme_run;

/* ------------------------------------------------------------------ */
/* Setup                                                                */
/* ------------------------------------------------------------------ */

static int
thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Threads to use: the request (or OpenMP's default), capped by the work. */
static int
choose_threads(int requested, double work)
{
    int nt = 1;
#ifdef _OPENMP
    nt = requested > 0 ? requested : omp_get_max_threads();
#else
    (void)requested;
#endif
    const double useful = work / MIN_WORK_PER_THREAD;
    if (useful < nt) {
        nt = useful < 1.0 ? 1 : (int)useful;
    }
    return nt;
}

/* a * b into *out unless it overflows ptrdiff_t (a, b >= 0). */
static int
mul_ok(ptrdiff_t a, ptrdiff_t b, ptrdiff_t *out)
{
    if (a != 0 && b > PTRDIFF_MAX / a) {
        return 0;
    }
    *out = a * b;
    return 1;
}

/*
 * The geometry for grid `shape` and halo r.  Each row starts with `lead`
 * unused doubles so that its point x = 0 lies on a cache line; a row's
 * length is rounded up to whole lines.  0 when the buffer's size
 * overflows.
 */
static int
geom_init(geom *g, const ptrdiff_t shape[3], const ptrdiff_t r[3])
{
    const ptrdiff_t lead = (ALIGN_DOUBLES - r[2] % ALIGN_DOUBLES)
                           % ALIGN_DOUBLES;
    ptrdiff_t held[3], total;
    for (int a = 0; a < 3; a++) {
        g->n[a] = shape[a];
        g->r[a] = r[a];
        if (r[a] > (PTRDIFF_MAX / 4 - shape[a]) / 2) {
            return 0;
        }
        held[a] = shape[a] + 2 * r[a];
    }
    g->row = (lead + held[2] + ALIGN_DOUBLES - 1) / ALIGN_DOUBLES
             * ALIGN_DOUBLES;
    if (!mul_ok(held[1], g->row, &g->plane)
        || !mul_ok(held[0], g->plane, &total)
        || (size_t)total > SIZE_MAX / sizeof(double) - ALIGN_DOUBLES
                               - MAX_BUFFERS * STAGGER_DOUBLES) {
        return 0;
    }
    g->size = (size_t)total;
    g->origin = r[0] * g->plane + r[1] * g->row + lead + r[2];
    return 1;
}

/* Offset of grid row (z, y) from a buffer's origin. */
static ptrdiff_t
row_at(const geom *g, ptrdiff_t z, ptrdiff_t y)
{
    return z * g->plane + y * g->row;
}

static void
run_free(scheme_run *run)
{
    free(run->terms);
    free(run->tap_off);
    free(run->tap_w);
    free(run->copy_of);
    free(run->scratch);
    for (int b = 0; b < MAX_BUFFERS; b++) {
        free(run->raw[b]);
    }
}

/* Whether update u is `target = 1 * field` (a plain copy): its field, or
   -1.  Exact: 0 + (1 * 1) * x is x, but for the sign of a zero. */
static int
copied_field(const scheme_run *run, const cs_update *u)
{
    if (u->term_count != 1) {
        return -1;
    }
    const prep_term *t = &run->terms[u->first_term];
    if (t->kind != CS_TERM_MONOMIAL || t->coef != 1.0 || t->param >= 0
        || t->nfactors != 1) {
        return -1;
    }
    return t->factor[0];
}

/*
 * The tables the row loops read: each term's taps (the non-zero weights
 * of its stencil, in C order, with their offsets in a padded buffer) or
 * factors, and which updates are plain copies.
 */
static cs_status
run_prepare(scheme_run *run)
{
    const cs_scheme *s = run->s;
    const geom *g = &run->g;
    size_t ntaps = 0;
    for (int i = 0; i < s->stencil_count; i++) {
        ntaps += (size_t)cs_kernel_count(&s->stencils[i]);
    }
    run->terms = malloc((size_t)(s->term_count > 0 ? s->term_count : 1)
                        * sizeof(prep_term));
    run->tap_off = malloc((ntaps > 0 ? ntaps : 1) * sizeof(ptrdiff_t));
    run->tap_w = malloc((ntaps > 0 ? ntaps : 1) * sizeof(double));
    run->copy_of = malloc((size_t)(s->update_count > 0 ? s->update_count
                                                        : 1) * sizeof(int));
    if (run->terms == NULL || run->tap_off == NULL || run->tap_w == NULL
        || run->copy_of == NULL) {
        return CS_ERR_NOMEM;
    }
    /* each stencil's taps once, however many terms use it */
    size_t at = 0;
    for (int i = 0; i < s->term_count; i++) {
        const cs_term *t = &s->terms[i];
        prep_term *p = &run->terms[i];
        memset(p, 0, sizeof(*p));
        p->kind = t->kind;
        p->coef = t->coef;
        p->param = t->param;
        if (t->kind == CS_TERM_STENCIL) {
            p->field = t->field;
            for (int j = 0; j < i; j++) {
                if (s->terms[j].kind == CS_TERM_STENCIL
                    && s->terms[j].stencil == t->stencil) {
                    p->ntaps = run->terms[j].ntaps;
                    p->off = run->terms[j].off;
                    p->w = run->terms[j].w;
                    break;
                }
            }
            if (p->off != NULL) {
                continue;
            }
            const cs_kernel *k = &s->stencils[t->stencil];
            const ptrdiff_t count = cs_kernel_count(k);
            p->off = run->tap_off + at;
            p->w = run->tap_w + at;
            for (ptrdiff_t q = 0; q < count; q++) {
                if (k->weights[q] == 0.0) {
                    continue; /* skipped, as scipy.ndimage does */
                }
                const ptrdiff_t dz = q / (k->size[1] * k->size[2])
                                     - cs_kernel_radius(k, 0);
                const ptrdiff_t dy = q / k->size[2] % k->size[1]
                                     - cs_kernel_radius(k, 1);
                const ptrdiff_t dx = q % k->size[2] - cs_kernel_radius(k, 2);
                run->tap_off[at] = dz * g->plane + dy * g->row + dx;
                run->tap_w[at] = k->weights[q];
                at++;
                p->ntaps++;
            }
        }
        else {
            p->field = -1;
            for (int f = 0; f < s->field_count; f++) {
                for (int e = 0; e < t->power[f]; e++) {
                    p->factor[p->nfactors++] = f;
                }
            }
        }
    }
    for (int u = 0; u < s->update_count; u++) {
        run->copy_of[u] = copied_field(run, &s->updates[u]);
    }
    return CS_OK;
}

/* Buffer b, allocated on first use; CS_ERR_NOMEM when it cannot be. */
static cs_status
buffer_get(scheme_run *run, int b)
{
    if (run->buf[b] != NULL) {
        return CS_OK;
    }
    const size_t stagger = (size_t)b * STAGGER_DOUBLES;
    run->raw[b] = malloc((run->g.size + ALIGN_DOUBLES + stagger)
                         * sizeof(double));
    if (run->raw[b] == NULL) {
        return CS_ERR_NOMEM;
    }
    const uintptr_t line = ALIGN_DOUBLES * sizeof(double);
    const uintptr_t addr = (uintptr_t)run->raw[b];
    run->buf[b] = (double *)(void *)((char *)run->raw[b]
                                     + (line - addr % line) % line)
                  + stagger;
    run->stale[b] = 1;
    return CS_OK;
}

/* ------------------------------------------------------------------ */
/* Halos                                                                */
/* ------------------------------------------------------------------ */

/* The x halo of one row (`row` points at its x = 0). */
static void
fill_row_halo(const scheme_run *run, double *row)
{
    const ptrdiff_t n = run->g.n[2];
    for (ptrdiff_t k = 1; k <= run->g.r[2]; k++) {
        const ptrdiff_t lo = cs_extend_index(-k, n, run->mode);
        const ptrdiff_t hi = cs_extend_index(n - 1 + k, n, run->mode);
        row[-k] = lo < 0 ? run->cval : row[lo];
        row[n - 1 + k] = hi < 0 ? run->cval : row[hi];
    }
}

/* Halo row y (outside the grid) of plane z, whole: x halo included. */
static void
fill_halo_row(const scheme_run *run, double *base, ptrdiff_t z,
              ptrdiff_t y)
{
    const geom *g = &run->g;
    const ptrdiff_t m = cs_extend_index(y, g->n[1], run->mode);
    const ptrdiff_t len = g->n[2] + 2 * g->r[2];
    double *dst = base + row_at(g, z, y) - g->r[2];
    if (m < 0) {
        for (ptrdiff_t i = 0; i < len; i++) {
            dst[i] = run->cval;
        }
    }
    else {
        memcpy(dst, base + row_at(g, z, m) - g->r[2],
               (size_t)len * sizeof(double));
    }
}

/* Halo plane z (outside the grid), whole. */
static void
fill_halo_plane(const scheme_run *run, double *base, ptrdiff_t z)
{
    const geom *g = &run->g;
    const ptrdiff_t m = cs_extend_index(z, g->n[0], run->mode);
    double *dst = base + row_at(g, z, -g->r[1]) - g->r[2];
    /* from the first halo row's first cell to the last's last */
    const ptrdiff_t len = (g->n[1] + 2 * g->r[1] - 1) * g->row
                          + g->n[2] + 2 * g->r[2];
    if (m < 0) {
        for (ptrdiff_t i = 0; i < len; i++) {
            dst[i] = run->cval;
        }
    }
    else {
        memcpy(dst, base + row_at(g, m, -g->r[1]) - g->r[2],
               (size_t)len * sizeof(double));
    }
}

/*
 * The halos of the nb buffers `bufs` (their origins), shared by the
 * team: x halos of every grid row (unless written with the rows), then
 * the y halo rows of every grid plane, then the z halo planes, each
 * after what it copies.
 */
static void
fill_halos(const scheme_run *run, double *const *bufs, int nb)
{
    const geom *g = &run->g;
    const ptrdiff_t rows = g->n[0] * g->n[1];
    if (g->r[2] > 0 && !run->x_at_write) {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (ptrdiff_t i = 0; i < nb * rows; i++) {
            const ptrdiff_t z = i % rows / g->n[1], y = i % rows % g->n[1];
            fill_row_halo(run, bufs[i / rows] + row_at(g, z, y));
        }
    }
    if (g->r[1] > 0) {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (ptrdiff_t i = 0; i < nb * g->n[0]; i++) {
            const ptrdiff_t z = i % g->n[0];
            for (ptrdiff_t k = 1; k <= g->r[1]; k++) {
                fill_halo_row(run, bufs[i / g->n[0]], z, -k);
                fill_halo_row(run, bufs[i / g->n[0]], z, g->n[1] - 1 + k);
            }
        }
    }
    if (g->r[0] > 0) {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (ptrdiff_t i = 0; i < nb * 2 * g->r[0]; i++) {
            const ptrdiff_t k = i % (2 * g->r[0]);
            const ptrdiff_t z = k < g->r[0] ? -1 - k : g->n[0] + k - g->r[0];
            fill_halo_plane(run, bufs[i / (2 * g->r[0])], z);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Row loops                                                            */
/* ------------------------------------------------------------------ */

/*
 * d (+)= (coef * p) * v over n points (p NULL: coef alone; v NULL: the
 * value 1).  The first term of a sum stores 0 + term, exactly the
 * reference's acc = 0; acc += term.
 */
static void
accumulate(double *restrict d, const double *restrict v, double coef,
           const double *restrict p, ptrdiff_t n, int first)
{
    if (v == NULL) {
        if (p == NULL) {
            if (first) {
                for (ptrdiff_t i = 0; i < n; i++) {
                    d[i] = 0.0 + coef;
                }
            }
            else {
                for (ptrdiff_t i = 0; i < n; i++) {
                    d[i] += coef;
                }
            }
        }
        else if (first) {
            for (ptrdiff_t i = 0; i < n; i++) {
                d[i] = 0.0 + coef * p[i];
            }
        }
        else {
            for (ptrdiff_t i = 0; i < n; i++) {
                d[i] += coef * p[i];
            }
        }
    }
    else if (p == NULL) {
        if (first) {
            for (ptrdiff_t i = 0; i < n; i++) {
                d[i] = 0.0 + coef * v[i];
            }
        }
        else {
            for (ptrdiff_t i = 0; i < n; i++) {
                d[i] += coef * v[i];
            }
        }
    }
    else if (first) {
        for (ptrdiff_t i = 0; i < n; i++) {
            d[i] = 0.0 + (coef * p[i]) * v[i];
        }
    }
    else {
        for (ptrdiff_t i = 0; i < n; i++) {
            d[i] += (coef * p[i]) * v[i];
        }
    }
}

/* t = the correlation of src with the term's taps over n points, summed
   in the taps' order; 0 where it has none. */
static void
stencil_row(double *restrict t, const double *restrict src,
            const prep_term *term, ptrdiff_t n)
{
    if (term->ntaps == 0) {
        for (ptrdiff_t i = 0; i < n; i++) {
            t[i] = 0.0;
        }
        return;
    }
    const double *restrict s = src + term->off[0];
    const double w = term->w[0];
    for (ptrdiff_t i = 0; i < n; i++) {
        t[i] = w * s[i];
    }
    for (int k = 1; k < term->ntaps; k++) {
        const double *restrict sk = src + term->off[k];
        const double wk = term->w[k];
        for (ptrdiff_t i = 0; i < n; i++) {
            t[i] += wk * sk[i];
        }
    }
}

/* t = the product of the monomial's factors over n points, in order
   (at least two factors). */
static void
monomial_row(double *restrict t, const double *const *field,
             const prep_term *term, ptrdiff_t n)
{
    const double *restrict a = field[term->factor[0]];
    const double *restrict b = field[term->factor[1]];
    for (ptrdiff_t i = 0; i < n; i++) {
        t[i] = a[i] * b[i];
    }
    for (int k = 2; k < term->nfactors; k++) {
        const double *restrict c = field[term->factor[k]];
        for (ptrdiff_t i = 0; i < n; i++) {
            t[i] *= c[i];
        }
    }
}

/* CS_SCHEME_PLAIN_LOOPS builds the row loops alone, to test them. */
#if defined(__GNUC__) && !defined(CS_SCHEME_PLAIN_LOOPS)
/*
 * The register block: NV vectors of VN doubles, in GCC's vector types
 * (Clang's too), which keep every term's value and the running sum in
 * registers across the terms of an update: one load per tap or factor
 * and one store per output, where the row loops below pass over an L1
 * row per tap.  Sixteen of 32 zmm registers with AVX-512 (eight vectors
 * ran about a tenth faster than four in L2 there); elsewhere eight of
 * 16.  Loads may be unaligned (aligned(8)) and alias doubles.
 */
#ifdef __AVX512F__
#define VN 8
#define NV 8
#else
#define VN 4
#define NV 4
#endif
#define BLOCK (NV * VN)

typedef double vec __attribute__((vector_size(VN * sizeof(double)),
                                  aligned(sizeof(double)), may_alias));

static inline vec
load(const double *p)
{
    return *(const vec *)p;
}

static inline vec
splat(double a)
{
    vec v;
    for (int i = 0; i < VN; i++) {
        v[i] = a;
    }
    return v;
}

/*
 * BLOCK outputs of update u at x, d[x ..] = its terms' sum, in the order
 * and with the operations of the row loops below (no fused
 * multiply-adds: the build is C99, which does not contract).
 */
static inline void
update_block(const scheme_run *run, const cs_update *u, double *restrict d,
             const double *const *field, const double *const *param,
             ptrdiff_t x)
{
    vec acc[NV];
    for (int q = 0; q < NV; q++) {
        acc[q] = splat(0.0); /* acc = 0; acc += each term */
    }
    for (int j = 0; j < u->term_count; j++) {
        const prep_term *term = &run->terms[u->first_term + j];
        vec v[NV];
        if (term->kind == CS_TERM_STENCIL) {
            const double *s = field[term->field] + x;
            if (term->ntaps == 0) {
                for (int q = 0; q < NV; q++) {
                    v[q] = splat(0.0);
                }
            }
            else {
                const double *s0 = s + term->off[0];
                const double w0 = term->w[0];
                for (int q = 0; q < NV; q++) {
                    v[q] = w0 * load(s0 + q * VN);
                }
                for (int k = 1; k < term->ntaps; k++) {
                    const double *sk = s + term->off[k];
                    const double wk = term->w[k];
                    for (int q = 0; q < NV; q++) {
                        v[q] += wk * load(sk + q * VN);
                    }
                }
            }
        }
        else if (term->nfactors == 0) {
            for (int q = 0; q < NV; q++) {
                v[q] = splat(1.0);
            }
        }
        else {
            const double *f0 = field[term->factor[0]] + x;
            for (int q = 0; q < NV; q++) {
                v[q] = load(f0 + q * VN);
            }
            for (int k = 1; k < term->nfactors; k++) {
                const double *fk = field[term->factor[k]] + x;
                for (int q = 0; q < NV; q++) {
                    v[q] *= load(fk + q * VN);
                }
            }
        }
        if (term->param >= 0) {
            const double *p = param[term->param] + x;
            for (int q = 0; q < NV; q++) {
                acc[q] += (term->coef * load(p + q * VN)) * v[q];
            }
        }
        else {
            for (int q = 0; q < NV; q++) {
                acc[q] += term->coef * v[q];
            }
        }
    }
    for (int q = 0; q < NV; q++) {
        *(vec *)(d + x + q * VN) = acc[q];
    }
}
#endif /* __GNUC__ && !CS_SCHEME_PLAIN_LOOPS */

/*
 * One update over n points of one row: d = its terms' sum; field[f]
 * and param[p] point at the same point of every field and parameter
 * field, t is scratch.
 */
static void
update_row(const scheme_run *run, const cs_update *u, double *restrict d,
           const double *const *field, const double *const *param,
           double *restrict t, ptrdiff_t n)
{
    if (u->term_count == 0) {
        for (ptrdiff_t i = 0; i < n; i++) {
            d[i] = 0.0;
        }
        return;
    }
#ifdef BLOCK
    if (n >= BLOCK) {
        /* a ragged end: one more block flush with the row's end, which
           rewrites a few outputs with the same values (d is read by no
           term) */
        for (ptrdiff_t x = 0; x + BLOCK <= n; x += BLOCK) {
            update_block(run, u, d, field, param, x);
        }
        if (n % BLOCK != 0) {
            update_block(run, u, d, field, param, n - BLOCK);
        }
        return;
    }
#endif
    for (int j = 0; j < u->term_count; j++) {
        const prep_term *term = &run->terms[u->first_term + j];
        const double *p = term->param >= 0 ? param[term->param] : NULL;
        const double *v;
        if (term->kind == CS_TERM_STENCIL) {
            stencil_row(t, field[term->field], term, n);
            v = t;
        }
        else if (term->nfactors == 0) {
            v = NULL;
        }
        else if (term->nfactors == 1) {
            v = field[term->factor[0]];
        }
        else {
            monomial_row(t, field, term, n);
            v = t;
        }
        accumulate(d, v, term->coef, p, n, j == 0);
    }
}

/* ------------------------------------------------------------------ */
/* Stages and steps                                                     */
/* ------------------------------------------------------------------ */

/*
 * One stage: dst[j] is the buffer update j of the stage writes (-1: a
 * copy, nothing written); the nf buffers `fill` need their halo filled
 * first.  Run by the team, which shares the rows (or, where they are
 * few, pieces of them) in contiguous blocks.  A thread that writes whole
 * rows writes their x halos too, while they are in cache.
 */
static void
stage_compute(const scheme_run *run, const cs_stage *stage, const int *dst,
              double *const *fill, int nf, const double *const *params)
{
    const cs_scheme *s = run->s;
    const geom *g = &run->g;
    const ptrdiff_t rows = g->n[0] * g->n[1];
    const ptrdiff_t split = run->split;
    double *t = run->scratch + (size_t)thread_id() * SEGMENT;
    if (nf > 0) {
        fill_halos(run, fill, nf);
    }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (ptrdiff_t unit = 0; unit < rows * split; unit++) {
        const ptrdiff_t r = unit / split, piece = unit % split;
        const ptrdiff_t row = g->origin + row_at(g, r / g->n[1],
                                                 r % g->n[1]);
        const ptrdiff_t end = g->n[2] * (piece + 1) / split;
        for (ptrdiff_t x0 = g->n[2] * piece / split; x0 < end;
             x0 += SEGMENT) {
            const ptrdiff_t at = row + x0;
            const ptrdiff_t grid_at = r * g->n[2] + x0;
            const double *field[CS_SCHEME_MAX_FIELDS];
            const double *param[CS_SCHEME_MAX_PARAMS];
            for (int f = 0; f < s->field_count; f++) {
                field[f] = run->buf[run->field_buf[f]] + at;
            }
            for (int p = 0; p < s->param_count; p++) {
                param[p] = params[p] + grid_at;
            }
            for (int j = 0; j < stage->update_count; j++) {
                if (dst[j] >= 0) {
                    update_row(run, &s->updates[stage->first_update + j],
                               run->buf[dst[j]] + at, field, param, t,
                               MIN(SEGMENT, end - x0));
                }
            }
        }
        if (run->x_at_write) {
            for (int j = 0; j < stage->update_count; j++) {
                if (dst[j] >= 0) {
                    fill_row_halo(run, run->buf[dst[j]] + row);
                }
            }
        }
    }
}

/*
 * Stage `stage` of a step: choose the buffers it writes, fill the halos
 * its stencils read, compute it, and point its targets at their new
 * values.
 */
static cs_status
stage_run(scheme_run *run, const cs_stage *stage,
          const double *const *params)
{
    const cs_scheme *s = run->s;
    int dst[CS_SCHEME_MAX_FIELDS];
    int taken[MAX_BUFFERS] = {0};
    double *fill[MAX_BUFFERS];
    int nf = 0;
    for (int f = 0; f < s->field_count; f++) {
        taken[run->field_buf[f]] = 1;
    }
    for (int j = 0; j < stage->update_count; j++) {
        const int u = stage->first_update + j;
        dst[j] = -1;
        if (run->copy_of[u] >= 0) {
            continue;
        }
        int b = 0;
        while (taken[b]) {
            b++; /* the pool has one buffer per field and per target */
        }
        taken[b] = 1;
        cs_status st = buffer_get(run, b);
        if (st != CS_OK) {
            return st;
        }
        dst[j] = b;
        /* the stencils this update reads */
        const cs_update *up = &s->updates[u];
        for (int i = 0; i < up->term_count; i++) {
            const prep_term *t = &run->terms[up->first_term + i];
            if (t->kind != CS_TERM_STENCIL) {
                continue;
            }
            const int src = run->field_buf[t->field];
            if (run->stale[src]) {
                run->stale[src] = 0;
                fill[nf++] = run->buf[src] + run->g.origin;
            }
        }
    }

#ifdef _OPENMP
#pragma omp parallel num_threads(run->nt) if (run->nt > 1)
#endif
    stage_compute(run, stage, dst, fill, nf, params);

    /* the new values, all read from the old mapping */
    int next[CS_SCHEME_MAX_FIELDS];
    memcpy(next, run->field_buf, sizeof(next));
    for (int j = 0; j < stage->update_count; j++) {
        const int u = stage->first_update + j;
        const int target = s->updates[u].target;
        if (dst[j] >= 0) {
            next[target] = dst[j];
            /* a constant halo, once filled, stays: only interiors are
               written */
            if (run->mode != CS_MODE_CONSTANT) {
                run->stale[dst[j]] = 1;
            }
        }
        else {
            next[target] = run->field_buf[run->copy_of[u]];
        }
    }
    memcpy(run->field_buf, next, sizeof(next));
    return CS_OK;
}

/* Copy the grids in[k] into the interiors of buffers k (load; with
   their x halos where x_at_write) or the interiors of the fields'
   buffers into out[k]; shared by the team. */
static void
copy_grids(const scheme_run *run, const double *const *in,
           double *const *out)
{
    const geom *g = &run->g;
    const ptrdiff_t rows = g->n[0] * g->n[1];
    const int k_count = run->s->field_count;
    const size_t bytes = (size_t)g->n[2] * sizeof(double);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (ptrdiff_t i = 0; i < k_count * rows; i++) {
        const int k = (int)(i / rows);
        const ptrdiff_t r = i % rows;
        const ptrdiff_t at = g->origin + row_at(g, r / g->n[1], r % g->n[1]);
        if (in != NULL) {
            memcpy(run->buf[k] + at, in[k] + r * g->n[2], bytes);
            if (run->x_at_write) {
                fill_row_halo(run, run->buf[k] + at);
            }
        }
        else {
            memcpy(out[k] + r * g->n[2], run->buf[run->field_buf[k]] + at,
                   bytes);
        }
    }
}

static cs_status
check_args(const cs_scheme *s, const double *const *in, double *const *out,
           const double *const *params, const ptrdiff_t shape[3],
           cs_mode mode, long steps)
{
    if (cs_scheme_check(s, NULL, 0) != CS_OK || in == NULL || out == NULL
        || shape == NULL || steps < 0 || (int)mode < 0
        || (int)mode >= CS_MODE_COUNT
        || (s->param_count > 0 && params == NULL)) {
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < 3; a++) {
        if (shape[a] < 1 || (a < 3 - s->ndim && shape[a] != 1)) {
            return CS_ERR_INVALID;
        }
    }
    for (int k = 0; k < s->field_count; k++) {
        if (in[k] == NULL || out[k] == NULL) {
            return CS_ERR_INVALID;
        }
    }
    for (int p = 0; p < s->param_count; p++) {
        if (params[p] == NULL) {
            return CS_ERR_INVALID;
        }
    }
    return CS_OK;
}

/* Pieces per row: 1 where the rows are enough to share among nt
   threads, else as many as make 8 units a thread, of MIN_PIECE points
   or more. */
static ptrdiff_t
pieces_per_row(const geom *g, int nt)
{
    const ptrdiff_t rows = g->n[0] * g->n[1];
    if (nt <= 1 || rows >= 8 * (ptrdiff_t)nt) {
        return 1;
    }
    const ptrdiff_t want = (8 * (ptrdiff_t)nt + rows - 1) / rows;
    return MAX(1, MIN(want, g->n[2] / MIN_PIECE));
}

/* Point-factors of one step: the threads' share of work. */
static double
step_work(const scheme_run *run)
{
    const geom *g = &run->g;
    double per_point = 0.0;
    for (int u = 0; u < run->s->update_count; u++) {
        const cs_update *up = &run->s->updates[u];
        for (int i = 0; i < up->term_count; i++) {
            const prep_term *t = &run->terms[up->first_term + i];
            per_point += 1.0 + t->ntaps + t->nfactors;
        }
    }
    return per_point * (double)g->n[0] * (double)g->n[1] * (double)g->n[2];
}

/* ------------------------------------------------------------------ */
/* Public API                                                           */
/* ------------------------------------------------------------------ */

cs_status
cs_cpu_scheme_apply(const cs_scheme *s, const double *const *in,
                    double *const *out, const double *const *params,
                    const ptrdiff_t shape[3], cs_mode mode, double cval,
                    long steps, int num_threads, cs_run_info *info,
                    const cs_interrupt *intr)
{
    cs_status st = check_args(s, in, out, params, shape, mode, steps);
    if (st != CS_OK) {
        return st;
    }
    scheme_run run;
    memset(&run, 0, sizeof(run));
    run.s = s;
    run.mode = mode;
    run.cval = cval;
    ptrdiff_t r[3];
    for (int a = 0; a < 3; a++) {
        r[a] = cs_scheme_radius(s, a);
    }
    if (!geom_init(&run.g, shape, r)) {
        st = CS_ERR_NOMEM; /* the padded grid exceeds the address space */
        goto exit;
    }
    st = run_prepare(&run);
    if (st != CS_OK) {
        goto exit;
    }
    run.nt = steps > 0 ? choose_threads(num_threads, step_work(&run)) : 1;
    if (run.nt < 1) {
        run.nt = 1;
    }
    run.scratch = malloc((size_t)run.nt * SEGMENT * sizeof(double));
    if (run.scratch == NULL) {
        st = CS_ERR_NOMEM;
        goto exit;
    }
    for (int k = 0; k < s->field_count; k++) {
        st = buffer_get(&run, k);
        if (st != CS_OK) {
            goto exit;
        }
        run.field_buf[k] = k;
    }
    run.split = pieces_per_row(&run.g, run.nt);
    run.x_at_write = run.split == 1 && mode != CS_MODE_CONSTANT;

#ifdef _OPENMP
#pragma omp parallel num_threads(run.nt) if (run.nt > 1)
#endif
    copy_grids(&run, in, NULL);

    for (long step = 0; step < steps; step++) {
        for (int i = 0; i < s->stage_count; i++) {
            st = stage_run(&run, &s->stages[i], params);
            if (st != CS_OK) {
                goto exit;
            }
        }
        if (step + 1 < steps && cs_interrupt_requested(intr, step + 1)) {
            st = CS_ERR_INTERRUPTED;
            goto exit;
        }
    }

#ifdef _OPENMP
#pragma omp parallel num_threads(run.nt) if (run.nt > 1)
#endif
    copy_grids(&run, NULL, out);

    if (info != NULL) {
        info->backend = "cpu";
        info->path = "scheme";
        info->threads = run.nt;
        info->fused_depth = 1;
        info->fused_passes = 0;
        info->unfused_steps = steps;
        info->device_seconds = -1.0;
        info->nonfinite = -1;
    }

exit:
    run_free(&run);
    return st;
}
