/*
 * scheme_tables_glue.h -- a PDE scheme's stencils and code tables from
 * Python (scheme_tables_glue.c), for run_scheme_device and the planners'
 * calls (plan_scheme_device, plan_scheme_cpu).
 */
#ifndef CS_SCHEME_TABLES_GLUE_H
#define CS_SCHEME_TABLES_GLUE_H

#include <Python.h>

#include "scheme.h"

/* Columns of the terms table before the powers. */
#define TERM_COLUMNS 4

/* A scheme's tables as read from Python: init before reading, release
   on every path after. */
typedef struct cs_py_scheme_tables {
    Py_buffer tab_v[4];  /* coefs, terms, updates, stages */
    Py_buffer *st_v;     /* the stencils' views */
    Py_ssize_t ns;
    cs_kernel *kernels;
    cs_term *terms;
    cs_update *updates;
    cs_stage *stages;
    cs_scheme scheme;
} cs_py_scheme_tables;

void
cs_py_scheme_tables_init(cs_py_scheme_tables *t);

void
cs_py_scheme_tables_release(cs_py_scheme_tables *t);

/*
 * The stencils (a tuple of float64 weight arrays of `ndim` axes) and the
 * code tables of a scheme of k fields and np parameter fields, read and
 * checked (cs_scheme_check) into t->scheme; -1 with an exception set.
 * `fn` names the caller in messages.
 */
int
cs_py_read_scheme_tables(const char *fn, int ndim, Py_ssize_t k,
                         Py_ssize_t np, PyObject *stencils_obj,
                         PyObject *coefs_obj, PyObject *terms_obj,
                         PyObject *updates_obj, PyObject *stages_obj,
                         cs_py_scheme_tables *t);

/* Whether the buffer holds items of struct code `code` and `itemsize`
   bytes in native byte order. */
int
cs_py_format_is(const Py_buffer *v, char code, Py_ssize_t itemsize);

/* The shape tuple (1 to 3 ints >= 0) as 3 extents with leading 1s; its
   length, or -1 with ValueError naming `fn`. */
int
cs_py_scheme_shape(const char *fn, PyObject *t, ptrdiff_t shape[3]);

#endif /* CS_SCHEME_TABLES_GLUE_H */
