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

cs_status
cs_cuda_stream_synchronize(uintptr_t stream, char *msg, size_t msg_len)
{
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess) {
        cs_say(msg, msg_len, "cudaStreamSynchronize: %s",
               cudaGetErrorString(e));
        (void)cudaGetLastError();
        return CS_ERR_CUDA;
    }
    return CS_OK;
}

cs_status
cs_cuda_device_synchronize(char *msg, size_t msg_len)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cs_say(msg, msg_len, "cudaDeviceSynchronize: %s",
               cudaGetErrorString(e));
        (void)cudaGetLastError();
        return CS_ERR_CUDA;
    }
    return CS_OK;
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
