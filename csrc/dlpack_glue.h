/*
 * dlpack_glue.h -- DLPack capsules read and made for convstencil._core
 * (dlpack_glue.c; module.c registers the functions).
 */
#ifndef CS_DLPACK_GLUE_H
#define CS_DLPACK_GLUE_H

#include <Python.h>

/*
 * dlpack_info(capsule) -> dict(data, device_type, device_id, shape,
 * strides (elements, or None: C order), code, bits, lanes); the capsule
 * is read, not consumed.
 */
PyObject *
cs_py_dlpack_info(PyObject *self, PyObject *capsule);

/*
 * dlpack_export(data, device_id, shape, owner) -> a "dltensor" capsule
 * of a float64 C-contiguous CUDA array at `data`, holding a reference to
 * `owner` until it is released.
 */
PyObject *
cs_py_dlpack_export(PyObject *self, PyObject *args);

#endif /* CS_DLPACK_GLUE_H */
