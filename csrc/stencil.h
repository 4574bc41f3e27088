/*
 * stencil.h -- the engine's shared vocabulary: status codes, boundary
 * modes, the stencil kernel (a dense float64 weight box), and temporal
 * fusion (composing a kernel with itself and planning the boundary band
 * that fused steps must recompute step by step).
 *
 * Every grid and kernel is handled as 3D with leading unit axes:
 * a 1D grid of n points is {1, 1, n}, a 2D grid of ny x nx is {1, ny, nx}.
 * Axis 0 is z (slowest), axis 2 is x (fastest, contiguous).
 *
 * No Python in here: module.c is the only CPython glue.
 */
#ifndef CS_STENCIL_H
#define CS_STENCIL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CS_MAX_NDIM 3

typedef enum cs_status {
    CS_OK = 0,
    CS_ERR_NOMEM = 1,       /* a host allocation failed */
    CS_ERR_INVALID = 2,     /* an argument the caller should have checked */
    CS_ERR_UNSUPPORTED = 3, /* valid, but this backend cannot run it */
    CS_ERR_CUDA = 4,        /* a CUDA call failed; see the backend's message */
    CS_ERR_NO_DEVICE = 5,   /* no usable GPU */
    CS_ERR_DEVICE_NOMEM = 6, /* a device allocation failed */
    CS_ERR_INTERRUPTED = 7   /* the caller's poll asked to stop */
} cs_status;

const char *
cs_status_string(cs_status status);

/*
 * A caller's way to stop a long run (a user's Ctrl-C) and to watch it
 * (a progress bar): the engines call poll(arg, steps_done) between steps
 * or passes, on the thread that called them, with the number of time
 * steps completed so far (on the GPU: queued so far), and when it
 * returns nonzero they free what they hold and return
 * CS_ERR_INTERRUPTED; `out` may then hold partial results, `in` is never
 * written.  poll runs as often as every step: it must be cheap (look at
 * a clock, and do real work only every tenth of a second or so).
 */
typedef struct cs_interrupt {
    int (*poll)(void *arg, long steps_done);
    void *arg;
} cs_interrupt;

/* Whether `intr` (NULL: never) asks to stop now, `steps_done` steps in. */
int
cs_interrupt_requested(const cs_interrupt *intr, long steps_done);

/* printf into msg (msg_len bytes); nothing when msg is NULL. */
void
cs_say(char *msg, size_t msg_len, const char *fmt, ...);

/* Boundary modes, with scipy.ndimage's names and meanings. */
typedef enum cs_mode {
    CS_MODE_CONSTANT = 0, /* k k k | a b c d | k k k   (k = cval)        */
    CS_MODE_WRAP = 1,     /* b c d | a b c d | a b c   (periodic)        */
    CS_MODE_NEAREST = 2,  /* a a a | a b c d | d d d                     */
    CS_MODE_REFLECT = 3,  /* c b a | a b c d | d c b   (half-sample)     */
    CS_MODE_MIRROR = 4    /* d c b | a b c d | c b a   (whole-sample)    */
} cs_mode;

#define CS_MODE_COUNT 5

/* cs_extend_index, the boundary index map, and the other functions
   that host and device share */
#include "host_device.h"

/* The GPU engine's paths (cuda_engine.h; here so that every build can
   name them to Python). */
typedef enum cs_cuda_path {
    CS_CUDA_PATH_AUTO = 0,        /* the path plan.c picks for the
                                     kernel (cs_plan_make) */
    CS_CUDA_PATH_TENSOR_CORE = 1, /* dual tessellation on FP64 MMA */
    CS_CUDA_PATH_CUDA_CORE = 2    /* shared-memory tiled direct stencil */
} cs_cuda_path;

/* Element types a grid may arrive in (the engines compute in float64;
   convstencil._core exports the codes as DTYPE_*). */
typedef enum cs_dtype {
    CS_DTYPE_FLOAT64 = 0,
    CS_DTYPE_FLOAT32,
    CS_DTYPE_FLOAT16,
    CS_DTYPE_BFLOAT16,
    CS_DTYPE_INT8,
    CS_DTYPE_INT16,
    CS_DTYPE_INT32,
    CS_DTYPE_INT64,
    CS_DTYPE_UINT8,
    CS_DTYPE_UINT16,
    CS_DTYPE_UINT32,
    CS_DTYPE_UINT64,
    CS_DTYPE_BOOL,
    CS_DTYPE_COUNT
} cs_dtype;

/* A stencil kernel: an owned, dense, C-ordered box of float64 weights. */
typedef struct cs_kernel {
    int ndim;              /* 1..3: the user's dimensionality */
    ptrdiff_t size[3];     /* odd extents; unused leading axes are 1 */
    double *weights;       /* size[0]*size[1]*size[2] values, owned */
} cs_kernel;

/* Copy `weights` (extents `size`, ndim of them, C order) into `k`. */
cs_status
cs_kernel_init(cs_kernel *k, int ndim, const ptrdiff_t *size,
               const double *weights);

/* Release k's weights; safe on a zeroed or already freed kernel. */
void
cs_kernel_free(cs_kernel *k);

ptrdiff_t
cs_kernel_count(const cs_kernel *k);

/* (size[axis] - 1) / 2 */
ptrdiff_t
cs_kernel_radius(const cs_kernel *k, int axis);

/*
 * The kernel whose single application equals `k` applied `times` times
 * (times >= 1): the full convolution of k with itself, radius times*r.
 * `out` must be zeroed or freed; the caller frees it.
 */
cs_status
cs_kernel_compose(const cs_kernel *k, int times, cs_kernel *out);

/*
 * Temporal fusion plan.  `depth` steps are fused into one pass with the
 * composed kernel; `passes` such passes run first, then `remainder`
 * single steps.  Near an edge, fused composition differs from stepping
 * for every mode but wrap: an output within band[a] = (depth-1)*r[a] of
 * either edge along axis a must be recomputed step by step, which reads
 * the input strip of width strip[a] = (2*depth-1)*r[a] along that edge.
 */
typedef struct cs_fusion_plan {
    int depth;
    long passes;
    long remainder;
    int needs_band;        /* 0 for wrap or depth 1 */
    ptrdiff_t band[3];
    ptrdiff_t strip[3];
} cs_fusion_plan;

/*
 * The deepest fusion whose composed kernel fits max_side[a] along every
 * axis a (a side of 1 always fits) and at most `steps` deep, reduced
 * until the grid holds the band fix-up's two edge strips on every banded
 * axis (shape[a] >= 2*strip[a]).  max_side entries must be odd and >= 1.
 */
cs_status
cs_fusion_plan_make(const cs_kernel *k, long steps, cs_mode mode,
                    const ptrdiff_t shape[3], const ptrdiff_t max_side[3],
                    cs_fusion_plan *plan);

/* What a run did, reported to Python as last_run_info(). */
typedef struct cs_run_info {
    const char *backend;   /* "cpu", "cpu-tc", "cuda" */
    const char *path;      /* e.g. "direct", "tensor-core", "cuda-core" */
    int fused_depth;
    long fused_passes;
    long unfused_steps;
    int threads;
    double device_seconds; /* the step loop's time on the GPU (CUDA events,
                              no transfers); < 0 where not measured */
    int nonfinite;         /* 1: NaN or infinite values were met and the
                              path that keeps them where SciPy does ran;
                              0: none were met; -1: not known (not
                              checked, or the call returned before) */
} cs_run_info;

#ifdef __cplusplus
}
#endif

#endif /* CS_STENCIL_H */
