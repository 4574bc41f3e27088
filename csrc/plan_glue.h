/*
 * plan_glue.h -- convstencil._core.plan: the engines' plan (plan.c) for
 * Python, so that tests, last_run_info() and users read the policy
 * instead of re-deriving it (plan_glue.c; module.c registers it).
 */
#ifndef CS_PLAN_GLUE_H
#define CS_PLAN_GLUE_H

#include <Python.h>

extern const char cs_py_plan_doc[];

PyObject *
cs_py_plan(PyObject *self, PyObject *args, PyObject *kwargs);

extern const char cs_py_kernel_taps_doc[];

PyObject *
cs_py_kernel_taps(PyObject *self, PyObject *weights);

extern const char cs_py_plan_cpu_doc[];

PyObject *
cs_py_plan_cpu(PyObject *self, PyObject *args, PyObject *kwargs);

extern const char cs_py_barrier_spin_doc[];

PyObject *
cs_py_barrier_spin(PyObject *self, PyObject *args);

extern const char cs_py_threads_fit_doc[];

PyObject *
cs_py_threads_fit(PyObject *self, PyObject *args);

extern const char cs_py_threads_idle_doc[];

PyObject *
cs_py_threads_idle(PyObject *self, PyObject *noargs);

/* The planner's limits as module constants (TC_MAX_SIDE, ...); -1 on
   failure with an exception set. */
int
cs_py_plan_add_constants(PyObject *module);

#endif /* CS_PLAN_GLUE_H */
