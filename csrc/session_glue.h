/*
 * session_glue.h -- convstencil._core's sessions: a grid kept in the
 * CUDA engine's layout across rounds, for the distributed layer
 * (session_glue.c; module.c registers them).
 */
#ifndef CS_SESSION_GLUE_H
#define CS_SESSION_GLUE_H

#include <Python.h>

extern const char cs_py_session_open_doc[];

PyObject *
cs_py_session_open(PyObject *self, PyObject *args);

extern const char cs_py_session_run_doc[];

PyObject *
cs_py_session_run(PyObject *self, PyObject *args);

extern const char cs_py_session_bands_doc[];

PyObject *
cs_py_session_bands(PyObject *self, PyObject *capsule);

extern const char cs_py_session_exchange_stream_doc[];

PyObject *
cs_py_session_exchange_stream(PyObject *self, PyObject *capsule);

extern const char cs_py_session_wait_bands_doc[];

PyObject *
cs_py_session_wait_bands(PyObject *self, PyObject *capsule);

extern const char cs_py_session_exchanged_doc[];

PyObject *
cs_py_session_exchanged(PyObject *self, PyObject *capsule);

extern const char cs_py_session_view_doc[];

PyObject *
cs_py_session_view(PyObject *self, PyObject *capsule);

extern const char cs_py_session_halo_doc[];

PyObject *
cs_py_session_halo(PyObject *self, PyObject *capsule);

extern const char cs_py_session_copy_doc[];

PyObject *
cs_py_session_copy(PyObject *self, PyObject *args);

extern const char cs_py_session_close_doc[];

PyObject *
cs_py_session_close(PyObject *self, PyObject *args);

#endif /* CS_SESSION_GLUE_H */
