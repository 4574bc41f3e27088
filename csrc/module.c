/*
 * module.c -- convstencil._core: the module, its table of functions and
 * codes, the host engines' run(), and what the other glue files share
 * (core_glue.h, array_glue.h).  Device arrays are in device_glue.c,
 * sessions in session_glue.c, schemes in scheme_glue.c and
 * scheme_device_glue.c, peer copies in peer_glue.c.
 *
 * The Python layer (src/convstencil/_engine.py) validates and converts
 * every argument and allocates the output; the glue re-checks what the
 * engine relies on (a wrong call must raise, never crash), builds the
 * engine's kernel, releases the GIL around the engine, and turns status
 * codes into exceptions once the GIL is back.  One exit path per
 * function.
 */
#define PY_SSIZE_T_CLEAN
#define CS_ARRAY_GLUE_IMPORT /* this file calls import_array */
#include "array_glue.h"

#include <math.h>
#include <time.h>

#include "stencil.h"
#include "cai_glue.h"
#include "device_glue.h"
#include "dlpack_glue.h"
#include "plan_glue.h"
#include "peer_glue.h"
#include "scheme_device_glue.h"
#include "scheme_glue.h"
#include "session_glue.h"
#include "core_glue.h"
#include "cpu/cpu_engine.h"
#include "cpu/tc_emulation.h"
#include "cpu/workspace.h"
#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
#endif

/* 1 where the CUDA engine runs on the CPU emulation of tests/cuda_emu
   (setup.py's CONVSTENCIL_CUDA=emulate), exported as CUDA_EMULATION. */
#ifdef CS_CUDA_EMULATION
#define CUDA_EMULATION 1
#else
#define CUDA_EMULATION 0
#endif

int
cs_py_is_float64_carray(PyArrayObject *a)
{
    /* the type number of '>f8' is NPY_DOUBLE too: native order only */
    return PyArray_TYPE(a) == NPY_DOUBLE && PyArray_ISNOTSWAPPED(a)
           && PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISALIGNED(a);
}

int
cs_py_check_weights(PyArrayObject *weights)
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
    if (!cs_py_is_float64_carray(grid) || !cs_py_is_float64_carray(weights)
        || !cs_py_is_float64_carray(out)) {
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
    return cs_py_check_weights(weights);
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

PyObject *
cs_py_no_cuda_engine(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "this build has no CUDA engine: " CS_NO_CUDA_REASON);
    return NULL;
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

/* ---- the engines' caches ---- */

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

static PyMethodDef core_methods[] = {
    {"run", run, METH_VARARGS, run_doc},
    {"run_scheme", cs_py_run_scheme, METH_VARARGS, cs_py_run_scheme_doc},
    {"plan_scheme_cpu", cs_py_plan_scheme_cpu, METH_VARARGS,
     cs_py_plan_scheme_cpu_doc},
    {"run_device", cs_py_run_device, METH_VARARGS, cs_py_run_device_doc},
    {"run_onestep_cai", cs_py_run_onestep_cai, METH_VARARGS,
     cs_py_run_onestep_cai_doc},
    {"cai_plain_ndim", cs_py_cai_plain_ndim, METH_O, cs_py_cai_plain_ndim_doc},
    {"run_scheme_device", cs_py_run_scheme_device, METH_VARARGS,
     cs_py_run_scheme_device_doc},
    {"plan_scheme_device", cs_py_plan_scheme_device, METH_VARARGS,
     cs_py_plan_scheme_device_doc},
    {"to_device", cs_py_to_device, METH_VARARGS, cs_py_copy_doc},
    {"to_host", cs_py_to_host, METH_VARARGS, cs_py_copy_doc},
    {"device_alloc", cs_py_device_alloc, METH_VARARGS, cs_py_device_alloc_doc},
    {"device_free", cs_py_device_free, METH_VARARGS, "device_free(ptr)"},
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
    {"cuda_info", cs_py_cuda_info, METH_NOARGS, cs_py_cuda_info_doc},
    {"cuda_device_caps", cs_py_cuda_device_caps, METH_NOARGS,
     cs_py_cuda_device_caps_doc},
    {"cuda_mem_info", cs_py_cuda_mem_info, METH_NOARGS,
     cs_py_cuda_mem_info_doc},
    {"cuda_current_device", cs_py_cuda_current_device, METH_NOARGS,
     cs_py_cuda_current_device_doc},
    {"cuda_set_device", cs_py_cuda_set_device, METH_VARARGS,
     cs_py_cuda_set_device_doc},
    {"session_open", cs_py_session_open, METH_VARARGS, cs_py_session_open_doc},
    {"session_run", cs_py_session_run, METH_VARARGS, cs_py_session_run_doc},
    {"session_exchange_stream", cs_py_session_exchange_stream, METH_O,
     cs_py_session_exchange_stream_doc},
    {"session_bands", cs_py_session_bands, METH_O, cs_py_session_bands_doc},
    {"session_wait_bands", cs_py_session_wait_bands, METH_O,
     cs_py_session_wait_bands_doc},
    {"session_exchanged", cs_py_session_exchanged, METH_O,
     cs_py_session_exchanged_doc},
    {"session_view", cs_py_session_view, METH_O, cs_py_session_view_doc},
    {"session_halo", cs_py_session_halo, METH_O, cs_py_session_halo_doc},
    {"session_copy", cs_py_session_copy, METH_VARARGS, cs_py_session_copy_doc},
    {"session_close", cs_py_session_close, METH_VARARGS,
     cs_py_session_close_doc},
    {"cuda_stream_synchronize", cs_py_cuda_stream_synchronize, METH_VARARGS,
     cs_py_cuda_stream_synchronize_doc},
    {"cuda_device_synchronize", cs_py_cuda_device_synchronize, METH_NOARGS,
     cs_py_cuda_device_synchronize_doc},
    {"cuda_ipc_export", cs_py_cuda_ipc_export, METH_VARARGS,
     cs_py_cuda_ipc_export_doc},
    {"cuda_ipc_open", cs_py_cuda_ipc_open, METH_VARARGS,
     cs_py_cuda_ipc_open_doc},
    {"cuda_ipc_close", cs_py_cuda_ipc_close, METH_VARARGS,
     cs_py_cuda_ipc_close_doc},
    {"cuda_can_access_peer", cs_py_cuda_can_access_peer, METH_VARARGS,
     cs_py_cuda_can_access_peer_doc},
    {"device_copies", cs_py_device_copies, METH_O, cs_py_device_copies_doc},
    {"device_copy_pitched", cs_py_device_copy_pitched, METH_VARARGS,
     cs_py_device_copy_pitched_doc},
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

