/*
 * module.c -- convstencil._core, the only CPython/NumPy glue.
 *
 * The Python layer (src/convstencil/_apply.py) validates and converts every
 * argument and allocates the output; this file re-checks what the engine
 * relies on (a wrong call must raise, never crash), builds the engine's
 * kernel, releases the GIL around the engine, and turns status codes into
 * exceptions once the GIL is back.  One exit path per function.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <numpy/arrayobject.h>

#include <math.h>
#include <time.h>

#include "stencil.h"
#include "cai_glue.h"
#include "dlpack_glue.h"
#include "plan_glue.h"
#include "peer_glue.h"
#include "scheme_device_glue.h"
#include "scheme_glue.h"
#include "core_glue.h"
#include "cpu/cpu_engine.h"
#include "cpu/tc_emulation.h"
#include "cpu/workspace.h"
#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
#endif
#ifndef CS_NO_CUDA_REASON
#define CS_NO_CUDA_REASON "built without the CUDA engine"
#endif

/* 1 where the CUDA engine runs on the CPU emulation of tests/cuda_emu
   (setup.py's CONVSTENCIL_CUDA=emulate), exported as CUDA_EMULATION. */
#ifdef CS_CUDA_EMULATION
#define CUDA_EMULATION 1
#else
#define CUDA_EMULATION 0
#endif

static int
is_float64_carray(PyArrayObject *a)
{
    /* the type number of '>f8' is NPY_DOUBLE too: native order only */
    return PyArray_TYPE(a) == NPY_DOUBLE && PyArray_ISNOTSWAPPED(a)
           && PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISALIGNED(a);
}

/* Weights (float64 C-contiguous, checked by the caller) of an odd size on
   every axis and finite; set an exception and return -1 otherwise. */
static int
check_weights(PyArrayObject *weights)
{
    for (int a = 0; a < PyArray_NDIM(weights); a++) {
        if (PyArray_DIM(weights, a) % 2 == 0) {
            PyErr_SetString(PyExc_ValueError,
                            "weights must have an odd size on every axis");
            return -1;
        }
    }
    const double *wv = PyArray_DATA(weights);
    for (npy_intp i = 0; i < PyArray_SIZE(weights); i++) {
        if (!isfinite(wv[i])) {
            PyErr_SetString(PyExc_ValueError, "weights must be finite");
            return -1;
        }
    }
    return 0;
}

/* Check the grid/weights/out triple; set an exception and return -1. */
static int
check_arrays(PyArrayObject *grid, PyArrayObject *weights, PyArrayObject *out)
{
    int ndim = PyArray_NDIM(grid);
    if (!is_float64_carray(grid) || !is_float64_carray(weights)
        || !is_float64_carray(out)) {
        PyErr_SetString(PyExc_TypeError,
                        "_core.run needs aligned C-contiguous float64 arrays");
        return -1;
    }
    if (!PyArray_ISWRITEABLE(out)) {
        PyErr_SetString(PyExc_ValueError, "out is read-only");
        return -1;
    }
    if (ndim < 1 || ndim > CS_MAX_NDIM || PyArray_NDIM(weights) != ndim
        || PyArray_NDIM(out) != ndim) {
        PyErr_SetString(PyExc_ValueError,
                        "grid, weights and out need the same ndim, 1 to 3");
        return -1;
    }
    for (int a = 0; a < ndim; a++) {
        if (PyArray_DIM(grid, a) < 1 || PyArray_DIM(out, a)
                                            != PyArray_DIM(grid, a)) {
            PyErr_SetString(PyExc_ValueError,
                            "grid must be non-empty and out of its shape");
            return -1;
        }
    }
    return check_weights(weights);
}

/* The record's keys, made once (interned) at import: a scheme's loop of
   small calls pays for the record at every call. */
enum { INFO_BACKEND, INFO_PATH, INFO_FUSED_DEPTH, INFO_FUSED_PASSES,
       INFO_UNFUSED_STEPS, INFO_THREADS, INFO_DEVICE_SECONDS,
       INFO_NONFINITE, INFO_KEYS };
static const char *const info_key_names[INFO_KEYS] = {
    "backend", "path", "fused_depth", "fused_passes", "unfused_steps",
    "threads", "device_seconds", "nonfinite"};
static PyObject *info_keys[INFO_KEYS];

static int
info_keys_init(void)
{
    for (int i = 0; i < INFO_KEYS; i++) {
        info_keys[i] = PyUnicode_InternFromString(info_key_names[i]);
        if (info_keys[i] == NULL) {
            return -1;
        }
    }
    return 0;
}

PyObject *
cs_py_info_to_dict(const cs_run_info *info)
{
    PyObject *values[INFO_KEYS];
    values[INFO_BACKEND] = PyUnicode_FromString(info->backend ? info->backend
                                                              : "");
    values[INFO_PATH] = PyUnicode_FromString(info->path ? info->path : "");
    values[INFO_FUSED_DEPTH] = PyLong_FromLong(info->fused_depth);
    values[INFO_FUSED_PASSES] = PyLong_FromLong(info->fused_passes);
    values[INFO_UNFUSED_STEPS] = PyLong_FromLong(info->unfused_steps);
    values[INFO_THREADS] = PyLong_FromLong(info->threads);
    if (info->device_seconds >= 0.0) {
        values[INFO_DEVICE_SECONDS] = PyFloat_FromDouble(info->device_seconds);
    } else {
        Py_INCREF(Py_None);
        values[INFO_DEVICE_SECONDS] = Py_None;
    }
    values[INFO_NONFINITE] = info->nonfinite < 0 ? Py_None
                             : info->nonfinite   ? Py_True
                                                 : Py_False;
    Py_INCREF(values[INFO_NONFINITE]);
    PyObject *dict = PyDict_New();
    for (int i = 0; i < INFO_KEYS; i++) {
        if (dict != NULL
            && (values[i] == NULL
                || PyDict_SetItem(dict, info_keys[i], values[i]) < 0)) {
            Py_CLEAR(dict);
        }
        Py_XDECREF(values[i]);
    }
    return dict;
}

/* ---- Ctrl-C and progress during a run: the engines poll this ---- */

#define SIGNAL_POLL_SECONDS 0.1 /* a tenth of a second between looks */

static double
monotonic_seconds(void)
{
#if defined(CLOCK_MONOTONIC)
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) == 0) {
        return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    }
#endif
    return (double)time(NULL);
}

/*
 * cs_interrupt's poll: at most every SIGNAL_POLL_SECONDS, take the GIL,
 * run Python's signal handlers (in the main thread; elsewhere they do
 * nothing) and report progress.  A handler or a progress function that
 * raises (KeyboardInterrupt, by default on SIGINT) stops the run; its
 * exception stays set for run() to return.  Called without the GIL,
 * from the thread that released it.
 */
static int
poll_signals(void *arg, long steps_done)
{
    cs_py_poll *sp = (cs_py_poll *)arg;
    const double now = monotonic_seconds();
    if (now < sp->next) {
        return 0;
    }
    sp->next = now + SIGNAL_POLL_SECONDS;
    PyGILState_STATE gil = PyGILState_Ensure();
    int raised = sp->check_signals && PyErr_CheckSignals() != 0;
    if (!raised && sp->progress != NULL) {
        PyObject *r = PyObject_CallFunction(sp->progress, "l", steps_done);
        raised = r == NULL;
        Py_XDECREF(r);
    }
    PyGILState_Release(gil);
    return raised;
}

/* The poll of one run: NULL when there is nothing to look at. */
cs_interrupt
cs_py_make_poll(cs_py_poll *sp, int interruptible, PyObject *progress)
{
    sp->next = monotonic_seconds() + SIGNAL_POLL_SECONDS;
    /* elsewhere than in the main thread the handlers would not run; the
       poll would only take the GIL, from threads that may need it */
    sp->check_signals = interruptible;
    sp->progress = progress != Py_None ? progress : NULL;
    cs_interrupt intr = {NULL, sp};
    if (sp->check_signals || sp->progress != NULL) {
        intr.poll = poll_signals;
    }
    return intr;
}

void
cs_py_raise_status(cs_status status, const char *backend, const char *detail)
{
    PyObject *type = PyExc_RuntimeError;
    if (status == CS_ERR_NOMEM || status == CS_ERR_DEVICE_NOMEM) {
        type = PyExc_MemoryError;
    }
    else if (status == CS_ERR_INVALID || status == CS_ERR_UNSUPPORTED) {
        type = PyExc_ValueError;
    }
    if (detail != NULL && detail[0] != '\0') {
        PyErr_Format(type, "%s backend: %s: %s", backend,
                     cs_status_string(status), detail);
    }
    else {
        PyErr_Format(type, "%s backend: %s", backend,
                     cs_status_string(status));
    }
}

PyDoc_STRVAR(run_doc,
"run(grid, weights, out, steps, mode, cval, backend, path, threads,\n"
"    interruptible, progress) -> dict\n"
"\n"
"Apply `weights` to `grid` `steps` times into `out` (all float64,\n"
"C-contiguous, same ndim; out may be grid).  mode, backend and path are\n"
"the integer codes of convstencil._apply.  With `interruptible` (the\n"
"main thread: the only one that runs signal handlers) the run stops at\n"
"a signal whose handler raises, e.g. Ctrl-C.  `progress` (None or a\n"
"callable) is called with the steps done so far, at most every 0.1 s.\n"
"Returns what the run did.\n"
"Use convstencil.apply(): this function assumes validated arguments.");

static PyObject *
run(PyObject *self, PyObject *args)
{
    PyArrayObject *grid, *weights, *out;
    long steps;
    int mode, backend, path, threads, interruptible;
    double cval;
    PyObject *progress;
    cs_kernel kernel = {0};
    cs_run_info info = {0};
    cs_status status = CS_OK;
    char detail[512] = "";
    const char *backend_name = "cpu";
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "O!O!O!lidiiipO", &PyArray_Type, &grid,
                          &PyArray_Type, &weights, &PyArray_Type, &out,
                          &steps, &mode, &cval, &backend, &path, &threads,
                          &interruptible, &progress)) {
        return NULL;
    }
    if (check_arrays(grid, weights, out) < 0) {
        goto exit;
    }
    if (steps < 0 || mode < 0 || mode >= CS_MODE_COUNT) {
        PyErr_SetString(PyExc_ValueError, "steps < 0 or unknown mode code");
        goto exit;
    }

    int ndim = PyArray_NDIM(grid);
    ptrdiff_t shape[3] = {1, 1, 1};
    ptrdiff_t ksize[3];
    for (int a = 0; a < ndim; a++) {
        shape[3 - ndim + a] = PyArray_DIM(grid, a);
        ksize[a] = PyArray_DIM(weights, a);
    }
    status = cs_kernel_init(&kernel, ndim, ksize, PyArray_DATA(weights));
    if (status != CS_OK) {
        cs_py_raise_status(status, backend_name, NULL);
        goto exit;
    }

    /* defaults for an engine that steps one by one; engines override */
    info.fused_depth = 1;
    info.unfused_steps = steps;
    info.device_seconds = -1.0;
    info.nonfinite = -1;

    const double *in_data = PyArray_DATA(grid);
    double *out_data = PyArray_DATA(out);
    cs_py_poll sp;
    const cs_interrupt intr = cs_py_make_poll(&sp, interruptible, progress);
    switch (backend) {
    case BACKEND_CPU:
        Py_BEGIN_ALLOW_THREADS
        status = cs_cpu_apply(in_data, out_data, shape, &kernel,
                              (cs_mode)mode, cval, steps, threads, &info,
                              &intr);
        Py_END_ALLOW_THREADS
        break;
    case BACKEND_CPU_TC:
        backend_name = "cpu-tc";
        Py_BEGIN_ALLOW_THREADS
        status = cs_tc_emulation_apply(in_data, out_data, shape, &kernel,
                                       (cs_mode)mode, cval, steps, threads,
                                       &info, &intr);
        Py_END_ALLOW_THREADS
        break;
    case BACKEND_CUDA:
        backend_name = "cuda";
#ifdef CS_HAVE_CUDA
        Py_BEGIN_ALLOW_THREADS
        status = cs_cuda_apply(in_data, out_data, shape, &kernel,
                               (cs_mode)mode, cval, steps,
                               (cs_cuda_path)path, &info, &intr, detail,
                               sizeof(detail));
        Py_END_ALLOW_THREADS
#else
        status = CS_ERR_UNSUPPORTED;
        PyOS_snprintf(detail, sizeof(detail),
                      "this build has no CUDA engine");
#endif
        break;
    default:
        PyErr_SetString(PyExc_ValueError, "unknown backend code");
        goto exit;
    }
    if (status == CS_ERR_INTERRUPTED) {
        /* the signal handler's exception (KeyboardInterrupt) is set */
        if (!PyErr_Occurred()) {
            PyErr_SetNone(PyExc_KeyboardInterrupt);
        }
        goto exit;
    }
    if (status != CS_OK) {
        cs_py_raise_status(status, backend_name, detail);
        goto exit;
    }
    result = cs_py_info_to_dict(&info);

exit:
    cs_kernel_free(&kernel);
    return result;
}

/* ---- device arrays (the CUDA engine only) ---- */

#ifndef CS_HAVE_CUDA
/* The exception of a call that needs the CUDA engine this build lacks. */
static void
no_cuda_engine(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "this build has no CUDA engine: " CS_NO_CUDA_REASON);
}
#endif

#ifdef CS_HAVE_CUDA
/* None, or RuntimeError(msg) where status is not CS_OK. */
static PyObject *
none_or_runtime_error(cs_status status, const char *msg)
{
    if (status != CS_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s", msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A tuple of 3 integers into v; -1 with an exception otherwise. */
static int
parse_triple(PyObject *t, const char *what, ptrdiff_t v[3])
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
        PyErr_Format(PyExc_ValueError, "%s must be a tuple of 3 integers",
                     what);
        return -1;
    }
    for (int a = 0; a < 3; a++) {
        v[a] = (ptrdiff_t)PyLong_AsSsize_t(PyTuple_GET_ITEM(t, a));
        if (v[a] == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}
#endif

#ifdef CS_HAVE_CUDA
/* A device call's kernel from `weights` (C-contiguous float64, 1 to 3
   odd axes, finite); -1 with an exception otherwise. */
static int
device_kernel(PyArrayObject *weights, cs_kernel *kernel)
{
    if (!is_float64_carray(weights) || PyArray_NDIM(weights) < 1
        || PyArray_NDIM(weights) > 3) {
        PyErr_SetString(PyExc_TypeError, "weights must be a C-contiguous "
                                         "float64 array of 1 to 3 axes");
        return -1;
    }
    if (check_weights(weights) < 0) {
        return -1;
    }
    ptrdiff_t ksize[3] = {1, 1, 1};
    const int ndim = PyArray_NDIM(weights);
    for (int a = 0; a < ndim; a++) {
        ksize[a] = PyArray_DIM(weights, a);
    }
    cs_status status = cs_kernel_init(kernel, ndim, ksize,
                                      PyArray_DATA(weights));
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", NULL);
        return -1;
    }
    return 0;
}
#endif

PyDoc_STRVAR(run_device_doc,
"run_device(in_ptr, in_dtype, in_strides, out_ptr, out_strides, shape,\n"
"           weights, steps, mode, cval, path, wait0, wait1, run_stream,\n"
"           interruptible, progress) -> dict\n"
"\n"
"Apply `weights` to the device array at in_ptr (DTYPE_* code, strides\n"
"in bytes, all 3D with leading unit axes) into the float64 device array\n"
"at out_ptr.  wait0/wait1: producers' streams to wait for (0: none);\n"
"run_stream: 0 runs on the engine's stream and returns when done,\n"
"otherwise the work is queued on that stream.  Use convstencil.apply().");

#ifdef CS_HAVE_CUDA
/* The engine's call between device arrays, the GIL released around it;
   the record, or NULL with an exception. */
static PyObject *
device_run(const cs_darray *in, const cs_darray *out,
           const ptrdiff_t shape[3], const cs_kernel *kernel, int mode,
           double cval, long steps, int path,
           const cs_cuda_streams *streams, int interruptible,
           PyObject *progress)
{
    cs_status status;
    cs_run_info info = {0};
    info.nonfinite = -1;
    char detail[512] = "";
    cs_py_poll sp;
    const cs_interrupt intr = cs_py_make_poll(&sp, interruptible, progress);
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_apply_device(in, out, shape, kernel, (cs_mode)mode,
                                  cval, steps, (cs_cuda_path)path, streams,
                                  &info, &intr, detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status == CS_ERR_INTERRUPTED) {
        if (!PyErr_Occurred()) {
            PyErr_SetNone(PyExc_KeyboardInterrupt);
        }
        return NULL;
    }
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    return cs_py_info_to_dict(&info);
}
#endif

static PyObject *
run_device(PyObject *self, PyObject *args)
{
    unsigned long long in_ptr, out_ptr, wait0, wait1, run_stream;
    int in_dtype, mode, path, interruptible;
    PyObject *in_strides_obj, *out_strides_obj, *shape_obj, *progress;
    PyArrayObject *weights;
    long steps;
    double cval;
    cs_kernel kernel = {0};
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "KiOKOOO!lidiKKKpO", &in_ptr, &in_dtype,
                          &in_strides_obj, &out_ptr, &out_strides_obj,
                          &shape_obj, &PyArray_Type, &weights, &steps, &mode,
                          &cval, &path, &wait0, &wait1, &run_stream,
                          &interruptible, &progress)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    ptrdiff_t in_strides[3], out_strides[3], shape[3];
    if (parse_triple(in_strides_obj, "in_strides", in_strides) < 0
        || parse_triple(out_strides_obj, "out_strides", out_strides) < 0
        || parse_triple(shape_obj, "shape", shape) < 0) {
        goto exit;
    }
    if (steps < 0 || mode < 0 || mode >= CS_MODE_COUNT || in_dtype < 0
        || in_dtype >= CS_DTYPE_COUNT || shape[0] < 1 || shape[1] < 1
        || shape[2] < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "steps < 0, an unknown mode or dtype code, or an "
                        "empty shape");
        goto exit;
    }
    if (device_kernel(weights, &kernel) < 0) {
        goto exit;
    }
    cs_darray in = {(void *)(uintptr_t)in_ptr, (cs_dtype)in_dtype,
                    {in_strides[0], in_strides[1], in_strides[2]}};
    cs_darray out = {(void *)(uintptr_t)out_ptr, CS_DTYPE_FLOAT64,
                     {out_strides[0], out_strides[1], out_strides[2]}};
    cs_cuda_streams streams = {{(uintptr_t)wait0, (uintptr_t)wait1},
                               (uintptr_t)run_stream};
    result = device_run(&in, &out, shape, &kernel, mode, cval, steps, path,
                        &streams, interruptible, progress);
#else
    no_cuda_engine();
    goto exit;
#endif
exit:
    cs_kernel_free(&kernel);
    return result;
}

PyDoc_STRVAR(cai_plain_ndim_doc,
"cai_plain_ndim(cai) -> int\n"
"\n"
"The number of axes of the array a CUDA Array Interface dict describes\n"
"where it is of the plain kind run_onestep_cai reads, 0 otherwise.");

static PyObject *
cai_plain_ndim(PyObject *self, PyObject *cai)
{
    cs_cai_plain plain;
    return PyLong_FromLong(cs_cai_plain_read(cai, &plain) ? plain.ndim : 0);
}

PyDoc_STRVAR(run_onestep_cai_doc,
"run_onestep_cai(grid_cai, out, weights, mode, cval, path, run_stream,\n"
"                interruptible) -> dict or None\n"
"\n"
"One step of `weights` between device arrays whose CUDA Array Interface\n"
"dicts are of the plain kind (cai_glue.h): `grid_cai` the grid's, `out`\n"
"the result's (its shape, writable), or an int: the pointer of a new\n"
"C-ordered float64 array of the grid's shape, ordered on the grid's\n"
"stream.  None, having run nothing, where either is not plain or the\n"
"weights' axes are not the grid's; the caller then takes the full\n"
"path, which reads every kind and says what is wrong.  Use\n"
"convstencil.apply().");

static PyObject *
run_onestep_cai(PyObject *self, PyObject *args)
{
    PyObject *grid_cai, *out_obj;
    PyArrayObject *weights;
    int mode, path, interruptible;
    double cval;
    unsigned long long run_stream;
    if (!PyArg_ParseTuple(args, "OOO!idiKp", &grid_cai, &out_obj,
                          &PyArray_Type, &weights, &mode, &cval, &path,
                          &run_stream, &interruptible)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    cs_cai_plain grid, out;
    if (!cs_cai_plain_read(grid_cai, &grid)
        || PyArray_NDIM(weights) != grid.ndim) {
        Py_RETURN_NONE;
    }
    if (PyLong_CheckExact(out_obj)) {
        /* a new array: C order, the grid's stream */
        const unsigned long long ptr = PyLong_AsUnsignedLongLong(out_obj);
        if (ptr == (unsigned long long)-1 && PyErr_Occurred()) {
            return NULL;
        }
        memset(&out, 0, sizeof(out));
        out.data = (uintptr_t)ptr;
        out.strides[2] = (ptrdiff_t)sizeof(double);
        out.strides[1] = out.strides[2] * grid.shape[2];
        out.strides[0] = out.strides[1] * grid.shape[1];
        out.stream = grid.stream;
    } else if (!cs_cai_plain_read(out_obj, &out) || out.readonly
               || out.ndim != grid.ndim || out.shape[0] != grid.shape[0]
               || out.shape[1] != grid.shape[1]
               || out.shape[2] != grid.shape[2]) {
        Py_RETURN_NONE;
    }
    if (mode < 0 || mode >= CS_MODE_COUNT) {
        PyErr_SetString(PyExc_ValueError, "an unknown mode code");
        return NULL;
    }
    cs_kernel kernel = {0};
    if (device_kernel(weights, &kernel) < 0) {
        return NULL;
    }
    cs_darray in_arr = {(void *)grid.data, CS_DTYPE_FLOAT64,
                        {grid.strides[0], grid.strides[1], grid.strides[2]}};
    cs_darray out_arr = {(void *)out.data, CS_DTYPE_FLOAT64,
                         {out.strides[0], out.strides[1], out.strides[2]}};
    cs_cuda_streams streams = {{grid.stream, out.stream},
                               (uintptr_t)run_stream};
    PyObject *result = device_run(&in_arr, &out_arr, grid.shape, &kernel,
                                  mode, cval, 1, path, &streams,
                                  interruptible, Py_None);
    cs_kernel_free(&kernel);
    return result;
#else
    no_cuda_engine();
    return NULL;
#endif
}

/* ---- sessions: a grid kept in the engine's layout across calls ---- */

#define SESSION_CAPSULE "convstencil._core.session"

#ifdef CS_HAVE_CUDA
/* The capsule's payload: the session, NULL once closed. */
typedef struct session_box {
    cs_cuda_session *x;
} session_box;

static void
session_capsule_free(PyObject *capsule)
{
    session_box *box = PyCapsule_GetPointer(capsule, SESSION_CAPSULE);
    if (box != NULL) {
        cs_cuda_session_free(box->x);
        PyMem_Free(box);
    }
}

/* The box of a capsule holding an open session; NULL with an exception
   otherwise. */
static session_box *
open_session(PyObject *capsule)
{
    session_box *box = PyCapsule_GetPointer(capsule, SESSION_CAPSULE);
    if (box != NULL && box->x == NULL) {
        PyErr_SetString(PyExc_ValueError, "the session is closed");
        return NULL;
    }
    return box;
}
#endif

PyDoc_STRVAR(session_open_doc,
"session_open(in_ptr, in_strides, shape, weights, round_steps, mode,\n"
"             cval, path[, at, box[, ends]]) -> (session, path)\n"
"\n"
"Load the float64 device grid at in_ptr (byte strides and shape 3D,\n"
"leading unit axes; 2D and 3D grids) into the engine's own layout, or\n"
"with `at` and `box` an array of extents `box` into the box at `at` of\n"
"a grid of `shape` (the rest the caller writes before a round), to\n"
"be advanced in rounds of round_steps (session_run), read and written\n"
"between rounds (session_view, session_copy) and stored once\n"
"(session_close); `path` is the one its plan runs.  With ends > 0, only\n"
"that many planes (rows) at each end of the box along its first axis\n"
"are loaded where the rounds can read the rest from in_ptr, which\n"
"must then stay as it is until the first round is done.  On the\n"
"current device, which must stay current.");

static PyObject *
session_open(PyObject *self, PyObject *args)
{
    unsigned long long in_ptr;
    PyObject *strides_obj, *shape_obj, *at_obj = NULL, *box_obj = NULL;
    PyArrayObject *weights;
    long steps;
    int mode, path;
    double cval;
    Py_ssize_t ends = 0;
    if (!PyArg_ParseTuple(args, "KOOO!lidi|OOn:session_open", &in_ptr,
                          &strides_obj, &shape_obj, &PyArray_Type, &weights,
                          &steps, &mode, &cval, &path, &at_obj, &box_obj,
                          &ends)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    ptrdiff_t strides[3], shape[3], at[3] = {0, 0, 0}, box_ext[3];
    if (parse_triple(strides_obj, "in_strides", strides) < 0
        || parse_triple(shape_obj, "shape", shape) < 0
        || (at_obj != NULL && parse_triple(at_obj, "at", at) < 0)) {
        return NULL;
    }
    if (box_obj != NULL) {
        if (parse_triple(box_obj, "box", box_ext) < 0) {
            return NULL;
        }
    } else {
        memcpy(box_ext, shape, sizeof(box_ext));
    }
    if (steps < 1 || mode < 0 || mode >= CS_MODE_COUNT || shape[0] < 1
        || shape[1] < 1 || shape[2] < 1 || ends < 0) {
        PyErr_SetString(PyExc_ValueError, "round_steps < 1, an unknown "
                                          "mode, an empty shape or ends "
                                          "< 0");
        return NULL;
    }
    cs_kernel kernel = {0};
    if (device_kernel(weights, &kernel) < 0) {
        return NULL;
    }
    session_box *box = PyMem_Malloc(sizeof(*box));
    if (box == NULL) {
        cs_kernel_free(&kernel);
        return PyErr_NoMemory();
    }
    box->x = NULL;
    cs_darray in = {(void *)(uintptr_t)in_ptr, CS_DTYPE_FLOAT64,
                    {strides[0], strides[1], strides[2]}};
    char detail[512] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_open(&in, shape, at, box_ext, &kernel,
                                  (cs_mode)mode, cval, steps,
                                  (cs_cuda_path)path, (ptrdiff_t)ends,
                                  &box->x, detail,
                                  sizeof(detail));
    Py_END_ALLOW_THREADS
    cs_kernel_free(&kernel);
    if (status != CS_OK) {
        PyMem_Free(box);
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(box, SESSION_CAPSULE,
                                      session_capsule_free);
    if (capsule == NULL) {
        cs_cuda_session_free(box->x);
        PyMem_Free(box);
        return NULL;
    }
    return Py_BuildValue("(Ns)", capsule, cs_cuda_session_path(box->x));
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_run_doc,
"session_run(session[, bands[, out]]) -> split\n"
"\n"
"One round: the session's plan on its grid.  Without `bands`, returns\n"
"when done (split False).  With bands = (low, high), the planes at the\n"
"ends of the box along the first axis that the neighbours receive:\n"
"queued, the last pass writing those first where it can (split True;\n"
"else the exchange waits for the whole round); exchange on\n"
"session_exchange_stream or after session_wait_bands, then call\n"
"session_exchanged.  With out = (out_ptr, out_strides) (bands None):\n"
"the last round, whose result goes into that float64 device array of\n"
"the grid's shape (its last pass writes the box's planes there where\n"
"the passes take windows, else the grid is stored whole); then\n"
"session_close with the same array.");

#ifdef CS_HAVE_CUDA
/* session_run's `out`: (ptr, strides) as a float64 array; -1 with an
   exception otherwise. */
static int
parse_out(PyObject *obj, cs_darray *out)
{
    unsigned long long ptr = 0;
    PyObject *strides_obj;
    ptrdiff_t strides[3];
    if (!PyTuple_Check(obj)) {
        PyErr_SetString(PyExc_TypeError,
                        "out must be (out_ptr, out_strides)");
        return -1;
    }
    if (!PyArg_ParseTuple(obj, "KO;out must be (out_ptr, out_strides)",
                          &ptr, &strides_obj)
        || parse_triple(strides_obj, "out_strides", strides) < 0) {
        return -1;
    }
    out->data = (void *)(uintptr_t)ptr;
    out->dtype = CS_DTYPE_FLOAT64;
    for (int a = 0; a < 3; a++) {
        out->strides[a] = strides[a];
    }
    return 0;
}
#endif

static PyObject *
session_run(PyObject *self, PyObject *args)
{
#ifdef CS_HAVE_CUDA
    PyObject *capsule, *bands_obj = Py_None, *out_obj = Py_None;
    if (!PyArg_ParseTuple(args, "O|OO:session_run", &capsule, &bands_obj,
                          &out_obj)) {
        return NULL;
    }
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    Py_ssize_t bands[2] = {0, 0};
    if (bands_obj != Py_None
        && (!PyTuple_Check(bands_obj)
            || !PyArg_ParseTuple(bands_obj, "nn;bands must be (low, high)",
                                 &bands[0], &bands[1]))) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "bands must be (low, high)");
        }
        return NULL;
    }
    cs_darray out;
    if (out_obj != Py_None && parse_out(out_obj, &out) < 0) {
        return NULL;
    }
    const ptrdiff_t planes[2] = {bands[0], bands[1]};
    char detail[512] = "";
    int split = 0;
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_run(box->x, bands_obj == Py_None ? NULL : planes,
                                 out_obj == Py_None ? NULL : &out, &split,
                                 detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    return PyBool_FromLong(split);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_bands_doc,
"session_bands(session) -> 'lead' or 'apart'\n"
"\n"
"How a split round's bands run: the first blocks of their pass's launch\n"
"(the exchange stream waits for their count in memory), or launches of\n"
"their own.");

static PyObject *
session_bands(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    return PyUnicode_FromString(cs_cuda_session_bands(box->x));
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_exchange_stream_doc,
"session_exchange_stream(session) -> stream\n"
"\n"
"The stream (a cudaStream_t as an int) that a queued round's exchange\n"
"goes on: it waits for the round's bands.");

static PyObject *
session_exchange_stream(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(
        (unsigned long long)(uintptr_t)cs_cuda_session_exchange_stream(
            box->x));
#else
    no_cuda_engine();
    return NULL;
#endif
}

#ifdef CS_HAVE_CUDA
/* A session call that takes the session alone and may wait. */
static PyObject *
session_step(PyObject *capsule,
             cs_status (*call)(cs_cuda_session *, char *, size_t))
{
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    char detail[512] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = call(box->x, detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    Py_RETURN_NONE;
}
#endif

PyDoc_STRVAR(session_wait_bands_doc,
"session_wait_bands(session)\n"
"\n"
"Wait for the bands of the round last queued (an exchange that the\n"
"host drives may start then).");

static PyObject *
session_wait_bands(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    return session_step(capsule, cs_cuda_session_wait_bands);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_exchanged_doc,
"session_exchanged(session)\n"
"\n"
"The exchange after a queued round is queued on the exchange stream (or\n"
"done): the next round waits for it.");

static PyObject *
session_exchanged(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    return session_step(capsule, cs_cuda_session_exchanged);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_view_doc,
"session_view(session) -> (ptr, strides, shape)\n"
"\n"
"The current grid's interior as a float64 device array (byte strides\n"
"and shape, 3D), valid until the next session call.");

static PyObject *
session_view(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    cs_darray view;
    ptrdiff_t shape[3];
    cs_cuda_session_view(box->x, &view, shape);
    return Py_BuildValue("K(nnn)(nnn)", (unsigned long long)(uintptr_t)
                         view.data, view.strides[0], view.strides[1],
                         view.strides[2], shape[0], shape[1], shape[2]);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_halo_doc,
"session_halo(session) -> (z, y, x)\n"
"\n"
"The current grid's halo widths (3D): around the interior that\n"
"session_view gives, the cells the engine refills before it reads\n"
"them.");

static PyObject *
session_halo(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    ptrdiff_t halo[3];
    cs_cuda_session_halo(box->x, halo);
    return Py_BuildValue("(nnn)", halo[0], halo[1], halo[2]);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_copy_doc,
"session_copy(session, starts, sizes, buf_ptr, put)\n"
"\n"
"Copy the box at `starts` (3D, leading zeros) with extents `sizes` of\n"
"the current grid into the C-ordered float64 device buffer at buf_ptr,\n"
"or (put) the buffer into the box; returns when done.");

static PyObject *
session_copy(PyObject *self, PyObject *args)
{
    PyObject *capsule, *starts_obj, *sizes_obj;
    unsigned long long buf;
    int put;
    if (!PyArg_ParseTuple(args, "OOOKp:session_copy", &capsule, &starts_obj,
                          &sizes_obj, &buf, &put)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    ptrdiff_t starts[3], sizes[3];
    if (box == NULL || parse_triple(starts_obj, "starts", starts) < 0
        || parse_triple(sizes_obj, "sizes", sizes) < 0) {
        return NULL;
    }
    char detail[512] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_copy(box->x, starts, sizes,
                                  (void *)(uintptr_t)buf,
                                  put, detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    Py_RETURN_NONE;
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(session_close_doc,
"session_close(session, out_ptr, out_strides) -> nonfinite\n"
"\n"
"Store the grid into the float64 device array at out_ptr (unless the\n"
"last round wrote its result there: session_run's out) and end the\n"
"session.  True when the input or the result held NaN or infinity:\n"
"the result is then not exact on tensor cores; run again without a\n"
"session.");

static PyObject *
session_close(PyObject *self, PyObject *args)
{
    PyObject *capsule, *strides_obj;
    unsigned long long out_ptr;
    if (!PyArg_ParseTuple(args, "OKO:session_close", &capsule, &out_ptr,
                          &strides_obj)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    ptrdiff_t strides[3];
    if (box == NULL
        || parse_triple(strides_obj, "out_strides", strides) < 0) {
        return NULL;
    }
    cs_darray out = {(void *)(uintptr_t)out_ptr, CS_DTYPE_FLOAT64,
                     {strides[0], strides[1], strides[2]}};
    char detail[512] = "";
    int nonfinite = 0;
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_close(box->x, &out, &nonfinite, detail,
                                   sizeof(detail));
    Py_END_ALLOW_THREADS
    cs_cuda_session_free(box->x);
    box->x = NULL;
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    return PyBool_FromLong(nonfinite);
#else
    no_cuda_engine();
    return NULL;
#endif
}

/* A host array argument: C-contiguous, and writeable when it is written. */
static int
check_host_buffer(PyArrayObject *a, int written)
{
    if (!PyArray_IS_C_CONTIGUOUS(a) || (written && !PyArray_ISWRITEABLE(a))) {
        PyErr_SetString(PyExc_ValueError,
                        "host array must be C-contiguous (and writeable "
                        "when written)");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(copy_doc,
"to_device(ptr, host_array) / to_host(host_array, ptr)\n"
"\n"
"Copy host_array.nbytes bytes between a C-contiguous NumPy array and\n"
"device memory at ptr through the engine's pinned staging; complete on\n"
"return.");

static PyObject *
copy_between(PyObject *args, int to_device)
{
    unsigned long long ptr;
    PyArrayObject *host;
    int ok = to_device ? PyArg_ParseTuple(args, "KO!", &ptr, &PyArray_Type,
                                          &host)
                       : PyArg_ParseTuple(args, "O!K", &PyArray_Type, &host,
                                          &ptr);
    if (!ok || check_host_buffer(host, !to_device) < 0) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    char detail[512] = "";
    cs_status status;
    void *dev = (void *)(uintptr_t)ptr;
    void *data = PyArray_DATA(host);
    size_t bytes = (size_t)PyArray_NBYTES(host);
    Py_BEGIN_ALLOW_THREADS
    status = to_device
                 ? cs_cuda_copy_to_device(dev, data, bytes, detail,
                                          sizeof(detail))
                 : cs_cuda_copy_to_host(data, dev, bytes, detail,
                                        sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    Py_RETURN_NONE;
#else
    no_cuda_engine();
    return NULL;
#endif
}

static PyObject *
to_device(PyObject *self, PyObject *args)
{
    return copy_between(args, 1);
}

static PyObject *
to_host(PyObject *self, PyObject *args)
{
    return copy_between(args, 0);
}

PyDoc_STRVAR(device_alloc_doc,
"device_alloc(nbytes) -> (ptr, device)\n"
"\n"
"cudaMalloc on the current device, after checking that nbytes fit in\n"
"its free memory (MemoryError otherwise).  Free with device_free.");

static PyObject *
device_alloc(PyObject *self, PyObject *args)
{
    Py_ssize_t nbytes;
    if (!PyArg_ParseTuple(args, "n", &nbytes)) {
        return NULL;
    }
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes must be >= 0");
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    char detail[512] = "";
    void *ptr = NULL;
    int device = 0;
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_malloc(&ptr, (size_t)nbytes, &device, detail,
                            sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    return Py_BuildValue("(Ki)", (unsigned long long)(uintptr_t)ptr, device);
#else
    no_cuda_engine();
    return NULL;
#endif
}

static PyObject *
device_free(PyObject *self, PyObject *args)
{
    unsigned long long ptr;
    if (!PyArg_ParseTuple(args, "K", &ptr)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    Py_BEGIN_ALLOW_THREADS
    cs_cuda_free((void *)(uintptr_t)ptr);
    Py_END_ALLOW_THREADS
#endif
    Py_RETURN_NONE;
}

PyDoc_STRVAR(clear_cache_doc,
"clear_cache() -> int\n"
"\n"
"Free the device memory and pinned staging the GPU engine keeps between\n"
"calls, and the host blocks of the CPU engine; returns the device bytes\n"
"freed (0 without the CUDA engine).");

static PyObject *
clear_cache(PyObject *self, PyObject *noargs)
{
    size_t freed = 0;
    Py_BEGIN_ALLOW_THREADS
    cs_cpu_workspace_clear();
#ifdef CS_HAVE_CUDA
    freed = cs_cuda_clear_cache();
#endif
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(freed);
}

PyDoc_STRVAR(cache_info_doc,
"cache_info() -> dict(device_bytes, blocks, pinned_bytes, lanes,\n"
"                     host_bytes)\n"
"\n"
"What the engines keep between calls: the GPU engine's idle device\n"
"memory and blocks, pinned host staging and lanes (idle or in use); the\n"
"CPU engine's host blocks (host_bytes).");

static PyObject *
cache_info(PyObject *self, PyObject *noargs)
{
    size_t device_bytes = 0, pinned_bytes = 0;
    int blocks = 0, lanes = 0;
#ifdef CS_HAVE_CUDA
    cs_cuda_cache_info(&device_bytes, &blocks, &pinned_bytes, &lanes);
#endif
    return Py_BuildValue("{s:n,s:i,s:n,s:i,s:n}", "device_bytes",
                         (Py_ssize_t)device_bytes, "blocks", blocks,
                         "pinned_bytes", (Py_ssize_t)pinned_bytes, "lanes",
                         lanes, "host_bytes",
                         (Py_ssize_t)cs_cpu_workspace_bytes());
}

PyDoc_STRVAR(cuda_info_doc,
"cuda_info() -> (built, device_count, message)\n"
"\n"
"Whether this build has the CUDA engine, how many devices it sees\n"
"(-1: the runtime could not be queried) and a one-line description.");

static PyObject *
cuda_info(PyObject *self, PyObject *noargs)
{
#ifdef CS_HAVE_CUDA
    char msg[256] = "";
    int count;
    Py_BEGIN_ALLOW_THREADS
    count = cs_cuda_device_count(msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Ois)", Py_True, count, msg);
#else
    /* CS_NO_CUDA_REASON comes from setup.py: why CUDA was left out */
    return Py_BuildValue("(Ois)", Py_False, 0, "not built: " CS_NO_CUDA_REASON);
#endif
}

PyDoc_STRVAR(cuda_device_caps_doc,
"cuda_device_caps() -> {'cc_major': int, 'sms': int, 'smem_optin': int,\n"
"                       'image_arch': int}\n"
"\n"
"The current device's facts the planner reads: compute capability\n"
"major, multiprocessors, the shared memory (bytes) a block may opt\n"
"in to, and the architecture of the kernel image the device runs (90:\n"
"compiled from compute_90).  Raises RuntimeError where the CUDA engine\n"
"cannot run.");

static PyObject *
cuda_device_caps(PyObject *self, PyObject *noargs)
{
#ifdef CS_HAVE_CUDA
    int cc_major = 0, sms = 0, smem_optin = 0, image_arch = 0;
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_device_caps(&cc_major, &sms, &smem_optin, &image_arch,
                                 msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        PyErr_Format(PyExc_RuntimeError, "CUDA device: %s", msg);
        return NULL;
    }
    return Py_BuildValue("{s:i,s:i,s:i,s:i}", "cc_major", cc_major, "sms",
                         sms, "smem_optin", smem_optin, "image_arch",
                         image_arch);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(cuda_mem_info_doc,
"cuda_mem_info() -> (free_bytes, total_bytes)\n"
"\n"
"cudaMemGetInfo on the current device (for leak checks and benchmarks).\n"
"Raises RuntimeError where the CUDA engine cannot run.");

static PyObject *
cuda_mem_info(PyObject *self, PyObject *noargs)
{
#ifdef CS_HAVE_CUDA
    size_t free_bytes = 0, total_bytes = 0;
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_mem_info(&free_bytes, &total_bytes, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        PyErr_Format(PyExc_RuntimeError, "cudaMemGetInfo: %s", msg);
        return NULL;
    }
    return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes,
                         (Py_ssize_t)total_bytes);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(cuda_current_device_doc,
"cuda_current_device() -> int\n"
"\n"
"The calling thread's current CUDA device (where engine calls from it\n"
"run).  Raises RuntimeError where the CUDA engine cannot run.");

static PyObject *
cuda_current_device(PyObject *self, PyObject *noargs)
{
#ifdef CS_HAVE_CUDA
    int device = 0;
    char msg[256] = "";
    cs_status status = cs_cuda_current_device(&device, msg, sizeof(msg));
    if (status != CS_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s", msg);
        return NULL;
    }
    return PyLong_FromLong(device);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(cuda_set_device_doc,
"cuda_set_device(device)\n"
"\n"
"Make visible CUDA device `device` current for the calling thread.\n"
"ValueError for a device that is not visible; RuntimeError where the\n"
"CUDA engine cannot run.");

static PyObject *
cuda_set_device(PyObject *self, PyObject *args)
{
    int device = 0;
    if (!PyArg_ParseTuple(args, "i:cuda_set_device", &device)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    char msg[256] = "";
    cs_status status = cs_cuda_set_device(device, msg, sizeof(msg));
    if (status != CS_OK) {
        PyErr_Format(status == CS_ERR_INVALID ? PyExc_ValueError
                                              : PyExc_RuntimeError,
                     "%s", msg);
        return NULL;
    }
    Py_RETURN_NONE;
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(cuda_stream_synchronize_doc,
"cuda_stream_synchronize(stream)\n"
"\n"
"Wait (without the GIL) for the work queued so far on `stream`, a\n"
"cudaStream_t as an integer (1: the legacy default stream).");

static PyObject *
cuda_stream_synchronize(PyObject *self, PyObject *args)
{
    unsigned long long stream = 0;
    if (!PyArg_ParseTuple(args, "K:cuda_stream_synchronize", &stream)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_stream_synchronize((uintptr_t)stream, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    return none_or_runtime_error(status, msg);
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(device_copy_pitched_doc,
"device_copy_pitched(dst_ptr, dst_strides, src_ptr, src_strides, shape)\n"
"    -> bool\n"
"\n"
"dst = src for two float64 device views of `shape` (3D, leading unit\n"
"axes; byte strides) as one pitched cudaMemcpy3D on the legacy default\n"
"stream, complete on return: True; False (nothing done) where a view's\n"
"rows are not of unit stride or its planes not a whole number of rows\n"
"apart.");

static PyObject *
device_copy_pitched(PyObject *self, PyObject *args)
{
    unsigned long long dst, src;
    PyObject *dst_strides_obj, *src_strides_obj, *shape_obj;
    if (!PyArg_ParseTuple(args, "KOKOO:device_copy_pitched", &dst,
                          &dst_strides_obj, &src, &src_strides_obj,
                          &shape_obj)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    ptrdiff_t dst_strides[3], src_strides[3], shape[3];
    if (parse_triple(dst_strides_obj, "dst_strides", dst_strides) < 0
        || parse_triple(src_strides_obj, "src_strides", src_strides) < 0
        || parse_triple(shape_obj, "shape", shape) < 0) {
        return NULL;
    }
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_copy_pitched((void *)(uintptr_t)dst, dst_strides,
                                  (const void *)(uintptr_t)src, src_strides,
                                  shape, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    if (status == CS_ERR_UNSUPPORTED) {
        Py_RETURN_FALSE;
    }
    if (status != CS_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s", msg);
        return NULL;
    }
    Py_RETURN_TRUE;
#else
    no_cuda_engine();
    return NULL;
#endif
}

PyDoc_STRVAR(cuda_device_synchronize_doc,
"cuda_device_synchronize()\n"
"\n"
"Wait (without the GIL) for the work of every stream on the current\n"
"device, as cudaFree does before it frees.");

static PyObject *
cuda_device_synchronize(PyObject *self, PyObject *noargs)
{
#ifdef CS_HAVE_CUDA
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_device_synchronize(msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    return none_or_runtime_error(status, msg);
#else
    no_cuda_engine();
    return NULL;
#endif
}

static PyMethodDef core_methods[] = {
    {"run", run, METH_VARARGS, run_doc},
    {"run_scheme", cs_py_run_scheme, METH_VARARGS, cs_py_run_scheme_doc},
    {"plan_scheme_cpu", cs_py_plan_scheme_cpu, METH_VARARGS,
     cs_py_plan_scheme_cpu_doc},
    {"run_device", run_device, METH_VARARGS, run_device_doc},
    {"run_onestep_cai", run_onestep_cai, METH_VARARGS, run_onestep_cai_doc},
    {"cai_plain_ndim", cai_plain_ndim, METH_O, cai_plain_ndim_doc},
    {"run_scheme_device", cs_py_run_scheme_device, METH_VARARGS,
     cs_py_run_scheme_device_doc},
    {"plan_scheme_device", cs_py_plan_scheme_device, METH_VARARGS,
     cs_py_plan_scheme_device_doc},
    {"to_device", to_device, METH_VARARGS, copy_doc},
    {"to_host", to_host, METH_VARARGS, copy_doc},
    {"device_alloc", device_alloc, METH_VARARGS, device_alloc_doc},
    {"device_free", device_free, METH_VARARGS, "device_free(ptr)"},
    {"clear_cache", clear_cache, METH_NOARGS, clear_cache_doc},
    {"cache_info", cache_info, METH_NOARGS, cache_info_doc},
    {"dlpack_info", cs_py_dlpack_info, METH_O,
     "dlpack_info(capsule) -> dict: what a DLPack capsule holds"},
    {"dlpack_export", cs_py_dlpack_export, METH_VARARGS,
     "dlpack_export(data, device_id, shape, owner) -> DLPack capsule"},
    {"plan", (PyCFunction)(void (*)(void))cs_py_plan,
     METH_VARARGS | METH_KEYWORDS, cs_py_plan_doc},
    {"kernel_taps", cs_py_kernel_taps, METH_O, cs_py_kernel_taps_doc},
    {"plan_cpu", (PyCFunction)(void (*)(void))cs_py_plan_cpu,
     METH_VARARGS | METH_KEYWORDS, cs_py_plan_cpu_doc},
    {"barrier_spin", cs_py_barrier_spin, METH_VARARGS,
     cs_py_barrier_spin_doc},
    {"threads_fit", cs_py_threads_fit, METH_VARARGS, cs_py_threads_fit_doc},
    {"threads_idle", cs_py_threads_idle, METH_NOARGS,
     cs_py_threads_idle_doc},
    {"cuda_info", cuda_info, METH_NOARGS, cuda_info_doc},
    {"cuda_device_caps", cuda_device_caps, METH_NOARGS,
     cuda_device_caps_doc},
    {"cuda_mem_info", cuda_mem_info, METH_NOARGS, cuda_mem_info_doc},
    {"cuda_current_device", cuda_current_device, METH_NOARGS,
     cuda_current_device_doc},
    {"cuda_set_device", cuda_set_device, METH_VARARGS, cuda_set_device_doc},
    {"session_open", session_open, METH_VARARGS, session_open_doc},
    {"session_run", session_run, METH_VARARGS, session_run_doc},
    {"session_exchange_stream", session_exchange_stream, METH_O,
     session_exchange_stream_doc},
    {"session_bands", session_bands, METH_O, session_bands_doc},
    {"session_wait_bands", session_wait_bands, METH_O,
     session_wait_bands_doc},
    {"session_exchanged", session_exchanged, METH_O, session_exchanged_doc},
    {"session_view", session_view, METH_O, session_view_doc},
    {"session_halo", session_halo, METH_O, session_halo_doc},
    {"session_copy", session_copy, METH_VARARGS, session_copy_doc},
    {"session_close", session_close, METH_VARARGS, session_close_doc},
    {"cuda_stream_synchronize", cuda_stream_synchronize, METH_VARARGS,
     cuda_stream_synchronize_doc},
    {"cuda_device_synchronize", cuda_device_synchronize, METH_NOARGS,
     cuda_device_synchronize_doc},
    {"cuda_ipc_export", cs_py_cuda_ipc_export, METH_VARARGS,
     cs_py_cuda_ipc_export_doc},
    {"cuda_ipc_open", cs_py_cuda_ipc_open, METH_VARARGS,
     cs_py_cuda_ipc_open_doc},
    {"cuda_ipc_close", cs_py_cuda_ipc_close, METH_VARARGS,
     cs_py_cuda_ipc_close_doc},
    {"cuda_can_access_peer", cs_py_cuda_can_access_peer, METH_VARARGS,
     cs_py_cuda_can_access_peer_doc},
    {"device_copies", cs_py_device_copies, METH_O, cs_py_device_copies_doc},
    {"device_copy_pitched", device_copy_pitched, METH_VARARGS,
     device_copy_pitched_doc},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "_core",
    "The convstencil engine (C, OpenMP, CUDA). Use convstencil.apply().",
    -1, core_methods, NULL, NULL, NULL, NULL
};

/* Codes Python passes to run(): defined here once (and in the C headers
   they come from), read by _apply.py, _backends.py and _device.py. */
static int
add_codes(PyObject *m)
{
    static const struct {
        const char *name;
        int value;
    } codes[] = {
        {"MODE_CONSTANT", CS_MODE_CONSTANT}, {"MODE_WRAP", CS_MODE_WRAP},
        {"MODE_NEAREST", CS_MODE_NEAREST},   {"MODE_REFLECT", CS_MODE_REFLECT},
        {"MODE_MIRROR", CS_MODE_MIRROR},
        {"BACKEND_CPU", BACKEND_CPU},        {"BACKEND_CPU_TC", BACKEND_CPU_TC},
        {"BACKEND_CUDA", BACKEND_CUDA},
        {"PATH_AUTO", CS_CUDA_PATH_AUTO},
        {"PATH_TENSOR_CORE", CS_CUDA_PATH_TENSOR_CORE},
        {"PATH_CUDA_CORE", CS_CUDA_PATH_CUDA_CORE},
        {"DTYPE_FLOAT64", CS_DTYPE_FLOAT64}, {"DTYPE_FLOAT32", CS_DTYPE_FLOAT32},
        {"DTYPE_FLOAT16", CS_DTYPE_FLOAT16},
        {"DTYPE_BFLOAT16", CS_DTYPE_BFLOAT16}, {"DTYPE_INT8", CS_DTYPE_INT8},
        {"DTYPE_INT16", CS_DTYPE_INT16},     {"DTYPE_INT32", CS_DTYPE_INT32},
        {"DTYPE_INT64", CS_DTYPE_INT64},     {"DTYPE_UINT8", CS_DTYPE_UINT8},
        {"DTYPE_UINT16", CS_DTYPE_UINT16},   {"DTYPE_UINT32", CS_DTYPE_UINT32},
        {"DTYPE_UINT64", CS_DTYPE_UINT64},   {"DTYPE_BOOL", CS_DTYPE_BOOL},
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        if (PyModule_AddIntConstant(m, codes[i].name, codes[i].value) < 0) {
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC
PyInit__core(void)
{
    import_array();
    PyObject *m = PyModule_Create(&core_module);
    if (m != NULL
        && (add_codes(m) < 0 || info_keys_init() < 0
            || cs_cai_keys_init() < 0
            || cs_py_plan_add_constants(m) < 0
            || PyModule_AddIntConstant(m, "CUDA_EMULATION",
                                       CUDA_EMULATION) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
