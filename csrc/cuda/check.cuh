/*
 * check.cuh -- error handling for the CUDA engine, llm.c style but
 * without exit(): every CUDA call and kernel launch is checked, and a
 * failure writes "what failed: cudaGetErrorString" into the caller's
 * message buffer and returns a cs_status.  Nothing here ever aborts the
 * process (it may be a user's notebook kernel).
 *
 * A cs_cuda_ctx travels through every launcher: the stream all work is
 * queued on and the message buffer.  With CONVSTENCIL_CUDA_SYNC=1 in the
 * environment, each launch is followed by a stream synchronization, so
 * an asynchronous fault (an illegal address, say) is reported under the
 * name of the kernel that caused it rather than at the next copy.  With
 * CONVSTENCIL_CUDA_POISON=1, device memory is filled with NaN (all bits
 * set) when allocated, so a result element no kernel wrote shows up as
 * NaN instead of as a stale value that happens to be right.  With
 * CONVSTENCIL_CUDA_MAX_DEPTH=k (an integer >= 1), every path fuses at
 * most k time steps per pass, for measuring what temporal fusion buys
 * (engine.cu parses it into the plan's capabilities, plan.c applies it);
 * any other value fails the call with CS_ERR_INVALID.
 */
#ifndef CS_CUDA_CHECK_CUH
#define CS_CUDA_CHECK_CUH

#include <cuda_runtime.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../stencil.h"

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

typedef struct cs_cuda_ctx {
    cudaStream_t stream;
    int sync_each_launch; /* debugging: name the kernel that faults */
    int poison_memory;    /* testing: fill new device memory with NaN */
    char *err;            /* message buffer, may be NULL */
    size_t err_len;
    /* the device's facts (resources.cu reads them once per device) */
    int device;           /* the current device, which the call runs on */
    int sms;              /* multiprocessors */
    int smem_optin;       /* shared memory (bytes) a block may opt into */
    int cc_major;         /* compute capability, major */
    int image_arch;       /* the architecture the device's kernel image
                             was compiled for (90: from compute_90) */
    const cs_interrupt *intr; /* the caller's stop request, polled per
                                 pass (may be NULL) */
} cs_cuda_ctx;

/* printf into the context's message buffer (the first failure wins). */
static inline void
cs_cuda_message(cs_cuda_ctx *ctx, const char *fmt, ...)
{
    if (ctx->err == NULL || ctx->err_len == 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, ctx->err_len, fmt, ap);
    va_end(ap);
}

/*
 * Record a failed CUDA call and return CS_ERR_CUDA.  The runtime's
 * last-error slot is cleared so that a later, unrelated check does not
 * report this error again (sticky errors stay, as they must).
 */
static inline cs_status
cs_cuda_fail(cs_cuda_ctx *ctx, cudaError_t e, const char *what)
{
    cs_cuda_message(ctx, "%s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return CS_ERR_CUDA;
}

/* Check a runtime call; on failure record it and return CS_ERR_CUDA. */
#define CS_CUDA_CHECK(ctx, call, what)                                        \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            return cs_cuda_fail((ctx), e_, (what));                           \
        }                                                                     \
    } while (0)

/* Propagate a cs_status from a helper. */
#define CS_TRY(expr)                                                          \
    do {                                                                      \
        cs_status s_ = (expr);                                                \
        if (s_ != CS_OK) {                                                    \
            return s_;                                                        \
        }                                                                     \
    } while (0)

/*
 * Let `kernel` (named `name`) launch with `smem` bytes of dynamic shared
 * memory: past 48 KB a kernel must opt in, up to ctx->smem_optin.
 */
template <class Kernel>
static inline cs_status
cs_cuda_allow_smem(cs_cuda_ctx *ctx, Kernel *kernel, size_t smem,
                   const char *name)
{
    const cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) {
        cs_cuda_message(ctx, "cudaFuncSetAttribute (%s, %zu bytes of shared "
                             "memory): %s",
                        name, smem, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return CS_ERR_CUDA;
    }
    return CS_OK;
}

/* The environment variable `var` as an integer >= 1 in *value (0 when
   it is not set); CS_ERR_INVALID, saying so, for anything else. */
static inline cs_status
cs_env_count(cs_cuda_ctx *ctx, const char *var, long *value)
{
    *value = 0;
    const char *env = getenv(var);
    if (env == NULL || env[0] == '\0') {
        return CS_OK;
    }
    char *end = NULL;
    errno = 0;
    const long v = strtol(env, &end, 10);
    if (errno != 0 || end == env || *end != '\0' || v < 1) {
        cs_cuda_message(ctx, "%s must be an integer >= 1, not \"%s\"", var,
                        env);
        return CS_ERR_INVALID;
    }
    *value = v;
    return CS_OK;
}

/* Check the launch just queued on ctx->stream (named `kernel`). */
static inline cs_status
cs_cuda_check_launch(cs_cuda_ctx *ctx, const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && ctx->sync_each_launch) {
        e = cudaStreamSynchronize(ctx->stream);
    }
    if (e != cudaSuccess) {
        return cs_cuda_fail(ctx, e, kernel);
    }
    return CS_OK;
}

/*
 * Before each pass or step: has the caller asked to stop?  Polled on the
 * host while it queues launches, `steps_done` steps into the run; once
 * the launch queue is full each launch waits for an earlier one to
 * finish, so a request is seen within that queue's worth of passes.  The
 * caller's `out` is written only after the last pass, so it is left as
 * it was.
 */
static inline cs_status
cs_cuda_check_interrupt(cs_cuda_ctx *ctx, long steps_done)
{
    if (cs_interrupt_requested(ctx->intr, steps_done)) {
        cs_cuda_message(ctx, "interrupted before the last pass");
        return CS_ERR_INTERRUPTED;
    }
    return CS_OK;
}

#endif /* CS_CUDA_CHECK_CUH */
