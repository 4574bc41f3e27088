/*
 * peer_glue.c -- convstencil._core.cuda_ipc_export, cuda_ipc_open,
 * cuda_ipc_close, cuda_can_access_peer and device_copies (peer_glue.h).
 *
 * Pointers travel as integers, handles as 64-byte bytes objects.  The
 * CUDA calls run without the GIL; a failed one raises RuntimeError with
 * the runtime's reason, a malformed argument TypeError or ValueError.
 * A build without the CUDA engine raises RuntimeError saying why.
 */
#define PY_SSIZE_T_CLEAN
#include "peer_glue.h"

#include "core_glue.h"

#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
#endif

#include <stdint.h>
#include <string.h>

#ifdef CS_HAVE_CUDA
static PyObject *
raise_status(cs_status status, const char *msg)
{
    PyErr_Format(status == CS_ERR_INVALID ? PyExc_ValueError
                                          : PyExc_RuntimeError,
                 "%s", msg);
    return NULL;
}
#endif

const char cs_py_cuda_ipc_export_doc[] =
    "cuda_ipc_export(ptr) -> (handle, base, size)\n"
    "\n"
    "The device allocation holding pointer `ptr` (its base pointer and\n"
    "size in bytes) and the 64-byte CUDA IPC handle (bytes) another\n"
    "process of this host opens it by.";

PyObject *
cs_py_cuda_ipc_export(PyObject *self, PyObject *args)
{
    unsigned long long ptr;
    if (!PyArg_ParseTuple(args, "K:cuda_ipc_export", &ptr)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    unsigned char handle[CS_IPC_HANDLE_BYTES];
    uintptr_t base = 0;
    size_t size = 0;
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_ipc_export((uintptr_t)ptr, handle, &base, &size, msg,
                                sizeof(msg));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        return raise_status(status, msg);
    }
    return Py_BuildValue("(y#KK)", (const char *)handle,
                         (Py_ssize_t)CS_IPC_HANDLE_BYTES,
                         (unsigned long long)base, (unsigned long long)size);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_ipc_open_doc[] =
    "cuda_ipc_open(handle) -> (base, device)\n"
    "\n"
    "Map the allocation another process exported (cuda_ipc_export's\n"
    "handle) into this one: its base pointer here, and the device that\n"
    "holds it as this process numbers its devices.  Close it with\n"
    "cuda_ipc_close(base); a process cannot open its own allocation.";

PyObject *
cs_py_cuda_ipc_open(PyObject *self, PyObject *args)
{
    const char *handle;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "y#:cuda_ipc_open", &handle, &len)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    if (len != CS_IPC_HANDLE_BYTES) {
        PyErr_Format(PyExc_ValueError, "a CUDA IPC handle has %d bytes, "
                     "not %zd", CS_IPC_HANDLE_BYTES, len);
        return NULL;
    }
    unsigned char h[CS_IPC_HANDLE_BYTES];
    memcpy(h, handle, CS_IPC_HANDLE_BYTES);
    uintptr_t base = 0;
    int device = -1;
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_ipc_open(h, &base, &device, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        return raise_status(status, msg);
    }
    return Py_BuildValue("(Ki)", (unsigned long long)base, device);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_ipc_close_doc[] =
    "cuda_ipc_close(base)\n"
    "\n"
    "Unmap an allocation cuda_ipc_open mapped.";

PyObject *
cs_py_cuda_ipc_close(PyObject *self, PyObject *args)
{
    unsigned long long base;
    if (!PyArg_ParseTuple(args, "K:cuda_ipc_close", &base)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_ipc_close((uintptr_t)base, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        return raise_status(status, msg);
    }
    Py_RETURN_NONE;
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_cuda_can_access_peer_doc[] =
    "cuda_can_access_peer(device, peer) -> bool\n"
    "\n"
    "Whether copies and kernels on `device` reach `peer`'s memory\n"
    "directly (True for one device).";

PyObject *
cs_py_cuda_can_access_peer(PyObject *self, PyObject *args)
{
    int device, peer;
    if (!PyArg_ParseTuple(args, "ii:cuda_can_access_peer", &device, &peer)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    int can = 0;
    char msg[256] = "";
    cs_status status = cs_cuda_can_access_peer(device, peer, &can, msg,
                                               sizeof(msg));
    if (status != CS_OK) {
        return raise_status(status, msg);
    }
    return PyBool_FromLong(can);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_device_copies_doc[] =
    "device_copies(copies)\n"
    "\n"
    "`copies`: a sequence of (dst, src, nbytes), device pointers (this\n"
    "process's or opened ones) and a byte count, at most 16.  Each copy\n"
    "runs on a stream of its own, after the work queued on the legacy\n"
    "default stream, so that the copy engines move them at once; all are\n"
    "complete on return.";

#ifdef CS_HAVE_CUDA
/* copies[i] as (dst, src, nbytes); -1 with an exception otherwise. */
static int
parse_copy(PyObject *item, uintptr_t *dst, uintptr_t *src, size_t *bytes)
{
    unsigned long long d, s, n;
    if (!PyTuple_Check(item)
        || !PyArg_ParseTuple(item, "KKK", &d, &s, &n)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "device_copies takes (dst, src, "
                        "nbytes) tuples of integers");
        return -1;
    }
    *dst = (uintptr_t)d;
    *src = (uintptr_t)s;
    *bytes = (size_t)n;
    return 0;
}
#endif

PyObject *
cs_py_device_copies(PyObject *self, PyObject *copies)
{
#ifdef CS_HAVE_CUDA
    PyObject *seq = PySequence_Fast(copies, "device_copies takes a "
                                            "sequence of (dst, src, nbytes)");
    if (seq == NULL) {
        return NULL;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > CS_MAX_COPIES) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "device_copies takes at most %d "
                     "copies, not %zd", CS_MAX_COPIES, n);
        return NULL;
    }
    uintptr_t dst[CS_MAX_COPIES], src[CS_MAX_COPIES];
    size_t bytes[CS_MAX_COPIES];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parse_copy(PySequence_Fast_GET_ITEM(seq, i), &dst[i], &src[i],
                       &bytes[i]) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    char msg[256] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_copies((int)n, dst, src, bytes, msg, sizeof(msg));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        return raise_status(status, msg);
    }
    Py_RETURN_NONE;
#else
    return cs_py_no_cuda_engine();
#endif
}
