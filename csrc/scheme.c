/*
 * scheme.c -- the checks every engine of a PDE scheme (scheme.h) relies
 * on, and the halo a scheme needs.  cs_scheme_check is the one place
 * that says whether a scheme's tables are consistent: the Python glue
 * calls it before an engine runs, and the engines call it again, so a
 * wrong table is an error code with a message, never a read out of
 * bounds.
 */
#include "scheme.h"

/* Whether stencil k has the scheme's ndim, odd extents and weights. */
static int
stencil_ok(const cs_kernel *k, int ndim, char *msg, size_t msg_len, int i)
{
    if (k->weights == NULL || k->ndim != ndim) {
        cs_say(msg, msg_len, "stencil %d: ndim %d, the scheme's is %d", i,
               k->ndim, ndim);
        return 0;
    }
    for (int a = 0; a < CS_MAX_NDIM; a++) {
        const ptrdiff_t s = k->size[a];
        if (s < 1 || s % 2 == 0
            || (a < CS_MAX_NDIM - ndim && s != 1)) {
            cs_say(msg, msg_len, "stencil %d: extent %td along axis %d is "
                                 "not odd", i, s, a);
            return 0;
        }
    }
    return 1;
}

/* Whether term t is consistent with the scheme's fields and tables. */
static int
term_ok(const cs_scheme *s, const cs_term *t, char *msg, size_t msg_len,
        int i)
{
    if (t->param < -1 || t->param >= s->param_count) {
        cs_say(msg, msg_len, "term %d: param %d out of range (%d params)",
               i, t->param, s->param_count);
        return 0;
    }
    if (t->kind == CS_TERM_STENCIL) {
        if (t->field < 0 || t->field >= s->field_count) {
            cs_say(msg, msg_len, "term %d: field %d out of range (%d "
                                 "fields)", i, t->field, s->field_count);
            return 0;
        }
        if (t->stencil < 0 || t->stencil >= s->stencil_count) {
            cs_say(msg, msg_len, "term %d: stencil %d out of range (%d "
                                 "stencils)", i, t->stencil,
                   s->stencil_count);
            return 0;
        }
        return 1;
    }
    if (t->kind != CS_TERM_MONOMIAL) {
        cs_say(msg, msg_len, "term %d: unknown kind %d", i, (int)t->kind);
        return 0;
    }
    for (int f = 0; f < CS_SCHEME_MAX_FIELDS; f++) {
        if (t->power[f] > CS_SCHEME_MAX_POWER
            || (f >= s->field_count && t->power[f] != 0)) {
            cs_say(msg, msg_len, "term %d: power %d of field %d (0 to %d, "
                                 "%d fields)", i, (int)t->power[f], f,
                   CS_SCHEME_MAX_POWER, s->field_count);
            return 0;
        }
    }
    return 1;
}

/* Whether [first, first + count) lies in [0, total). */
static int
range_ok(int first, int count, int total)
{
    return first >= 0 && count >= 0 && first <= total
           && count <= total - first;
}

cs_status
cs_scheme_check(const cs_scheme *s, char *msg, size_t msg_len)
{
    if (s == NULL) {
        cs_say(msg, msg_len, "no scheme");
        return CS_ERR_INVALID;
    }
    if (s->ndim < 1 || s->ndim > CS_MAX_NDIM) {
        cs_say(msg, msg_len, "ndim %d (1 to %d)", s->ndim, CS_MAX_NDIM);
        return CS_ERR_INVALID;
    }
    if (s->field_count < 1 || s->field_count > CS_SCHEME_MAX_FIELDS) {
        cs_say(msg, msg_len, "%d fields (1 to %d)", s->field_count,
               CS_SCHEME_MAX_FIELDS);
        return CS_ERR_INVALID;
    }
    if (s->param_count < 0 || s->param_count > CS_SCHEME_MAX_PARAMS) {
        cs_say(msg, msg_len, "%d parameter fields (0 to %d)",
               s->param_count, CS_SCHEME_MAX_PARAMS);
        return CS_ERR_INVALID;
    }
    if (s->stencil_count < 0 || s->term_count < 0 || s->update_count < 0
        || s->stage_count < 1) {
        cs_say(msg, msg_len, "%d stencils, %d terms, %d updates, %d stages "
                             "(at least one stage)", s->stencil_count,
               s->term_count, s->update_count, s->stage_count);
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
        if (!stencil_ok(&s->stencils[i], s->ndim, msg, msg_len, i)) {
            return CS_ERR_INVALID;
        }
    }
    for (int i = 0; i < s->term_count; i++) {
        if (!term_ok(s, &s->terms[i], msg, msg_len, i)) {
            return CS_ERR_INVALID;
        }
    }
    for (int i = 0; i < s->update_count; i++) {
        const cs_update *u = &s->updates[i];
        if (u->target < 0 || u->target >= s->field_count) {
            cs_say(msg, msg_len, "update %d: target %d out of range (%d "
                                 "fields)", i, u->target, s->field_count);
            return CS_ERR_INVALID;
        }
        if (!range_ok(u->first_term, u->term_count, s->term_count)) {
            cs_say(msg, msg_len, "update %d: terms %d + %d out of range "
                                 "(%d terms)", i, u->first_term,
                   u->term_count, s->term_count);
            return CS_ERR_INVALID;
        }
    }
    for (int i = 0; i < s->stage_count; i++) {
        const cs_stage *g = &s->stages[i];
        if (!range_ok(g->first_update, g->update_count, s->update_count)) {
            cs_say(msg, msg_len, "stage %d: updates %d + %d out of range "
                                 "(%d updates)", i, g->first_update,
                   g->update_count, s->update_count);
            return CS_ERR_INVALID;
        }
        unsigned int seen = 0; /* one bit per field */
        for (int j = 0; j < g->update_count; j++) {
            const int target = s->updates[g->first_update + j].target;
            if (seen & (1u << target)) {
                cs_say(msg, msg_len, "stage %d: field %d is the target of "
                                     "two updates", i, target);
                return CS_ERR_INVALID;
            }
            seen |= 1u << target;
        }
    }
    return CS_OK;
}

ptrdiff_t
cs_scheme_radius(const cs_scheme *s, int axis)
{
    ptrdiff_t r = 0;
    if (s == NULL || s->stencils == NULL || axis < 0
        || axis >= CS_MAX_NDIM) {
        return 0;
    }
    for (int i = 0; i < s->stencil_count; i++) {
        const ptrdiff_t ri = cs_kernel_radius(&s->stencils[i], axis);
        if (ri > r) {
            r = ri;
        }
    }
    return r;
}
