/*
 * scheme_tables.c -- what both ways of running a scheme on the CPU
 * (scheme_cpu.c, a pass a stage over the whole grid; scheme_blocked.c,
 * several steps a pass over tiles) set up the same way: the padded
 * buffers' geometry, the row kernels' tables for that geometry, the
 * halo copies a written row owes, and which buffer each stage writes.
 */
#include "scheme_private.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
 * Each row starts with `lead` unused doubles so that its point x = 0
 * lies on a cache line; a row's length is rounded up to whole lines.
 */
int
cs_scheme_geom_init(geom *g, const ptrdiff_t shape[3], const ptrdiff_t r[3])
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

cs_status
cs_scheme_axis_halo_init(axis_halo *h, ptrdiff_t n, ptrdiff_t r,
                         cs_mode mode)
{
    h->count = 0;
    h->index = malloc((size_t)(2 * r + 1) * sizeof(ptrdiff_t));
    h->source = malloc((size_t)(2 * r + 1) * sizeof(ptrdiff_t));
    if (h->index == NULL || h->source == NULL) {
        return CS_ERR_NOMEM;
    }
    for (ptrdiff_t k = 1; k <= r && mode != CS_MODE_CONSTANT; k++) {
        const ptrdiff_t beyond[2] = {-k, n - 1 + k};
        for (int side = 0; side < 2; side++) {
            h->index[h->count] = beyond[side];
            h->source[h->count] = cs_extend_index(beyond[side], n, mode);
            h->count++;
        }
    }
    return CS_OK;
}

void
cs_scheme_axis_halo_free(axis_halo *h)
{
    free(h->index);
    free(h->source);
    h->index = h->source = NULL;
    h->count = 0;
}

void
cs_scheme_tables_free(scheme_tables *t)
{
    free(t->terms);
    free(t->tap_off);
    free(t->tap_w);
    free(t->copy_of);
    memset(t, 0, sizeof(*t));
}

/* Whether update u is `target = 1 * field` (a plain copy): its field, or
   -1.  Exact: 0 + (1 * 1) * x is x, but for the sign of a zero. */
static int
copied_field(const prep_term *terms, const cs_update *u)
{
    if (u->term_count != 1) {
        return -1;
    }
    const prep_term *t = &terms[u->first_term];
    if (t->kind != CS_TERM_MONOMIAL || t->coef != 1.0 || t->param >= 0
        || t->nfactors != 1) {
        return -1;
    }
    return t->factor[0];
}

/* Term i's taps: the non-zero weights of its stencil, in C order, with
   their offsets in a buffer of geometry g, from tap_off[*at] on. */
static void
stencil_taps(scheme_tables *t, const cs_kernel *k, const geom *g,
             prep_term *p, size_t *at)
{
    const ptrdiff_t count = cs_kernel_count(k);
    p->off = t->tap_off + *at;
    p->w = t->tap_w + *at;
    for (ptrdiff_t q = 0; q < count; q++) {
        if (k->weights[q] == 0.0) {
            continue; /* skipped, as scipy.ndimage does */
        }
        const ptrdiff_t dz = q / (k->size[1] * k->size[2])
                             - cs_kernel_radius(k, 0);
        const ptrdiff_t dy = q / k->size[2] % k->size[1]
                             - cs_kernel_radius(k, 1);
        const ptrdiff_t dx = q % k->size[2] - cs_kernel_radius(k, 2);
        t->tap_off[*at] = dz * g->plane + dy * g->row + dx;
        t->tap_w[*at] = k->weights[q];
        (*at)++;
        p->ntaps++;
    }
}

cs_status
cs_scheme_tables_init(scheme_tables *t, const cs_scheme *s, const geom *g)
{
    memset(t, 0, sizeof(*t));
    size_t ntaps = 0;
    for (int i = 0; i < s->stencil_count; i++) {
        ntaps += (size_t)cs_kernel_count(&s->stencils[i]);
    }
    t->terms = malloc((size_t)(s->term_count > 0 ? s->term_count : 1)
                      * sizeof(prep_term));
    t->tap_off = malloc((ntaps > 0 ? ntaps : 1) * sizeof(ptrdiff_t));
    t->tap_w = malloc((ntaps > 0 ? ntaps : 1) * sizeof(double));
    t->copy_of = malloc((size_t)(s->update_count > 0 ? s->update_count : 1)
                        * sizeof(int));
    if (t->terms == NULL || t->tap_off == NULL || t->tap_w == NULL
        || t->copy_of == NULL) {
        return CS_ERR_NOMEM;
    }
    size_t at = 0;
    for (int i = 0; i < s->term_count; i++) {
        const cs_term *term = &s->terms[i];
        prep_term *p = &t->terms[i];
        memset(p, 0, sizeof(*p));
        p->kind = term->kind;
        p->coef = term->coef;
        p->param = term->param;
        if (term->kind != CS_TERM_STENCIL) {
            p->field = -1;
            for (int f = 0; f < s->field_count; f++) {
                for (int e = 0; e < term->power[f]; e++) {
                    p->factor[p->nfactors++] = f;
                }
            }
            continue;
        }
        p->field = term->field;
        /* each stencil's taps once, however many terms use it */
        for (int j = 0; j < i && p->w == NULL; j++) {
            if (s->terms[j].kind == CS_TERM_STENCIL
                && s->terms[j].stencil == term->stencil) {
                p->ntaps = t->terms[j].ntaps;
                p->off = t->terms[j].off;
                p->w = t->terms[j].w;
            }
        }
        if (p->w == NULL) {
            stencil_taps(t, &s->stencils[term->stencil], g, p, &at);
        }
    }
    for (int u = 0; u < s->update_count; u++) {
        t->copy_of[u] = copied_field(t->terms, &s->updates[u]);
    }
    return CS_OK;
}

int
cs_scheme_targets_most(const cs_scheme *s, const int *copy_of)
{
    int most = 0;
    for (int i = 0; i < s->stage_count; i++) {
        int writes = 0;
        for (int j = 0; j < s->stages[i].update_count; j++) {
            writes += copy_of[s->stages[i].first_update + j] < 0;
        }
        most = MAX(most, writes);
    }
    return most;
}

void
cs_scheme_assign_stage(const cs_scheme *s, const int *copy_of,
                       const cs_stage *stage, const int *fb, int *dst,
                       int *next)
{
    int taken[MAX_BUFFERS] = {0};
    for (int f = 0; f < s->field_count; f++) {
        taken[fb[f]] = 1;
        next[f] = fb[f];
    }
    for (int j = 0; j < stage->update_count; j++) {
        const int u = stage->first_update + j;
        const int target = s->updates[u].target;
        if (copy_of[u] >= 0) {
            dst[j] = -1;
            next[target] = fb[copy_of[u]];
            continue;
        }
        int b = 0;
        while (taken[b]) {
            b++; /* the pool has one buffer per field and per target */
        }
        taken[b] = 1;
        dst[j] = b;
        next[target] = b;
    }
}

/* Whether index i of an axis is the source of halo entry e. */
static int
is_source(const axis_halo *h, int e, ptrdiff_t i)
{
    return h->source[e] == i;
}

void
cs_scheme_write_copies(const geom *g, const axis_halo *halo, double *base,
                       ptrdiff_t z, ptrdiff_t y, ptrdiff_t x0, ptrdiff_t x1)
{
    const axis_halo *hz = &halo[0];
    const axis_halo *hy = &halo[1];
    const axis_halo *hx = &halo[2];
    const double *row = base + cs_scheme_row_at(g, z, y);
    /* the row itself (e = -1), then the halo rows and planes mapping to
       it (e >= 0) */
    for (int ez = -1; ez < hz->count; ez++) {
        if (ez >= 0 && !is_source(hz, ez, z)) {
            continue;
        }
        const ptrdiff_t zi = ez < 0 ? z : hz->index[ez];
        for (int ey = -1; ey < hy->count; ey++) {
            if (ey >= 0 && !is_source(hy, ey, y)) {
                continue;
            }
            const ptrdiff_t yi = ey < 0 ? y : hy->index[ey];
            double *image = base + cs_scheme_row_at(g, zi, yi);
            if (image != row) {
                memcpy(image + x0, row + x0,
                       (size_t)(x1 - x0) * sizeof(double));
            }
            for (int ex = 0; ex < hx->count; ex++) {
                const ptrdiff_t src = hx->source[ex];
                if (src >= x0 && src < x1) {
                    image[hx->index[ex]] = row[src];
                }
            }
        }
    }
}

double
cs_scheme_point_work(const cs_scheme *s, const scheme_tables *t)
{
    double per_point = 0.0;
    for (int u = 0; u < s->update_count; u++) {
        const cs_update *up = &s->updates[u];
        for (int i = 0; i < up->term_count; i++) {
            const prep_term *p = &t->terms[up->first_term + i];
            per_point += 1.0 + p->ntaps + p->nfactors;
        }
    }
    return per_point / MAX(s->stage_count, 1);
}

/* A buffer's length rounded up to whole pages (512 doubles), so that
   only the stagger sets where buffers fall within a page. */
#define PAGE_DOUBLES 512

size_t
cs_scheme_pool_doubles(int count, size_t size)
{
    const size_t room = SIZE_MAX / sizeof(double) - ALIGN_DOUBLES;
    if (size > room - PAGE_DOUBLES - STAGGER_DOUBLES) {
        return 0;
    }
    const size_t each = CEIL_DIV(size, PAGE_DOUBLES) * PAGE_DOUBLES
                        + STAGGER_DOUBLES;
    if (count > 0 && each > room / (size_t)count) {
        return 0;
    }
    return ALIGN_DOUBLES + (size_t)count * each;
}

double *
cs_scheme_carve(double *block, int count, size_t size, double **buf)
{
    const uintptr_t line = ALIGN_DOUBLES * sizeof(double);
    const uintptr_t addr = (uintptr_t)block;
    const size_t pages = CEIL_DIV(size, PAGE_DOUBLES) * PAGE_DOUBLES;
    double *at = (double *)(void *)((char *)block
                                    + (line - addr % line) % line);
    for (int b = 0; b < count; b++) {
        /* whole pages and a stagger apart: the same point of two buffers
           never shares its address modulo 4 KiB */
        buf[b] = at;
        at += pages + STAGGER_DOUBLES;
    }
    return at;
}
