/*
 * scheme_tables_glue.c -- a PDE scheme's stencils and code tables
 * (scheme.h) read from Python into a cs_scheme, for the calls that take
 * them as arrays (scheme_tables_glue.h).  Every table's type, shape,
 * contiguity and alignment is checked here and every index through
 * cs_scheme_check, so a wrong call raises TypeError or ValueError and
 * never crashes.  No NumPy C API: the buffer protocol.
 */
#include "scheme_tables_glue.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

int
cs_py_format_is(const Py_buffer *v, char code, Py_ssize_t itemsize)
{
    const unsigned int one = 1;
    const int little = *(const unsigned char *)&one == 1;
    const char *f = v->format;
    if (f == NULL || v->itemsize != itemsize) {
        return 0;
    }
    if (*f == '@' || *f == '=' || (*f == '<' && little)
        || ((*f == '>' || *f == '!') && !little)) {
        f++;
    }
    return f[0] == code && f[1] == '\0';
}

/*
 * A C-contiguous view of `obj` (argument `name`, item i, or -1) into
 * *view: aligned items of struct code `code` ('d' float64, 'i' int32) and
 * `ndim` axes.  -1 with TypeError or ValueError otherwise; view->obj is
 * NULL unless a view was taken.
 */
static int
get_view(const char *fn, PyObject *obj, Py_buffer *view, const char *name,
         Py_ssize_t i, char code, int ndim)
{
    char what[64];
    if (i >= 0) {
        PyOS_snprintf(what, sizeof(what), "%s[%zd]", name, i);
    }
    else {
        PyOS_snprintf(what, sizeof(what), "%s", name);
    }
    const Py_ssize_t itemsize = code == 'd' ? 8 : 4;
    const char *type = code == 'd' ? "float64" : "int32";
    view->obj = NULL;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
        < 0) {
        view->obj = NULL;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s must be a C-contiguous %s "
                     "host array, not %.200s", fn, what, type,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!cs_py_format_is(view, code, itemsize)
        || (uintptr_t)view->buf % (uintptr_t)itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an aligned %s array "
                     "in native byte order, not format '%s'", fn, what, type,
                     view->format != NULL ? view->format : "?");
        return -1;
    }
    if (view->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %d axes, not %d", fn,
                     what, view->ndim, ndim);
        return -1;
    }
    return 0;
}

/* The shape tuple (1 to 3 ints >= 0) as 3 extents with leading 1s;
   its length, or -1 with an exception. */
int
cs_py_scheme_shape(const char *fn, PyObject *t, ptrdiff_t shape[3])
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 1
        || PyTuple_GET_SIZE(t) > CS_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "%s: shape must be a tuple of 1 to "
                     "3 ints", fn);
        return -1;
    }
    const int ndim = (int)PyTuple_GET_SIZE(t);
    for (int a = 0; a < 3; a++) {
        shape[a] = 1;
    }
    for (int a = 0; a < ndim; a++) {
        PyObject *item = PyTuple_GET_ITEM(t, a);
        const Py_ssize_t v = PyLong_Check(item) ? PyLong_AsSsize_t(item)
                                                : -1;
        if (v < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: shape must hold ints >= 0",
                         fn);
            return -1;
        }
        shape[3 - ndim + a] = (ptrdiff_t)v;
    }
    return ndim;
}

/* The terms table's row i of a scheme of k fields; -1 with ValueError
   for what cs_scheme_check does not see (a monomial's field and stencil,
   a stencil term's powers). */
static int
read_term(const char *fn, const int *row, double coef, int k, Py_ssize_t i,
          cs_term *t)
{
    memset(t, 0, sizeof(*t));
    if (row[0] != CS_TERM_STENCIL && row[0] != CS_TERM_MONOMIAL) {
        PyErr_Format(PyExc_ValueError, "%s: terms[%zd]: kind %d (0 "
                     "stencil, 1 monomial)", fn, i, row[0]);
        return -1;
    }
    t->kind = (cs_term_kind)row[0];
    t->coef = coef;
    t->param = row[1];
    t->field = row[2];
    t->stencil = row[3];
    if (t->kind == CS_TERM_MONOMIAL && (t->field != -1 || t->stencil != -1)) {
        PyErr_Format(PyExc_ValueError, "%s: terms[%zd]: a monomial's field "
                     "and stencil are -1, not %d and %d", fn, i, t->field,
                     t->stencil);
        return -1;
    }
    for (int f = 0; f < k; f++) {
        const int p = row[TERM_COLUMNS + f];
        const int most = t->kind == CS_TERM_MONOMIAL ? CS_SCHEME_MAX_POWER
                                                     : 0;
        if (p < 0 || p > most) {
            PyErr_Format(PyExc_ValueError, "%s: terms[%zd]: power %d of "
                         "field %d (a %s term takes 0 to %d)", fn, i, p, f,
                         t->kind == CS_TERM_MONOMIAL ? "monomial"
                                                              : "stencil",
                         most);
            return -1;
        }
        t->power[f] = (unsigned char)p;
    }
    return 0;
}

/* Stencil i's weights as a kernel: odd extents, finite weights; -1 with
   an exception otherwise. */
static int
read_stencil(const char *fn, const Py_buffer *v, Py_ssize_t i, cs_kernel *k)
{
    ptrdiff_t size[CS_MAX_NDIM];
    for (int a = 0; a < v->ndim; a++) {
        size[a] = v->shape[a];
        if (size[a] < 1 || size[a] % 2 == 0) {
            PyErr_Format(PyExc_ValueError, "%s: stencils[%zd] must have an "
                         "odd extent on every axis", fn, i);
            return -1;
        }
    }
    const double *w = v->buf;
    for (Py_ssize_t q = 0; q < v->len / (Py_ssize_t)sizeof(double); q++) {
        if (!isfinite(w[q])) {
            PyErr_Format(PyExc_ValueError, "%s: stencils[%zd] must be "
                         "finite", fn, i);
            return -1;
        }
    }
    if (cs_kernel_init(k, v->ndim, size, w) != CS_OK) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void
cs_py_scheme_tables_init(cs_py_scheme_tables *t)
{
    memset(t, 0, sizeof(*t));
}

void
cs_py_scheme_tables_release(cs_py_scheme_tables *t)
{
    for (Py_ssize_t i = 0; t->kernels != NULL && i < t->ns; i++) {
        cs_kernel_free(&t->kernels[i]);
    }
    PyMem_Free(t->kernels);
    PyMem_Free(t->terms);
    PyMem_Free(t->updates);
    PyMem_Free(t->stages);
    for (Py_ssize_t i = 0; t->st_v != NULL && i < t->ns; i++) {
        if (t->st_v[i].obj != NULL) {
            PyBuffer_Release(&t->st_v[i]);
        }
    }
    PyMem_Free(t->st_v);
    for (int i = 0; i < 4; i++) {
        if (t->tab_v[i].obj != NULL) {
            PyBuffer_Release(&t->tab_v[i]);
        }
    }
    cs_py_scheme_tables_init(t);
}

int
cs_py_read_scheme_tables(const char *fn, int ndim, Py_ssize_t k,
                         Py_ssize_t np, PyObject *stencils_obj,
                         PyObject *coefs_obj, PyObject *terms_obj,
                         PyObject *updates_obj, PyObject *stages_obj,
                         cs_py_scheme_tables *t)
{
    const Py_ssize_t ns = PyTuple_GET_SIZE(stencils_obj);
    if (k < 1 || k > CS_SCHEME_MAX_FIELDS || np < 0
        || np > CS_SCHEME_MAX_PARAMS || ns > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: %zd fields (1 to %d), %zd "
                     "parameter fields (0 to %d)", fn, k,
                     CS_SCHEME_MAX_FIELDS, np, CS_SCHEME_MAX_PARAMS);
        return -1;
    }
    t->ns = ns;
    t->st_v = PyMem_Calloc((size_t)(ns > 0 ? ns : 1), sizeof(Py_buffer));
    t->kernels = PyMem_Calloc((size_t)(ns > 0 ? ns : 1), sizeof(cs_kernel));
    if (t->st_v == NULL || t->kernels == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < ns; i++) {
        if (get_view(fn, PyTuple_GET_ITEM(stencils_obj, i), &t->st_v[i],
                     "stencils", i, 'd', ndim) < 0
            || read_stencil(fn, &t->st_v[i], i, &t->kernels[i]) < 0) {
            return -1;
        }
    }
    static const char *const table_names[] = {"coefs", "terms", "updates",
                                              "stages"};
    PyObject *const table_objs[] = {coefs_obj, terms_obj, updates_obj,
                                    stages_obj};
    for (int i = 0; i < 4; i++) {
        if (get_view(fn, table_objs[i], &t->tab_v[i], table_names[i], -1,
                     i == 0 ? 'd' : 'i', i == 0 ? 1 : 2) < 0) {
            return -1;
        }
    }
    const Py_buffer *tab_v = t->tab_v;
    const Py_ssize_t nt = tab_v[1].shape[0];
    const Py_ssize_t nu = tab_v[2].shape[0];
    const Py_ssize_t ng = tab_v[3].shape[0];
    if (tab_v[0].shape[0] != nt || tab_v[1].shape[1] != TERM_COLUMNS + k
        || tab_v[2].shape[1] != 3 || tab_v[3].shape[1] != 2
        || nt > INT32_MAX || nu > INT32_MAX || ng > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: the tables' shapes must be "
                     "coefs (T,), terms (T, %zd), updates (U, 3), stages "
                     "(G, 2)", fn, TERM_COLUMNS + k);
        return -1;
    }
    t->terms = PyMem_Calloc((size_t)(nt > 0 ? nt : 1), sizeof(cs_term));
    t->updates = PyMem_Calloc((size_t)(nu > 0 ? nu : 1), sizeof(cs_update));
    t->stages = PyMem_Calloc((size_t)(ng > 0 ? ng : 1), sizeof(cs_stage));
    if (t->terms == NULL || t->updates == NULL || t->stages == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const double *coefs = tab_v[0].buf;
    const int *rows = tab_v[1].buf;
    for (Py_ssize_t i = 0; i < nt; i++) {
        if (read_term(fn, rows + i * (TERM_COLUMNS + k), coefs[i], (int)k,
                      i, &t->terms[i]) < 0) {
            return -1;
        }
    }
    rows = tab_v[2].buf;
    for (Py_ssize_t i = 0; i < nu; i++) {
        t->updates[i].target = rows[3 * i];
        t->updates[i].first_term = rows[3 * i + 1];
        t->updates[i].term_count = rows[3 * i + 2];
    }
    rows = tab_v[3].buf;
    for (Py_ssize_t i = 0; i < ng; i++) {
        t->stages[i].first_update = rows[2 * i];
        t->stages[i].update_count = rows[2 * i + 1];
    }
    cs_scheme *scheme = &t->scheme;
    scheme->ndim = ndim;
    scheme->field_count = (int)k;
    scheme->param_count = (int)np;
    scheme->stencil_count = (int)ns;
    scheme->stencils = t->kernels;
    scheme->term_count = (int)nt;
    scheme->terms = t->terms;
    scheme->update_count = (int)nu;
    scheme->updates = t->updates;
    scheme->stage_count = (int)ng;
    scheme->stages = t->stages;
    char detail[512] = "";
    if (cs_scheme_check(scheme, detail, sizeof(detail)) != CS_OK) {
        PyErr_Format(PyExc_ValueError, "%s: %s", fn, detail);
        return -1;
    }
    return 0;
}
