/*
 * scheme_rows.c -- the row kernels of the CPU scheme engine: every
 * output is computed here, one update over a piece of one row at a time.
 *
 * An update sums its terms in order, acc = 0; acc += (coef * param) *
 * value, where a stencil's value is the sum of its non-zero taps in the
 * kernel's C order (w0 * s0 + w1 * s1 + ...) and a monomial's the
 * product of its factors in field order.  Blocks of BLOCK points keep
 * every value and the sum in vector registers (update_block); a shorter
 * row, or a compiler without GCC's vector types, takes loops over x into
 * an L1 scratch row, one pass per tap (the row loops), which the
 * compiler vectorizes.  Both do the same operations in the same order,
 * without fused multiply-adds (the build is C99, which does not
 * contract): the same bits.
 */
#include "scheme_private.h"

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
 * and one store per output, where the row loops pass over an L1 row per
 * tap.  Sixteen of 32 zmm registers with AVX-512 (eight vectors
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
 * and with the operations of the row loops above.
 */
static inline void
update_block(const prep_term *terms, const cs_update *u, double *restrict d,
             const double *const *field, const double *const *param,
             ptrdiff_t x)
{
    vec acc[NV];
    for (int q = 0; q < NV; q++) {
        acc[q] = splat(0.0); /* acc = 0; acc += each term */
    }
    for (int j = 0; j < u->term_count; j++) {
        const prep_term *term = &terms[u->first_term + j];
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

void
cs_scheme_update_row(const prep_term *terms, const cs_update *u, double *d,
                     const double *const *field, const double *const *param,
                     double *t, ptrdiff_t n)
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
            update_block(terms, u, d, field, param, x);
        }
        if (n % BLOCK != 0) {
            update_block(terms, u, d, field, param, n - BLOCK);
        }
        return;
    }
#endif
    for (int j = 0; j < u->term_count; j++) {
        const prep_term *term = &terms[u->first_term + j];
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
