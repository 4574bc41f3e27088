/*
 * dlpack_glue.c -- reading and making DLPack capsules (the data
 * exchange protocol of the Python array API: `__dlpack__` returns a
 * PyCapsule named "dltensor" holding a DLManagedTensor).
 *
 * The structs below are DLPack's stable ABI (dlpack.h, versions 0.x:
 * the "dltensor" capsule; the versioned "dltensor_versioned" capsule is
 * only returned to consumers that ask for it with max_version, which
 * convstencil does not).  Reading: convstencil only reads the tensor
 * while it holds the capsule, so it does not consume it (does not rename
 * it "used_dltensor"); the capsule's own destructor releases the tensor
 * when the last reference goes.  Making: the capsule keeps a reference to
 * the Python object that owns the memory until the consumer, or the
 * capsule's destructor when no consumer took it, calls the deleter.
 *
 * CPython glue, like module.c, which registers these functions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack_glue.h"

typedef struct {
    int32_t device_type; /* kDLCPU = 1, kDLCUDA = 2, ... */
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6 */
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* elements; NULL: compact C order */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#define DLPACK_NAME "dltensor"
#define DLPACK_USED_NAME "used_dltensor"
#define KDL_CUDA 2
#define KDL_FLOAT 2

PyObject *
cs_py_dlpack_info(PyObject *self, PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, DLPACK_NAME)) {
        PyErr_SetString(PyExc_TypeError,
                        "__dlpack__() did not return a live \"dltensor\" "
                        "capsule");
        return NULL;
    }
    DLManagedTensor *m =
        (DLManagedTensor *)PyCapsule_GetPointer(capsule, DLPACK_NAME);
    if (m == NULL) {
        return NULL;
    }
    const DLTensor *t = &m->dl_tensor;
    if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && t->shape == NULL)) {
        PyErr_SetString(PyExc_ValueError, "DLPack tensor with a bad ndim or "
                                          "no shape");
        return NULL;
    }
    PyObject *shape = PyTuple_New(t->ndim);
    PyObject *strides = Py_None;
    if (t->strides != NULL) {
        strides = PyTuple_New(t->ndim);
    } else {
        Py_INCREF(Py_None);
    }
    PyObject *result = NULL;
    if (shape == NULL || strides == NULL) {
        goto exit;
    }
    for (int i = 0; i < t->ndim; i++) {
        PyObject *v = PyLong_FromLongLong((long long)t->shape[i]);
        if (v == NULL) {
            goto exit;
        }
        PyTuple_SET_ITEM(shape, i, v);
        if (t->strides != NULL) {
            v = PyLong_FromLongLong((long long)t->strides[i]);
            if (v == NULL) {
                goto exit;
            }
            PyTuple_SET_ITEM(strides, i, v);
        }
    }
    result = Py_BuildValue(
        "{s:K,s:i,s:i,s:O,s:O,s:i,s:i,s:i}", "data",
        (unsigned long long)((uintptr_t)t->data + t->byte_offset),
        "device_type", (int)t->device.device_type, "device_id",
        (int)t->device.device_id, "shape", shape, "strides", strides, "code",
        (int)t->dtype.code, "bits", (int)t->dtype.bits, "lanes",
        (int)t->dtype.lanes);
exit:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return result;
}

/* ---- making capsules ---- */

/* A DLManagedTensor and what it points to, in one allocation. */
typedef struct exported {
    DLManagedTensor managed;
    int64_t shape[3];
    int64_t strides[3];
    PyObject *owner; /* keeps the memory alive */
} exported;

static void
exported_deleter(DLManagedTensor *self)
{
    exported *e = (exported *)self->manager_ctx;
    /* a consumer may call this from a thread without the GIL */
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(e->owner);
    PyGILState_Release(gil);
    free(e);
}

/* The capsule's destructor: only a capsule no consumer took still has
   the tensor to release. */
static void
capsule_destructor(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, DLPACK_USED_NAME)) {
        return;
    }
    DLManagedTensor *m =
        (DLManagedTensor *)PyCapsule_GetPointer(capsule, DLPACK_NAME);
    if (m == NULL) {
        PyErr_Clear();
        return;
    }
    if (m->deleter != NULL) {
        m->deleter(m);
    }
}

PyObject *
cs_py_dlpack_export(PyObject *self, PyObject *args)
{
    unsigned long long data;
    int device_id;
    PyObject *shape, *owner;
    if (!PyArg_ParseTuple(args, "KiO!O", &data, &device_id, &PyTuple_Type,
                          &shape, &owner)) {
        return NULL;
    }
    const Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    if (ndim < 1 || ndim > 3) {
        PyErr_SetString(PyExc_ValueError, "dlpack_export: ndim 1 to 3");
        return NULL;
    }
    exported *e = (exported *)calloc(1, sizeof(*e));
    if (e == NULL) {
        return PyErr_NoMemory();
    }
    int64_t stride = 1;
    for (Py_ssize_t i = ndim - 1; i >= 0; i--) {
        long long n = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (n == -1 && PyErr_Occurred()) {
            free(e);
            return NULL;
        }
        e->shape[i] = (int64_t)n;
        e->strides[i] = stride;
        stride *= (int64_t)n;
    }
    DLTensor *t = &e->managed.dl_tensor;
    t->data = (void *)(uintptr_t)data;
    t->device.device_type = KDL_CUDA;
    t->device.device_id = device_id;
    t->ndim = (int32_t)ndim;
    t->dtype.code = KDL_FLOAT;
    t->dtype.bits = 64;
    t->dtype.lanes = 1;
    t->shape = e->shape;
    t->strides = e->strides;
    t->byte_offset = 0;
    e->managed.manager_ctx = e;
    e->managed.deleter = exported_deleter;
    Py_INCREF(owner);
    e->owner = owner;
    PyObject *capsule =
        PyCapsule_New(&e->managed, DLPACK_NAME, capsule_destructor);
    if (capsule == NULL) {
        Py_DECREF(owner);
        free(e);
    }
    return capsule;
}
