/*
 * cuda_engine.h -- the GPU engine's plain C API (implemented in the .cu
 * files of this folder; compiled only when nvcc is found).
 *
 * Data flow of one call: the grid is read once into a padded device
 * grid (from host memory through pinned staging, cs_cuda_apply; or
 * straight from the caller's device array, of any real dtype and
 * strides, cs_cuda_apply_device), the whole step loop runs on the
 * device with ping-pong buffers (halo fill, fused passes, band fix-up,
 * unfused remainder), and the result is written once.  Streams, events,
 * staging and device memory are kept between calls (resources.cu);
 * cs_cuda_clear_cache releases them.  Every CUDA call is checked; on
 * any failure a message naming the failing kernel or call is written to
 * `err` and nothing is left half-held.
 */
#ifndef CS_CUDA_ENGINE_H
#define CS_CUDA_ENGINE_H

#include "../scheme.h"
#include "../stencil.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif


/*
 * Number of visible CUDA devices (>= 0), or -1 when the runtime cannot
 * be queried; `msg` gets a one-line description ("NVIDIA H100 80GB HBM3,
 * sm_90" or why none is usable).
 */
int
cs_cuda_device_count(char *msg, size_t msg_len);

/*
 * The current device's facts the planner reads (csrc/plan.h's cs_caps):
 * compute capability major, multiprocessors, the shared memory a block
 * may opt in to (bytes), and the architecture of the kernel image the
 * device runs (90: compiled from compute_90; kernels.cuh says what an
 * older image leaves out); cached per device.  CS_OK, or
 * CS_ERR_NO_DEVICE / CS_ERR_CUDA with the reason in `msg`.
 */
cs_status
cs_cuda_device_caps(int *cc_major, int *sms, int *smem_optin,
                    int *image_arch, char *msg, size_t msg_len);

/*
 * The calling thread's current CUDA device (cudaGetDevice) in `*device`;
 * CS_OK, or CS_ERR_NO_DEVICE / CS_ERR_CUDA with the reason in `msg`.
 */
cs_status
cs_cuda_current_device(int *device, char *msg, size_t msg_len);

/*
 * Makes visible device `device` (0 to count - 1) current for the calling
 * thread (cudaSetDevice): every later engine call from this thread runs
 * there.  CS_ERR_INVALID names the visible range for a device out of it.
 */
cs_status
cs_cuda_set_device(int device, char *msg, size_t msg_len);

/*
 * Waits for the work queued so far on `stream` (a cudaStream_t as an
 * integer; 1 is the legacy default stream, as in the CUDA Array
 * Interface): CS_OK, or CS_ERR_CUDA with the reason in `msg`.
 */
cs_status
cs_cuda_stream_synchronize(uintptr_t stream, char *msg, size_t msg_len);
/*
 * CUDA IPC on one host (peer.cu), for the distributed layer's "cuda-ipc"
 * transport.  cs_cuda_ipc_export: the allocation holding device pointer
 * `ptr` (its `base` and `size`) and the handle another process opens it
 * by.  cs_cuda_ipc_open: that allocation mapped here (`base`) and the
 * device that holds it, as this process numbers its devices; close it
 * with cs_cuda_ipc_close.  cs_cuda_can_access_peer: whether kernels and
 * copies of `device` reach `peer`'s memory directly (1 for the same
 * device).  CS_OK, or CS_ERR_CUDA / CS_ERR_INVALID / CS_ERR_UNSUPPORTED
 * with the reason in `msg`.
 */
#define CS_IPC_HANDLE_BYTES 64

cs_status
cs_cuda_ipc_export(uintptr_t ptr, unsigned char handle[CS_IPC_HANDLE_BYTES],
                   uintptr_t *base, size_t *size, char *msg, size_t msg_len);

cs_status
cs_cuda_ipc_open(const unsigned char handle[CS_IPC_HANDLE_BYTES],
                 uintptr_t *base, int *device, char *msg, size_t msg_len);

cs_status
cs_cuda_ipc_close(uintptr_t base, char *msg, size_t msg_len);

cs_status
cs_cuda_can_access_peer(int device, int peer, int *can, char *msg,
                        size_t msg_len);

/*
 * n (at most CS_MAX_COPIES) copies of bytes[i] from src[i] to dst[i]
 * (device pointers, this process's or opened ones), each on a stream of
 * its own so that the copy engines move them at once, after the work
 * queued on the legacy default stream; complete on return.
 */
#define CS_MAX_COPIES 16

cs_status
cs_cuda_copies(int n, const uintptr_t *dst, const uintptr_t *src,
               const size_t *bytes, char *msg, size_t msg_len);

/*
 * dst = src for two float64 device views of `shape` (3D, leading unit
 * axes) with byte strides, as one pitched copy on the legacy default
 * stream, complete on return; CS_ERR_UNSUPPORTED (nothing done, no
 * message) where a view is not rows of unit stride with its planes a
 * whole number of rows apart.
 */
cs_status
cs_cuda_copy_pitched(void *dst, const ptrdiff_t dst_strides[3],
                     const void *src, const ptrdiff_t src_strides[3],
                     const ptrdiff_t shape[3], char *msg, size_t msg_len);

/* Wait for every stream's work on the current device. */
cs_status
cs_cuda_device_synchronize(char *msg, size_t msg_len);

/*
 * cudaMemGetInfo of the current device: CS_OK, or CS_ERR_NO_DEVICE /
 * CS_ERR_CUDA with the reason in `msg`.
 */
cs_status
cs_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, char *msg,
                 size_t msg_len);

/*
 * Host arrays in, host array out, same contract as cs_cpu_apply.
 * `in` and `out` may alias.  `intr` (may be NULL) is polled before each
 * pass; when it asks to stop, `out` is left as it was.  Returns once
 * `out` holds the result.
 */
cs_status
cs_cuda_apply(const double *in, double *out, const ptrdiff_t shape[3],
              const cs_kernel *kernel, cs_mode mode, double cval,
              long steps, cs_cuda_path path, cs_run_info *info,
              const cs_interrupt *intr, char *err, size_t err_len);

/*
 * An array in device memory: element (z, y, x) of the 3D view (leading
 * unit axes, as every grid here) at data + z*strides[0] + y*strides[1]
 * + x*strides[2] bytes; strides may be negative, and must be multiples
 * of the element size.
 */
typedef struct cs_darray {
    void *data;
    cs_dtype dtype;
    ptrdiff_t strides[3];
} cs_darray;

/*
 * Streams of a device call.  The engine first waits (on the device) for
 * the work queued so far on each nonzero `wait` stream: the producers of
 * `in` and `out` (CUDA Array Interface v3, or the stream named in a
 * DLPack exchange; 1 and 2 are the legacy and per-thread default
 * streams).  With `run` == 0 the work runs on the engine's own stream
 * and the call returns when it is complete; otherwise it is queued on
 * the stream `run` and the call returns at once (the result is valid in
 * that stream's order; device_seconds is not measured).
 */
typedef struct cs_cuda_streams {
    uintptr_t wait[2];
    uintptr_t run;
} cs_cuda_streams;

/*
 * Device array in, float64 device array out (any strides; it may be
 * `in` itself): the same computation as cs_cuda_apply, with no host
 * copy.  Both must be in memory of the current device: CS_ERR_INVALID
 * with a message naming the devices otherwise.
 */
cs_status
cs_cuda_apply_device(const cs_darray *in, const cs_darray *out,
                     const ptrdiff_t shape[3], const cs_kernel *kernel,
                     cs_mode mode, double cval, long steps,
                     cs_cuda_path path, const cs_cuda_streams *streams,
                     cs_run_info *info, const cs_interrupt *intr, char *err,
                     size_t err_len);

/*
 * A PDE scheme (scheme.h) advanced `steps` steps on device arrays of the
 * current device: in[f], out[f] (field f) and params[q] are float64
 * C-contiguous arrays of extents shape[0..2] (leading 1s for 1D and 2D).
 * The outs are distinct; an out may be an in (its own field's: in
 * place, or another's: time levels swapped), any other overlap is
 * CS_ERR_INVALID; an in that is no out is never written.  Each stage of
 * each step is one pass over the grid (scheme.cu); an update that is
 * another field unchanged only renames buffers.  Scratch arrays (at most
 * K + 1) come from the engine's kept device memory.  `stream` 0: the
 * engine's own stream, after the work queued so far on the legacy
 * default stream, and the call returns when the outs hold the result
 * (info->device_seconds measured); otherwise the work is queued on
 * `stream` and the call returns at once.  `intr` is polled before each
 * step; when it stops the run, the outs may hold partial results.
 */
cs_status
cs_cuda_scheme_apply_device(const cs_scheme *s, double *const *in,
                            double *const *out, const double *const *params,
                            const ptrdiff_t shape[3], cs_mode mode,
                            double cval, long steps, uintptr_t stream,
                            cs_run_info *info, const cs_interrupt *intr,
                            char *err, size_t err_len);

/*
 * Copy `bytes` between host memory and device memory of the current
 * device, through the engine's pinned staging (both directions
 * complete on return).
 */
cs_status
cs_cuda_copy_to_device(void *dst, const void *src, size_t bytes, char *err,
                       size_t err_len);
cs_status
cs_cuda_copy_to_host(void *dst, const void *src, size_t bytes, char *err,
                     size_t err_len);

/*
 * Device memory for arrays the engine hands out (cudaMalloc on the
 * current device; checked against its free memory first).
 */
cs_status
cs_cuda_malloc(void **ptr, size_t bytes, int *device, char *err,
               size_t err_len);
void
cs_cuda_free(void *ptr);

/* Free the memory kept between calls; returns the device bytes freed. */
size_t
cs_cuda_clear_cache(void);

/* What is kept: idle device bytes and blocks, pinned bytes, lanes. */
void
cs_cuda_cache_info(size_t *device_bytes, int *blocks, size_t *pinned_bytes,
                   int *lanes);

/*
 * A session (session.cu): a 2D or 3D grid loaded once into the engine's
 * padded layout, advanced in rounds of `round_steps` (one plan), read
 * and written by the caller between rounds through a strided view of its
 * interior, stored once.  Every call runs on the current device, which
 * must stay the one the session was opened on.  Closing reports whether
 * the input or the result held a value that is not finite (the caller
 * then runs again without a session, on the masked path).  Free with
 * cs_cuda_session_free on every path, closed or not.
 */
typedef struct cs_cuda_session cs_cuda_session;

/* The grid is `shape`; `in` (extents `box`) is loaded at `at` in it,
   the rest left for the caller to write before the first round (box =
   shape, at = 0: the whole grid).  ends > 0: where the passes can, only
   `ends` planes at each end of the box along the first axis (rows of a
   2D grid) are loaded, and the first round reads the rest from `in`,
   which must then stay as it is until that round is done; before it,
   the box's other cells are in the grid for cs_cuda_session_copy (which
   loads them first) but not through cs_cuda_session_view. */
cs_status
cs_cuda_session_open(const cs_darray *in, const ptrdiff_t shape[3],
                     const ptrdiff_t at[3], const ptrdiff_t box[3],
                     const cs_kernel *kernel, cs_mode mode, double cval,
                     long round_steps, cs_cuda_path path, ptrdiff_t ends,
                     cs_cuda_session **out, char *err, size_t err_len);

/* One round.  bands NULL: returns when it is done.  Else it is queued
   and returns at once: the last pass writes bands[0] and bands[1] planes
   at the ends of the box along the grid's first axis first, where it
   can (*split = 1; session.cu), and the exchange stream waits for them
   (else for the whole round); the caller then exchanges (queued on the
   exchange stream, or after cs_cuda_session_wait_bands) and calls
   cs_cuda_session_exchanged, which the next round waits for.
   out non-NULL (bands NULL): the last round, whose result goes into
   `out`, a float64 device array of the grid's shape: written by its last
   pass where the passes take windows (the box along the first axis, the
   rest of `out` left as it was), else stored whole; no round may follow,
   and cs_cuda_session_close must be given the same array. */
cs_status
cs_cuda_session_run(cs_cuda_session *x, const ptrdiff_t *bands,
                    const cs_darray *out, int *split, char *err,
                    size_t err_len);

/* The stream (a cudaStream_t) a split round's exchange is queued on. */
void *
cs_cuda_session_exchange_stream(const cs_cuda_session *x);

/* Wait on the host for the bands of the round last queued. */
cs_status
cs_cuda_session_wait_bands(cs_cuda_session *x, char *err, size_t err_len);

/* The exchange is queued on the exchange stream (or done): the next
   round waits for it. */
cs_status
cs_cuda_session_exchanged(cs_cuda_session *x, char *err, size_t err_len);

/* How a split round's bands run: "lead" (the first blocks of their
   pass's launch, counted in memory) or "apart" (launches of their own:
   CONVSTENCIL_SPLIT_BANDS=apart, a driver without stream waits on
   memory, or one that refused one). */
const char *
cs_cuda_session_bands(const cs_cuda_session *x);

/* The path the session's plan runs ("tensor-core" or "cuda-core"). */
const char *
cs_cuda_session_path(const cs_cuda_session *x);

/* The current grid's interior (float64, byte strides) and its shape. */
void
cs_cuda_session_view(const cs_cuda_session *x, cs_darray *view,
                     ptrdiff_t shape[3]);

/* The current grid's halo widths (z, y, x): with its strides, the layout
   of the memory around the interior that a whole-plane copy crosses. */
void
cs_cuda_session_halo(const cs_cuda_session *x, ptrdiff_t halo[3]);

/* Copy the box [starts, starts + sizes) of the current grid into the
   C-ordered device buffer `buf` (put = 0), or `buf` into the box (put =
   1); returns when done. */
cs_status
cs_cuda_session_copy(cs_cuda_session *x, const ptrdiff_t starts[3],
                     const ptrdiff_t sizes[3], void *buf, int put,
                     char *err, size_t err_len);

/* Store the grid into the float64 device array `out` (the grid's shape),
   unless the last round wrote its result there (then `out` must be that
   array); *nonfinite: the input or the result held NaN or infinity. */
cs_status
cs_cuda_session_close(cs_cuda_session *x, const cs_darray *out,
                      int *nonfinite, char *err, size_t err_len);

void
cs_cuda_session_free(cs_cuda_session *x);

#ifdef __cplusplus
}
#endif

#endif /* CS_CUDA_ENGINE_H */
