/*
 * device_glue.h -- convstencil._core's device arrays, copies and CUDA
 * runtime calls (device_glue.c; module.c registers them), and what the
 * other glue files that reach the device share with them.
 */
#ifndef CS_DEVICE_GLUE_H
#define CS_DEVICE_GLUE_H

#include "array_glue.h"
#include "stencil.h"

#ifdef CS_HAVE_CUDA
/* A tuple of 3 integers into v; -1 with an exception otherwise. */
int
cs_py_parse_triple(PyObject *t, const char *what, ptrdiff_t v[3]);

/* A device call's kernel from `weights` (C-contiguous float64, 1 to 3
   odd axes, finite); -1 with an exception otherwise. */
int
cs_py_device_kernel(PyArrayObject *weights, cs_kernel *kernel);
#endif

extern const char cs_py_run_device_doc[];

PyObject *
cs_py_run_device(PyObject *self, PyObject *args);

extern const char cs_py_cai_plain_ndim_doc[];

PyObject *
cs_py_cai_plain_ndim(PyObject *self, PyObject *cai);

extern const char cs_py_run_onestep_cai_doc[];

PyObject *
cs_py_run_onestep_cai(PyObject *self, PyObject *args);

extern const char cs_py_copy_doc[];

PyObject *
cs_py_to_device(PyObject *self, PyObject *args);

PyObject *
cs_py_to_host(PyObject *self, PyObject *args);

extern const char cs_py_device_alloc_doc[];

PyObject *
cs_py_device_alloc(PyObject *self, PyObject *args);

PyObject *
cs_py_device_free(PyObject *self, PyObject *args);

extern const char cs_py_cuda_info_doc[];

PyObject *
cs_py_cuda_info(PyObject *self, PyObject *noargs);

extern const char cs_py_cuda_device_caps_doc[];

PyObject *
cs_py_cuda_device_caps(PyObject *self, PyObject *noargs);

extern const char cs_py_cuda_mem_info_doc[];

PyObject *
cs_py_cuda_mem_info(PyObject *self, PyObject *noargs);

extern const char cs_py_cuda_current_device_doc[];

PyObject *
cs_py_cuda_current_device(PyObject *self, PyObject *noargs);

extern const char cs_py_cuda_set_device_doc[];

PyObject *
cs_py_cuda_set_device(PyObject *self, PyObject *args);

extern const char cs_py_cuda_stream_synchronize_doc[];

PyObject *
cs_py_cuda_stream_synchronize(PyObject *self, PyObject *args);

extern const char cs_py_device_copy_pitched_doc[];

PyObject *
cs_py_device_copy_pitched(PyObject *self, PyObject *args);

extern const char cs_py_cuda_device_synchronize_doc[];

PyObject *
cs_py_cuda_device_synchronize(PyObject *self, PyObject *noargs);

#endif /* CS_DEVICE_GLUE_H */
