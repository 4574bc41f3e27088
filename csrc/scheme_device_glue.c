/*
 * scheme_device_glue.c -- convstencil._core.run_scheme_device
 * (scheme_device_glue.h).
 *
 * The fields and parameter fields are device arrays, passed as pointers
 * (integers) with one shape; the stencils and the code tables are host
 * arrays, read through the buffer protocol (no NumPy C API here).  This
 * file checks what the engine relies on -- every table's type, shape,
 * contiguity and alignment, every index through cs_scheme_check -- so
 * that a wrong call raises TypeError or ValueError and never crashes;
 * the engine checks the pointers (device memory of the current device,
 * no overlap but an out that is an in).  The engine runs without the
 * GIL.  One exit path.
 */
#include "scheme_device_glue.h"

#include "core_glue.h"
#include "scheme.h"
#include "scheme_plan.h"
#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
#endif
#ifndef CS_NO_CUDA_REASON
#define CS_NO_CUDA_REASON "built without the CUDA engine"
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const char cs_py_run_scheme_device_doc[] =
    "run_scheme_device(fields_in, fields_out, params, shape, stencils,\n"
    "                  coefs, terms, updates, stages, steps, mode, cval,\n"
    "                  stream, interruptible, progress) -> dict\n"
    "\n"
    "Advance the K fields of a PDE scheme (csrc/scheme.h) `steps` steps on\n"
    "the GPU.  fields_in, fields_out, params: tuples of device pointers\n"
    "(int) to float64 C-contiguous arrays of `shape` (a tuple of 1 to 3\n"
    "ints) on the current device; the outs are distinct, an out may be an\n"
    "in (in place, or another field's: swapped), an in that is no out is\n"
    "never written.  stencils: a tuple of float64 C-contiguous host weight\n"
    "arrays of len(shape) axes, odd extents.  The tables: coefs, float64\n"
    "(T,); terms, int32 (T, 4 + K): kind (0 stencil, 1 monomial), param\n"
    "(-1: none), field and stencil (-1 for a monomial), then the K powers\n"
    "(0 to 4; 0 for a stencil term); updates, int32 (U, 3): target,\n"
    "first_term, term_count; stages, int32 (G, 2): first_update,\n"
    "update_count.  mode: a MODE_* code.  stream: a cudaStream_t as an int;\n"
    "0 runs on the engine's stream after the legacy default stream's work\n"
    "and returns when done, any other queues the work there and returns.\n"
    "interruptible and progress as in run().  Returns what the run did.";

/* Columns of the terms table before the powers. */
#define TERM_COLUMNS 4

/* Whether the buffer holds items of struct code `code` and `itemsize`
   bytes in native byte order. */
static int
format_is(const Py_buffer *v, char code, Py_ssize_t itemsize)
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
get_view(PyObject *obj, Py_buffer *view, const char *name, Py_ssize_t i,
         char code, int ndim)
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
        PyErr_Format(PyExc_TypeError, "run_scheme_device: %s must be a "
                     "C-contiguous %s host array, not %.200s", what, type,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!format_is(view, code, itemsize)
        || (uintptr_t)view->buf % (uintptr_t)itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "run_scheme_device: %s must be an "
                     "aligned %s array in native byte order, not format "
                     "'%s'", what, type,
                     view->format != NULL ? view->format : "?");
        return -1;
    }
    if (view->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "run_scheme_device: %s has %d axes, "
                     "not %d", what, view->ndim, ndim);
        return -1;
    }
    return 0;
}

/* Item i of tuple `t` (argument `name`) as a pointer (a positive int, or
   0 where `zero_ok`); -1 with TypeError or ValueError otherwise. */
static int
get_pointer(PyObject *t, Py_ssize_t i, const char *name, int zero_ok,
            void **ptr)
{
    PyObject *item = PyTuple_GET_ITEM(t, i);
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "run_scheme_device: %s[%zd] must be "
                     "a device pointer (int), not %.200s", name, i,
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(item);
    if (PyErr_Occurred() || (v == 0 && !zero_ok) || v > UINTPTR_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "run_scheme_device: %s[%zd] is no "
                     "device pointer (a positive int)", name, i);
        return -1;
    }
    *ptr = (void *)(uintptr_t)v;
    return 0;
}

/* The shape tuple (1 to 3 ints >= 0) as 3 extents with leading 1s;
   its length, or -1 with an exception. */
static int
get_shape(PyObject *t, ptrdiff_t shape[3])
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 1
        || PyTuple_GET_SIZE(t) > CS_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "run_scheme_device: shape must "
                        "be a tuple of 1 to 3 ints");
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
            PyErr_SetString(PyExc_ValueError, "run_scheme_device: shape "
                            "must hold ints >= 0");
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
read_term(const int *row, double coef, int k, Py_ssize_t i, cs_term *t)
{
    memset(t, 0, sizeof(*t));
    if (row[0] != CS_TERM_STENCIL && row[0] != CS_TERM_MONOMIAL) {
        PyErr_Format(PyExc_ValueError, "run_scheme_device: terms[%zd]: "
                     "kind %d (0 stencil, 1 monomial)", i, row[0]);
        return -1;
    }
    t->kind = (cs_term_kind)row[0];
    t->coef = coef;
    t->param = row[1];
    t->field = row[2];
    t->stencil = row[3];
    if (t->kind == CS_TERM_MONOMIAL && (t->field != -1 || t->stencil != -1)) {
        PyErr_Format(PyExc_ValueError, "run_scheme_device: terms[%zd]: a "
                     "monomial's field and stencil are -1, not %d and %d",
                     i, t->field, t->stencil);
        return -1;
    }
    for (int f = 0; f < k; f++) {
        const int p = row[TERM_COLUMNS + f];
        const int most = t->kind == CS_TERM_MONOMIAL ? CS_SCHEME_MAX_POWER
                                                     : 0;
        if (p < 0 || p > most) {
            PyErr_Format(PyExc_ValueError, "run_scheme_device: terms[%zd]: "
                         "power %d of field %d (a %s term takes 0 to %d)",
                         i, p, f, t->kind == CS_TERM_MONOMIAL ? "monomial"
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
read_stencil(const Py_buffer *v, Py_ssize_t i, cs_kernel *k)
{
    ptrdiff_t size[CS_MAX_NDIM];
    for (int a = 0; a < v->ndim; a++) {
        size[a] = v->shape[a];
        if (size[a] < 1 || size[a] % 2 == 0) {
            PyErr_Format(PyExc_ValueError, "run_scheme_device: stencils[%zd]"
                         " must have an odd extent on every axis", i);
            return -1;
        }
    }
    const double *w = v->buf;
    for (Py_ssize_t q = 0; q < v->len / (Py_ssize_t)sizeof(double); q++) {
        if (!isfinite(w[q])) {
            PyErr_Format(PyExc_ValueError, "run_scheme_device: stencils[%zd]"
                         " must be finite", i);
            return -1;
        }
    }
    if (cs_kernel_init(k, v->ndim, size, w) != CS_OK) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* A scheme's tables as read from Python (release with
   tables_release on every path). */
typedef struct scheme_tables {
    Py_buffer tab_v[4];  /* coefs, terms, updates, stages */
    Py_buffer *st_v;     /* the stencils' views */
    Py_ssize_t ns;
    cs_kernel *kernels;
    cs_term *terms;
    cs_update *updates;
    cs_stage *stages;
    cs_scheme scheme;
} scheme_tables;

static void
tables_init(scheme_tables *t)
{
    memset(t, 0, sizeof(*t));
}

static void
tables_release(scheme_tables *t)
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
    tables_init(t);
}

/*
 * The stencils (a tuple of float64 weight arrays of `ndim` axes) and the
 * code tables of a scheme of k fields and np parameter fields, read and
 * checked (cs_scheme_check) into t->scheme; -1 with an exception set.
 * `fn` names the caller in messages.
 */
static int
read_tables(const char *fn, int ndim, Py_ssize_t k, Py_ssize_t np,
            PyObject *stencils_obj, PyObject *coefs_obj, PyObject *terms_obj,
            PyObject *updates_obj, PyObject *stages_obj, scheme_tables *t)
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
        if (get_view(PyTuple_GET_ITEM(stencils_obj, i), &t->st_v[i],
                     "stencils", i, 'd', ndim) < 0
            || read_stencil(&t->st_v[i], i, &t->kernels[i]) < 0) {
            return -1;
        }
    }
    static const char *const table_names[] = {"coefs", "terms", "updates",
                                              "stages"};
    PyObject *const table_objs[] = {coefs_obj, terms_obj, updates_obj,
                                    stages_obj};
    for (int i = 0; i < 4; i++) {
        if (get_view(table_objs[i], &t->tab_v[i], table_names[i], -1,
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
        if (read_term(rows + i * (TERM_COLUMNS + k), coefs[i], (int)k, i,
                      &t->terms[i]) < 0) {
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

PyObject *
cs_py_run_scheme_device(PyObject *self, PyObject *args)
{
    PyObject *fields_in, *fields_out, *params_obj, *shape_obj, *stencils_obj;
    PyObject *coefs_obj, *terms_obj, *updates_obj, *stages_obj, *stream_obj;
    PyObject *progress;
    long steps;
    int mode, interruptible;
    double cval;
    scheme_tables tab;
    PyObject *result = NULL;
    (void)self;

    tables_init(&tab);
    if (!PyArg_ParseTuple(args, "O!O!O!OO!OOOOlidOpO:run_scheme_device",
                          &PyTuple_Type, &fields_in, &PyTuple_Type,
                          &fields_out, &PyTuple_Type, &params_obj,
                          &shape_obj, &PyTuple_Type, &stencils_obj,
                          &coefs_obj, &terms_obj, &updates_obj, &stages_obj,
                          &steps, &mode, &cval, &stream_obj, &interruptible,
                          &progress)) {
        return NULL;
    }
    const Py_ssize_t k = PyTuple_GET_SIZE(fields_in);
    const Py_ssize_t np = PyTuple_GET_SIZE(params_obj);
    const Py_ssize_t ns = PyTuple_GET_SIZE(stencils_obj);
    if (k < 1 || k > CS_SCHEME_MAX_FIELDS
        || PyTuple_GET_SIZE(fields_out) != k || np > CS_SCHEME_MAX_PARAMS
        || ns > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "run_scheme_device: %zd fields in "
                     "and %zd out (1 to %d, as many out as in), %zd "
                     "parameter fields (0 to %d)", k,
                     PyTuple_GET_SIZE(fields_out), CS_SCHEME_MAX_FIELDS, np,
                     CS_SCHEME_MAX_PARAMS);
        goto exit;
    }
    ptrdiff_t shape[3];
    const int ndim = get_shape(shape_obj, shape);
    if (ndim < 0) {
        goto exit;
    }
    if (steps < 0 || mode < 0 || mode >= CS_MODE_COUNT) {
        PyErr_Format(PyExc_ValueError, "run_scheme_device: steps %ld < 0 or "
                     "unknown mode code %d", steps, mode);
        goto exit;
    }
    unsigned long long stream = 0;
    if (!PyLong_Check(stream_obj)) {
        PyErr_Format(PyExc_TypeError, "run_scheme_device: stream must be an "
                     "int (a cudaStream_t; 0: none), not %.200s",
                     Py_TYPE(stream_obj)->tp_name);
        goto exit;
    }
    stream = PyLong_AsUnsignedLongLong(stream_obj);
    if (PyErr_Occurred() || stream > UINTPTR_MAX) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "run_scheme_device: stream must "
                        "be an int >= 0");
        goto exit;
    }

    /* the arrays' pointers: checked by the engine (device memory of the
       current device, no overlap but an out that is an in) */
    const int empty = shape[0] * shape[1] * shape[2] == 0;
    double *in[CS_SCHEME_MAX_FIELDS], *out[CS_SCHEME_MAX_FIELDS];
    const double *par[CS_SCHEME_MAX_PARAMS + 1];
    for (Py_ssize_t i = 0; i < k; i++) {
        if (get_pointer(fields_in, i, "fields_in", empty, (void **)&in[i])
                < 0
            || get_pointer(fields_out, i, "fields_out", empty,
                           (void **)&out[i])
                   < 0) {
            goto exit;
        }
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        void *p = NULL;
        if (get_pointer(params_obj, i, "params", empty, &p) < 0) {
            goto exit;
        }
        par[i] = p;
    }

    /* the stencils and the tables */
    if (read_tables("run_scheme_device", ndim, k, np, stencils_obj,
                    coefs_obj, terms_obj, updates_obj, stages_obj, &tab)
        < 0) {
        goto exit;
    }
#ifdef CS_HAVE_CUDA
    char detail[512] = "";
    cs_run_info info = {0};
    info.nonfinite = -1;
    info.device_seconds = -1.0;
    cs_py_poll sp;
    const cs_interrupt intr = cs_py_make_poll(&sp, interruptible, progress);
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_scheme_apply_device(&tab.scheme, in, out, par, shape,
                                         (cs_mode)mode, cval, steps,
                                         (uintptr_t)stream, &info, &intr,
                                         detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status == CS_ERR_INTERRUPTED) {
        /* the signal handler's exception (KeyboardInterrupt) is set */
        if (!PyErr_Occurred()) {
            PyErr_SetNone(PyExc_KeyboardInterrupt);
        }
        goto exit;
    }
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        goto exit;
    }
    result = cs_py_info_to_dict(&info);
#else
    (void)in;
    (void)out;
    (void)par;
    (void)interruptible;
    (void)progress;
    (void)cval;
    PyErr_SetString(PyExc_RuntimeError,
                    "this build has no CUDA engine: " CS_NO_CUDA_REASON);
#endif

exit:
    tables_release(&tab);
    return result;
}

const char cs_py_plan_scheme_device_doc[] =
    "plan_scheme_device(shape, stencils, coefs, terms, updates, stages,\n"
    "                   fields, params, mode, steps, smem_optin,\n"
    "                   image_arch) -> dict\n"
    "\n"
    "The passes the GPU engine would run for `steps` steps of a scheme of\n"
    "`fields` fields and `params` parameter fields on a grid of `shape`\n"
    "(the tables as run_scheme_device takes them), with blocks of at most\n"
    "smem_optin bytes of shared memory, and the model's price of each\n"
    "(csrc/scheme_plan.c, the engine's own choice; CONVSTENCIL_SCHEME_BLOCK\n"
    "is honoured) under boundary mode `mode` (a MODE_* code), on a device\n"
    "whose kernel image is for `image_arch` (90: sm_90; below 90 it holds\n"
    "no streamed passes).  Needs no GPU.  Returns path ('scheme', 'scheme-blocked' or 'scheme-streamed'),\n"
    "fused_depth (steps a pass), rows (of a blocked pass's region; 0\n"
    "otherwise), onestep_seconds, blocked_seconds and streamed_seconds\n"
    "(the model's, a grid point and step; 0 where no such pass fits),\n"
    "shared_memory (bytes a blocked block takes).";

PyObject *
cs_py_plan_scheme_device(PyObject *self, PyObject *args)
{
    PyObject *shape_obj, *stencils_obj, *coefs_obj, *terms_obj;
    PyObject *updates_obj, *stages_obj;
    int nfields, nparams, mode, smem_optin, image_arch;
    long steps;
    scheme_tables tab;
    sch_stage_plan *plans = NULL;
    int *tap0 = NULL;
    int made = 0;
    PyObject *result = NULL;
    (void)self;

    tables_init(&tab);
    if (!PyArg_ParseTuple(args, "OO!OOOOiiilii:plan_scheme_device",
                          &shape_obj, &PyTuple_Type, &stencils_obj,
                          &coefs_obj, &terms_obj, &updates_obj, &stages_obj,
                          &nfields, &nparams, &mode, &steps, &smem_optin,
                          &image_arch)) {
        return NULL;
    }
    if (nfields < 1 || nfields > CS_SCHEME_MAX_FIELDS || nparams < 0
        || nparams > CS_SCHEME_MAX_PARAMS || steps < 0 || smem_optin < 0
        || mode < 0 || mode >= CS_MODE_COUNT) {
        PyErr_Format(PyExc_ValueError, "plan_scheme_device: %d fields (1 to "
                     "%d), %d parameter fields (0 to %d), mode %d, steps "
                     "%ld and smem_optin %d (>= 0)", nfields,
                     CS_SCHEME_MAX_FIELDS, nparams, CS_SCHEME_MAX_PARAMS,
                     mode, steps, smem_optin);
        return NULL;
    }
    ptrdiff_t shape[3];
    const int ndim = get_shape(shape_obj, shape);
    if (ndim < 0
        || read_tables("plan_scheme_device", ndim, nfields, nparams,
                       stencils_obj, coefs_obj, terms_obj, updates_obj,
                       stages_obj, &tab)
               < 0) {
        goto exit;
    }
    const cs_scheme *s = &tab.scheme;
    plans = calloc((size_t)s->stage_count, sizeof(sch_stage_plan));
    tap0 = malloc((size_t)(s->stencil_count > 0 ? s->stencil_count : 1)
                  * sizeof(int));
    if (plans == NULL || tap0 == NULL) {
        PyErr_NoMemory();
        goto exit;
    }
    const sch_grid grid = {{shape[0], shape[1], shape[2]}, shape[2],
                           shape[1] * shape[2]};
    char msg[256] = "";
    for (int gi = 0; gi < s->stage_count; gi++) {
        made = gi + 1;
        const cs_status st =
            sch_stage_plan_make(s, gi, &grid, tap0, &plans[gi], msg,
                                sizeof(msg));
        if (st != CS_OK) {
            cs_py_raise_status(st, "cuda", msg);
            goto exit;
        }
    }
    sch_passes *plan = malloc(sizeof(sch_passes));
    if (plan == NULL) {
        PyErr_NoMemory();
        goto exit;
    }
    const cs_status st = sch_choose_passes(
        s, plans, shape, (cs_mode)mode, steps, smem_optin, image_arch >= 90,
        getenv("CONVSTENCIL_SCHEME_BLOCK"), plan, msg, sizeof(msg));
    if (st != CS_OK) {
        free(plan);
        cs_py_raise_status(st, "cuda", msg);
        goto exit;
    }
    static const char *const paths[] = {"scheme", "scheme-blocked",
                                        "scheme-streamed"};
    const int blocked = plan->kind == SCH_PASSES_BLOCKED;
    result = Py_BuildValue(
        "{s:s,s:i,s:i,s:d,s:d,s:d,s:n}", "path", paths[plan->kind],
        "fused_depth", plan->depth, "rows", blocked ? plan->sc.rows : 0,
        "onestep_seconds", plan->onestep_cost, "blocked_seconds",
        plan->blocked_cost, "streamed_seconds", plan->stream_cost,
        "shared_memory",
        (Py_ssize_t)(blocked ? sch_tb_smem(&plan->sc, nparams) : 0));
    free(plan);

exit:
    for (int gi = 0; plans != NULL && gi < made; gi++) {
        sch_stage_plan_free(&plans[gi]);
    }
    free(plans);
    free(tap0);
    tables_release(&tab);
    return result;
}
