/*
 * device.cu -- cs_cuda_device_count: is there a GPU this engine can use?
 * Also which device is current, making another one current, and
 * waiting for a stream.
 *
 * Asks the runtime for the visible devices and describes the current one
 * ("NVIDIA H100 80GB HBM3, sm_90, 132 SMs").  A machine without a driver
 * or without a GPU is an answer, not a crash: the runtime reports an
 * error code, which becomes the message.  A device this build has no
 * kernel image for (compiled for sm_90, run on an older GPU) counts as
 * unusable, found by asking the runtime for a probe kernel's attributes.
 */
#include <string.h>
#include "cuda_engine.h"
#include "check.cuh"


/* Never launched: its attributes tell whether this build runs here. */
__global__ void
cs_cuda_probe_kernel(void)
{
}

int
cs_cuda_device_count(char *msg, size_t msg_len)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        /* no driver, no GPU, a driver older than the runtime, ... */
        cs_say(msg, msg_len, "no usable CUDA device: %s",
               cudaGetErrorString(e));
        (void)cudaGetLastError();
        return e == cudaErrorNoDevice ? 0 : -1;
    }
    if (count == 0) {
        cs_say(msg, msg_len, "no CUDA device is visible");
        return 0;
    }
    int dev = 0;
    cudaDeviceProp prop;
    e = cudaGetDevice(&dev);
    if (e == cudaSuccess) {
        e = cudaGetDeviceProperties(&prop, dev);
    }
    if (e != cudaSuccess) {
        cs_say(msg, msg_len, "cannot query CUDA device: %s",
               cudaGetErrorString(e));
        (void)cudaGetLastError();
        return -1;
    }
    cudaFuncAttributes attr;
    e = cudaFuncGetAttributes(&attr, cs_cuda_probe_kernel);
    if (e != cudaSuccess) {
        cs_say(msg, msg_len, "%s, sm_%d%d: not usable by this build: %s",
               prop.name, prop.major, prop.minor, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    if (count > 1) {
        cs_say(msg, msg_len, "%s, sm_%d%d, %d SMs (device %d of %d)",
               prop.name, prop.major, prop.minor, prop.multiProcessorCount,
               dev, count);
    } else {
        cs_say(msg, msg_len, "%s, sm_%d%d, %d SMs", prop.name, prop.major,
               prop.minor, prop.multiProcessorCount);
    }
    return count;
}

/* The visible device count, or a status with the reason in msg. */
static cs_status
visible_devices(int *count, char *msg, size_t msg_len)
{
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess || *count == 0) {
        cs_say(msg, msg_len, "no usable CUDA device: %s",
               e != cudaSuccess ? cudaGetErrorString(e) : "none is visible");
        (void)cudaGetLastError();
        return CS_ERR_NO_DEVICE;
    }
    return CS_OK;
}

cs_status
cs_cuda_current_device(int *device, char *msg, size_t msg_len)
{
    int count = 0;
    cs_status status = visible_devices(&count, msg, msg_len);
    if (status != CS_OK) {
        return status;
    }
    cudaError_t e = cudaGetDevice(device);
    if (e != cudaSuccess) {
        cs_say(msg, msg_len, "cudaGetDevice: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return CS_ERR_CUDA;
    }
    return CS_OK;
}

cs_status
cs_cuda_set_device(int device, char *msg, size_t msg_len)
{
    int count = 0;
    cs_status status = visible_devices(&count, msg, msg_len);
    if (status != CS_OK) {
        return status;
    }
    if (device < 0 || device >= count) {
        cs_say(msg, msg_len, "CUDA device %d is not visible: %d device%s "
                             "(0 to %d)",
               device, count, count == 1 ? "" : "s", count - 1);
        return CS_ERR_INVALID;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        cs_say(msg, msg_len, "cudaSetDevice(%d): %s", device,
               cudaGetErrorString(e));
        (void)cudaGetLastError();
        return CS_ERR_CUDA;
    }
    return CS_OK;
}

/* CS_OK, or CS_ERR_CUDA with "what: the error" in msg (the error
   cleared). */
static cs_status
runtime_status(cudaError_t e, const char *what, char *msg, size_t msg_len)
{
    if (e == cudaSuccess) {
        return CS_OK;
    }
    cs_say(msg, msg_len, "%s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return CS_ERR_CUDA;
}

cs_status
cs_cuda_stream_synchronize(uintptr_t stream, char *msg, size_t msg_len)
{
    return runtime_status(cudaStreamSynchronize((cudaStream_t)stream),
                          "cudaStreamSynchronize", msg, msg_len);
}

cs_status
cs_cuda_device_synchronize(char *msg, size_t msg_len)
{
    return runtime_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize",
                          msg, msg_len);
}

/* The rows pitch and rows-per-plane of a view of `shape` with byte
   `strides` as cudaMemcpy3D sees it; 0 where it is not one (unit rows,
   planes a whole number of rows apart, every stride positive). */
static int
pitched_layout(const ptrdiff_t strides[3], const ptrdiff_t shape[3],
               size_t *pitch, size_t *rows)
{
    const ptrdiff_t width = shape[2] * (ptrdiff_t)sizeof(double);
    if (shape[2] > 1 && strides[2] != (ptrdiff_t)sizeof(double)) {
        return 0;
    }
    ptrdiff_t p = shape[1] > 1 ? strides[1] : width;
    if (p < width || p <= 0) {
        return 0;
    }
    ptrdiff_t h = shape[1];
    if (shape[0] > 1) {
        if (strides[0] <= 0 || strides[0] % p != 0 || strides[0] / p < h) {
            return 0;
        }
        h = strides[0] / p;
    }
    *pitch = (size_t)p;
    *rows = (size_t)h;
    return 1;
}

cs_status
cs_cuda_copy_pitched(void *dst, const ptrdiff_t dst_strides[3],
                     const void *src, const ptrdiff_t src_strides[3],
                     const ptrdiff_t shape[3], char *msg, size_t msg_len)
{
    size_t dst_pitch, dst_rows, src_pitch, src_rows;
    if (!pitched_layout(dst_strides, shape, &dst_pitch, &dst_rows)
        || !pitched_layout(src_strides, shape, &src_pitch, &src_rows)) {
        return CS_ERR_UNSUPPORTED;
    }
    if (shape[0] == 0 || shape[1] == 0 || shape[2] == 0) {
        return CS_OK;
    }
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr((void *)src, src_pitch,
                                   (size_t)shape[2] * sizeof(double),
                                   src_rows);
    p.dstPtr = make_cudaPitchedPtr(dst, dst_pitch,
                                   (size_t)shape[2] * sizeof(double),
                                   dst_rows);
    p.extent = make_cudaExtent((size_t)shape[2] * sizeof(double),
                               (size_t)shape[1], (size_t)shape[0]);
    p.kind = cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpy3DAsync(&p, cudaStreamLegacy);
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(cudaStreamLegacy);
    }
    return runtime_status(e, "cudaMemcpy3DAsync (device box)", msg,
                          msg_len);
}

cs_status
cs_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, char *msg,
                 size_t msg_len)
{
    int count = 0;
    cs_status status = visible_devices(&count, msg, msg_len);
    if (status != CS_OK) {
        return status;
    }
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) {
        cs_say(msg, msg_len, "%s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return CS_ERR_CUDA;
    }
    return CS_OK;
}
