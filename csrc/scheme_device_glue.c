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
#include "scheme_tables_glue.h"

#include "core_glue.h"
#include "scheme.h"
#include "scheme_plan.h"
#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
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

PyObject *
cs_py_run_scheme_device(PyObject *self, PyObject *args)
{
    PyObject *fields_in, *fields_out, *params_obj, *shape_obj, *stencils_obj;
    PyObject *coefs_obj, *terms_obj, *updates_obj, *stages_obj, *stream_obj;
    PyObject *progress;
    long steps;
    int mode, interruptible;
    double cval;
    cs_py_scheme_tables tab;
    PyObject *result = NULL;
    (void)self;

    cs_py_scheme_tables_init(&tab);
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
    const int ndim = cs_py_scheme_shape("run_scheme_device", shape_obj, shape);
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
    if (cs_py_read_scheme_tables("run_scheme_device", ndim, k, np, stencils_obj,
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
    cs_py_no_cuda_engine();
#endif

exit:
    cs_py_scheme_tables_release(&tab);
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
    cs_py_scheme_tables tab;
    sch_stage_plan *plans = NULL;
    int *tap0 = NULL;
    int made = 0;
    PyObject *result = NULL;
    (void)self;

    cs_py_scheme_tables_init(&tab);
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
    const int ndim = cs_py_scheme_shape("plan_scheme_device", shape_obj, shape);
    if (ndim < 0
        || cs_py_read_scheme_tables("plan_scheme_device", ndim, nfields, nparams,
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
    cs_py_scheme_tables_release(&tab);
    return result;
}
