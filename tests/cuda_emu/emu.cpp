/*
 * emu.cpp -- the CPU emulation of the CUDA runtime and device built-ins
 * declared in cuda_runtime.h (this folder).  Environment switches for
 * the error paths: EMU_NO_DEVICE=1, EMU_NO_DRIVER=1, EMU_CC_MAJOR=8,
 * EMU_MALLOC_LIMIT=<bytes>; EMU_DEVICES=<n> makes n devices visible
 * (default 1).  Device memory is host memory, tagged with the device
 * current when it was allocated (cudaPointerGetAttributes reports it,
 * cudaMemGetInfo counts it); the current device belongs to the calling
 * thread, as in CUDA.  One grid runs at a time in the process, whichever
 * host thread launched it.  An allocation is a memfd mapped shared (plain
 * host memory where that fails), so that CUDA IPC works between the
 * processes of the host: a handle names the process and the descriptor,
 * and the importer maps /proc/PID/fd/FD.
 */
#include <chrono>
#include <semaphore>
#include <string>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include "cuda_runtime.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {
thread_local cudaError_t last_error = cudaSuccess;
thread_local std::barrier<> *block_barrier = nullptr;
thread_local double *dyn_smem = nullptr;

struct Warp {
    double a0[32], a1[32], b0[32], xch[32];
    std::barrier<> bar{32};
};
thread_local Warp *my_warp = nullptr;

struct Allocation {
    size_t bytes;
    int device;
    int fd;  // the memfd behind it, -1 for plain host memory
    long serial;  // unique in the process: a handle names one allocation
};
long next_serial = 0;
std::mutex alloc_mutex;
std::map<void *, Allocation> allocations;
std::map<void *, Allocation> opened;  // other processes' (IPC), fd -1

struct IpcHandle {  // what cudaIpcMemHandle_t holds here
    char magic[8];
    long pid, serial;
    int fd, device;
    size_t bytes;
};
const char ipc_magic[8] = {'c', 's', 'e', 'm', 'u', 'i', 'p', 'c'};

// Shared memory of `bytes`, or nullptr (and fd -1).
void *shared_alloc(size_t bytes, int *fd) {
    *fd = memfd_create("convstencil-emu", MFD_CLOEXEC);
    if (*fd < 0) return nullptr;
    void *q = nullptr;
    if (ftruncate(*fd, (off_t)bytes) == 0)
        q = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (q == nullptr || q == MAP_FAILED) {
        close(*fd);
        *fd = -1;
        return nullptr;
    }
    return q;
}
size_t allocated = 0;                 // every device's
std::map<int, size_t> allocated_on;  // device -> its bytes
thread_local int current_device = 0;

// The OS threads that run the threads of one block, started as a block
// first needs them.  Each waits on a semaphore of its own, so a block of
// n threads wakes n of them, not the whole pool.
struct Pool {
    struct Worker {
        std::binary_semaphore go{0};
        std::thread th;
    };
    std::vector<std::unique_ptr<Worker>> workers;
    const std::function<void(int)> *task = nullptr;
    std::atomic<int> remaining{0};
    std::binary_semaphore finished{0};

    void work(Worker *w, int id) {
        for (;;) {
            w->go.acquire();  // task and remaining are set before it
            (*task)(id);
            if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1)
                finished.release();
        }
    }
    // one caller at a time (run_grid's lock)
    void run(int n, const std::function<void(int)> &f) {
        while ((int)workers.size() < n) {
            Worker *w = new Worker;
            const int id = (int)workers.size();
            workers.emplace_back(w);
            w->th = std::thread([this, w, id] { work(w, id); });
            w->th.detach();  // never joined: process exit ends it
        }
        task = &f;
        remaining.store(n, std::memory_order_relaxed);
        for (int i = 0; i < n; i++) workers[i]->go.release();
        finished.acquire();
    }
};
Pool *pool() {
    static Pool *p = new Pool;  // never freed: its threads outlive exit
    return p;
}
}  // namespace

namespace {
std::mutex launches_mu;
std::map<std::string, long> launches;
}  // namespace
long cs_emu_launches(const char *name) {
    std::lock_guard<std::mutex> l(launches_mu);
    auto it = launches.find(name);
    return it == launches.end() ? 0 : it->second;
}
void cs_emu_reset_launches(void) {
    std::lock_guard<std::mutex> l(launches_mu);
    launches.clear();
}

namespace cs_emu {
void set_error(cudaError_t e) { last_error = e; }
void count_launch(const char *name) {
    std::lock_guard<std::mutex> l(launches_mu);
    launches[name]++;
}
size_t &max_dynamic_smem(const void *fn) {
    static std::map<const void *, size_t> m;
    static std::mutex mu;
    std::lock_guard<std::mutex> l(mu);
    auto it = m.find(fn);
    if (it == m.end()) it = m.emplace(fn, 48 * 1024).first;
    return it->second;
}
cudaError_t check_config(const void *fn, dim3 grid, dim3 block, size_t smem) {
    size_t threads = (size_t)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.y != 1 || block.z != 1)
        return cudaErrorInvalidConfiguration;  // the engine uses 1D blocks
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535
        || grid.z > 65535 || grid.x > 0x7fffffffu)
        return cudaErrorInvalidConfiguration;
    if (smem > max_dynamic_smem(fn)) return cudaErrorInvalidValue;
    return cudaSuccess;
}
void run_grid(dim3 grid, dim3 block, size_t smem,
              const std::function<void()> &body) {
    // one grid at a time: its blocks share the thread pool, blockDim,
    // gridDim and the kernels' static __shared__ arrays
    static std::mutex grid_mutex;
    std::lock_guard<std::mutex> one_grid(grid_mutex);
    const int n = (int)block.x;
    std::vector<double> dyn((smem + 7) / 8 + 1);
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                // fresh shared memory is garbage: make it NaN
                std::fill(dyn.begin(), dyn.end(), std::nan(""));
                std::barrier<> bar(n);
                std::vector<std::unique_ptr<Warp>> warps;
                for (int w = 0; w < (n + 31) / 32; w++)
                    warps.emplace_back(new Warp);
                blockDim = block;
                gridDim = grid;
                pool()->run(n, [&](int t) {
                    threadIdx = dim3(t, 0, 0);
                    blockIdx = dim3(bx, by, bz);
                    block_barrier = &bar;
                    dyn_smem = smem ? dyn.data() : nullptr;
                    my_warp = warps[t / 32].get();
                    body();
                });
            }
}
}  // namespace cs_emu

void __syncthreads(void) { block_barrier->arrive_and_wait(); }
void __syncwarp(unsigned mask) {
    if (mask != 0xffffffffu) abort();  // partial warps are not emulated
    my_warp->bar.arrive_and_wait();
}
double *cs_emu_dynamic_smem(void) { return dyn_smem; }

// m16n8k4 f64: a0 = A[lane/4][lane%4], a1 = A[lane/4 + 8][lane%4],
// b0 = B[lane%4][lane/4], c0,c1 = C[lane/4][2(lane%4) + {0,1}],
// c2,c3 = C[lane/4 + 8][...]
void cs_emu_dmma_16x8x4(double (&d)[4], double a0, double a1, double b0) {
    Warp *w = my_warp;
    const int lane = threadIdx.x % 32;
    w->a0[lane] = a0;
    w->a1[lane] = a1;
    w->b0[lane] = b0;
    w->bar.arrive_and_wait();
    auto A = [&](int m, int k) {
        return m < 8 ? w->a0[m * 4 + k] : w->a1[(m - 8) * 4 + k];
    };
    auto B = [&](int k, int n) { return w->b0[n * 4 + k]; };
    const int g = lane / 4, c = 2 * (lane % 4);
    double r[4] = {d[0], d[1], d[2], d[3]};
    for (int k = 0; k < 4; k++) {
        r[0] += A(g, k) * B(k, c);
        r[1] += A(g, k) * B(k, c + 1);
        r[2] += A(g + 8, k) * B(k, c);
        r[3] += A(g + 8, k) * B(k, c + 1);
    }
    w->bar.arrive_and_wait();
    for (int i = 0; i < 4; i++) d[i] = r[i];
}

// A shuffle: every lane posts its value, then reads its source lane's (its
// own when the source is outside the warp, as on the device).
static double shuffle(double v, int src) {
    Warp *w = my_warp;
    const int lane = threadIdx.x % 32;
    w->xch[lane] = v;
    w->bar.arrive_and_wait();
    const double r = src >= 0 && src < 32 ? w->xch[src] : v;
    w->bar.arrive_and_wait();
    return r;
}
double __shfl_up_sync(unsigned mask, double v, unsigned delta) {
    if (mask != 0xffffffffu) abort();  // partial warps are not emulated
    return shuffle(v, (int)(threadIdx.x % 32) - (int)delta);
}
double __shfl_down_sync(unsigned mask, double v, unsigned delta) {
    if (mask != 0xffffffffu) abort();
    return shuffle(v, (int)(threadIdx.x % 32) + (int)delta);
}
double __shfl_sync(unsigned mask, double v, int src_lane) {
    if (mask != 0xffffffffu) abort();
    return shuffle(v, src_lane & 31);  // the lane modulo the warp, as there
}
int cs_emu_occupancy(void) {
    const char *s = getenv("EMU_OCCUPANCY");
    return s ? atoi(s) : 3;
}

// ---- runtime API ------------------------------------------------------
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    }
    return "unknown error";
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaGetDeviceCount(int *n) {
    const char *v = getenv("EMU_NO_DRIVER");
    if (v && *v == '1') { *n = 0; return last_error = cudaErrorInsufficientDriver; }
    v = getenv("EMU_NO_DEVICE");
    if (v && *v == '1') { *n = 0; return last_error = cudaErrorNoDevice; }
    v = getenv("EMU_DEVICES");
    *n = v ? atoi(v) : 1;
    return cudaSuccess;
}
static bool visible(int d) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && d >= 0 && d < n;
}
cudaError_t cudaGetDevice(int *d) { *d = current_device; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
    if (!visible(d)) {
        (void)cudaGetLastError();
        return last_error = cudaErrorInvalidDevice;
    }
    current_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!visible(d)) {
        (void)cudaGetLastError();
        return last_error = cudaErrorInvalidDevice;
    }
    // what it is, for cuda_info() and convstencil.backends() to say
    snprintf(p->name, sizeof p->name, "CPU emulation of CUDA "
             "(tests/cuda_emu)");
    const char *v = getenv("EMU_CC_MAJOR");
    p->major = v ? atoi(v) : 9;
    p->minor = 0;
    const char *sms = getenv("EMU_SMS");
    p->multiProcessorCount = sms ? atoi(sms) : 132;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    if (a == cudaDevAttrComputeCapabilityMajor) {
        const char *s = getenv("EMU_CC_MAJOR");
        *v = s ? atoi(s) : 9;
    } else if (a == cudaDevAttrMultiProcessorCount) {
        // EMU_SMS: fewer SMs, so that persistent blocks loop over tiles
        const char *s = getenv("EMU_SMS");
        *v = s ? atoi(s) : 132;
    } else if (a == cudaDevAttrMaxSharedMemoryPerBlockOptin) {
        // EMU_SMEM_OPTIN: a device with less shared memory per block
        const char *s = getenv("EMU_SMEM_OPTIN");
        *v = s ? atoi(s) : 232448;
    } else {
        return last_error = cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    const char *lim = getenv("EMU_MALLOC_LIMIT");
    std::lock_guard<std::mutex> l(alloc_mutex);
    if (lim && allocated + bytes > (size_t)atoll(lim)) {
        *p = nullptr;
        return last_error = cudaErrorMemoryAllocation;
    }
    int fd = -1;
    void *q = shared_alloc(bytes ? bytes : 1, &fd);
    if (q == nullptr && posix_memalign(&q, 256, bytes ? bytes : 1) != 0)
        return last_error = cudaErrorMemoryAllocation;
    memset(q, 0xff, bytes);  // NaN: reading unwritten memory shows
    allocations[q] = Allocation{bytes, current_device, fd, ++next_serial};
    allocated += bytes;
    allocated_on[current_device] += bytes;
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> l(alloc_mutex);
    auto it = allocations.find(p);
    if (it == allocations.end()) return last_error = cudaErrorInvalidValue;
    allocated -= it->second.bytes;
    allocated_on[it->second.device] -= it->second.bytes;
    if (it->second.fd >= 0) {
        munmap(p, it->second.bytes ? it->second.bytes : 1);
        close(it->second.fd);
    } else {
        free(p);
    }
    allocations.erase(it);
    return cudaSuccess;
}
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
    std::lock_guard<std::mutex> l(alloc_mutex);
    auto it = allocations.find(p);  // the base of an allocation only
    if (it == allocations.end() || it->second.fd < 0)
        return last_error = cudaErrorInvalidValue;
    IpcHandle ih;
    memcpy(ih.magic, ipc_magic, sizeof(ih.magic));
    ih.pid = (long)getpid();
    ih.serial = it->second.serial;
    ih.fd = it->second.fd;
    ih.device = it->second.device;
    ih.bytes = it->second.bytes ? it->second.bytes : 1;
    static_assert(sizeof(ih) <= sizeof(h->reserved), "handle too small");
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, &ih, sizeof(ih));
    return cudaSuccess;
}
cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned) {
    IpcHandle ih;
    memcpy(&ih, h.reserved, sizeof(ih));
    if (memcmp(ih.magic, ipc_magic, sizeof(ih.magic)) != 0
        || ih.pid == (long)getpid())  // CUDA refuses one's own memory too
        return last_error = cudaErrorInvalidValue;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/fd/%d", ih.pid, ih.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return last_error = cudaErrorInvalidValue;
    void *q = mmap(nullptr, ih.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   0);
    close(fd);
    if (q == MAP_FAILED) return last_error = cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> l(alloc_mutex);
    opened[q] = Allocation{ih.bytes, ih.device, -1, ih.serial};
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaIpcCloseMemHandle(void *p) {
    std::lock_guard<std::mutex> l(alloc_mutex);
    auto it = opened.find(p);
    if (it == opened.end()) return last_error = cudaErrorInvalidValue;
    munmap(p, it->second.bytes);
    opened.erase(it);
    return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer) {
    if (!visible(device) || !visible(peer))
        return last_error = cudaErrorInvalidDevice;
    *can = 1;
    return cudaSuccess;
}
// cuMemGetAddressRange: CUDA_SUCCESS 0, CUDA_ERROR_INVALID_VALUE 1
static int address_range(unsigned long long *base, size_t *size,
                         unsigned long long ptr) {
    std::lock_guard<std::mutex> l(alloc_mutex);
    for (auto *table : {&allocations, &opened})
        for (auto &kv : *table) {
            unsigned long long b = (unsigned long long)kv.first;
            if (ptr >= b && ptr < b + (kv.second.bytes ? kv.second.bytes : 1)) {
                *base = b;
                *size = kv.second.bytes;
                return 0;
            }
        }
    return 1;
}
// cuStreamWaitValue32 with CU_STREAM_WAIT_VALUE_GEQ (0): every launch has
// run when it returned, so a count short of the value would never reach
// it on a GPU either (a hang there): said, and the process stopped.
static int stream_wait_value32(cudaStream_t, unsigned long long addr,
                               unsigned value, unsigned flags) {
    const unsigned now = __atomic_load_n((unsigned *)addr, __ATOMIC_SEQ_CST);
    if (flags != 0) return 1;  // CUDA_ERROR_INVALID_VALUE
    if ((int)(now - value) < 0) {
        fprintf(stderr, "emulated cuStreamWaitValue32: the count is %u and "
                "will stay so; the stream waits for %u (a hang on a GPU)\n",
                now, value);
        abort();
    }
    return 0;
}
cudaError_t cudaGetDriverEntryPointByVersion(
        const char *symbol, void **fn, unsigned, unsigned long long,
        cudaDriverEntryPointQueryResult *result) {
    bool known = true;
    if (strcmp(symbol, "cuMemGetAddressRange") == 0)
        *fn = (void *)&address_range;
    else if (strcmp(symbol, "cuStreamWaitValue32") == 0)
        *fn = (void *)&stream_wait_value32;
    else
        known = false;
    if (!known) *fn = nullptr;
    *result = known ? cudaDriverEntryPointSuccess
                    : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
size_t cs_emu_allocated(void) { return allocated; }
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind, cudaStream_t) {
    memcpy(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms *p, cudaStream_t) {
    // pitched pointers only, as the engine uses them
    for (size_t z = 0; z < p->extent.depth; z++)
        for (size_t y = 0; y < p->extent.height; y++) {
            const char *src = (const char *)p->srcPtr.ptr
                + ((p->srcPos.z + z) * p->srcPtr.ysize + p->srcPos.y + y)
                      * p->srcPtr.pitch + p->srcPos.x;
            char *dst = (char *)p->dstPtr.ptr
                + ((p->dstPos.z + z) * p->dstPtr.ysize + p->dstPos.y + y)
                      * p->dstPtr.pitch + p->dstPos.x;
            memcpy(dst, src, p->extent.width);
        }
    return cudaSuccess;
}
static int streams_alive = 0;
int cs_emu_streams_alive(void) { return streams_alive; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = (cudaStream_t) new char[1];
    streams_alive++;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags,
                                        int) {
    return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}
// Launches run synchronously here: every stream is already in order.
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete[] (char *)s;
    streams_alive--;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
// Events are host timestamps: launches run synchronously here.
static int events_alive = 0;
int cs_emu_events_alive(void) { return events_alive; }
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = (cudaEvent_t) new std::chrono::steady_clock::time_point();
    events_alive++;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    return cudaEventCreate(e);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete (std::chrono::steady_clock::time_point *)e;
    events_alive--;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    *(std::chrono::steady_clock::time_point *)e =
        std::chrono::steady_clock::now();
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t stop) {
    auto d = *(std::chrono::steady_clock::time_point *)stop
             - *(std::chrono::steady_clock::time_point *)start;
    *ms = (float)std::chrono::duration<double, std::milli>(d).count();
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t) {
    memset(p, value, bytes);
    return cudaSuccess;
}
// Pinned host memory is plain host memory here, counted apart.
static int host_allocs_alive = 0;
int cs_emu_host_allocs_alive(void) { return host_allocs_alive; }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return last_error = cudaErrorMemoryAllocation;
    host_allocs_alive++;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    if (p) { free(p); host_allocs_alive--; }
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
// Device memory: any address inside a cudaMalloc'd allocation.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    std::lock_guard<std::mutex> l(alloc_mutex);
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    a->devicePointer = a->hostPointer = nullptr;
    for (auto *table : {&allocations, &opened})
        for (auto &kv : *table) {
            const char *b = (const char *)kv.first;
            if ((const char *)p >= b && (const char *)p < b + kv.second.bytes) {
                a->type = cudaMemoryTypeDevice;
                a->device = kv.second.device;
                a->devicePointer = (void *)p;
            }
        }
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> l(alloc_mutex);
    *total_bytes = (size_t)80 << 30;
    *free_bytes = *total_bytes - allocated_on[current_device];
    return cudaSuccess;
}
