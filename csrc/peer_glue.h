/*
 * peer_glue.h -- convstencil._core's CUDA IPC and peer copies
 * (csrc/cuda/peer.cu) for the distributed layer's "cuda-ipc" transport
 * (peer_glue.c; module.c registers them).
 */
#ifndef CS_PEER_GLUE_H
#define CS_PEER_GLUE_H

#include <Python.h>

extern const char cs_py_cuda_ipc_export_doc[];

PyObject *
cs_py_cuda_ipc_export(PyObject *self, PyObject *args);

extern const char cs_py_cuda_ipc_open_doc[];

PyObject *
cs_py_cuda_ipc_open(PyObject *self, PyObject *args);

extern const char cs_py_cuda_ipc_close_doc[];

PyObject *
cs_py_cuda_ipc_close(PyObject *self, PyObject *args);

extern const char cs_py_cuda_can_access_peer_doc[];

PyObject *
cs_py_cuda_can_access_peer(PyObject *self, PyObject *args);

extern const char cs_py_device_copies_doc[];

PyObject *
cs_py_device_copies(PyObject *self, PyObject *copies);

#endif /* CS_PEER_GLUE_H */
