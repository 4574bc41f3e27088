/*
 * session_glue.c -- convstencil._core's sessions (session_glue.h): a
 * grid kept in the engine's own layout across rounds (csrc/cuda/
 * session.cu), held by a capsule that frees it when Python lets go.
 *
 * As in device_glue.c, the arguments are parsed in every build and a
 * build without the CUDA engine raises RuntimeError saying why; the
 * CUDA calls run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include "array_glue.h"
#include "session_glue.h"

#include <stdint.h>
#include <string.h>

#include "core_glue.h"
#include "device_glue.h"
#ifdef CS_HAVE_CUDA
#include "cuda/cuda_engine.h"
#endif

#define SESSION_CAPSULE "convstencil._core.session"

#ifdef CS_HAVE_CUDA
/* The capsule's payload: the session, NULL once closed. */
typedef struct session_box {
    cs_cuda_session *x;
} session_box;

static void
session_capsule_free(PyObject *capsule)
{
    session_box *box = PyCapsule_GetPointer(capsule, SESSION_CAPSULE);
    if (box != NULL) {
        cs_cuda_session_free(box->x);
        PyMem_Free(box);
    }
}

/* The box of a capsule holding an open session; NULL with an exception
   otherwise. */
static session_box *
open_session(PyObject *capsule)
{
    session_box *box = PyCapsule_GetPointer(capsule, SESSION_CAPSULE);
    if (box != NULL && box->x == NULL) {
        PyErr_SetString(PyExc_ValueError, "the session is closed");
        return NULL;
    }
    return box;
}
#endif

const char cs_py_session_open_doc[] =
"session_open(in_ptr, in_strides, shape, weights, round_steps, mode,\n"
"             cval, path[, at, box[, ends]]) -> (session, path)\n"
"\n"
"Load the float64 device grid at in_ptr (byte strides and shape 3D,\n"
"leading unit axes; 2D and 3D grids) into the engine's own layout, or\n"
"with `at` and `box` an array of extents `box` into the box at `at` of\n"
"a grid of `shape` (the rest the caller writes before a round), to\n"
"be advanced in rounds of round_steps (session_run), read and written\n"
"between rounds (session_view, session_copy) and stored once\n"
"(session_close); `path` is the one its plan runs.  With ends > 0, only\n"
"that many planes (rows) at each end of the box along its first axis\n"
"are loaded where the rounds can read the rest from in_ptr, which\n"
"must then stay as it is until the first round is done.  On the\n"
"current device, which must stay current.";

PyObject *
cs_py_session_open(PyObject *self, PyObject *args)
{
    unsigned long long in_ptr;
    PyObject *strides_obj, *shape_obj, *at_obj = NULL, *box_obj = NULL;
    PyArrayObject *weights;
    long steps;
    int mode, path;
    double cval;
    Py_ssize_t ends = 0;
    if (!PyArg_ParseTuple(args, "KOOO!lidi|OOn:session_open", &in_ptr,
                          &strides_obj, &shape_obj, &PyArray_Type, &weights,
                          &steps, &mode, &cval, &path, &at_obj, &box_obj,
                          &ends)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    ptrdiff_t strides[3], shape[3], at[3] = {0, 0, 0}, box_ext[3];
    if (cs_py_parse_triple(strides_obj, "in_strides", strides) < 0
        || cs_py_parse_triple(shape_obj, "shape", shape) < 0
        || (at_obj != NULL && cs_py_parse_triple(at_obj, "at", at) < 0)) {
        return NULL;
    }
    if (box_obj != NULL) {
        if (cs_py_parse_triple(box_obj, "box", box_ext) < 0) {
            return NULL;
        }
    } else {
        memcpy(box_ext, shape, sizeof(box_ext));
    }
    if (steps < 1 || mode < 0 || mode >= CS_MODE_COUNT || shape[0] < 1
        || shape[1] < 1 || shape[2] < 1 || ends < 0) {
        PyErr_SetString(PyExc_ValueError, "round_steps < 1, an unknown "
                                          "mode, an empty shape or ends "
                                          "< 0");
        return NULL;
    }
    cs_kernel kernel = {0};
    if (cs_py_device_kernel(weights, &kernel) < 0) {
        return NULL;
    }
    session_box *box = PyMem_Malloc(sizeof(*box));
    if (box == NULL) {
        cs_kernel_free(&kernel);
        return PyErr_NoMemory();
    }
    box->x = NULL;
    cs_darray in = {(void *)(uintptr_t)in_ptr, CS_DTYPE_FLOAT64,
                    {strides[0], strides[1], strides[2]}};
    char detail[512] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_open(&in, shape, at, box_ext, &kernel,
                                  (cs_mode)mode, cval, steps,
                                  (cs_cuda_path)path, (ptrdiff_t)ends,
                                  &box->x, detail,
                                  sizeof(detail));
    Py_END_ALLOW_THREADS
    cs_kernel_free(&kernel);
    if (status != CS_OK) {
        PyMem_Free(box);
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(box, SESSION_CAPSULE,
                                      session_capsule_free);
    if (capsule == NULL) {
        cs_cuda_session_free(box->x);
        PyMem_Free(box);
        return NULL;
    }
    return Py_BuildValue("(Ns)", capsule, cs_cuda_session_path(box->x));
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_run_doc[] =
"session_run(session[, bands[, out]]) -> split\n"
"\n"
"One round: the session's plan on its grid.  Without `bands`, returns\n"
"when done (split False).  With bands = (low, high), the planes at the\n"
"ends of the box along the first axis that the neighbours receive:\n"
"queued, the last pass writing those first where it can (split True;\n"
"else the exchange waits for the whole round); exchange on\n"
"session_exchange_stream or after session_wait_bands, then call\n"
"session_exchanged.  With out = (out_ptr, out_strides) (bands None):\n"
"the last round, whose result goes into that float64 device array of\n"
"the grid's shape (its last pass writes the box's planes there where\n"
"the passes take windows, else the grid is stored whole); then\n"
"session_close with the same array.";

#ifdef CS_HAVE_CUDA
/* session_run's `out`: (ptr, strides) as a float64 array; -1 with an
   exception otherwise. */
static int
parse_out(PyObject *obj, cs_darray *out)
{
    unsigned long long ptr = 0;
    PyObject *strides_obj;
    ptrdiff_t strides[3];
    if (!PyTuple_Check(obj)) {
        PyErr_SetString(PyExc_TypeError,
                        "out must be (out_ptr, out_strides)");
        return -1;
    }
    if (!PyArg_ParseTuple(obj, "KO;out must be (out_ptr, out_strides)",
                          &ptr, &strides_obj)
        || cs_py_parse_triple(strides_obj, "out_strides", strides) < 0) {
        return -1;
    }
    out->data = (void *)(uintptr_t)ptr;
    out->dtype = CS_DTYPE_FLOAT64;
    for (int a = 0; a < 3; a++) {
        out->strides[a] = strides[a];
    }
    return 0;
}
#endif

PyObject *
cs_py_session_run(PyObject *self, PyObject *args)
{
#ifdef CS_HAVE_CUDA
    PyObject *capsule, *bands_obj = Py_None, *out_obj = Py_None;
    if (!PyArg_ParseTuple(args, "O|OO:session_run", &capsule, &bands_obj,
                          &out_obj)) {
        return NULL;
    }
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    Py_ssize_t bands[2] = {0, 0};
    if (bands_obj != Py_None
        && (!PyTuple_Check(bands_obj)
            || !PyArg_ParseTuple(bands_obj, "nn;bands must be (low, high)",
                                 &bands[0], &bands[1]))) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "bands must be (low, high)");
        }
        return NULL;
    }
    cs_darray out;
    if (out_obj != Py_None && parse_out(out_obj, &out) < 0) {
        return NULL;
    }
    const ptrdiff_t planes[2] = {bands[0], bands[1]};
    char detail[512] = "";
    int split = 0;
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_run(box->x, bands_obj == Py_None ? NULL : planes,
                                 out_obj == Py_None ? NULL : &out, &split,
                                 detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    return PyBool_FromLong(split);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_bands_doc[] =
"session_bands(session) -> 'lead' or 'apart'\n"
"\n"
"How a split round's bands run: the first blocks of their pass's launch\n"
"(the exchange stream waits for their count in memory), or launches of\n"
"their own.";

PyObject *
cs_py_session_bands(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    return PyUnicode_FromString(cs_cuda_session_bands(box->x));
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_exchange_stream_doc[] =
"session_exchange_stream(session) -> stream\n"
"\n"
"The stream (a cudaStream_t as an int) that a queued round's exchange\n"
"goes on: it waits for the round's bands.";

PyObject *
cs_py_session_exchange_stream(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(
        (unsigned long long)(uintptr_t)cs_cuda_session_exchange_stream(
            box->x));
#else
    return cs_py_no_cuda_engine();
#endif
}

#ifdef CS_HAVE_CUDA
/* A session call that takes the session alone and may wait. */
static PyObject *
session_step(PyObject *capsule,
             cs_status (*call)(cs_cuda_session *, char *, size_t))
{
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    char detail[512] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = call(box->x, detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    Py_RETURN_NONE;
}
#endif

const char cs_py_session_wait_bands_doc[] =
"session_wait_bands(session)\n"
"\n"
"Wait for the bands of the round last queued (an exchange that the\n"
"host drives may start then).";

PyObject *
cs_py_session_wait_bands(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    return session_step(capsule, cs_cuda_session_wait_bands);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_exchanged_doc[] =
"session_exchanged(session)\n"
"\n"
"The exchange after a queued round is queued on the exchange stream (or\n"
"done): the next round waits for it.";

PyObject *
cs_py_session_exchanged(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    return session_step(capsule, cs_cuda_session_exchanged);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_view_doc[] =
"session_view(session) -> (ptr, strides, shape)\n"
"\n"
"The current grid's interior as a float64 device array (byte strides\n"
"and shape, 3D), valid until the next session call.";

PyObject *
cs_py_session_view(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    cs_darray view;
    ptrdiff_t shape[3];
    cs_cuda_session_view(box->x, &view, shape);
    return Py_BuildValue("K(nnn)(nnn)", (unsigned long long)(uintptr_t)
                         view.data, view.strides[0], view.strides[1],
                         view.strides[2], shape[0], shape[1], shape[2]);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_halo_doc[] =
"session_halo(session) -> (z, y, x)\n"
"\n"
"The current grid's halo widths (3D): around the interior that\n"
"session_view gives, the cells the engine refills before it reads\n"
"them.";

PyObject *
cs_py_session_halo(PyObject *self, PyObject *capsule)
{
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    if (box == NULL) {
        return NULL;
    }
    ptrdiff_t halo[3];
    cs_cuda_session_halo(box->x, halo);
    return Py_BuildValue("(nnn)", halo[0], halo[1], halo[2]);
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_copy_doc[] =
"session_copy(session, starts, sizes, buf_ptr, put)\n"
"\n"
"Copy the box at `starts` (3D, leading zeros) with extents `sizes` of\n"
"the current grid into the C-ordered float64 device buffer at buf_ptr,\n"
"or (put) the buffer into the box; returns when done.";

PyObject *
cs_py_session_copy(PyObject *self, PyObject *args)
{
    PyObject *capsule, *starts_obj, *sizes_obj;
    unsigned long long buf;
    int put;
    if (!PyArg_ParseTuple(args, "OOOKp:session_copy", &capsule, &starts_obj,
                          &sizes_obj, &buf, &put)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    ptrdiff_t starts[3], sizes[3];
    if (box == NULL || cs_py_parse_triple(starts_obj, "starts", starts) < 0
        || cs_py_parse_triple(sizes_obj, "sizes", sizes) < 0) {
        return NULL;
    }
    char detail[512] = "";
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_copy(box->x, starts, sizes,
                                  (void *)(uintptr_t)buf,
                                  put, detail, sizeof(detail));
    Py_END_ALLOW_THREADS
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    Py_RETURN_NONE;
#else
    return cs_py_no_cuda_engine();
#endif
}

const char cs_py_session_close_doc[] =
"session_close(session, out_ptr, out_strides) -> nonfinite\n"
"\n"
"Store the grid into the float64 device array at out_ptr (unless the\n"
"last round wrote its result there: session_run's out) and end the\n"
"session.  True when the input or the result held NaN or infinity:\n"
"the result is then not exact on tensor cores; run again without a\n"
"session.";

PyObject *
cs_py_session_close(PyObject *self, PyObject *args)
{
    PyObject *capsule, *strides_obj;
    unsigned long long out_ptr;
    if (!PyArg_ParseTuple(args, "OKO:session_close", &capsule, &out_ptr,
                          &strides_obj)) {
        return NULL;
    }
#ifdef CS_HAVE_CUDA
    session_box *box = open_session(capsule);
    ptrdiff_t strides[3];
    if (box == NULL
        || cs_py_parse_triple(strides_obj, "out_strides", strides) < 0) {
        return NULL;
    }
    cs_darray out = {(void *)(uintptr_t)out_ptr, CS_DTYPE_FLOAT64,
                     {strides[0], strides[1], strides[2]}};
    char detail[512] = "";
    int nonfinite = 0;
    cs_status status;
    Py_BEGIN_ALLOW_THREADS
    status = cs_cuda_session_close(box->x, &out, &nonfinite, detail,
                                   sizeof(detail));
    Py_END_ALLOW_THREADS
    cs_cuda_session_free(box->x);
    box->x = NULL;
    if (status != CS_OK) {
        cs_py_raise_status(status, "cuda", detail);
        return NULL;
    }
    return PyBool_FromLong(nonfinite);
#else
    return cs_py_no_cuda_engine();
#endif
}
