/*
 * cuda_runtime.h (emulation) -- the slice of CUDA the convstencil engine
 * uses, on the CPU, so that the engine's real sources can be run and
 * checked on a machine without a GPU (run.sh).  Not a general emulator.
 *
 * Blocks run one at a time; the threads of a block run as OS threads, so
 * __syncthreads is a real barrier and a missing one shows up as a race.
 * The FP64 m16n8k4 MMA is emulated per warp from the PTX fragment layout
 * (a 32-thread barrier gathers the lanes' fragments).  Device memory and
 * fresh shared memory are filled with NaN, so a read of anything never
 * written poisons the result.  __shared__ arrays become statics (one
 * block at a time); the dynamic one comes from cs_emu_dynamic_smem().
 * Limits are checked as the device checks them: 1024 threads, grid y/z
 * <= 65535, dynamic shared memory <= the kernel's attribute (48 KB until
 * cudaFuncSetAttribute raises it).
 */
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct double2 { double x, y; };
struct int4 { int x, y, z, w; };
static inline double2 make_double2(double a, double b) { return {a, b}; }
static inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
template <class T> static inline T __ldg(const T *p) { return *p; }
using std::isfinite;  // CUDA's device isfinite is a global function
static inline int __double2hiint(double v) {  // the high 32 bits
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return (int)(uint32_t)(bits >> 32);
}
template <class T> static inline T min(T a, T b) { return a < b ? a : b; }
template <class T> static inline T max(T a, T b) { return a > b ? a : b; }
static inline void __trap() { abort(); }

extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;  // one block at a time: shared by its threads

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
} cudaError_t;
typedef struct CUstream_st *cudaStream_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
typedef struct CUevent_st *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };
struct cudaPos { size_t x, y, z; };
struct cudaExtent { size_t width, height, depth; };
struct cudaArray;
struct cudaMemcpy3DParms {
    cudaArray *srcArray; cudaPos srcPos; cudaPitchedPtr srcPtr;
    cudaArray *dstArray; cudaPos dstPos; cudaPitchedPtr dstPtr;
    cudaExtent extent; cudaMemcpyKind kind;
};
static inline cudaPitchedPtr make_cudaPitchedPtr(void *p, size_t pitch,
                                                 size_t xs, size_t ys) {
    return cudaPitchedPtr{p, pitch, xs, ys};
}
static inline cudaPos make_cudaPos(size_t x, size_t y, size_t z) {
    return cudaPos{x, y, z};
}
static inline cudaExtent make_cudaExtent(size_t w, size_t h, size_t d) {
    return cudaExtent{w, h, d};
}
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum { cudaSharedmemCarveoutMaxShared = 100 };
enum cudaDeviceAttr {
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
};
struct cudaFuncAttributes { int maxThreadsPerBlock, ptxVersion; };

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind k, cudaStream_t s);
cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms *p, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags,
                                        int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t stop);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
#define cudaHostAllocDefault 0
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);
// CUDA IPC between the processes of one host: device memory is shared
// memory (a memfd), which another process maps through /proc/PID/fd.
struct cudaIpcMemHandle_t { char reserved[64]; };
#define cudaIpcMemLazyEnablePeerAccess 1
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p);
cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h,
                                 unsigned flags);
cudaError_t cudaIpcCloseMemHandle(void *p);
cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer);
enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
};
#define cudaEnableDefault 0
// cuMemGetAddressRange alone
cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **fn, unsigned version, unsigned long long flags,
    cudaDriverEntryPointQueryResult *result);

// ---- kernel-side emulation hooks ------------------------------------
void __syncthreads(void);
void cs_emu_dmma_16x8x4(double (&d)[4], double a0, double a1, double b0);
// warp shuffles of doubles: every lane of the warp must take part (the
// full mask), as the engine's kernels do
double __shfl_up_sync(unsigned mask, double v, unsigned delta);
double __shfl_down_sync(unsigned mask, double v, unsigned delta);
double __shfl_sync(unsigned mask, double v, int src_lane);
double *cs_emu_dynamic_smem(void);
// atomics and fences: a block's threads are OS threads (blocks one at a
// time), so the host's atomics and fences serve
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline void __threadfence_system(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
// a barrier of the warp's 32 threads (the full mask only, as the
// engine's kernels use it)
void __syncwarp(unsigned mask = 0xffffffffu);

// ---- launches and function attributes --------------------------------
namespace cs_emu {
void set_error(cudaError_t e);
size_t &max_dynamic_smem(const void *fn);
cudaError_t check_config(const void *fn, dim3 grid, dim3 block, size_t smem);
void run_grid(dim3 grid, dim3 block, size_t smem,
              const std::function<void()> &body);
void count_launch(const char *name);
}  // namespace cs_emu
// launches of the kernel named `name` (template arguments left out) since
// the last cs_emu_reset_launches()
long cs_emu_launches(const char *name);
void cs_emu_reset_launches(void);

template <class F>
cudaError_t cudaFuncSetAttribute(F *fn, cudaFuncAttribute a, int v)
{
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > 232448) return cudaErrorInvalidValue;
        cs_emu::max_dynamic_smem((const void *)fn) = (size_t)v;
    }
    return cudaSuccess;
}
// EMU_OCCUPANCY: the blocks per SM reported (default 3)
int cs_emu_occupancy(void);
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F *, int,
                                                          size_t)
{
    *n = cs_emu_occupancy();
    return cudaSuccess;
}
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F *)
{
    a->maxThreadsPerBlock = 1024;
    a->ptxVersion = 90; /* the emulated kernels are the full sources */
    return cudaSuccess;
}

template <class... KArgs, class... Args>
void cs_emu_launch(const char *name, void (*fn)(KArgs...), dim3 grid,
                   dim3 block, size_t smem, cudaStream_t, Args... args)
{
    cs_emu::count_launch(name);
    cudaError_t e = cs_emu::check_config((const void *)fn, grid, block, smem);
    if (e != cudaSuccess) {
        cs_emu::set_error(e);
        return;
    }
    cs_emu::run_grid(grid, block, smem, [&]() { fn(args...); });
}
