/*
 * device_glue.c -- convstencil._core's device arrays (device_glue.h):
 * the engine's runs between device arrays (run_device,
 * run_onestep_cai), copies between host and device, allocations, and
 * the CUDA runtime's facts and calls the Python layer reads (devices,
 * memory, streams).
 *
 * Every function parses its arguments in every build (a malformed call
 * raises TypeError or ValueError even without CUDA); a build without
 * the CUDA engine then raises RuntimeError saying why.  The CUDA calls
 * run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include "array_glue.h"
#include "device_glue.h"

#include <stdint.h>
#include <string.h>

#include "cai_glue.h"
#include "core_glue.h"
#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
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

int
cs_py_parse_triple(PyObject *t, const char *what, ptrdiff_t v[3])
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

int
cs_py_device_kernel(PyArrayObject *weights, cs_kernel *kernel)
{
    if (!cs_py_is_float64_carray(weights) || PyArray_NDIM(weights) < 1
        || PyArray_NDIM(weights) > 3) {
        PyErr_SetString(PyExc_TypeError, "weights must be a C-contiguous "
                                         "float64 array of 1 to 3 axes");
        return -1;
    }
    if (cs_py_check_weights(weights) < 0) {
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

const char cs_py_run_device_doc[] =
"run_device(in_ptr, in_dtype, in_strides, out_ptr, out_strides, shape,\n"
"           weights, steps, mode, cval, path, wait0, wait1, run_stream,\n"
"           interruptible, progress) -> dict\n"
"\n"
"Apply `weights` to the device array at in_ptr (DTYPE_* code, strides\n"
"in bytes, all 3D with leading unit axes) into the float64 device array\n"
"at out_ptr.  wait0/wait1: producers' streams to wait for (0: none);\n"
"run_stream: 0 runs on the engine's stream and returns when done,\n"
"otherwise the work is queued on that stream.  Use convstencil.apply().";

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

PyObject *
cs_py_run_device(PyObject *self, PyObject *args)
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
    if (cs_py_parse_triple(in_strides_obj, "in_strides", in_strides) < 0
        || cs_py_parse_triple(out_strides_obj, "out_strides", out_strides) < 0
        || cs_py_parse_triple(shape_obj, "shape", shape) < 0) {
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
    if (cs_py_device_kernel(weights, &kernel) < 0) {
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
    cs_py_no_cuda_engine();
    goto exit;
#endif
exit:
    cs_kernel_free(&kernel);
    return result;
}

const char cs_py_cai_plain_ndim_doc[] =
"cai_plain_ndim(cai) -> int\n"
"\n"
"The number of axes of the array a CUDA Array Interface dict describes\n"
"where it is of the plain kind run_onestep_cai reads, 0 otherwise.";

PyObject *
cs_py_cai_plain_ndim(PyObject *self, PyObject *cai)
{
    cs_cai_plain plain;
    return PyLong_FromLong(cs_cai_plain_read(cai, &plain) ? plain.ndim : 0);
}

const char cs_py_run_onestep_cai_doc[] =
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
"convstencil.apply().";

PyObject *
cs_py_run_onestep_cai(PyObject *self, PyObject *args)
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
    if (cs_py_device_kernel(weights, &kernel) < 0) {
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
    return cs_py_no_cuda_engine();
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

const char cs_py_copy_doc[] =
"to_device(ptr, host_array) / to_host(host_array, ptr)\n"
"\n"
"Copy host_array.nbytes bytes between a C-contiguous NumPy array and\n"
"device memory at ptr through the engine's pinned staging; complete on\n"
"return.";

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
    return cs_py_no_cuda_engine();
#endif
}

PyObject *
cs_py_to_device(PyObject *self, PyObject *args)
{
    return copy_between(args, 1);
}

PyObject *
cs_py_to_host(PyObject *self, PyObject *args)
{
    return copy_between(args, 0);
}

const char cs_py_device_alloc_doc[] =
"device_alloc(nbytes) -> (ptr, device)\n"
"\n"
"cudaMalloc on the current device, after checking that nbytes fit in\n"
"its free memory (MemoryError otherwise).  Free with device_free.";

PyObject *
cs_py_device_alloc(PyObject *self, PyObject *args)
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
    return cs_py_no_cuda_engine();
#endif
}

PyObject *
cs_py_device_free(PyObject *self, PyObject *args)
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

const char cs_py_cuda_info_doc[] =
"cuda_info() -> (built, device_count, message)\n"
"\n"
"Whether this build has the CUDA engine, how many devices it sees\n"
"(-1: the runtime could not be queried) and a one-line description.";

PyObject *
cs_py_cuda_info(PyObject *self, PyObject *noargs)
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

const char cs_py_cuda_device_caps_doc[] =
"cuda_device_caps() -> {'cc_major': int, 'sms': int, 'smem_optin': int,\n"
"                       'image_arch': int}\n"
"\n"
"The current device's facts the planner reads: compute capability\n"
"major, multiprocessors, the shared memory (bytes) a block may opt\n"
"in to, and the architecture of the kernel image the device runs (90:\n"
"compiled from compute_90).  Raises RuntimeError where the CUDA engine\n"
"cannot run.";

PyObject *
cs_py_cuda_device_caps(PyObject *self, PyObject *noargs)
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
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_mem_info_doc[] =
"cuda_mem_info() -> (free_bytes, total_bytes)\n"
"\n"
"cudaMemGetInfo on the current device (for leak checks and benchmarks).\n"
"Raises RuntimeError where the CUDA engine cannot run.";

PyObject *
cs_py_cuda_mem_info(PyObject *self, PyObject *noargs)
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
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_current_device_doc[] =
"cuda_current_device() -> int\n"
"\n"
"The calling thread's current CUDA device (where engine calls from it\n"
"run).  Raises RuntimeError where the CUDA engine cannot run.";

PyObject *
cs_py_cuda_current_device(PyObject *self, PyObject *noargs)
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
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_set_device_doc[] =
"cuda_set_device(device)\n"
"\n"
"Make visible CUDA device `device` current for the calling thread.\n"
"ValueError for a device that is not visible; RuntimeError where the\n"
"CUDA engine cannot run.";

PyObject *
cs_py_cuda_set_device(PyObject *self, PyObject *args)
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
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_stream_synchronize_doc[] =
"cuda_stream_synchronize(stream)\n"
"\n"
"Wait (without the GIL) for the work queued so far on `stream`, a\n"
"cudaStream_t as an integer (1: the legacy default stream).";

PyObject *
cs_py_cuda_stream_synchronize(PyObject *self, PyObject *args)
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
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_device_copy_pitched_doc[] =
"device_copy_pitched(dst_ptr, dst_strides, src_ptr, src_strides, shape)\n"
"    -> bool\n"
"\n"
"dst = src for two float64 device views of `shape` (3D, leading unit\n"
"axes; byte strides) as one pitched cudaMemcpy3D on the legacy default\n"
"stream, complete on return: True; False (nothing done) where a view's\n"
"rows are not of unit stride or its planes not a whole number of rows\n"
"apart.";

PyObject *
cs_py_device_copy_pitched(PyObject *self, PyObject *args)
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
    if (cs_py_parse_triple(dst_strides_obj, "dst_strides", dst_strides) < 0
        || cs_py_parse_triple(src_strides_obj, "src_strides", src_strides) < 0
        || cs_py_parse_triple(shape_obj, "shape", shape) < 0) {
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
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_device_synchronize_doc[] =
"cuda_device_synchronize()\n"
"\n"
"Wait (without the GIL) for the work of every stream on the current\n"
"device, as cudaFree does before it frees.";

PyObject *
cs_py_cuda_device_synchronize(PyObject *self, PyObject *noargs)
{
#ifdef CS_HAVE_CUDA
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_device_synchronize(msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    return none_or_runtime_error(status, msg);
#else
    return cs_py_no_cuda_engine();
#endif
}
