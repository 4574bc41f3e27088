/*
 * scheme_glue.c -- convstencil._core.run_scheme and plan_scheme_cpu
 * (scheme_glue.h).
 *
 * The Python layer (src/convstencil/_scheme.py) turns a user's scheme
 * into code tables and checks the arrays; this file checks again what
 * the engine relies on (every field's type, shape, contiguity and
 * alignment; the tables through scheme_tables_glue.c, every index
 * through cs_scheme_check), so that a wrong call raises TypeError or
 * ValueError and never crashes.  Every array
 * arrives through the buffer protocol (no NumPy C API here) and its view
 * is held until the engine returns.  The engine runs without the GIL.
 * One exit path.
 */
#include "scheme_glue.h"

#include "core_glue.h"
#include "scheme.h"
#include "cpu/scheme_cpu.h"
#include "scheme_tables_glue.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cs_py_run_scheme_doc[] =
    "run_scheme(fields_in, fields_out, params, stencils, coefs, terms,\n"
    "           updates, stages, steps, mode, cval, backend, threads,\n"
    "           interruptible, progress) -> dict\n"
    "\n"
    "Advance the K fields of a PDE scheme (csrc/scheme.h) `steps` steps.\n"
    "fields_in, fields_out: tuples of K float64 C-contiguous arrays of one\n"
    "shape (ndim 1 to 3; an out may be an in); params: a tuple of float64\n"
    "arrays of that shape; stencils: a tuple of float64 weight arrays of\n"
    "the grid's ndim with odd extents.  The tables: coefs, float64 (T,);\n"
    "terms, int32 (T, 4 + K): kind (0 stencil, 1 monomial), param (-1:\n"
    "none), field and stencil (-1 for a monomial), then the K powers (0\n"
    "for a stencil term); updates, int32 (U, 3): target, first_term,\n"
    "term_count; stages, int32 (G, 2): first_update, update_count.  mode\n"
    "and backend are MODE_* and BACKEND_* codes; threads <= 0: the OpenMP\n"
    "default; interruptible and progress as in run().  Returns what the\n"
    "run did.  Use the package's schemes: this function assumes their\n"
    "tables.";

/*
 * A C-contiguous view of `obj` (the argument `name`, index i or -1) into
 * *view, of items of struct code `code` (itemsize bytes, aligned) and
 * `ndim` axes (0: 1 to 3).  -1 with TypeError or ValueError otherwise.
 */
static int
get_view(PyObject *obj, Py_buffer *view, const char *name, Py_ssize_t i,
         char code, Py_ssize_t itemsize, int ndim)
{
    char what[64];
    if (i >= 0) {
        PyOS_snprintf(what, sizeof(what), "%s[%zd]", name, i);
    }
    else {
        PyOS_snprintf(what, sizeof(what), "%s", name);
    }
    const char *type = code == 'd' ? "float64" : "int32";
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
        < 0) {
        view->obj = NULL;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "run_scheme: %s must be an aligned, "
                     "C-contiguous %s array, not %.200s (or not "
                     "contiguous)", what, type, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!cs_py_format_is(view, code, itemsize)
        || (uintptr_t)view->buf % (uintptr_t)itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "run_scheme: %s must be an aligned, "
                     "C-contiguous %s array in native byte order, not "
                     "format '%s'%s", what, type,
                     view->format != NULL ? view->format : "?",
                     (uintptr_t)view->buf % (uintptr_t)itemsize != 0
                         ? " (misaligned)" : "");
        return -1;
    }
    if (ndim > 0 ? view->ndim != ndim
                 : (view->ndim < 1 || view->ndim > CS_MAX_NDIM)) {
        PyErr_Format(PyExc_ValueError, "run_scheme: %s has %d axes, "
                     "not %s", what, view->ndim,
                     ndim == 1   ? "1"
                     : ndim == 2 ? "2"
                     : ndim == 3 ? "3"
                                 : "1 to 3");
        return -1;
    }
    return 0;
}

/* Whether views a and b hold the same shape. */
static int
same_shape(const Py_buffer *a, const Py_buffer *b)
{
    if (a->ndim != b->ndim) {
        return 0;
    }
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] != b->shape[d]) {
            return 0;
        }
    }
    return 1;
}

/* Whether the memory of views a and b overlaps. */
static int
overlap(const Py_buffer *a, const Py_buffer *b)
{
    const char *a0 = a->buf, *b0 = b->buf;
    return a->len > 0 && b->len > 0 && a0 < b0 + b->len && b0 < a0 + a->len;
}

/* The tuple `t` (argument `name`) of between lo and hi items; -1 with
   ValueError otherwise. */
static Py_ssize_t
tuple_size(PyObject *t, const char *name, Py_ssize_t lo, Py_ssize_t hi)
{
    const Py_ssize_t n = PyTuple_GET_SIZE(t);
    if (n < lo || n > hi) {
        PyErr_Format(PyExc_ValueError, "run_scheme: %s holds %zd arrays, "
                     "not %zd to %zd", name, n, lo, hi);
        return -1;
    }
    return n;
}

/*
 * The plan CONVSTENCIL_CPU_SCHEME_BLOCK forces, for tests and
 * benchmarks: "off" (the whole-grid passes) or "TxC0xC1" (blocked passes
 * of T steps over C0 x C1 tiles along axes 0 and 1).  0 with *force NULL
 * when unset, 0 with *force set, or -1 with ValueError.
 */
static int
forced_plan(const cs_scheme *s, const ptrdiff_t shape[3],
            cs_scheme_cpu_plan *plan, const cs_scheme_cpu_plan **force)
{
    const char *text = getenv("CONVSTENCIL_CPU_SCHEME_BLOCK");
    *force = NULL;
    if (text == NULL || text[0] == '\0') {
        return 0;
    }
    memset(plan, 0, sizeof(*plan));
    if (strcmp(text, "off") == 0) {
        plan->depth = 1;
        plan->count[0] = plan->count[1] = 1;
        *force = plan;
        return 0;
    }
    int depth = 0;
    long c0 = 0, c1 = 0;
    char end = 0;
    if (sscanf(text, "%dx%ldx%ld%c", &depth, &c0, &c1, &end) == 3) {
        const ptrdiff_t count[2] = {(ptrdiff_t)c0, (ptrdiff_t)c1};
        if (cs_cpu_scheme_plan_forced(s, shape, depth, count, plan)
            == CS_OK) {
            *force = plan;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "CONVSTENCIL_CPU_SCHEME_BLOCK=%s: write "
                 "off or TxC0xC1 (T steps a pass, 1 to 16, over C0 x C1 "
                 "tiles along the first two axes of a 3D grid, C0 = 1 for "
                 "2D, each tile more rows than the scheme's radius)", text);
    return -1;
}

PyObject *
cs_py_run_scheme(PyObject *self, PyObject *args)
{
    PyObject *fields_in, *fields_out, *params_obj, *stencils_obj;
    PyObject *coefs_obj, *terms_obj, *updates_obj, *stages_obj, *progress;
    long steps;
    int mode, backend, threads, interruptible;
    double cval;
    Py_buffer *views = NULL;
    Py_ssize_t nviews = 0;
    cs_py_scheme_tables tab;
    PyObject *result = NULL;
    (void)self;

    cs_py_scheme_tables_init(&tab);
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOOlidiipO:run_scheme",
                          &PyTuple_Type, &fields_in, &PyTuple_Type,
                          &fields_out, &PyTuple_Type, &params_obj,
                          &PyTuple_Type, &stencils_obj, &coefs_obj,
                          &terms_obj, &updates_obj, &stages_obj, &steps,
                          &mode, &cval, &backend, &threads, &interruptible,
                          &progress)) {
        return NULL;
    }
    const Py_ssize_t k = tuple_size(fields_in, "fields_in", 1,
                                    CS_SCHEME_MAX_FIELDS);
    if (k < 0 || tuple_size(fields_out, "fields_out", k, k) < 0) {
        goto exit;
    }
    const Py_ssize_t np = tuple_size(params_obj, "params", 0,
                                     CS_SCHEME_MAX_PARAMS);
    const Py_ssize_t ns = tuple_size(stencils_obj, "stencils", 0,
                                     INT32_MAX);
    if (np < 0 || ns < 0) {
        goto exit;
    }
    if (steps < 0 || mode < 0 || mode >= CS_MODE_COUNT) {
        PyErr_Format(PyExc_ValueError, "run_scheme: steps %ld < 0 or "
                     "unknown mode code %d", steps, mode);
        goto exit;
    }
    if (backend == BACKEND_CPU_TC || backend == BACKEND_CUDA) {
        PyErr_Format(PyExc_RuntimeError, "run_scheme: the %s backend does "
                     "not run schemes yet (backend \"cpu\" does)",
                     backend == BACKEND_CUDA ? "cuda" : "cpu-tc");
        goto exit;
    }
    if (backend != BACKEND_CPU) {
        PyErr_Format(PyExc_ValueError, "run_scheme: unknown backend code "
                     "%d", backend);
        goto exit;
    }

    /* the views, in order: ins, outs, params */
    views = PyMem_Calloc((size_t)(2 * k + np), sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        goto exit;
    }
    nviews = 2 * k + np; /* each released once taken (obj set) */
    Py_buffer *in_v = views, *out_v = views + k, *par_v = views + 2 * k;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (get_view(PyTuple_GET_ITEM(fields_in, i), &in_v[i], "fields_in",
                     i, 'd', sizeof(double), 0) < 0) {
            goto exit;
        }
    }
    const Py_buffer *grid = &in_v[0];
    for (int a = 0; a < grid->ndim; a++) {
        if (grid->shape[a] < 1) {
            PyErr_SetString(PyExc_ValueError,
                            "run_scheme: the fields must not be empty");
            goto exit;
        }
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (get_view(PyTuple_GET_ITEM(fields_out, i), &out_v[i],
                     "fields_out", i, 'd', sizeof(double), 0) < 0) {
            goto exit;
        }
        if (out_v[i].readonly) {
            PyErr_Format(PyExc_ValueError, "run_scheme: fields_out[%zd] is "
                         "read-only", i);
            goto exit;
        }
        for (Py_ssize_t j = 0; j < i; j++) {
            if (overlap(&out_v[i], &out_v[j])) {
                PyErr_Format(PyExc_ValueError, "run_scheme: fields_out[%zd] "
                             "and fields_out[%zd] overlap", j, i);
                goto exit;
            }
        }
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        if (get_view(PyTuple_GET_ITEM(params_obj, i), &par_v[i], "params",
                     i, 'd', sizeof(double), 0) < 0) {
            goto exit;
        }
    }
    for (Py_ssize_t i = 0; i < 2 * k + np; i++) {
        if (!same_shape(&views[i], grid)) {
            PyErr_SetString(PyExc_ValueError, "run_scheme: fields_in, "
                            "fields_out and params need one shape");
            goto exit;
        }
    }
    /* the stencils and the tables, checked (cs_scheme_check) */
    if (cs_py_read_scheme_tables("run_scheme", grid->ndim, k, np,
                                 stencils_obj, coefs_obj, terms_obj,
                                 updates_obj, stages_obj, &tab) < 0) {
        goto exit;
    }
    const cs_scheme *scheme = &tab.scheme;

    /* the run */
    const double *in[CS_SCHEME_MAX_FIELDS];
    double *out[CS_SCHEME_MAX_FIELDS];
    const double *par[CS_SCHEME_MAX_PARAMS + 1];
    for (Py_ssize_t i = 0; i < k; i++) {
        in[i] = in_v[i].buf;
        out[i] = out_v[i].buf;
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        par[i] = par_v[i].buf;
    }
    ptrdiff_t shape[3] = {1, 1, 1};
    for (int a = 0; a < grid->ndim; a++) {
        shape[3 - grid->ndim + a] = grid->shape[a];
    }
    cs_scheme_cpu_plan forced;
    const cs_scheme_cpu_plan *force = NULL;
    if (forced_plan(scheme, shape, &forced, &force) < 0) {
        goto exit;
    }
    cs_run_info info = {0};
    info.fused_depth = 1;
    info.unfused_steps = steps;
    info.device_seconds = -1.0;
    info.nonfinite = -1;
    cs_py_poll sp;
    const cs_interrupt intr = cs_py_make_poll(&sp, interruptible, progress);
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cpu_scheme_apply(scheme, in, out, par, shape,
                                 (cs_mode)mode, cval, steps, threads, force,
                                 &info, &intr);
    Py_END_ALLOW_THREADS
    if (status == CS_ERR_INTERRUPTED) {
        /* the signal handler's exception (KeyboardInterrupt) is set */
        if (!PyErr_Occurred()) {
            PyErr_SetNone(PyExc_KeyboardInterrupt);
        }
        goto exit;
    }
    if (status != CS_OK) {
        cs_py_raise_status(status, "cpu", NULL);
        goto exit;
    }
    result = cs_py_info_to_dict(&info);

exit:
    cs_py_scheme_tables_release(&tab);
    for (Py_ssize_t i = 0; i < nviews; i++) {
        if (views[i].obj != NULL) {
            PyBuffer_Release(&views[i]);
        }
    }
    PyMem_Free(views);
    return result;
}

const char cs_py_plan_scheme_cpu_doc[] =
    "plan_scheme_cpu(shape, stencils, coefs, terms, updates, stages, fields,\n"
    "                params, mode, steps, threads) -> dict\n"
    "\n"
    "What run_scheme would run for `steps` steps of a scheme of `fields`\n"
    "fields and `params` parameter fields on a grid of `shape` (the tables\n"
    "as run_scheme_device takes them) under boundary mode `mode` (a MODE_*\n"
    "code) with `threads` threads (0: the engine's choice, which reads the\n"
    "machine's load now): the CPU engine's own choice\n"
    "(csrc/cpu/scheme_blocked.c; CONVSTENCIL_CPU_SCHEME_BLOCK is\n"
    "honoured).  Returns path ('scheme': a pass a stage over the whole\n"
    "grid; 'scheme-blocked': passes of several steps over tiles),\n"
    "fused_depth, fused_passes, unfused_steps, threads, and tiles,\n"
    "tile_rows and margins (along the first two axes of the grid as 3D,\n"
    "a 2D grid's leading 1 first: how many tiles, their largest extent,\n"
    "the rows a tile loads beyond its own on each side), tile_bytes (one\n"
    "thread's tile buffers; 0 for the whole-grid passes or a forced plan)\n"
    "and tile_spills (they exceed the L2 budget the planner prices).";

PyObject *
cs_py_plan_scheme_cpu(PyObject *self, PyObject *args)
{
    PyObject *shape_obj, *stencils_obj, *coefs_obj, *terms_obj;
    PyObject *updates_obj, *stages_obj;
    int nfields, nparams, mode, threads;
    long steps;
    cs_py_scheme_tables tab;
    PyObject *result = NULL;
    (void)self;

    cs_py_scheme_tables_init(&tab);
    if (!PyArg_ParseTuple(args, "OO!OOOOiiili:plan_scheme_cpu", &shape_obj,
                          &PyTuple_Type, &stencils_obj, &coefs_obj,
                          &terms_obj, &updates_obj, &stages_obj, &nfields,
                          &nparams, &mode, &steps, &threads)) {
        return NULL;
    }
    if (steps < 0 || mode < 0 || mode >= CS_MODE_COUNT) {
        PyErr_Format(PyExc_ValueError, "plan_scheme_cpu: steps %ld < 0 or "
                     "unknown mode code %d", steps, mode);
        return NULL;
    }
    ptrdiff_t shape[3];
    const int ndim = cs_py_scheme_shape("plan_scheme_cpu", shape_obj, shape);
    if (ndim < 0
        || cs_py_read_scheme_tables("plan_scheme_cpu", ndim, nfields,
                                    nparams, stencils_obj, coefs_obj,
                                    terms_obj, updates_obj, stages_obj, &tab)
               < 0) {
        goto exit;
    }
    for (int a = 0; a < 3; a++) {
        if (shape[a] < 1) {
            PyErr_SetString(PyExc_ValueError, "plan_scheme_cpu: the grid "
                            "must not be empty");
            goto exit;
        }
    }
    cs_scheme_cpu_plan plan, forced;
    const cs_scheme_cpu_plan *force = NULL;
    if (forced_plan(&tab.scheme, shape, &forced, &force) < 0) {
        goto exit;
    }
    int nt = 1;
    const cs_status st = cs_cpu_scheme_choose(&tab.scheme, shape,
                                              (cs_mode)mode, steps, threads,
                                              &plan, &nt);
    if (st != CS_OK) {
        cs_py_raise_status(st, "cpu", NULL);
        goto exit;
    }
    if (force != NULL) {
        plan = *force;
    }
    const int blocked = plan.blocked && steps > 0;
    result = Py_BuildValue(
        "{s:s,s:i,s:l,s:l,s:i,s:(nn),s:(nn),s:(nn),s:d,s:O}",
        "path", blocked ? "scheme-blocked" : "scheme",
        "fused_depth", blocked ? plan.depth : 1,
        "fused_passes", blocked ? (steps + plan.depth - 1) / plan.depth : 0L,
        "unfused_steps", blocked ? 0L : steps, "threads", nt,
        "tiles", (Py_ssize_t)plan.count[0], (Py_ssize_t)plan.count[1],
        "tile_rows", (Py_ssize_t)plan.tile[0], (Py_ssize_t)plan.tile[1],
        "margins", (Py_ssize_t)plan.margin[0], (Py_ssize_t)plan.margin[1],
        "tile_bytes", blocked ? plan.tile_bytes : 0.0,
        "tile_spills", blocked && plan.tile_spills ? Py_True : Py_False);

exit:
    cs_py_scheme_tables_release(&tab);
    return result;
}
