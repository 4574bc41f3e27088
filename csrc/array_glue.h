/*
 * array_glue.h -- the NumPy C API for the glue files that read arrays
 * (module.c imports it, the others share its table of functions), and
 * the checks of float64 arrays they share (module.c).
 */
#ifndef CS_ARRAY_GLUE_H
#define CS_ARRAY_GLUE_H

#include <Python.h>

/* one table of NumPy's functions for the whole extension: module.c,
   which calls import_array, defines CS_ARRAY_GLUE_IMPORT first */
#define PY_ARRAY_UNIQUE_SYMBOL convstencil_core_ARRAY_API
#ifndef CS_ARRAY_GLUE_IMPORT
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

/* float64 in native byte order, aligned and C-contiguous. */
int
cs_py_is_float64_carray(PyArrayObject *a);

/* Weights (float64 C-contiguous, checked by the caller) of an odd size on
   every axis and finite; set an exception and return -1 otherwise. */
int
cs_py_check_weights(PyArrayObject *weights);

#endif /* CS_ARRAY_GLUE_H */
