/*
 * scheme_plan.c -- the host's plan of a scheme's run on the GPU
 * (scheme_plan.h): stage tables, buffers, blocked-pass schedules and the
 * model that chooses between one-step and blocked passes.
 */
#include "scheme_plan.h"
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * the plan of a stage: its terms and taps, built once
 * --------------------------------------------------------------------- */

/* Is update u one other field with coefficient 1 and no parameter?
   That field, or -1. */
static int
rename_source(const cs_scheme *s, const cs_update *u)
{
    if (u->term_count != 1) {
        return -1;
    }
    const cs_term *t = &s->terms[u->first_term];
    if (t->kind != CS_TERM_MONOMIAL || t->coef != 1.0 || t->param >= 0) {
        return -1;
    }
    int source = -1;
    for (int f = 0; f < s->field_count; f++) {
        if (t->power[f] == 1 && source < 0) {
            source = f;
        } else if (t->power[f] != 0) {
            return -1;
        }
    }
    return source;
}

/* The pointwise slot of field f, added when new. */
int
sch_pw_slot(int *npw, int *pw_field, int f)
{
    for (int j = 0; j < *npw; j++) {
        if (pw_field[j] == f) {
            return j;
        }
    }
    pw_field[*npw] = f;
    return (*npw)++;
}

void
sch_stage_plan_free(sch_stage_plan *sp)
{
    free(sp->terms);
    free(sp->tap_w);
    free(sp->tap_off);
    free(sp->tap_d);
    memset(sp, 0, sizeof(*sp));
}

/* Nonzero weights of a stencil. */
static int
nonzero_count(const cs_kernel *k)
{
    int n = 0;
    for (ptrdiff_t e = 0; e < cs_kernel_count(k); e++) {
        n += k->weights[e] != 0.0;
    }
    return n;
}

/* Element offset of a tap, 0 when it reaches past the grid: such a tap is
   read only through the edge map (and must not overflow here). */
static ptrdiff_t
tap_offset(const sch_grid *g, const int d[3])
{
    for (int a = 0; a < 3; a++) {
        if (d[a] > g->n[a] || -d[a] > g->n[a]) {
            return 0;
        }
    }
    return d[0] * g->sz + d[1] * g->sy + d[2];
}

/* Append the nonzero weights of stencil k to sp's taps. */
static void
add_taps(sch_stage_plan *sp, const sch_grid *g, const cs_kernel *k)
{
    for (ptrdiff_t z = 0; z < k->size[0]; z++) {
        for (ptrdiff_t y = 0; y < k->size[1]; y++) {
            for (ptrdiff_t x = 0; x < k->size[2]; x++) {
                const double w =
                    k->weights[(z * k->size[1] + y) * k->size[2] + x];
                if (w == 0.0) {
                    continue; /* never multiplies data: scipy.ndimage */
                }
                int *d = sp->tap_d[sp->ntaps];
                d[0] = (int)(z - cs_kernel_radius(k, 0));
                d[1] = (int)(y - cs_kernel_radius(k, 1));
                d[2] = (int)(x - cs_kernel_radius(k, 2));
                sp->tap_w[sp->ntaps] = w;
                sp->tap_off[sp->ntaps] = tap_offset(g, d);
                sp->ntaps++;
            }
        }
    }
}

/*
 * Stage gi's plan: which updates are renames, which fields its sums read
 * through stencils and at the point, their terms, and the nonzero
 * weights of their stencils (each stencil's once).  `tap0` holds
 * stencil_count ints of scratch.
 */
cs_status
sch_stage_plan_make(const cs_scheme *s, int gi, const sch_grid *g, int *tap0,
                    sch_stage_plan *sp, char *msg, size_t msg_len)
{
    const cs_stage *stage = &s->stages[gi];
    memset(sp, 0, sizeof(*sp));
    sp->count = stage->update_count;
    int nterms = 0, ntaps = 0;
    for (int k = 0; k < s->stencil_count; k++) {
        tap0[k] = -1;
    }
    for (int j = 0; j < sp->count; j++) {
        const cs_update *u = &s->updates[stage->first_update + j];
        sp->target[j] = u->target;
        sp->targets |= 1u << u->target;
        sp->rename[j] = rename_source(s, u);
        if (sp->rename[j] >= 0) {
            continue;
        }
        nterms += u->term_count;
        for (int t = u->first_term; t < u->first_term + u->term_count;
             t++) {
            const cs_term *term = &s->terms[t];
            if (term->kind == CS_TERM_STENCIL && tap0[term->stencil] < 0) {
                tap0[term->stencil] = 0;
                ntaps += nonzero_count(&s->stencils[term->stencil]);
            }
        }
    }
    if (nterms > SCH_LARGE_TERMS || ntaps > SCH_LARGE_TAPS) {
        cs_say(msg, msg_len, "stage %d of the scheme has %d terms and %d "
                             "nonzero stencil weights; the GPU engine takes "
                             "at most %d and %d a stage",
               gi, nterms, ntaps, SCH_LARGE_TERMS, SCH_LARGE_TAPS);
        return CS_ERR_UNSUPPORTED;
    }
    const size_t nt = (size_t)(nterms > 0 ? nterms : 1);
    const size_t nq = (size_t)(ntaps > 0 ? ntaps : 1);
    sp->terms = (sch_term *)calloc(nt, sizeof(sch_term));
    sp->tap_w = (double *)calloc(nq, sizeof(double));
    sp->tap_off = (ptrdiff_t *)calloc(nq, sizeof(ptrdiff_t));
    sp->tap_d = (int (*)[3])calloc(nq, sizeof(int[3]));
    if (sp->terms == NULL || sp->tap_w == NULL || sp->tap_off == NULL
        || sp->tap_d == NULL) {
        cs_say(msg, msg_len, "out of host memory (a scheme's stage)");
        return CS_ERR_NOMEM;
    }
    for (int k = 0; k < s->stencil_count; k++) {
        tap0[k] = -1;
    }
    for (int j = 0; j < sp->count; j++) {
        const cs_update *u = &s->updates[stage->first_update + j];
        sp->out[j].copy = -1;
        if (sp->rename[j] >= 0) {
            continue;
        }
        sp->out[j].first_term = sp->nterms;
        sp->out[j].term_count = u->term_count;
        for (int t = u->first_term; t < u->first_term + u->term_count;
             t++) {
            const cs_term *term = &s->terms[t];
            sch_term *kt = &sp->terms[sp->nterms++];
            kt->coef = term->coef;
            kt->kind = (int)term->kind;
            kt->param = term->param;
            kt->field = -1;
            if (term->kind == CS_TERM_MONOMIAL) {
                for (int f = 0; f < s->field_count; f++) {
                    if (term->power[f] > 0) {
                        const int slot = sch_pw_slot(&sp->npw, sp->pw_field, f);
                        kt->pow |= (unsigned)term->power[f] << (4 * slot);
                    }
                }
                continue;
            }
            const cs_kernel *k = &s->stencils[term->stencil];
            kt->field = term->field;
            sp->stencil_read |= 1u << term->field;
            for (int a = 0; a < 3; a++) {
                const int ra = (int)cs_kernel_radius(k, a);
                sp->r[a] = ra > sp->r[a] ? ra : sp->r[a];
            }
            if (tap0[term->stencil] < 0) {
                tap0[term->stencil] = sp->ntaps;
                add_taps(sp, g, k);
            }
            kt->tap0 = tap0[term->stencil];
            kt->ntaps = nonzero_count(k);
        }
    }
    return CS_OK;
}


/* ------------------------------------------------------------------------
 * streamed passes: the regrouped sums (scheme_plan.h)
 * --------------------------------------------------------------------- */

/* The pattern of a 2D tap set (bit 3 dy + dx + 4 for dy, dx in -1..1)
   or a 3D one (within the 7-point star). */
static int
stream_kind(int ndim, unsigned mask)
{
    const unsigned centre = ndim == 3 ? 1u << SST_TAP3_CENTRE : 1u << 4;
    const unsigned plus = 0x0bau, box = 0x1ffu;
    if (mask == 0 || mask == centre) {
        return mask == 0 ? SST_NONE : SST_CENTRE;
    }
    if (ndim == 3) {
        return mask == SST_STAR3_MASK ? SST_STAR3 : SST_MASK;
    }
    return mask == plus ? SST_PLUS : mask == box ? SST_BOX : SST_MASK;
}

/* Add coef times stencil k's nonzero weights to group (i, c, f); 0 if k
   is wider than 3 x 3 (in 3D: has a tap off the 7-point star) or meets
   a tap the group has. */
static int
stream_add_stencil(sch_stream_tables *t, int i, int c, int f,
                   const cs_kernel *k, double coef)
{
    const ptrdiff_t rz = cs_kernel_radius(k, 0), ry = cs_kernel_radius(k, 1),
                    rx = cs_kernel_radius(k, 2);
    if ((t->ndim == 2 && k->size[0] != 1) || rz > 1 || ry > 1 || rx > 1) {
        return 0;
    }
    for (ptrdiff_t z = 0; z < k->size[0]; z++) {
        for (ptrdiff_t y = 0; y < k->size[1]; y++) {
            for (ptrdiff_t x = 0; x < k->size[2]; x++) {
                const double w =
                    k->weights[(z * k->size[1] + y) * k->size[2] + x];
                if (w == 0.0) {
                    continue; /* never multiplies data: scipy.ndimage */
                }
                const int in_plane = (int)(3 * (y - ry + 1) + (x - rx + 1));
                const int bit = t->ndim == 3
                                    ? (int)(9 * (z - rz + 1)) + in_plane
                                    : in_plane;
                if ((t->mask[i][c][f] >> bit) & 1u) {
                    return 0; /* two terms on one tap: kept apart elsewhere */
                }
                if (t->ndim == 3 && !((SST_STAR3_MASK >> bit) & 1u)) {
                    return 0; /* off the star */
                }
                t->mask[i][c][f] |= 1u << bit;
                t->w[i][c][f][bit] = coef * w;
            }
        }
    }
    return 1;
}

/* The one field of a monomial of degree one, or -1. */
static int
linear_field(const cs_scheme *s, const cs_term *term)
{
    int field = -1, degree = 0;
    for (int f = 0; f < s->field_count; f++) {
        degree += term->power[f];
        field = term->power[f] == 1 ? f : field;
    }
    return degree == 1 ? field : -1;
}

/* The scaled sum's parameter for the update at kernel field i: the one
   parameter any of its stencil terms carries (-1: none); -2 for two. */
static int
stream_scale_param(const cs_scheme *s, const cs_update *u)
{
    int q = -1;
    for (int t = u->first_term; t < u->first_term + u->term_count; t++) {
        const cs_term *term = &s->terms[t];
        if (term->kind == CS_TERM_STENCIL && term->param >= 0) {
            if (q >= 0 && term->param != q) {
                return -2;
            }
            q = term->param;
        }
    }
    return q;
}

/* Update u's terms into kernel field i's groups (field f of the scheme
   is kernel field pos[f]); 0 where a term does not fit. */
static int
stream_add_update(const cs_scheme *s, const cs_update *u, const int *pos,
                  int i, sch_stream_tables *t)
{
    for (int n = u->first_term; n < u->first_term + u->term_count; n++) {
        const cs_term *term = &s->terms[n];
        const int c = term->param >= 0 ? 1 : 0;
        if (c == 1 && term->param != t->scale_param[i]
            && term->kind == CS_TERM_STENCIL) {
            return 0;
        }
        if (term->kind == CS_TERM_STENCIL) {
            if (!stream_add_stencil(t, i, c, pos[term->field],
                                    &s->stencils[term->stencil],
                                    term->coef)) {
                return 0;
            }
            continue;
        }
        const int lf = linear_field(s, term);
        if (lf >= 0 && (c == 0 || term->param == t->scale_param[i])) {
            int *n = &t->ncentre[i][c][pos[lf]];
            if (*n == SST_CENTRES) {
                return 0;
            }
            t->centre[i][c][pos[lf]][(*n)++] = term->coef;
            continue;
        }
        int degree = 0;
        for (int f = 0; f < s->field_count; f++) {
            degree += term->power[f];
        }
        if (degree == 0 && c == 0) {
            t->constant[i] += term->coef;
            continue;
        }
        const int m = t->npw[i];
        if (m == SST_POINTWISE) {
            return 0;
        }
        t->pw_coef[i][m] = term->coef;
        t->pw_param[i][m] = term->param;
        for (int f = 0; f < s->field_count; f++) {
            t->pw_power[i][m][pos[f]] = term->power[f];
        }
        t->npw[i] = m + 1;
        t->pointwise = 1;
    }
    return 1;
}

unsigned long long
sch_stream_signature(const sch_stream_tables *t)
{
    const int K = t->fields;
    unsigned long long sig = 0;
    for (int i = 0; i < K; i++) {
        for (int c = 0; c < 2; c++) {
            for (int f = 0; f < K; f++) {
                sig |= SST_GROUP(t->kind[i][c][f], t->ncentre[i][c][f],
                                 (i * 2 + c) * K + f);
            }
        }
        if (t->constant[i] != 0.0) {
            sig |= SST_CONSTANT(i);
        }
    }
    return sig;
}

unsigned long long
sch_stream_pw_signature(const sch_stream_tables *t)
{
    unsigned long long sig = 0;
    for (int i = 0; i < t->fields; i++) {
        if (t->npw[i] > SST_PW_COMPILED) {
            return 0;
        }
        sig |= SST_PW_COUNT(i, t->npw[i]);
        for (int m = 0; m < t->npw[i]; m++) {
            for (int f = 0; f < t->fields; f++) {
                sig |= SST_PW_POWER(i, m, f, t->pw_power[i][m][f]);
            }
            if (t->pw_param[i][m] >= 0) {
                sig |= SST_PW_PARAM(i, m);
            }
        }
    }
    return sig;
}

int
sch_stream_pw_compiled(const sch_stream_tables *t)
{
    const unsigned long long sig = sch_stream_signature(t);
    const unsigned long long pwsig = sch_stream_pw_signature(t);
    if (!t->pointwise || t->scaled) {
        return 0;
    }
    if (t->fields == 1) {
        return (sig == SST_SIG_PLUS || sig == SST_SIG_PLUS_REACTING)
               && pwsig == SST_PWSIG_CUBE;
    }
    return (sig == SST_SIG_DIFFUSING_PAIR
            || sig == SST_SIG_DIFFUSING_PAIR_MERGED)
           && pwsig == SST_PWSIG_GRAY_SCOTT;
}

int
sch_stream_compiled(const sch_stream_tables *t)
{
    const unsigned long long sig = sch_stream_signature(t);
    if (t->ndim == 3) { /* scheme_stream3.cu's dispatch */
        return !t->pointwise && !t->scaled
               && ((t->fields == 2 && sig == SST_SIG_WAVE3
                    && t->copy[1] == 0)
                   || (t->fields == 1 && sig == SST_SIG_STAR3));
    }
    if (t->pointwise) {
        return sch_stream_pw_compiled(t);
    }
    if (t->fields == 1) {
        return !t->scaled && (sig == SST_SIG_PLUS || sig == SST_SIG_BOX
                              || sig == SST_SIG_PLUS_SOURCE);
    }
    return (t->scaled == 0 && sig == SST_SIG_WAVE)
           || (t->scaled == 1 && sig == SST_SIG_WAVE_SCALED);
}

int
sch_stream_max_depth(const sch_stream_tables *t)
{
    /* the levels each instance of scheme_stream.cu's kernel holds (its
       dispatch): about 48 doubles of partial rows a lane, more where
       the patterns and pointwise terms are compiled in and nothing
       spills (registers decide: the deepest parameter ring, 2 (6 + 4)
       rows of 64 doubles a warp, leaves room for the 3 blocks an SM
       the kernel is built for) */
    const unsigned long long sig = sch_stream_signature(t);
    const int pw = t->pointwise != 0;
    const int compiled = sch_stream_pw_compiled(t);
    if (t->ndim == 3) {
        /* scheme_stream3.cu's instances: a partial plane a level and sum
           (4 doubles a thread of 512, whose registers are 128), with
           the patterns compiled in 4 (they would hold 6, which ran no
           faster); read at run time 4 for one field, 3 for two, 2 for
           two with a scaled sum, none with two (their shared planes
           bound them too: sch_stream3_smem_bytes) */
        return sch_stream_compiled(t) ? 4
               : t->fields == 1       ? 4
               : t->scaled == 1       ? 2
               : t->scaled == 0       ? 3
                                      : 0;
    }
    if (t->fields == 1) {
        if (t->scaled) {
            return pw ? 3 : 4;
        }
        return pw && !compiled ? 6 : 8;
    }
    switch (t->scaled) {
    case 0:
        return !pw ? 8 : compiled ? 5 : 4;
    case 1:
        return pw ? 3 : sig == SST_SIG_WAVE_SCALED ? 6 : 4;
    default:
        return 2;
    }
}

unsigned
sch_stream3_shared(const sch_stream_tables *t)
{
    if (!sch_stream_compiled(t)) {
        return (1u << t->fields) - 1u; /* scheme_stream3.cu's dispatch */
    }
    unsigned shared = 0;
    const unsigned centre = 1u << SST_TAP3_CENTRE;
    for (int i = 0; i < t->fields; i++) {
        const int copied = t->copy[i];
        if (copied >= 0) {
            shared |= 1u << copied;
            continue;
        }
        for (int c = 0; c < 2; c++) {
            for (int f = 0; f < t->fields; f++) {
                if (t->mask[i][c][f] & ~centre) {
                    shared |= 1u << f;
                }
            }
        }
        for (int m = 0; m < t->npw[i]; m++) {
            for (int f = 0; f < t->fields; f++) {
                if (t->pw_power[i][m][f] != 0) {
                    shared |= 1u << f;
                }
            }
        }
    }
    return shared;
}

size_t
sch_stream3_smem_bytes(const sch_stream_tables *t, int depth)
{
    const size_t shared = (size_t)__builtin_popcount(sch_stream3_shared(t));
    return 2 * (size_t)depth * shared * SST3_PLANE_BYTES;
}

int
sch_stream_tables_make(const cs_scheme *s, cs_mode mode,
                       sch_stream_tables *t)
{
    memset(t, 0, sizeof(*t));
    const int K = s->field_count;
    if ((s->ndim != 2 && s->ndim != 3) || s->stage_count != 1
        || K > SST_FIELDS
        || (mode != CS_MODE_WRAP && mode != CS_MODE_CONSTANT)) {
        return 0;
    }
    const cs_stage *stage = &s->stages[0];
    const cs_update *upd[SST_FIELDS] = {NULL, NULL};
    int scale[SST_FIELDS];
    for (int j = 0; j < stage->update_count; j++) {
        const cs_update *u = &s->updates[stage->first_update + j];
        upd[u->target] = u;
    }
    /* fields with a scaled sum first */
    int pos[SST_FIELDS];
    for (int f = 0; f < K; f++) {
        scale[f] = upd[f] != NULL ? stream_scale_param(s, upd[f]) : -1;
        if (scale[f] == -2) {
            return 0;
        }
        if (scale[f] >= 0) {
            pos[f] = t->scaled++;
        }
    }
    int next = t->scaled;
    for (int f = 0; f < K; f++) {
        if (scale[f] < 0) {
            pos[f] = next++;
        }
    }
    t->ndim = s->ndim;
    t->fields = K;
    for (int f = 0; f < K; f++) {
        const int i = pos[f];
        t->order[i] = f;
        t->updated[i] = upd[f] != NULL;
        t->scale_param[i] = scale[f];
        const int source = upd[f] != NULL ? rename_source(s, upd[f]) : f;
        t->copy[i] = source >= 0 ? pos[source] : -1;
        for (int m = 0; m < SST_POINTWISE; m++) {
            t->pw_param[i][m] = -1;
        }
    }
    for (int f = 0; f < K; f++) {
        const int i = pos[f];
        if (upd[f] == NULL) { /* kept: its own value */
            t->ncentre[i][0][i] = 1;
            t->centre[i][0][i][0] = 1.0;
        } else if (!stream_add_update(s, upd[f], pos, i, t)) {
            return 0;
        }
    }
    for (int i = 0; i < K; i++) {
        for (int c = 0; c < 2; c++) {
            for (int f = 0; f < K; f++) {
                t->kind[i][c][f] = stream_kind(t->ndim, t->mask[i][c][f]);
            }
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------
 * buffers: which holds each field, and where a stage writes
 * --------------------------------------------------------------------- */






/* The caller's buffer at p, added when new. */
int
sch_buffer_of(sch_buffers *B, double *p, int writable)
{
    for (int b = 0; b < B->count; b++) {
        if (B->ptr[b] == p) {
            B->writable[b] |= (unsigned char)writable;
            return b;
        }
    }
    B->ptr[B->count] = p;
    B->writable[B->count] = (unsigned char)writable;
    return B->count++;
}

/* May a stage write buffer b, which `busy` does not hold? */
static int
usable(const sch_buffers *B, const sch_state *st, const unsigned char *busy,
       int b)
{
    return b >= 0 && b < B->count + st->scratch && B->writable[b]
           && !busy[b];
}

/* A scratch array in play that `busy` leaves, or one more; -1 if none. */
static int
scratch_buffer(const sch_buffers *B, sch_state *st,
               const unsigned char *busy)
{
    for (int k = 0; k < st->scratch; k++) {
        if (!busy[B->count + k]) {
            return B->count + k;
        }
    }
    if (st->scratch < SCH_MAX_SCRATCH) {
        return B->count + st->scratch++;
    }
    return -1;
}


/* A buffer for a sum of field t away from the last stage; -1 if none. */
static int
pick_buffer(const sch_buffers *B, sch_state *st, const unsigned char *busy,
            int t, int order)
{
    const int own = B->out[t];
    if (order == SCH_OWN_OUT_FIRST && usable(B, st, busy, own)) {
        return own;
    }
    if (usable(B, st, busy, st->cur[t])) {
        return st->cur[t]; /* in place: read only at the point */
    }
    for (int k = 0; k < st->scratch; k++) {
        if (usable(B, st, busy, B->count + k)) {
            return B->count + k;
        }
    }
    if (order == SCH_SCRATCH_FIRST && st->scratch < SCH_MAX_SCRATCH) {
        return B->count + st->scratch++;
    }
    if (order == SCH_SCRATCH_FIRST && usable(B, st, busy, own)) {
        return own;
    }
    for (int f = 0; f < B->fields; f++) {
        if (f != t && usable(B, st, busy, B->out[f])) {
            return B->out[f];
        }
    }
    if (usable(B, st, busy, own)) {
        return own;
    }
    return scratch_buffer(B, st, busy);
}

/*
 * Where stage sp writes, from the buffers' state st (updated to the
 * state after the stage); `final`: the last stage of the run.  Away
 * from it a sum takes pick_buffer's; in it, its out when that is free,
 * else a scratch array (never another field's out), and a rename whose
 * source is not in the target's out is written there when that is free.
 * -1 when no buffer is left (never: a stage keeps at most K buffers,
 * and K + 1 scratch arrays leave K to write).
 */
int
sch_assign_stage(const sch_buffers *B, sch_state *st, const sch_stage_plan *sp,
             int final, int order, sch_assign *a)
{
    const int K = B->fields;
    unsigned char busy[SCH_MAX_BUFFERS];
    memset(busy, 0, sizeof(busy));
    for (int f = 0; f < K; f++) {
        a->from[f] = st->cur[f];
        if (!((sp->targets >> f) & 1u) || ((sp->stencil_read >> f) & 1u)) {
            busy[st->cur[f]] = 1; /* kept, or read by other threads */
        }
    }
    for (int j = 0; j < sp->count; j++) {
        a->how[j] = sp->rename[j] >= 0 ? SCH_RENAME : SCH_SUM;
        a->dst[j] = -1;
        if (sp->rename[j] >= 0) {
            busy[st->cur[sp->rename[j]]] = 1; /* its value lives on */
        }
    }
    for (int j = 0; j < sp->count && final; j++) {
        const int b = B->out[sp->target[j]];
        if (a->how[j] == SCH_SUM && usable(B, st, busy, b)) {
            a->dst[j] = b;
            busy[b] = 1;
        }
    }
    for (int j = 0; j < sp->count && final; j++) {
        const int b = B->out[sp->target[j]];
        if (a->how[j] == SCH_RENAME && a->from[sp->rename[j]] != b
            && usable(B, st, busy, b)) {
            a->how[j] = SCH_COPY;
            a->dst[j] = b;
            busy[b] = 1;
        }
    }
    for (int j = 0; j < sp->count; j++) {
        if (a->how[j] != SCH_SUM || a->dst[j] >= 0) {
            continue;
        }
        const int b = final ? scratch_buffer(B, st, busy)
                            : pick_buffer(B, st, busy, sp->target[j], order);
        if (b < 0) {
            return -1;
        }
        a->dst[j] = b;
        busy[b] = 1;
    }
    for (int j = 0; j < sp->count; j++) {
        st->cur[sp->target[j]] = a->how[j] == SCH_RENAME
                                     ? a->from[sp->rename[j]]
                                     : a->dst[j];
    }
    return 0;
}

/* One step's stages from st (no launch). */
static int
step_state(const sch_buffers *B, sch_state *st, const sch_stage_plan *plans,
           int stages, int final, int order)
{
    sch_assign a;
    for (int g = 0; g < stages; g++) {
        if (sch_assign_stage(B, st, &plans[g], final && g == stages - 1, order,
                         &a)
            < 0) {
            return -1;
        }
    }
    return 0;
}


/*
 * The copies that bring every field into its out from state st: a field
 * whose out holds no value still to be moved goes first; when every out
 * still holds one (a cycle, as when the outs are the ins swapped), that
 * value is moved aside into a scratch array.  At most 2K moves; -1 when
 * no scratch array is left.
 */
int
sch_plan_moves(const sch_buffers *B, sch_state *st, sch_move *moves, int *count)
{
    const int K = B->fields;
    unsigned pending = 0;
    *count = 0;
    for (int f = 0; f < K; f++) {
        pending |= (unsigned)(st->cur[f] != B->out[f]) << f;
    }
    while (pending != 0) {
        int moved = 0;
        for (int f = 0; f < K; f++) {
            if (!((pending >> f) & 1u)) {
                continue;
            }
            int blocked = 0;
            for (int g = 0; g < K; g++) {
                blocked |= ((pending >> g) & 1u) && g != f
                           && st->cur[g] == B->out[f];
            }
            if (!blocked) {
                moves[(*count)++] = (sch_move){st->cur[f], B->out[f]};
                st->cur[f] = B->out[f];
                pending &= ~(1u << f);
                moved = 1;
            }
        }
        if (moved) {
            continue;
        }
        /* a cycle: move the value in the first pending field's out aside */
        int f = 0;
        while (!((pending >> f) & 1u)) {
            f++;
        }
        unsigned char busy[SCH_MAX_BUFFERS];
        memset(busy, 0, sizeof(busy));
        for (int g = 0; g < K; g++) {
            busy[st->cur[g]] = 1;
        }
        const int aside = scratch_buffer(B, st, busy);
        if (aside < 0) {
            return -1;
        }
        const int held = B->out[f];
        moves[(*count)++] = (sch_move){held, aside};
        for (int g = 0; g < K; g++) {
            st->cur[g] = st->cur[g] == held ? aside : st->cur[g];
        }
    }
    return 0;
}

static int
same_state(const sch_state *a, const sch_state *b, int K)
{
    if (a->scratch != b->scratch) {
        return 0;
    }
    for (int f = 0; f < K; f++) {
        if (a->cur[f] != b->cur[f]) {
            return 0;
        }
    }
    return 1;
}

/*
 * Follow a run of `steps` steps from `init` in buffer order `order`,
 * without launching: *scratch gets the scratch arrays it brings into
 * play (the last step's and the final copies' included), *moves the
 * copies at its end.  The buffers' state repeats within a few steps,
 * after which the state before the last step follows from the period.
 * -1 when a stage finds no buffer.
 */
static int
simulate(const sch_buffers *B, const sch_state *init,
         const sch_stage_plan *plans, int stages, long steps, int order,
         int *scratch, int *moves)
{
    sch_state st = *init;
    sch_state history[SCH_HISTORY];
    long step = 0;
    while (step < steps - 1) {
        if (step < SCH_HISTORY) {
            long j = 0;
            while (j < step && !same_state(&history[j], &st, B->fields)) {
                j++;
            }
            if (j < step) {
                const long period = step - j;
                st = history[j + (steps - 1 - j) % period];
                break;
            }
            history[step] = st;
        }
        if (step_state(B, &st, plans, stages, 0, order) < 0) {
            return -1;
        }
        step++;
    }
    if (steps > 0 && step_state(B, &st, plans, stages, 1, order) < 0) {
        return -1;
    }
    sch_move list[2 * CS_SCHEME_MAX_FIELDS];
    if (sch_plan_moves(B, &st, list, moves) < 0) {
        return -1;
    }
    *scratch = st.scratch;
    return 0;
}

/* The buffer order whose run ends with the fewest copies (then the
   fewest scratch arrays), and its scratch arrays; -1 if none works. */
int
sch_choose_order(const sch_buffers *B, const sch_state *init,
             const sch_stage_plan *plans, int stages, long steps,
             int *scratch)
{
    int best = -1, best_moves = 0;
    for (int order = 0; order < SCH_ORDERS; order++) {
        int n = 0, moves = 0;
        if (simulate(B, init, plans, stages, steps, order, &n, &moves) < 0) {
            continue;
        }
        if (best < 0 || moves < best_moves
            || (moves == best_moves && n < *scratch)) {
            best = order;
            best_moves = moves;
            *scratch = n;
        }
    }
    return best;
}


/* ------------------------------------------------------------------------
 * blocked passes (scheme_tb.cu): the schedule, the model, the choice
 * --------------------------------------------------------------------- */

/* The pass model (H100 class): rates of DRAM, of L2 (a halo read again
   by the neighbouring block), and of the blocked kernel's work in shared
   memory (a stage's taps, factors, parameters and writes, as bytes).
   The last is what the kernel reaches, not the hardware's 30 TB/s: its
   stages interpret the scheme's tables and are bound by instructions
   (Nsight Compute, first version: SM throughput 76%, DRAM 14%).  A pass
   costs its work plus SCH_TB_OVERLAP of its memory time (the two overlap
   in part), a third more work where one block fills an SM.  Fitted to
   the H100's blocked passes (benchmarks/results/h100_schemes_blocked.md:
   18 shapes of 3 presets within 15%). */
#define SCH_TB_DRAM 3.0e12
#define SCH_TB_L2 7.0e12
#define SCH_TB_SMEM 15.5e12
#define SCH_TB_OVERLAP 0.78
#define SCH_TB_LONE 1.3

size_t
sch_tb_smem(const sch_tb_schedule *sc, int nparams)
{
    return (size_t)(sc->slots + nparams) * (size_t)sc->rows
           * SCH_TB_COLUMNS * sizeof(double);
}

int
sch_tb_fits(const sch_stage_plan *plans, int stages)
{
    if (stages > SCH_TB_STAGES) {
        return 0;
    }
    int terms = 0, taps = 0;
    for (int g = 0; g < stages; g++) {
        terms += plans[g].nterms;
        taps += plans[g].ntaps;
        if (plans[g].count > 8 || plans[g].r[0] > 0) {
            return 0;
        }
    }
    return terms <= SCH_TB_TERMS && taps <= SCH_TB_TAPS;
}



/*
 * The slots of a pass of k steps in regions of `rows` rows: the stages
 * followed through assign_stage, shared-memory slots as buffers (slot f
 * holds field f as the pass begins; each field's "out" is its own slot),
 * in the buffer order that needs the fewest slots.  -1 when a stage
 * finds none (never) or the pass is too long for the schedule.
 */
static int
tb_schedule_make(const sch_stage_plan *plans, int stages, int K, int k,
                 int rows, sch_tb_schedule *sc)
{
    if (k < 1 || k * stages > SCH_TB_INSTANCES) {
        return -1;
    }
    sch_buffers B;
    memset(&B, 0, sizeof(B));
    B.fields = K;
    B.count = K;
    for (int b = 0; b < SCH_MAX_BUFFERS; b++) {
        B.writable[b] = 1;
    }
    for (int f = 0; f < K; f++) {
        B.out[f] = f;
    }
    int best_slots = -1;
    for (int order = 0; order < SCH_ORDERS; order++) {
        sch_tb_schedule cand;
        memset(&cand, 0, sizeof(cand));
        sch_state st;
        memset(&st, 0, sizeof(st));
        for (int f = 0; f < K; f++) {
            st.cur[f] = f;
        }
        int ok = 1;
        for (int i = 0; i < k * stages && ok; i++) {
            const sch_stage_plan *sp = &plans[i % stages];
            sch_assign a;
            if (sch_assign_stage(&B, &st, sp, 0, order, &a) < 0) {
                ok = 0;
                break;
            }
            for (int f = 0; f < K; f++) {
                cand.from[i][f] = (unsigned char)a.from[f];
            }
            for (int j = 0; j < sp->count; j++) {
                cand.dst[i][j] =
                    (signed char)(a.how[j] == SCH_RENAME ? -1 : a.dst[j]);
            }
        }
        if (!ok) {
            continue;
        }
        for (int f = 0; f < K; f++) {
            cand.from[k * stages][f] = (unsigned char)st.cur[f];
        }
        cand.slots = K + st.scratch;
        if (best_slots < 0 || cand.slots < best_slots) {
            best_slots = cand.slots;
            *sc = cand;
        }
    }
    if (best_slots < 0) {
        return -1;
    }
    sc->steps = k;
    sc->rows = rows;
    sc->halo[0] = sc->halo[1] = 0;
    for (int g = 0; g < stages; g++) {
        sc->halo[0] += k * plans[g].r[1];
        sc->halo[1] += k * plans[g].r[2];
    }
    return 0;
}

/* The work of one cell of stage sp, in shared-memory accesses: each
   sum's taps, factors and parameters, and its write. */
static double
stage_accesses(const sch_stage_plan *sp)
{
    double n = 0.0;
    for (int t = 0; t < sp->nterms; t++) {
        const sch_term *term = &sp->terms[t];
        if (term->kind == CS_TERM_STENCIL) {
            n += term->ntaps;
        } else {
            for (int j = 0; j < sp->npw; j++) {
                n += (double)((term->pow >> (4 * j)) & 15u);
            }
        }
        n += term->param >= 0;
    }
    for (int j = 0; j < sp->count; j++) {
        n += sp->rename[j] < 0;
    }
    return n;
}

/* The one-step passes' model: each stage reads every array it needs and
   writes its sums once, at a fraction of the copy floor, or spends its
   work at SCH_ONESTEP_WORK, whichever is longer (Gray-Scott's seven
   monomials: its taps and factors as bytes, through L1 and registers).
   The fraction is what the one-step kernel's tiles reach: 93% in 2D (the
   waves), 69% in 3D (a tile of 32 x 8 points walking 4 planes reads its
   neighbours' planes and rows again).  Fitted to the H100's one-step
   passes (h100_schemes_blocked.md, h100_schemes_explain.md). */
#define SCH_ONESTEP_DRAM_2D (0.93 * SCH_TB_DRAM)
#define SCH_ONESTEP_DRAM_3D (0.69 * SCH_TB_DRAM)
#define SCH_ONESTEP_WORK 11.9e12

/* Seconds a grid point and step of the one-step passes. */
double
sch_onestep_cost(const sch_stage_plan *plans, int stages,
                 const ptrdiff_t shape[3])
{
    double bytes = 0.0, work = 0.0;
    for (int g = 0; g < stages; g++) {
        const sch_stage_plan *sp = &plans[g];
        unsigned read = sp->stencil_read, params = 0;
        for (int j = 0; j < sp->npw; j++) {
            read |= 1u << sp->pw_field[j];
        }
        for (int t = 0; t < sp->nterms; t++) {
            if (sp->terms[t].param >= 0) {
                params |= 1u << sp->terms[t].param;
            }
        }
        int writes = 0;
        for (int j = 0; j < sp->count; j++) {
            writes += sp->rename[j] < 0;
        }
        bytes += 8.0 * (__builtin_popcount(read) + __builtin_popcount(params)
                        + writes);
        work += 8.0 * stage_accesses(sp);
    }
    const double memory =
        bytes / (shape[0] > 1 ? SCH_ONESTEP_DRAM_3D : SCH_ONESTEP_DRAM_2D);
    const double compute = work / SCH_ONESTEP_WORK;
    return memory > compute ? memory : compute;
}

/* Seconds a grid point and step of passes scheduled as sc, K fields
   (`updated` of them written) and `nparams` parameter fields: the work
   of the stages in shared memory, and the load of every region (the
   tile from DRAM, the halo again from L2) and the write of the tile in
   part (the pass model above). */
static double
tb_cost(int smem_optin, const sch_stage_plan *plans, int stages,
        int K, int nparams, int updated, const sch_tb_schedule *sc)
{
    const double rows = sc->rows, cols = SCH_TB_COLUMNS;
    const double tile = (rows - 2 * sc->halo[0]) * (cols - 2 * sc->halo[1]);
    const double region = rows * cols;
    const double mem = 8.0 * (K + nparams) * tile / SCH_TB_DRAM
                       + 8.0 * (K + nparams) * (region - tile) / SCH_TB_L2
                       + 8.0 * updated * tile / SCH_TB_DRAM;
    double smem = 0.0;
    int spent[2] = {0, 0};
    for (int i = 0; i < sc->steps * stages; i++) {
        const sch_stage_plan *sp = &plans[i % stages];
        spent[0] += sp->r[1];
        spent[1] += sp->r[2];
        smem += (rows - 2 * spent[0]) * (cols - 2 * spent[1]) * 8.0
                * stage_accesses(sp) / SCH_TB_SMEM;
    }
    const size_t bytes = sch_tb_smem(sc, nparams);
    const size_t per_sm = (size_t)smem_optin + 1024;
    const double lone = per_sm / (bytes + 1024) < 2 ? SCH_TB_LONE : 1.0;
    return (lone * smem + SCH_TB_OVERLAP * mem)
           / ((double)sc->steps * tile);
}

/* The model's streamed pass (scheme_stream.cu) of tables t at `depth`
   steps, a grid point and step: the fields and parameters read and the
   updated fields written once a pass at 90% of the copy floor (the
   margins a strip reads are its neighbours' own columns, which the
   neighbouring warps read at about the same time: L2 serves them), or
   its operations over the strip's own columns at SST_OP_RATE_COMPILED
   (instances with the patterns compiled in, sch_stream_compiled) or
   SST_OP_RATE (patterns read at run time), whichever takes longer.  Operations, a level and point: a multiply-add per tap
   and centre coefficient, SST_OPS_FIELD per field (its shuffles and
   moves), SST_OPS_SCALE per scaled sum's parameter (read from the
   warp's parameter ring), SST_OPS_PARAM per pointwise term's parameter
   (read from global memory by each level), and a pointwise term
   SST_OPS_TERM plus SST_OPS_FACTOR per field where its powers are
   multiplied in as run-time counts, 2 plus its powers where they are
   compiled in (sch_stream_pw_compiled).  SST_OP_RATE was fitted on the
   H100 (10240^2, 48 steps, h100_schemes_streamed.md) to Gray-Scott with
   run-time terms at depth 4 (91 G/s, the model 93);
   SST_OP_RATE_COMPILED to the compiled instances after their per-level
   instructions were cut by 40 to 45% (h100_schemes_streamed_ring.md,
   G/s measured and modelled): the wave at depths 2, 4, 8 (167, 169;
   324, 338; 539, 506), with a velocity field at 2, 4, 6 (135, 135; 263,
   270; 374, 405), Gray-Scott at 2, 4, 5 (150, 169; 267, 315; 288, 293).
   The deep passes of the wave with a velocity field are bound by
   memory (Nsight Compute: 73% of DRAM's peak at 4096^2,
   h100_ncu_streamed_schemes.txt). */
#define SST_COLUMNS 64
#define SST_DRAM (0.9 * SCH_TB_DRAM)
#define SST_OP_RATE 7.0e12
#define SST_OP_RATE_COMPILED 10.8e12
#define SST_OPS_FIELD 4
#define SST_OPS_PARAM 12
/* an estimate (the velocity wave's passes, the one measured case, are
   bound by memory at every depth): one 16-byte shared load a lane and
   level (2 points), and the row's two cp.async a lane spread over the
   levels; it was SST_OPS_PARAM, fitted, while every level read the row
   from global memory */
#define SST_OPS_SCALE 2
#define SST_OPS_TERM 6
#define SST_OPS_FACTOR 8
/* 3D (scheme_stream3.cu): a tile's central (64 - 2 depth) x (32 - 2
   depth) cells are its own; every level computes the whole tile, and
   each pass reads the whole tile (the margins too: unlike 2D's strips,
   the neighbouring tiles' planes are seldom in L2 at the time).  Its
   operations a level and cell: those of 2D, and SST3_OPS_SHARED per
   field through shared planes (its plane left there, its neighbours'
   and its previous plane read back).  Fitted on the H100 to the wave
   (512^3, 48 steps, h100_schemes_streamed3d.md, G/s measured and
   modelled): SST3_DRAM to depths 2, 3, 4 (132, 130; 179, 183; 231,
   229), SST3_OP_RATE to 5 and 6 (212, 221; 217, 193), where the work
   outweighs the bytes; the model's lowest cost is depth 4, the
   fastest. */
#define SST3_DRAM 2.3e12
#define SST3_OP_RATE 8.0e12
#define SST3_OPS_SHARED 3
static double
stream_waste(const sch_stream_tables *t, int depth)
{
    if (t->ndim == 3) {
        const double tile = (double)SST3_TILE_ROWS * SST3_TILE_COLS;
        return tile / ((SST3_TILE_ROWS - 2.0 * depth)
                       * (SST3_TILE_COLS - 2.0 * depth));
    }
    const int margin = (depth + 1) / 2 * 2;
    return (double)SST_COLUMNS / (SST_COLUMNS - 2 * margin);
}

static double
stream_cost(const sch_stream_tables *t, int nparams, int depth)
{
    const double waste = stream_waste(t, depth);
    const int compiled = sch_stream_pw_compiled(t);
    int updated = 0, ops = 0;
    for (int i = 0; i < t->fields; i++) {
        updated += t->updated[i];
        for (int c = 0; c < 2; c++) {
            for (int f = 0; f < t->fields; f++) {
                ops += __builtin_popcount(t->mask[i][c][f])
                       + t->ncentre[i][c][f];
            }
        }
        ops += SST_OPS_FIELD + (t->scale_param[i] >= 0 ? SST_OPS_SCALE : 0);
        for (int m = 0; m < t->npw[i]; m++) {
            int powers = 0;
            for (int f = 0; f < t->fields; f++) {
                powers += t->pw_power[i][m][f];
            }
            ops += (compiled ? 2 + powers
                             : SST_OPS_TERM + SST_OPS_FACTOR * t->fields)
                   + (t->pw_param[i][m] >= 0 ? SST_OPS_PARAM : 0);
        }
    }
    double mem = 8.0 * (t->fields + nparams + updated) / (SST_DRAM * depth);
    double rate = sch_stream_compiled(t) ? SST_OP_RATE_COMPILED
                                         : SST_OP_RATE;
    if (t->ndim == 3) {
        mem = 8.0 * ((t->fields + nparams) * waste + updated)
              / (SST3_DRAM * depth);
        ops += SST3_OPS_SHARED * __builtin_popcount(sch_stream3_shared(t));
        rate = SST3_OP_RATE;
    }
    const double work = ops * waste / rate;
    return mem > work ? mem : work;
}

/* The streamed passes' depth, forced or the deepest (0: none taken). */
static int
stream_choice(const cs_scheme *s, const ptrdiff_t shape[3], cs_mode mode,
              long steps, int force, int smem_optin, sch_stream_tables *t,
              double *cost)
{
    *cost = 0.0;
    const int fits = s->ndim == 3
                         ? shape[0] >= SST3_MIN_EXTENT
                               && shape[1] >= SST3_MIN_EXTENT
                               && shape[2] >= SST3_MIN_EXTENT
                         : shape[0] == 1 && shape[1] >= CS_TB2D_MIN_EXTENT
                               && shape[2] >= CS_TB2D_MIN_EXTENT;
    if (!fits || steps < 1 || !sch_stream_tables_make(s, mode, t)) {
        return 0;
    }
    int top = sch_stream_max_depth(t);
    if (t->ndim == 3) {
        while (top > 0 && sch_stream3_smem_bytes(t, top) > (size_t)smem_optin) {
            top--;
        }
        if (top == 0) {
            return 0;
        }
    }
    if (force > 0) {
        const int k = force < top ? force : top;
        *cost = stream_cost(t, s->param_count, k);
        return k;
    }
    /* the deepest the instance holds: on the H100 each preset ran
       fastest there or within 2% of it (h100_schemes_streamed.md),
       while the model, a maximum of two bounds, overrates the shallow
       passes of the schemes with parameters or pointwise terms */
    int k = steps < top ? (int)steps : top;
    if (t->ndim == 3) {
        /* in 3D the margins cost more: the depth the model prices
           lowest */
        for (int d = k - 1; d >= 1; d--) {
            if (stream_cost(t, s->param_count, d)
                < stream_cost(t, s->param_count, k)) {
                k = d;
            }
        }
    }
    *cost = stream_cost(t, s->param_count, k);
    return k;
}

cs_status
sch_choose_passes(const cs_scheme *s, const sch_stage_plan *plans,
                  const ptrdiff_t shape[3], cs_mode mode, long steps,
                  int smem_optin, int streamed_ok, const char *setting,
                  sch_passes *out, char *msg, size_t msg_len)
{
    memset(out, 0, sizeof(*out));
    out->kind = SCH_PASSES_ONESTEP;
    out->depth = 1;
    const double one = sch_onestep_cost(plans, s->stage_count, shape);
    out->onestep_cost = one;
    int force_rows = 0, force_k = 0, force_stream = 0, no_stream = 0;
    if (setting != NULL && setting[0] != '\0') {
        char tail = 0;
        if (strcmp(setting, "off") == 0) {
            return CS_OK;
        } else if (strcmp(setting, "nostream") == 0) {
            no_stream = 1;
        } else if (sscanf(setting, "stream%d%c", &force_stream, &tail) == 1
                   && force_stream >= 1) {
            /* forced below, where streamed passes are taken */
        } else if (sscanf(setting, "%dx%d%c", &force_rows, &force_k, &tail)
                       != 2
                   || (force_rows != 32 && force_rows != 64)
                   || force_k < 1) {
            cs_say(msg, msg_len, "CONVSTENCIL_SCHEME_BLOCK must be off, "
                                 "nostream, streamN or ROWSxSTEPS (ROWS 32 "
                                 "or 64), not \"%s\"",
                   setting);
            return CS_ERR_INVALID;
        }
    }
    double scost = 0.0;
    const int sdepth =
        force_rows != 0 || no_stream || !streamed_ok
            ? 0
            : stream_choice(s, shape, mode, steps, force_stream, smem_optin,
                            &out->stream, &scost);
    out->stream_cost = scost;
    const int K = s->field_count;
    unsigned updated = 0;
    for (int g = 0; g < s->stage_count; g++) {
        updated |= plans[g].targets;
    }
    double best = 0.0;
    int found = 0;
    if (shape[0] == 1 && shape[1] >= 2 && steps >= 2
        && sch_tb_fits(plans, s->stage_count)) {
        for (int rows = 32; rows <= 64; rows *= 2) {
            for (int k = 1; k <= 16 && k <= steps; k++) {
                const int want_k = force_k < steps ? force_k : (int)steps;
                if (force_rows != 0 && (rows != force_rows || k != want_k)) {
                    continue;
                }
                sch_tb_schedule cand;
                if (tb_schedule_make(plans, s->stage_count, K, k, rows,
                                     &cand)
                    < 0) {
                    continue;
                }
                const int tile_rows = rows - 2 * cand.halo[0];
                const int tile_cols = SCH_TB_COLUMNS - 2 * cand.halo[1];
                if (tile_rows < 8 || tile_cols < 16
                    || (shape[1] + tile_rows - 1) / tile_rows > SCH_GRID_YZ
                    || sch_tb_smem(&cand, s->param_count)
                           > (size_t)smem_optin) {
                    continue;
                }
                const double c = tb_cost(smem_optin, plans, s->stage_count,
                                         K, s->param_count,
                                         __builtin_popcount(updated), &cand);
                if (!found || c < best) {
                    best = c;
                    out->sc = cand;
                    found = 1;
                }
            }
        }
    }
    out->blocked_cost = found ? best : 0.0;
    if (sdepth > 0 && (force_stream > 0 || (scost < one
                                            && (!found || scost < best)))) {
        out->kind = SCH_PASSES_STREAMED;
        out->depth = sdepth;
        return CS_OK;
    }
    /* forced where it fits; else where it pays (one step a pass is the
       one-step passes with more halo) */
    if (found && (force_rows != 0
                  || (out->sc.steps >= 2 && best <= 0.9 * one))) {
        out->kind = SCH_PASSES_BLOCKED;
        out->depth = out->sc.steps;
    }
    return CS_OK;
}
