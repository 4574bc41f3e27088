/*
 * scheme_device_glue.h -- convstencil._core.run_scheme_device: a PDE
 * scheme (scheme.h) advanced on device arrays by the GPU engine
 * (scheme_device_glue.c; module.c registers it).
 */
#ifndef CS_SCHEME_DEVICE_GLUE_H
#define CS_SCHEME_DEVICE_GLUE_H

#include <Python.h>

extern const char cs_py_run_scheme_device_doc[];

PyObject *
cs_py_run_scheme_device(PyObject *self, PyObject *args);

extern const char cs_py_plan_scheme_device_doc[];

/* The passes the GPU engine would run for a scheme, and their price
   (scheme_plan.c): no GPU needed. */
PyObject *
cs_py_plan_scheme_device(PyObject *self, PyObject *args);

#endif /* CS_SCHEME_DEVICE_GLUE_H */
