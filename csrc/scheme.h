/*
 * scheme.h -- a PDE scheme as the engines run it: K fields of one shape
 * advanced together, one step a sequence of stages.
 *
 * A stage is a list of updates; each update sets one field (its target)
 * to a sum of terms evaluated on the values the fields had when the
 * stage began (so the updates of one stage may read each other's
 * targets: they see the old values).  A field no update of a stage
 * targets keeps its value through that stage.  A term is
 *
 *     coef * [param]  * stencil(field)              (CS_TERM_STENCIL)
 *     coef * [param]  * prod_f field_f ** power[f]  (CS_TERM_MONOMIAL)
 *
 * where [param] is a parameter field (read, never written) or 1 when
 * param < 0, and stencil(field) is one step of `apply`: the correlation
 * of the field with the stencil's weights under the scheme's boundary
 * mode and cval, skipping zero weights as scipy.ndimage does.  The terms
 * of an update are summed in their order, starting from 0:
 *
 *     acc = 0; for each term t: acc += (t.coef * param) * value(t)
 *
 * and a monomial's value is the product of its factors in field order,
 * each field multiplied in `power` times (power 0: not at all, so the
 * empty product is exactly 1 and NaN ** 0 is 1, as in NumPy).
 *
 * The Python layer (src/convstencil/_scheme.py) builds these tables from
 * a user's expression; tests/reference.py evaluates the same tables with
 * SciPy and NumPy.  No Python in here.
 */
#ifndef CS_SCHEME_H
#define CS_SCHEME_H

#include "stencil.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_SCHEME_MAX_FIELDS 8  /* Maxwell in 3D has 6 */
#define CS_SCHEME_MAX_PARAMS 8
#define CS_SCHEME_MAX_POWER 4

typedef enum cs_term_kind {
    CS_TERM_STENCIL = 0,
    CS_TERM_MONOMIAL = 1
} cs_term_kind;

typedef struct cs_term {
    cs_term_kind kind;
    double coef;        /* the number */
    int param;          /* the parameter field multiplying it; -1: none */
    int field;          /* STENCIL: the field correlated */
    int stencil;        /* STENCIL: index into cs_scheme.stencils */
    unsigned char power[CS_SCHEME_MAX_FIELDS]; /* MONOMIAL: 0..4 each */
} cs_term;

/* target = the sum of terms[first_term .. first_term + term_count) */
typedef struct cs_update {
    int target;
    int first_term;
    int term_count;
} cs_update;

/* updates[first_update .. first_update + update_count), distinct targets */
typedef struct cs_stage {
    int first_update;
    int update_count;
} cs_stage;

typedef struct cs_scheme {
    int ndim;                   /* 1..3, every stencil's too */
    int field_count;            /* 1..CS_SCHEME_MAX_FIELDS */
    int param_count;            /* 0..CS_SCHEME_MAX_PARAMS */
    int stencil_count;
    const cs_kernel *stencils;  /* odd extents, ndim axes */
    int term_count;
    const cs_term *terms;
    int update_count;
    const cs_update *updates;
    int stage_count;            /* >= 1 */
    const cs_stage *stages;
} cs_scheme;

/*
 * CS_OK when every index is in range, every stage's targets are
 * distinct, every stencil has the scheme's ndim and odd extents, and
 * every power is 0..CS_SCHEME_MAX_POWER; else CS_ERR_INVALID with what
 * was wrong in msg.
 */
cs_status
cs_scheme_check(const cs_scheme *s, char *msg, size_t msg_len);

/* The largest radius of any stencil along `axis` (0 where none). */
ptrdiff_t
cs_scheme_radius(const cs_scheme *s, int axis);

#ifdef __cplusplus
}
#endif

#endif /* CS_SCHEME_H */
