/*
 * device_call.cu -- cs_cuda_apply_device: device arrays in and out.
 *
 * The arrays are checked to be memory of the current device; a single
 * step on arrays that do not overlap is one launch, reading and writing
 * them where they are: one of onestep.cuh's kernels for float64 arrays
 * with unit x stride and the kernels they are built for, direct.cu's
 * for any other dtype, strides or kernel (float64 out); everything else
 * is engine.cu's call with the arrays as its grid_io (read straight
 * into the padded grid, written straight out).
 */
#include "engine.cuh"
#include "direct.cuh"
#include "onestep.cuh"
#include "transfer.cuh"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Whether a call is queued on the caller's stream and waits for no
   other (the arrays' producers name that stream, or none). */
static int
queued_alone(const cs_cuda_streams *streams)
{
    if (streams == NULL || streams->run == 0) {
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        if (streams->wait[i] != 0 && streams->wait[i] != streams->run) {
            return 0;
        }
    }
    return 1;
}

/* One step in one launch: onestep.cuh's kernel where one takes the
   call (its weights travel in the launch parameters), else direct.cu's
   (taps uploaded unless the lane holds them). */
static cs_status
apply_direct(cs_cuda_ctx *ctx, const cs_darray *in, const cs_darray *out,
             const ptrdiff_t shape[3], const cs_kernel *kernel, cs_mode mode,
             double cval, const cs_cuda_streams *streams, cs_run_info *info)
{
    cs_onestep os;
    CS_TRY(cs_onestep_plan(ctx, in, out, shape, kernel, mode, cval, &os));
    if (os.taken && queued_alone(streams)) {
        /* needs nothing of a lane (no taps, no flag, no event to wait
           for): launched on the caller's stream at once, which spares a
           scheme's many small calls the lane's lock and events */
        ctx->stream = (cudaStream_t)streams->run;
        return cs_cuda_onestep(ctx, &os, NULL);
    }
    cs_apply_state s;
    memset(&s, 0, sizeof(s));
    int timed = 1;
    cs_status st = cs_engine_begin(ctx, &s, streams, &timed);
    const size_t bytes = cs_direct_taps_bytes(kernel);
    if (st == CS_OK && !os.taken) {
        s.params_host = (char *)calloc(1, bytes);
        if (s.params_host == NULL) {
            cs_cuda_message(ctx, "out of host memory (taps)");
            st = CS_ERR_NOMEM;
        }
    }
    char *taps = NULL;
    int ntaps = 0;
    if (st == CS_OK && !os.taken) {
        ntaps = cs_direct_taps(kernel, s.params_host);
        st = cs_lane_params(ctx, s.lane, s.params_host, bytes, &taps);
    }
    if (st == CS_OK && timed) {
        cudaError_t e = cudaMemsetAsync(s.lane->flags, 0, sizeof(int),
                                        ctx->stream);
        if (e == cudaSuccess) {
            e = cudaEventRecord(s.lane->loop_start, ctx->stream);
        }
        st = e == cudaSuccess ? CS_OK
                              : cs_cuda_fail(ctx, e, "direct step (start)");
    }
    if (st == CS_OK) {
        /* its result is exact for non-finite values too; the flag only
           reports whether there were any (where the call waits) */
        int *flag_dev = timed ? s.lane->flags : NULL;
        st = os.taken ? cs_cuda_onestep(ctx, &os, flag_dev)
                      : cs_cuda_direct_step(ctx, in, out, shape, kernel, taps,
                                            ntaps, mode, cval, flag_dev);
    }
    int flag = 0;
    if (st == CS_OK && timed) {
        cudaError_t e = cudaEventRecord(s.lane->loop_stop, ctx->stream);
        if (e == cudaSuccess) {
            e = cudaMemcpyAsync(&flag, s.lane->flags, sizeof(int),
                                cudaMemcpyDeviceToHost, ctx->stream);
        }
        if (e == cudaSuccess) {
            e = cudaStreamSynchronize(ctx->stream);
        }
        float ms = 0.0f;
        if (e == cudaSuccess) {
            e = cudaEventElapsedTime(&ms, s.lane->loop_start,
                                     s.lane->loop_stop);
        }
        st = e == cudaSuccess ? CS_OK
                              : cs_cuda_fail(ctx, e, "direct step (end)");
        if (st == CS_OK && info != NULL) {
            info->device_seconds = 1e-3 * (double)ms;
            info->nonfinite = flag;
        }
    }
    cs_engine_release(ctx, &s);
    return st;
}

/* Do the bytes the two arrays may touch overlap? */
static int
arrays_overlap(const cs_darray *a, const cs_darray *b,
               const ptrdiff_t shape[3])
{
    const cs_darray *arr[2] = {a, b};
    uintptr_t lo[2], hi[2];
    for (int i = 0; i < 2; i++) {
        lo[i] = hi[i] = (uintptr_t)arr[i]->data;
        for (int k = 0; k < 3; k++) {
            const ptrdiff_t reach = (shape[k] - 1) * arr[i]->strides[k];
            if (reach < 0) {
                lo[i] -= (uintptr_t)(-reach);
            } else {
                hi[i] += (uintptr_t)reach;
            }
        }
        hi[i] += cs_dtype_size(arr[i]->dtype);
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* Is [data, data + its extent) in memory of the current device? */
static cs_status
check_device_pointer(cs_cuda_ctx *ctx, const void *data, const char *what)
{
    cudaPointerAttributes attr;
    memset(&attr, 0, sizeof(attr));
    cudaError_t e = cudaPointerGetAttributes(&attr, data);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cs_cuda_message(ctx, "%s is not memory CUDA knows (%s)", what,
                        cudaGetErrorString(e));
        return CS_ERR_INVALID;
    }
    if (attr.type != cudaMemoryTypeDevice
        && attr.type != cudaMemoryTypeManaged) {
        cs_cuda_message(ctx, "%s is not in device memory (CUDA memory type "
                             "%d)",
                        what, (int)attr.type);
        return CS_ERR_INVALID;
    }
    if (attr.device != ctx->device) {
        cs_cuda_message(ctx,
                        "%s is on CUDA device %d, but the current device is "
                        "%d: make device %d current (e.g. with "
                        "cupy.cuda.Device(%d) or torch.cuda.device(%d)) or "
                        "move the array",
                        what, attr.device, ctx->device, attr.device,
                        attr.device, attr.device);
        return CS_ERR_INVALID;
    }
    return CS_OK;
}

cs_status
cs_cuda_apply_device(const cs_darray *in, const cs_darray *out,
                     const ptrdiff_t shape[3], const cs_kernel *kernel,
                     cs_mode mode, double cval, long steps,
                     cs_cuda_path path, const cs_cuda_streams *streams,
                     cs_run_info *info, const cs_interrupt *intr, char *err,
                     size_t err_len)
{
    cs_cuda_ctx ctx;
    cs_engine_ctx_init(&ctx, intr, err, err_len);
    cs_engine_info_init(info, steps);
    if (in == NULL || out == NULL || in->data == NULL || out->data == NULL
        || cs_dtype_size(in->dtype) == 0 || out->dtype != CS_DTYPE_FLOAT64) {
        cs_cuda_message(&ctx, "cs_cuda_apply_device: NULL array or "
                              "unknown dtype (out must be float64)");
        return CS_ERR_INVALID;
    }
    CS_TRY(cs_engine_check_args(&ctx, (const double *)in->data,
                      (const double *)out->data, shape, kernel, mode, steps,
                      path));
    CS_TRY(cs_cuda_device_facts(&ctx));
    CS_TRY(check_device_pointer(&ctx, in->data, "the grid"));
    CS_TRY(check_device_pointer(&ctx, out->data, "out"));
    if (steps == 1 && path != CS_CUDA_PATH_TENSOR_CORE
        && !arrays_overlap(in, out, shape)) {
        /* one step: read and write the arrays where they are */
        if (info != NULL) {
            info->path = "direct";
            info->unfused_steps = 1;
        }
        return apply_direct(&ctx, in, out, shape, kernel, mode, cval,
                            streams, info);
    }
    cs_grid_io io = {NULL, NULL, in, out, arrays_overlap(in, out, shape)};
    return cs_engine_run(&ctx, &io, shape, kernel, mode, cval, steps, path,
                         streams, info);
}
