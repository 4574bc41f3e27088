/*
 * cai_glue.c -- a CUDA Array Interface of the plain kind read in C (see
 * cai_glue.h).  Every test here is one the Python reader makes too
 * (_device.py's _from_cai); what fails one is not an error here, only
 * not plain.
 */
#include "cai_glue.h"

#include <string.h>

enum { KEY_VERSION, KEY_SHAPE, KEY_TYPESTR, KEY_DATA, KEY_STRIDES,
       KEY_MASK, KEY_STREAM, KEYS };
static const char *const key_names[KEYS] = {
    "version", "shape", "typestr", "data", "strides", "mask", "stream"};
static PyObject *keys[KEYS];
static PyObject *float64_typestr;

int
cs_cai_keys_init(void)
{
    for (int i = 0; i < KEYS; i++) {
        keys[i] = PyUnicode_InternFromString(key_names[i]);
        if (keys[i] == NULL) {
            return -1;
        }
    }
    float64_typestr = PyUnicode_InternFromString("<f8");
    return float64_typestr == NULL ? -1 : 0;
}

/* The dict's entry for `key`, borrowed; NULL where absent (or on an
   error, cleared: the Python reader meets it again). */
static PyObject *
entry(PyObject *dict, int key)
{
    PyObject *v = PyDict_GetItemWithError(dict, keys[key]);
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* An exact int in [lo, hi] into *value; 0 where it is not one. */
static int
exact_long(PyObject *v, long long lo, long long hi, long long *value)
{
    if (v == NULL || !PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (x < lo || x > hi) {
        return 0;
    }
    *value = x;
    return 1;
}

/* An exact tuple of `n` exact ints in [lo, hi] (n = 0: any length from
   1 to 3, said in *n_out) into values[]. */
static int
int_tuple(PyObject *v, Py_ssize_t n, long long lo, long long hi,
          long long values[3], int *n_out)
{
    if (v == NULL || !PyTuple_CheckExact(v)) {
        return 0;
    }
    const Py_ssize_t len = PyTuple_GET_SIZE(v);
    if ((n != 0 && len != n) || len < 1 || len > 3) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (!exact_long(PyTuple_GET_ITEM(v, i), lo, hi, &values[i])) {
            return 0;
        }
    }
    *n_out = (int)len;
    return 1;
}

int
cs_cai_plain_read(PyObject *cai, cs_cai_plain *out)
{
    const long long most = PTRDIFF_MAX;
    long long x = 0;
    if (cai == NULL || !PyDict_CheckExact(cai)
        || !exact_long(entry(cai, KEY_VERSION), 3, 3, &x)) {
        return 0;
    }
    PyObject *typestr = entry(cai, KEY_TYPESTR);
    if (typestr == NULL || !PyUnicode_CheckExact(typestr)
        || PyUnicode_Compare(typestr, float64_typestr) != 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *mask = entry(cai, KEY_MASK);
    if (mask != NULL && mask != Py_None) {
        return 0;
    }
    long long shape[3], strides[3];
    int ndim = 0, n = 0;
    if (!int_tuple(entry(cai, KEY_SHAPE), 0, 1, most, shape, &ndim)) {
        return 0;
    }
    PyObject *strides_obj = entry(cai, KEY_STRIDES);
    if (strides_obj == NULL || strides_obj == Py_None) {
        long long step = (long long)sizeof(double);
        for (int a = ndim - 1; a >= 0; a--) {
            strides[a] = step;
            step = shape[a] > most / step ? most : step * shape[a];
        }
    } else if (!int_tuple(strides_obj, ndim, -most, most, strides, &n)) {
        return 0;
    } else {
        for (int a = 0; a < ndim; a++) {
            if (strides[a] % (long long)sizeof(double) != 0) {
                return 0;
            }
        }
    }
    PyObject *data = entry(cai, KEY_DATA);
    if (data == NULL || !PyTuple_CheckExact(data)
        || PyTuple_GET_SIZE(data) != 2
        || !PyBool_Check(PyTuple_GET_ITEM(data, 1))
        || !PyLong_CheckExact(PyTuple_GET_ITEM(data, 0))) {
        return 0;
    }
    const unsigned long long ptr =
        PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
    if (ptr == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or too large */
        return 0;
    }
    PyObject *stream_obj = entry(cai, KEY_STREAM);
    long long stream = 0;
    if (stream_obj != NULL && stream_obj != Py_None
        && !exact_long(stream_obj, 1, LLONG_MAX, &stream)) {
        return 0;
    }
    memset(out, 0, sizeof(*out));
    out->data = (uintptr_t)ptr;
    out->ndim = ndim;
    for (int a = 0; a < 3; a++) {
        const int src = a - (3 - ndim);
        out->shape[a] = src < 0 ? 1 : (ptrdiff_t)shape[src];
        out->strides[a] = src < 0 ? 0 : (ptrdiff_t)strides[src];
    }
    out->readonly = PyTuple_GET_ITEM(data, 1) == Py_True;
    out->stream = (uintptr_t)stream;
    return 1;
}
