/*
 * scheme.c -- the consistency check of a scheme's tables and the radius
 * a scheme reads (scheme.h).  Every engine and every glue function calls
 * cs_scheme_check before it reads a table, so that a wrong index is an
 * error code with a message, never a read out of bounds.
 */
#include "scheme.h"

/* Whether [first, first + count) lies within [0, total). */
static int
range_ok(int first, int count, int total)
{
    return first >= 0 && count >= 0 && first <= total
           && count <= total - first;
}

/* Stencil i: the scheme's ndim, odd extents, unit leading axes. */
static cs_status
check_stencil(const cs_scheme *s, int i, char *msg, size_t msg_len)
{
    const cs_kernel *k = &s->stencils[i];
    if (k->weights == NULL || k->ndim != s->ndim) {
        cs_say(msg, msg_len, "stencil %d has %d axes, the scheme %d", i,
               k->ndim, s->ndim);
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < CS_MAX_NDIM; a++) {
        const int unused = a < CS_MAX_NDIM - s->ndim;
        if (k->size[a] < 1 || k->size[a] % 2 == 0
            || (unused && k->size[a] != 1)) {
            cs_say(msg, msg_len, "stencil %d: extent %td along axis %d "
                                 "(odd, and 1 on the unused leading axes)",
                   i, k->size[a], a);
            return CS_ERR_INVALID;
        }
    }
    return CS_OK;
}

/* Term i: its kind, parameter, field, stencil and powers in range. */
static cs_status
check_term(const cs_scheme *s, int i, char *msg, size_t msg_len)
{
    const cs_term *t = &s->terms[i];
    if (t->param < -1 || t->param >= s->param_count) {
        cs_say(msg, msg_len, "term %d: parameter %d (-1, or 0 to %d)", i,
               t->param, s->param_count - 1);
        return CS_ERR_INVALID;
    }
    if (t->kind == CS_TERM_STENCIL) {
        if (t->field < 0 || t->field >= s->field_count || t->stencil < 0
            || t->stencil >= s->stencil_count) {
            cs_say(msg, msg_len, "term %d: field %d of %d, stencil %d of %d",
                   i, t->field, s->field_count, t->stencil,
                   s->stencil_count);
            return CS_ERR_INVALID;
        }
        return CS_OK;
    }
    if (t->kind != CS_TERM_MONOMIAL) {
        cs_say(msg, msg_len, "term %d: kind %d (0 stencil, 1 monomial)", i,
               (int)t->kind);
        return CS_ERR_INVALID;
    }
    for (int f = 0; f < CS_SCHEME_MAX_FIELDS; f++) {
        if (t->power[f] > CS_SCHEME_MAX_POWER
            || (f >= s->field_count && t->power[f] != 0)) {
            cs_say(msg, msg_len, "term %d: power %d of field %d (0 to %d, "
                                 "%d fields)",
                   i, (int)t->power[f], f, CS_SCHEME_MAX_POWER,
                   s->field_count);
            return CS_ERR_INVALID;
        }
    }
    return CS_OK;
}

cs_status
cs_scheme_check(const cs_scheme *s, char *msg, size_t msg_len)
{
    if (s == NULL) {
        cs_say(msg, msg_len, "no scheme");
        return CS_ERR_INVALID;
    }
    if (s->ndim < 1 || s->ndim > CS_MAX_NDIM || s->field_count < 1
        || s->field_count > CS_SCHEME_MAX_FIELDS || s->param_count < 0
        || s->param_count > CS_SCHEME_MAX_PARAMS) {
        cs_say(msg, msg_len, "ndim %d (1 to %d), %d fields (1 to %d), %d "
                             "parameter fields (0 to %d)",
               s->ndim, CS_MAX_NDIM, s->field_count, CS_SCHEME_MAX_FIELDS,
               s->param_count, CS_SCHEME_MAX_PARAMS);
        return CS_ERR_INVALID;
    }
    if (s->stencil_count < 0 || s->term_count < 0 || s->update_count < 0
        || s->stage_count < 1) {
        cs_say(msg, msg_len, "%d stencils, %d terms, %d updates, %d stages "
                             "(at least one)",
               s->stencil_count, s->term_count, s->update_count,
               s->stage_count);
        return CS_ERR_INVALID;
    }
    if ((s->stencil_count > 0 && s->stencils == NULL)
        || (s->term_count > 0 && s->terms == NULL)
        || (s->update_count > 0 && s->updates == NULL)
        || s->stages == NULL) {
        cs_say(msg, msg_len, "a table is missing");
        return CS_ERR_INVALID;
    }
    for (int i = 0; i < s->stencil_count; i++) {
        if (check_stencil(s, i, msg, msg_len) != CS_OK) {
            return CS_ERR_INVALID;
        }
    }
    for (int i = 0; i < s->term_count; i++) {
        if (check_term(s, i, msg, msg_len) != CS_OK) {
            return CS_ERR_INVALID;
        }
    }
    for (int i = 0; i < s->update_count; i++) {
        const cs_update *u = &s->updates[i];
        if (u->target < 0 || u->target >= s->field_count
            || !range_ok(u->first_term, u->term_count, s->term_count)) {
            cs_say(msg, msg_len, "update %d: target %d of %d fields, terms "
                                 "%d + %d of %d",
                   i, u->target, s->field_count, u->first_term,
                   u->term_count, s->term_count);
            return CS_ERR_INVALID;
        }
    }
    for (int i = 0; i < s->stage_count; i++) {
        const cs_stage *g = &s->stages[i];
        if (!range_ok(g->first_update, g->update_count, s->update_count)) {
            cs_say(msg, msg_len, "stage %d: updates %d + %d of %d", i,
                   g->first_update, g->update_count, s->update_count);
            return CS_ERR_INVALID;
        }
        unsigned int targets = 0; /* a bit per field */
        for (int j = 0; j < g->update_count; j++) {
            const int f = s->updates[g->first_update + j].target;
            if (targets & (1u << f)) {
                cs_say(msg, msg_len, "stage %d updates field %d twice", i,
                       f);
                return CS_ERR_INVALID;
            }
            targets |= 1u << f;
        }
    }
    return CS_OK;
}

ptrdiff_t
cs_scheme_radius(const cs_scheme *s, int axis)
{
    ptrdiff_t r = 0;
    if (s == NULL || s->stencils == NULL || axis < 0 || axis >= CS_MAX_NDIM) {
        return 0;
    }
    for (int i = 0; i < s->stencil_count; i++) {
        const ptrdiff_t ri = cs_kernel_radius(&s->stencils[i], axis);
        r = ri > r ? ri : r;
    }
    return r;
}
