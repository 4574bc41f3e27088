/*
 * peer.cu -- another process's device memory on the same host (CUDA
 * IPC), and copies into it by the copy engines.
 *
 * The distributed layer's "cuda-ipc" transport writes each ghost slab
 * straight into the neighbour's grid: on the GPUs of one host the copy
 * engines moved a round's slabs 1.3 to 2 times as fast as NCCL's
 * send/receive (benchmarks/results/h200x4_peer_moves_*.md).
 *
 * A handle exports a whole allocation, so export names the allocation
 * holding a pointer (the driver's cuMemGetAddressRange, reached through
 * the runtime's entry point: this build links the runtime only) and
 * the importer adds the offset.  Every call checks its CUDA return code
 * and leaves nothing held on failure.
 */
#include <string.h>

#include "cuda_engine.h"
#include "check.cuh"

/* cuMemGetAddressRange's signature (CUdeviceptr: an unsigned 64-bit
   integer, CUresult: 0 for success), without the driver's header. */
typedef int (*cs_address_range_fn)(unsigned long long *base, size_t *size,
                                   unsigned long long ptr);

static cs_status
failed(cudaError_t e, const char *what, char *msg, size_t msg_len)
{
    cs_say(msg, msg_len, "%s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return CS_ERR_CUDA;
}

static cs_status
address_range(uintptr_t ptr, uintptr_t *base, size_t *size, char *msg,
              size_t msg_len)
{
    static cs_address_range_fn fn = NULL;
    if (fn == NULL) {
        void *found = NULL;
        cudaDriverEntryPointQueryResult result;
        cudaError_t e = cudaGetDriverEntryPointByVersion(
            "cuMemGetAddressRange", &found, 12000, cudaEnableDefault,
            &result);
        if (e != cudaSuccess) {
            return failed(e, "cudaGetDriverEntryPointByVersion", msg,
                          msg_len);
        }
        if (result != cudaDriverEntryPointSuccess || found == NULL) {
            cs_say(msg, msg_len, "the driver has no cuMemGetAddressRange");
            return CS_ERR_UNSUPPORTED;
        }
        fn = (cs_address_range_fn)found;
    }
    unsigned long long b = 0;
    int r = fn(&b, size, (unsigned long long)ptr);
    if (r != 0) {
        cs_say(msg, msg_len, "cuMemGetAddressRange failed (CUresult %d): "
                             "0x%llx is not device memory",
               r, (unsigned long long)ptr);
        return CS_ERR_INVALID;
    }
    *base = (uintptr_t)b;
    return CS_OK;
}

cs_status
cs_cuda_ipc_export(uintptr_t ptr, unsigned char handle[CS_IPC_HANDLE_BYTES],
                   uintptr_t *base, size_t *size, char *msg, size_t msg_len)
{
    CS_TRY(address_range(ptr, base, size, msg, msg_len));
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, (void *)*base);
    if (e != cudaSuccess) {
        return failed(e, "cudaIpcGetMemHandle", msg, msg_len);
    }
    memcpy(handle, &h, CS_IPC_HANDLE_BYTES);
    return CS_OK;
}

cs_status
cs_cuda_ipc_open(const unsigned char handle[CS_IPC_HANDLE_BYTES],
                 uintptr_t *base, int *device, char *msg, size_t msg_len)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, CS_IPC_HANDLE_BYTES);
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h,
                                         cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        return failed(e, "cudaIpcOpenMemHandle", msg, msg_len);
    }
    cudaPointerAttributes a;
    e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaIpcCloseMemHandle(p);
        return failed(e, "cudaPointerGetAttributes (opened memory)", msg,
                      msg_len);
    }
    *base = (uintptr_t)p;
    *device = a.device;
    return CS_OK;
}

cs_status
cs_cuda_ipc_close(uintptr_t base, char *msg, size_t msg_len)
{
    cudaError_t e = cudaIpcCloseMemHandle((void *)base);
    return e == cudaSuccess ? CS_OK
                            : failed(e, "cudaIpcCloseMemHandle", msg,
                                     msg_len);
}

cs_status
cs_cuda_can_access_peer(int device, int peer, int *can, char *msg,
                        size_t msg_len)
{
    if (device == peer) {
        *can = 1;
        return CS_OK;
    }
    cudaError_t e = cudaDeviceCanAccessPeer(can, device, peer);
    return e == cudaSuccess ? CS_OK
                            : failed(e, "cudaDeviceCanAccessPeer", msg,
                                     msg_len);
}

/* Wait for `streams` (each where it was created) and destroy them and
   `after`; the first error is kept in *st. */
static void
finish(cudaStream_t *streams, int n, cudaEvent_t after, cs_status *st,
       char *msg, size_t msg_len)
{
    for (int i = 0; i < n; i++) {
        cudaError_t e = cudaStreamSynchronize(streams[i]);
        if (e != cudaSuccess && *st == CS_OK) {
            *st = failed(e, "cudaStreamSynchronize (copies)", msg, msg_len);
        }
        e = cudaStreamDestroy(streams[i]);
        if (e != cudaSuccess && *st == CS_OK) {
            *st = failed(e, "cudaStreamDestroy (copies)", msg, msg_len);
        }
    }
    if (after != NULL) {
        cudaError_t e = cudaEventDestroy(after);
        if (e != cudaSuccess && *st == CS_OK) {
            *st = failed(e, "cudaEventDestroy (copies)", msg, msg_len);
        }
    }
}

cs_status
cs_cuda_copies(int n, const uintptr_t *dst, const uintptr_t *src,
               const size_t *bytes, char *msg, size_t msg_len)
{
    if (n < 0 || n > CS_MAX_COPIES) {
        cs_say(msg, msg_len, "%d copies at once; at most %d", n,
               CS_MAX_COPIES);
        return CS_ERR_INVALID;
    }
    cudaStream_t streams[CS_MAX_COPIES];
    int made = 0;
    cudaEvent_t after = NULL;
    cs_status st = CS_OK;
    /* the copies follow the legacy stream's work (the slabs' packs) */
    cudaError_t e = cudaEventCreateWithFlags(&after, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        after = NULL;
        st = failed(e, "cudaEventCreateWithFlags (copies)", msg, msg_len);
    }
    if (st == CS_OK) {
        e = cudaEventRecord(after, cudaStreamLegacy);
        if (e != cudaSuccess) {
            st = failed(e, "cudaEventRecord (copies)", msg, msg_len);
        }
    }
    for (int i = 0; i < n && st == CS_OK; i++) {
        e = cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            st = failed(e, "cudaStreamCreateWithFlags (copies)", msg,
                        msg_len);
            break;
        }
        made++;
        e = cudaStreamWaitEvent(streams[i], after, 0);
        if (e == cudaSuccess) {
            e = cudaMemcpyAsync((void *)dst[i], (const void *)src[i],
                                bytes[i], cudaMemcpyDefault, streams[i]);
        }
        if (e != cudaSuccess) {
            st = failed(e, "cudaMemcpyAsync (copy to a peer)", msg, msg_len);
        }
    }
    finish(streams, made, after, &st, msg, msg_len);
    return st;
}
