/*
 * plan_glue.c -- convstencil._core.plan (plan_glue.h).
 *
 * The weights arrive through the buffer protocol (a float64 C-contiguous
 * array of the grid's ndim), so this file needs no NumPy C API.
 */
#include "plan_glue.h"

#include "plan.h"
#include "cpu/cpu_engine.h"
#include "cpu/threads.h"

#include <string.h>

const char cs_py_plan_doc[] =
    "plan(shape, weights, mode, steps, path, cc_major=9, max_depth=0,\n"
    "     smem_optin=0) -> dict\n"
    "\n"
    "The GPU engine's plan for `steps` steps of `weights` (a float64\n"
    "C-contiguous array, ndim = len(shape)) on a grid of `shape` under\n"
    "boundary mode code `mode`, on path code `path` (PATH_*), for a device\n"
    "of compute capability `cc_major` with the fused depth capped at\n"
    "`max_depth` (0: no cap; CONVSTENCIL_CUDA_MAX_DEPTH), whose blocks may\n"
    "opt in to `smem_optin` bytes of shared memory (0: as many as any pass\n"
    "takes, as on compute capability 9).  The dict names\n"
    "the path, the pass kind, the band fix-up, the fused depth, passes and\n"
    "unfused steps (tail_pass: run as one pass of their own depth), the\n"
    "band widths and the fused kernel's limits per axis\n"
    "(3D order: z, y, x), and a 1D grid's fold.  ValueError when the path\n"
    "cannot run the kernel.  The CPU emulation (\"cpu-tc\") runs the plan\n"
    "of path PATH_TENSOR_CORE on cc_major 9.";

static PyObject *
triple(const ptrdiff_t v[3])
{
    return Py_BuildValue("(nnn)", (Py_ssize_t)v[0], (Py_ssize_t)v[1],
                         (Py_ssize_t)v[2]);
}

/* shape (a tuple of 1 to 3 positive ints) as 3D extents; -1 on error. */
static int
parse_shape(PyObject *obj, ptrdiff_t shape[3], int *ndim)
{
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) < 1
        || PyTuple_GET_SIZE(obj) > 3) {
        PyErr_SetString(PyExc_ValueError,
                        "plan: shape must be a tuple of 1 to 3 ints");
        return -1;
    }
    *ndim = (int)PyTuple_GET_SIZE(obj);
    shape[0] = shape[1] = shape[2] = 1;
    for (int a = 0; a < *ndim; a++) {
        const Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, a));
        if (n == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (n < 1) {
            PyErr_SetString(PyExc_ValueError,
                            "plan: every extent of shape must be >= 1");
            return -1;
        }
        shape[3 - *ndim + a] = n;
    }
    return 0;
}

/* The weights buffer as a kernel (owned copy) of `ndim` axes (0: the
   buffer's own, 1 to 3); -1 on error. */
static int
parse_weights(PyObject *obj, int ndim, cs_kernel *k)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
        < 0) {
        return -1;
    }
    int rc = -1;
    ptrdiff_t size[3];
    if (ndim == 0 && view.ndim >= 1 && view.ndim <= 3) {
        ndim = view.ndim;
    }
    if (view.format == NULL || strcmp(view.format, "d") != 0
        || view.ndim != ndim) {
        PyErr_Format(PyExc_ValueError,
                     "plan: weights must be float64 with the grid's ndim "
                     "(%d)",
                     ndim);
        goto done;
    }
    for (int a = 0; a < ndim; a++) {
        size[a] = view.shape[a];
        if (size[a] < 1 || size[a] % 2 == 0) {
            PyErr_SetString(PyExc_ValueError,
                            "plan: weights must have an odd size on every "
                            "axis");
            goto done;
        }
    }
    if (cs_kernel_init(k, ndim, size, (const double *)view.buf) != CS_OK) {
        PyErr_NoMemory();
        goto done;
    }
    rc = 0;
done:
    PyBuffer_Release(&view);
    return rc;
}

static PyObject *
plan_to_dict(const cs_plan *p)
{
    PyObject *band = triple(p->fusion.band);
    PyObject *strip = triple(p->fusion.strip);
    PyObject *side = triple(p->max_side);
    PyObject *run = triple(p->run_shape);
    PyObject *d = NULL;
    if (band != NULL && strip != NULL && side != NULL && run != NULL) {
        d = Py_BuildValue(
            "{s:s,s:s,s:s,s:i,s:l,s:l,s:O,s:O,s:O,s:O,s:O,s:n,s:O}",
            "path",
            p->path == CS_CUDA_PATH_TENSOR_CORE ? "tensor-core"
                                                : "cuda-core",
            "pass", cs_pass_kind_name(p->pass), "band",
            cs_band_kind_name(p->band), "fused_depth", p->fusion.depth,
            "fused_passes", p->fusion.passes, "unfused_steps",
            p->fusion.remainder, "band_widths", band, "strip_widths", strip,
            "max_side", side, "run_shape", run, "fold",
            p->fold ? Py_True : Py_False, "fold_width",
            (Py_ssize_t)p->fold_width, "tail_pass",
            p->tail_pass ? Py_True : Py_False);
    }
    Py_XDECREF(band);
    Py_XDECREF(strip);
    Py_XDECREF(side);
    Py_XDECREF(run);
    return d;
}

PyObject *
cs_py_plan(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "weights", "mode", "steps", "path",
                               "cc_major", "max_depth", "smem_optin",
                               NULL};
    PyObject *shape_obj, *weights_obj;
    int mode, path, cc_major = 9;
    long steps, max_depth = 0;
    Py_ssize_t smem_optin = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOili|iln", keywords,
                                     &shape_obj, &weights_obj, &mode, &steps,
                                     &path, &cc_major, &max_depth,
                                     &smem_optin)) {
        return NULL;
    }
    ptrdiff_t shape[3];
    int ndim = 0;
    cs_kernel k = {0};
    if (parse_shape(shape_obj, shape, &ndim) < 0
        || parse_weights(weights_obj, ndim, &k) < 0) {
        return NULL;
    }
    if (steps < 0 || mode < 0 || mode >= CS_MODE_COUNT || max_depth < 0
        || smem_optin < 0
        || (path != CS_CUDA_PATH_AUTO && path != CS_CUDA_PATH_TENSOR_CORE
            && path != CS_CUDA_PATH_CUDA_CORE)) {
        cs_kernel_free(&k);
        PyErr_SetString(PyExc_ValueError,
                        "plan: steps, max_depth and smem_optin must be "
                        ">= 0, mode and path known codes");
        return NULL;
    }
    cs_caps caps;
    memset(&caps, 0, sizeof(caps));
    caps.cc_major = cc_major;
    caps.max_depth = max_depth;
    caps.smem_optin = (size_t)smem_optin;
    cs_plan p;
    char msg[256] = "";
    const cs_status st =
        cs_plan_make(&k, shape, (cs_mode)mode, steps, (cs_cuda_path)path,
                     &caps, &p, msg, sizeof(msg));
    cs_kernel_free(&k);
    if (st != CS_OK) {
        PyErr_Format(PyExc_ValueError, "plan: %s",
                     msg[0] ? msg : cs_status_string(st));
        return NULL;
    }
    return plan_to_dict(&p);
}

const char cs_py_plan_cpu_doc[] =
    "plan_cpu(shape, weights, mode, steps, threads=0, in_place=False)\n"
    "    -> dict\n"
    "\n"
    "What the CPU engine runs for `steps` steps of `weights` (a float64\n"
    "C-contiguous array, ndim = len(shape)) on a grid of `shape` under\n"
    "boundary mode code `mode` (csrc/cpu/cpu_engine.h, cs_cpu_plan_make:\n"
    "the function the engine's run calls): path, threads (threads > 0:\n"
    "that many; 0: the engine's own choice, which reads the machine's\n"
    "load now), fused_depth and passes (the blocked path's steps per\n"
    "pass and its passes; the direct path: 1 and steps), run_shape and\n"
    "radius (the engine's 3D view: a 2D grid runs as (ny, 1, nx)), tile\n"
    "and tiles (blocked), ntaps, separable, row_taps (multiply-adds a\n"
    "point and step), computed and loaded (blocked: points computed a\n"
    "step and loaded a pass per output point), ring_bytes, ring_spills,\n"
    "buffer_bytes (direct: each padded buffer), temp_grid.";

PyObject *
cs_py_plan_cpu(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "weights", "mode", "steps",
                               "threads", "in_place", NULL};
    PyObject *shape_obj, *weights_obj;
    int mode, threads = 0, in_place = 0;
    long steps;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOil|ip", keywords,
                                     &shape_obj, &weights_obj, &mode, &steps,
                                     &threads, &in_place)) {
        return NULL;
    }
    ptrdiff_t shape[3];
    int ndim = 0;
    cs_kernel k = {0};
    if (parse_shape(shape_obj, shape, &ndim) < 0
        || parse_weights(weights_obj, ndim, &k) < 0) {
        return NULL;
    }
    if (steps < 0 || mode < 0 || mode >= CS_MODE_COUNT || threads < 0) {
        cs_kernel_free(&k);
        PyErr_SetString(PyExc_ValueError,
                        "plan_cpu: steps and threads must be >= 0, mode a "
                        "known code");
        return NULL;
    }
    cs_cpu_plan p;
    cs_status st = cs_cpu_plan_make(shape, &k, (cs_mode)mode, steps, threads,
                                    in_place, &p);
    cs_kernel_free(&k);
    if (st != CS_OK) {
        if (st == CS_ERR_NOMEM) {
            return PyErr_NoMemory();
        }
        PyErr_Format(PyExc_ValueError, "plan_cpu: %s", cs_status_string(st));
        return NULL;
    }
    PyObject *run = triple(p.run_shape);
    PyObject *radius = triple(p.radius);
    PyObject *tile = triple(p.tile);
    PyObject *tiles = triple(p.tiles);
    PyObject *d = NULL;
    if (run != NULL && radius != NULL && tile != NULL && tiles != NULL) {
        d = Py_BuildValue(
            "{s:s,s:i,s:i,s:l,s:O,s:O,s:O,s:O,s:i,s:i,s:d,s:d,s:d,s:d,s:O,"
            "s:d,s:O}",
            "path", p.blocked ? "direct-temporal-blocked" : "direct",
            "threads", p.threads, "fused_depth", p.depth, "passes",
            p.passes, "run_shape", run, "radius", radius, "tile", tile,
            "tiles", tiles, "ntaps", p.ntaps, "separable", p.separable,
            "row_taps", p.row_taps, "computed", p.computed, "loaded",
            p.loaded, "ring_bytes", p.ring_bytes, "ring_spills",
            p.ring_spills ? Py_True : Py_False, "buffer_bytes",
            p.buffer_bytes, "temp_grid", p.temp_grid ? Py_True : Py_False);
    }
    Py_XDECREF(run);
    Py_XDECREF(radius);
    Py_XDECREF(tile);
    Py_XDECREF(tiles);
    return d;
}

int
cs_py_plan_add_constants(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "TC_MAX_SIDE", CS_TC_MAX_SIDE) < 0
        || PyModule_AddIntConstant(module, "TC_MAX_SIDE_1D",
                                   CS_TC_MAX_SIDE_1D)
               < 0
        || PyModule_AddIntConstant(module, "TC3D_MAX_KZ", CS_TC3D_MAX_KZ)
               < 0
        || PyModule_AddIntConstant(module, "BARRIER_SPIN_NS",
                                   CS_BARRIER_SPIN_NS)
               < 0
        || PyModule_AddObject(module, "THREADS_MIN_WORK",
                              PyFloat_FromDouble(CS_THREADS_MIN_WORK))
               < 0
        || PyModule_AddObject(module, "THREADS_MIN_CALL_WORK",
                              PyFloat_FromDouble(CS_THREADS_MIN_CALL_WORK))
               < 0
        || PyModule_AddObject(module, "THREADS_BUSY_WORK",
                              PyFloat_FromDouble(CS_THREADS_BUSY_WORK))
               < 0
        || PyModule_AddObject(module, "THREADS_POINT_TAPS",
                              PyFloat_FromDouble(CS_THREADS_POINT_TAPS))
               < 0) {
        return -1;
    }
    return 0;
}

const char cs_py_kernel_taps_doc[] =
    "kernel_taps(weights) -> dict\n"
    "\n"
    "The tap-set tests of plan.c and host_device.h for `weights` (a\n"
    "float64 C-contiguous array of 1 to 3 axes): `cc2d` and `cc3d`, the\n"
    "tap set those kernels would run it as (\"box\", \"plus\", \"rank1\",\n"
    "\"diamond\"; None where they do not run it); `plus`, whether a square\n"
    "planar kernel has weights on its centre row and column only; `outer`,\n"
    "whether the kernel as rows (every axis but the last) by columns (the\n"
    "last) is an outer product within 4 ulp.  The performance model reads\n"
    "these rather than testing the weights again.";

static PyObject *
name_or_none(const char *name)
{
    if (name == NULL) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(name);
}

PyObject *
cs_py_kernel_taps(PyObject *self, PyObject *weights)
{
    (void)self;
    cs_kernel k = {0};
    if (parse_weights(weights, 0, &k) < 0) {
        return NULL;
    }
    const int size[3] = {(int)k.size[0], (int)k.size[1], (int)k.size[2]};
    const int c2 = cs_cc2d_taps(size, k.weights);
    const int c3 = cs_cc3d_taps(size, k.weights);
    const int plus =
        size[0] == 1 && size[1] == size[2] && cs_taps_plus(size[2], k.weights);
    const ptrdiff_t count = cs_kernel_count(&k);
    const int rows = (int)(count / k.size[2]), cols = size[2];
    double *scratch = (double *)PyMem_Malloc(
        (size_t)(rows + cols) * sizeof(double));
    if (scratch == NULL) {
        cs_kernel_free(&k);
        return PyErr_NoMemory();
    }
    const int outer =
        cs_outer_factors(rows, cols, k.weights, scratch, scratch + rows);
    PyMem_Free(scratch);
    cs_kernel_free(&k);
    static const char *const cc2d_names[] = {"box", "plus", "rank1"};
    static const char *const cc3d_names[] = {"box", "diamond"};
    PyObject *n2 = name_or_none(c2 >= 0 ? cc2d_names[c2] : NULL);
    PyObject *n3 = name_or_none(c3 >= 0 ? cc3d_names[c3] : NULL);
    PyObject *d = NULL;
    if (n2 != NULL && n3 != NULL) {
        d = Py_BuildValue("{s:O,s:O,s:O,s:O}", "cc2d", n2, "cc3d", n3,
                          "plus", plus ? Py_True : Py_False, "outer",
                          outer ? Py_True : Py_False);
    }
    Py_XDECREF(n2);
    Py_XDECREF(n3);
    return d;
}

const char cs_py_barrier_spin_doc[] =
    "barrier_spin(ns=None) -> int\n"
    "\n"
    "How long a thread of the CPU engines spins at a step barrier before\n"
    "it sleeps, in nanoseconds (< 0: until released; 0: sleeps at once);\n"
    "with `ns`, set it first.  The default follows OMP_WAIT_POLICY as\n"
    "the process started with it (csrc/cpu/threads.h); convstencil sets\n"
    "it from the policy the user gave.";

PyObject *
cs_py_barrier_spin(PyObject *self, PyObject *args)
{
    PyObject *ns = Py_None;
    if (!PyArg_ParseTuple(args, "|O:barrier_spin", &ns)) {
        return NULL;
    }
    if (ns != Py_None) {
        long v = PyLong_AsLong(ns);
        if (v == -1 && PyErr_Occurred()) {
            return NULL;
        }
        cs_barrier_set_spin(v < 0 ? -1 : v);
    }
    return PyLong_FromLong(cs_barrier_spin());
}

const char cs_py_threads_fit_doc[] =
    "threads_fit(ceiling, idle, work, per_thread, close) -> int\n"
    "\n"
    "The CPU engines' rule for a thread count not requested\n"
    "(csrc/cpu/threads.h, cs_threads_fit): at most `ceiling` threads,\n"
    "each with `per_thread` of the `work`, and for a `close` region (one\n"
    "whose barriers are close) no more than `idle` (< 0: not known).";

PyObject *
cs_py_threads_fit(PyObject *self, PyObject *args)
{
    int ceiling, idle, close;
    double work, per_thread;
    if (!PyArg_ParseTuple(args, "iiddp:threads_fit", &ceiling, &idle, &work,
                          &per_thread, &close)) {
        return NULL;
    }
    return PyLong_FromLong(
        cs_threads_fit(ceiling, idle, work, per_thread, close));
}

const char cs_py_threads_idle_doc[] =
    "threads_idle() -> int\n"
    "\n"
    "The cores that the machine's other runnable threads leave idle now,\n"
    "or -1 where the engine does not look (csrc/cpu/threads.h,\n"
    "cs_threads_idle).";

PyObject *
cs_py_threads_idle(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(cs_threads_idle());
}
