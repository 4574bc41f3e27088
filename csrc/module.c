/*
 * module.c -- convstencil._core, the only CPython/NumPy glue.
 *
 * The Python layer (convstencil/_apply.py) validates and converts every
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
#include "cpu/cpu_engine.h"
#include "cpu/tc_emulation.h"
#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
#endif
#ifndef CS_NO_CUDA_REASON
#define CS_NO_CUDA_REASON "built without the CUDA engine"
#endif

/* Backend codes; convstencil/_apply.py mirrors them. */
enum {
    BACKEND_CPU = 0,
    BACKEND_CPU_TC = 1,
    BACKEND_CUDA = 2
};

static int
is_float64_carray(PyArrayObject *a)
{
    return PyArray_TYPE(a) == NPY_DOUBLE && PyArray_IS_C_CONTIGUOUS(a)
           && PyArray_ISALIGNED(a);
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
        npy_intp w = PyArray_DIM(weights, a);
        if (PyArray_DIM(grid, a) < 1 || PyArray_DIM(out, a)
                                            != PyArray_DIM(grid, a)) {
            PyErr_SetString(PyExc_ValueError,
                            "grid must be non-empty and out of its shape");
            return -1;
        }
        if (w < 1 || w % 2 == 0) {
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

static PyObject *
info_to_dict(const cs_run_info *info)
{
    PyObject *seconds = info->device_seconds >= 0.0
                            ? PyFloat_FromDouble(info->device_seconds)
                            : Py_NewRef(Py_None);
    if (seconds == NULL) {
        return NULL;
    }
    /* N: the dict takes over the reference to `seconds` */
    return Py_BuildValue("{s:s,s:s,s:i,s:l,s:l,s:i,s:N}",
                         "backend", info->backend ? info->backend : "",
                         "path", info->path ? info->path : "",
                         "fused_depth", info->fused_depth,
                         "fused_passes", info->fused_passes,
                         "unfused_steps", info->unfused_steps,
                         "threads", info->threads,
                         "device_seconds", seconds);
}

/* ---- Ctrl-C during a run: the engines poll this between steps ---- */

#define SIGNAL_POLL_SECONDS 0.1 /* a tenth of a second between looks */

typedef struct signal_poll {
    double next; /* clock reading of the next look */
} signal_poll;

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
 * cs_interrupt's poll: at most every SIGNAL_POLL_SECONDS, take the GIL
 * and run Python's signal handlers (in the main thread; elsewhere they
 * do nothing).  A handler that raises (KeyboardInterrupt, by default on
 * SIGINT) stops the run; its exception stays set for run() to return.
 * Called without the GIL, from the thread that released it.
 */
static int
poll_signals(void *arg)
{
    signal_poll *sp = (signal_poll *)arg;
    const double now = monotonic_seconds();
    if (now < sp->next) {
        return 0;
    }
    sp->next = now + SIGNAL_POLL_SECONDS;
    PyGILState_STATE gil = PyGILState_Ensure();
    const int raised = PyErr_CheckSignals() != 0;
    PyGILState_Release(gil);
    return raised;
}

static void
raise_status(cs_status status, const char *backend, const char *detail)
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
"    interruptible) -> dict\n"
"\n"
"Apply `weights` to `grid` `steps` times into `out` (all float64,\n"
"C-contiguous, same ndim; out may be grid).  mode, backend and path are\n"
"the integer codes of convstencil._apply.  With `interruptible` (the\n"
"main thread: the only one that runs signal handlers) the run stops at\n"
"a signal whose handler raises, e.g. Ctrl-C.  Returns what the run did.\n"
"Use convstencil.apply(): this function assumes validated arguments.");

static PyObject *
run(PyObject *self, PyObject *args)
{
    PyArrayObject *grid, *weights, *out;
    long steps;
    int mode, backend, path, threads, interruptible;
    double cval;
    cs_kernel kernel = {0};
    cs_run_info info = {0};
    cs_status status = CS_OK;
    char detail[512] = "";
    const char *backend_name = "cpu";
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "O!O!O!lidiiip", &PyArray_Type, &grid,
                          &PyArray_Type, &weights, &PyArray_Type, &out,
                          &steps, &mode, &cval, &backend, &path, &threads,
                          &interruptible)) {
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
        raise_status(status, backend_name, NULL);
        goto exit;
    }

    /* defaults for an engine that steps one by one; engines override */
    info.fused_depth = 1;
    info.unfused_steps = steps;
    info.device_seconds = -1.0;

    const double *in_data = PyArray_DATA(grid);
    double *out_data = PyArray_DATA(out);
    signal_poll sp = {monotonic_seconds() + SIGNAL_POLL_SECONDS};
    /* elsewhere than in the main thread the poll would only take the
       GIL, from threads that may need it */
    const cs_interrupt intr = {interruptible ? poll_signals : NULL, &sp};
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
        raise_status(status, backend_name, detail);
        goto exit;
    }
    result = info_to_dict(&info);

exit:
    cs_kernel_free(&kernel);
    return result;
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
    PyErr_SetString(PyExc_RuntimeError,
                    "not built with CUDA: " CS_NO_CUDA_REASON);
    return NULL;
#endif
}

static PyMethodDef core_methods[] = {
    {"run", run, METH_VARARGS, run_doc},
    {"cuda_info", cuda_info, METH_NOARGS, cuda_info_doc},
    {"cuda_mem_info", cuda_mem_info, METH_NOARGS, cuda_mem_info_doc},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "_core",
    "The convstencil engine (C, OpenMP, CUDA). Use convstencil.apply().",
    -1, core_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC
PyInit__core(void)
{
    import_array();
    return PyModule_Create(&core_module);
}
