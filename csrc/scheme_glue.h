/*
 * scheme_glue.h -- convstencil._core.run_scheme: a PDE scheme's tables
 * (scheme.h) from Python, run by the CPU engine, and plan_scheme_cpu, what
 * that run would be (scheme_glue.c; module.c registers them).
 */
#ifndef CS_SCHEME_GLUE_H
#define CS_SCHEME_GLUE_H

#include <Python.h>

extern const char cs_py_run_scheme_doc[];

PyObject *
cs_py_run_scheme(PyObject *self, PyObject *args);

extern const char cs_py_plan_scheme_cpu_doc[];

PyObject *
cs_py_plan_scheme_cpu(PyObject *self, PyObject *args);

#endif /* CS_SCHEME_GLUE_H */
