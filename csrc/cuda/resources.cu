/*
 * resources.cu -- the engine's process-wide cache: device facts, lanes
 * (streams, events, pinned staging, parameter blocks) and device blocks
 * (see resources.cuh for the rules).
 */
#include "resources.cuh"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 64
#define MAX_IDLE_LANES 4 /* nested or concurrent calls past this destroy
                            their lane when they give it back */

typedef struct device_facts {
    int known;
    int sms, smem_optin, cc_major, image_arch;
    size_t total_bytes; /* the device's memory */
} device_facts;

/* Never launched: its attributes say which of the build's images the
   device runs (every .cu file is compiled for the same architectures). */
static __global__ void
image_probe(void)
{
}

static pthread_mutex_t cache_mutex = PTHREAD_MUTEX_INITIALIZER;
static device_facts facts[MAX_DEVICES];
static cs_lane *idle_lanes;  /* a list, most recently given first */
static int lanes_alive;      /* idle and in use */
static cs_block *idle_blocks;
static size_t idle_block_bytes;

/* ------------------------------------------------------------------------
 * device facts
 * --------------------------------------------------------------------- */

/* Is there a device to run on?  Asked until a device's facts are known
   (a device once seen stays: a call on a lost one fails where it runs). */
static cs_status
check_device_count(cs_cuda_ctx *ctx)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cs_cuda_message(ctx, "no usable CUDA device: %s",
                        e != cudaSuccess ? cudaGetErrorString(e)
                                         : "none is visible");
        (void)cudaGetLastError();
        return CS_ERR_NO_DEVICE;
    }
    return CS_OK;
}

cs_status
cs_cuda_device_facts(cs_cuda_ctx *ctx)
{
    int dev = 0;
    device_facts f;
    memset(&f, 0, sizeof(f));
    /* cudaGetDevice does not fail without a device: the count says */
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess && dev >= 0 && dev < MAX_DEVICES) {
        pthread_mutex_lock(&cache_mutex);
        f = facts[dev];
        pthread_mutex_unlock(&cache_mutex);
    }
    if (!f.known) {
        CS_TRY(check_device_count(ctx));
        CS_CUDA_CHECK(ctx, e, "cudaGetDevice");
    }
    if (dev < 0 || dev >= MAX_DEVICES) {
        cs_cuda_message(ctx, "CUDA device %d: this engine handles devices "
                             "0 to %d",
                        dev, MAX_DEVICES - 1);
        return CS_ERR_UNSUPPORTED;
    }
    ctx->device = dev;
    if (!f.known) {
        e = cudaDeviceGetAttribute(&f.cc_major,
                                   cudaDevAttrComputeCapabilityMajor, dev);
        if (e == cudaSuccess) {
            e = cudaDeviceGetAttribute(
                &f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        }
        if (e == cudaSuccess) {
            e = cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount,
                                       dev);
        }
        if (e != cudaSuccess) {
            return cs_cuda_fail(ctx, e, "cudaDeviceGetAttribute");
        }
        cudaFuncAttributes attr;
        CS_CUDA_CHECK(ctx, cudaFuncGetAttributes(&attr, image_probe),
                      "cudaFuncGetAttributes (the kernel image's "
                      "architecture)");
        f.image_arch = attr.ptxVersion;
        size_t free_bytes = 0;
        CS_CUDA_CHECK(ctx, cudaMemGetInfo(&free_bytes, &f.total_bytes),
                      "cudaMemGetInfo");
        f.known = 1;
        pthread_mutex_lock(&cache_mutex);
        facts[dev] = f;
        pthread_mutex_unlock(&cache_mutex);
    }
    ctx->sms = f.sms;
    ctx->smem_optin = f.smem_optin;
    ctx->cc_major = f.cc_major;
    ctx->image_arch = f.image_arch;
    return CS_OK;
}

cs_status
cs_cuda_device_caps(int *cc_major, int *sms, int *smem_optin,
                    int *image_arch, char *msg, size_t msg_len)
{
    cs_cuda_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.err = msg;
    ctx.err_len = msg_len;
    const cs_status status = cs_cuda_device_facts(&ctx);
    if (status == CS_OK) {
        *cc_major = ctx.cc_major;
        *sms = ctx.sms;
        *smem_optin = ctx.smem_optin;
        *image_arch = ctx.image_arch;
    }
    return status;
}

/* ------------------------------------------------------------------------
 * lanes
 * --------------------------------------------------------------------- */

static void
lane_destroy(cs_lane *l)
{
    if (l == NULL) {
        return;
    }
    /* whatever was queued on the lane's streams ends first */
    if (l->stream != NULL) {
        (void)cudaStreamSynchronize(l->stream);
    }
    if (l->band_stream != NULL) {
        (void)cudaStreamSynchronize(l->band_stream);
    }
    if (l->done_recorded) {
        (void)cudaEventSynchronize(l->done);
    }
    cudaEvent_t *events[] = {&l->loop_start, &l->loop_stop, &l->src_ready,
                             &l->band_done, &l->producer, &l->done};
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        if (*events[i] != NULL) {
            (void)cudaEventDestroy(*events[i]);
        }
    }
    for (int i = 0; i < CS_STAGE_COUNT; i++) {
        if (l->stage_idle[i] != NULL) {
            (void)cudaEventSynchronize(l->stage_idle[i]);
            (void)cudaEventDestroy(l->stage_idle[i]);
        }
        if (l->stage[i] != NULL) {
            (void)cudaFreeHost(l->stage[i]);
        }
    }
    if (l->stream != NULL) {
        (void)cudaStreamDestroy(l->stream);
    }
    if (l->band_stream != NULL) {
        (void)cudaStreamDestroy(l->band_stream);
    }
    if (l->params != NULL) {
        (void)cudaFree(l->params);
    }
    if (l->flags != NULL) {
        (void)cudaFree(l->flags);
    }
    free(l->params_key);
    free(l);
    (void)cudaGetLastError();
}

/* The streams and events of a new lane. */
static cs_status
lane_create(cs_cuda_ctx *ctx, cs_lane *l)
{
    int least = 0, greatest = 0;
    l->device = ctx->device;
    CS_CUDA_CHECK(ctx,
                  cudaStreamCreateWithFlags(&l->stream,
                                            cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags");
    CS_CUDA_CHECK(ctx, cudaDeviceGetStreamPriorityRange(&least, &greatest),
                  "cudaDeviceGetStreamPriorityRange");
    /* the band stream has the highest priority, so that its small
       kernels take SMs as a pass's main kernel frees them */
    CS_CUDA_CHECK(ctx,
                  cudaStreamCreateWithPriority(
                      &l->band_stream, cudaStreamNonBlocking, greatest),
                  "cudaStreamCreateWithPriority (bands)");
    CS_CUDA_CHECK(ctx, cudaEventCreate(&l->loop_start), "cudaEventCreate");
    CS_CUDA_CHECK(ctx, cudaEventCreate(&l->loop_stop), "cudaEventCreate");
    cudaEvent_t *plain[] = {&l->src_ready, &l->band_done, &l->producer,
                            &l->done};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        CS_CUDA_CHECK(ctx,
                      cudaEventCreateWithFlags(plain[i],
                                               cudaEventDisableTiming),
                      "cudaEventCreateWithFlags");
    }
    CS_CUDA_CHECK(ctx,
                  cudaMalloc((void **)&l->flags, CS_LANE_FLAGS * sizeof(int)),
                  "cudaMalloc (lane flags)");
    return CS_OK;
}

cs_status
cs_lane_take(cs_cuda_ctx *ctx, cs_lane **lane)
{
    *lane = NULL;
    pthread_mutex_lock(&cache_mutex);
    cs_lane **at = &idle_lanes;
    while (*at != NULL && (*at)->device != ctx->device) {
        at = &(*at)->next;
    }
    cs_lane *l = *at;
    if (l != NULL) {
        *at = l->next;
        l->next = NULL;
    }
    pthread_mutex_unlock(&cache_mutex);
    if (l != NULL) {
        *lane = l;
        return CS_OK;
    }
    l = (cs_lane *)calloc(1, sizeof(*l));
    if (l == NULL) {
        cs_cuda_message(ctx, "out of host memory (engine lane)");
        return CS_ERR_NOMEM;
    }
    cs_status st = lane_create(ctx, l);
    if (st != CS_OK) {
        lane_destroy(l);
        return st;
    }
    pthread_mutex_lock(&cache_mutex);
    lanes_alive++;
    pthread_mutex_unlock(&cache_mutex);
    *lane = l;
    return CS_OK;
}

cs_status
cs_lane_wait_done(cs_cuda_ctx *ctx, cs_lane *lane, cudaStream_t stream)
{
    /* on the same stream the order is already the stream's */
    if (lane->done_recorded && lane->done_stream != stream) {
        CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(stream, lane->done, 0),
                      "cudaStreamWaitEvent (lane's last use)");
    }
    return CS_OK;
}

void
cs_lane_give(cs_lane *lane, cudaStream_t used)
{
    if (lane == NULL) {
        return;
    }
    int keep = 1;
    if (used != NULL && cudaEventRecord(lane->done, used) == cudaSuccess) {
        lane->done_recorded = 1;
        lane->done_stream = used;
    } else if (used != NULL) {
        /* cannot order the next user after this one: wait here */
        (void)cudaGetLastError();
        keep = cudaStreamSynchronize(used) == cudaSuccess;
        (void)cudaGetLastError();
    }
    pthread_mutex_lock(&cache_mutex);
    int idle = 0;
    for (cs_lane *l = idle_lanes; l != NULL; l = l->next) {
        idle++;
    }
    keep = keep && idle < MAX_IDLE_LANES;
    if (keep) {
        lane->next = idle_lanes;
        idle_lanes = lane;
    } else {
        lanes_alive--;
    }
    pthread_mutex_unlock(&cache_mutex);
    if (!keep) {
        lane_destroy(lane);
    }
}

int
cs_lane_has_stage(cs_lane *lane)
{
    if (!lane->stage_tried) {
        lane->stage_tried = 1;
        for (int i = 0; i < CS_STAGE_COUNT; i++) {
            if (cudaHostAlloc((void **)&lane->stage[i], CS_STAGE_BYTES,
                              cudaHostAllocDefault) != cudaSuccess
                || cudaEventCreateWithFlags(&lane->stage_idle[i],
                                            cudaEventDisableTiming)
                       != cudaSuccess) {
                lane->stage[i] = NULL; /* freed below */
                (void)cudaGetLastError();
                break;
            }
            /* an event never recorded counts as complete */
        }
    }
    for (int i = 0; i < CS_STAGE_COUNT; i++) {
        if (lane->stage[i] == NULL || lane->stage_idle[i] == NULL) {
            return 0;
        }
    }
    return 1;
}

cs_status
cs_lane_params(cs_cuda_ctx *ctx, cs_lane *lane, const void *host,
               size_t len, char **dev)
{
    if (len == 0) {
        *dev = lane->params;
        return CS_OK;
    }
    if (lane->params_key != NULL && lane->params_len == len
        && memcmp(lane->params_key, host, len) == 0) {
        *dev = lane->params;
        return CS_OK;
    }
    if (len > lane->params_cap) {
        /* the old block may still be read by queued work */
        if (lane->params != NULL) {
            CS_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream),
                          "cudaStreamSynchronize (parameter block)");
            CS_CUDA_CHECK(ctx, cudaFree(lane->params), "cudaFree");
            lane->params = NULL;
            lane->params_cap = 0;
        }
        const size_t cap = len < 4096 ? 4096 : len;
        cudaError_t e = cudaMalloc((void **)&lane->params, cap);
        if (e != cudaSuccess) {
            lane->params = NULL;
            (void)cudaGetLastError();
            cs_cuda_message(ctx, "cudaMalloc of %zu bytes of kernel "
                                 "parameters failed: %s",
                            cap, cudaGetErrorString(e));
            return e == cudaErrorMemoryAllocation ? CS_ERR_DEVICE_NOMEM
                                                  : CS_ERR_CUDA;
        }
        lane->params_cap = cap;
    }
    unsigned char *key = (unsigned char *)realloc(lane->params_key, len);
    if (key == NULL) {
        cs_cuda_message(ctx, "out of host memory (parameter key)");
        return CS_ERR_NOMEM;
    }
    lane->params_key = key;
    lane->params_len = 0; /* not valid until the upload is queued */
    /* from pageable memory: the runtime stages it before returning, so
       `host` may change afterwards */
    CS_CUDA_CHECK(ctx,
                  cudaMemcpyAsync(lane->params, host, len,
                                  cudaMemcpyHostToDevice, ctx->stream),
                  "cudaMemcpyAsync (upload kernel parameters)");
    memcpy(lane->params_key, host, len);
    lane->params_len = len;
    *dev = lane->params;
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * device blocks
 * --------------------------------------------------------------------- */

static void
block_destroy(cs_block *b)
{
    if (b->idle_recorded) {
        (void)cudaEventSynchronize(b->idle);
    }
    if (b->idle != NULL) {
        (void)cudaEventDestroy(b->idle);
    }
    if (b->ptr != NULL) {
        (void)cudaFree(b->ptr);
    }
    free(b);
    (void)cudaGetLastError();
}

/* Unlink and return the idle blocks chosen by `pick`; under the mutex. */
static cs_block *
unlink_idle(int (*pick)(const cs_block *, const void *), const void *arg)
{
    cs_block *taken = NULL;
    cs_block **at = &idle_blocks;
    while (*at != NULL) {
        cs_block *b = *at;
        if (pick(b, arg)) {
            *at = b->next;
            idle_block_bytes -= b->bytes;
            b->next = taken;
            taken = b;
        } else {
            at = &b->next;
        }
    }
    return taken;
}

static int
pick_all(const cs_block *b, const void *arg)
{
    (void)b;
    (void)arg;
    return 1;
}

static void
destroy_list(cs_block *b)
{
    while (b != NULL) {
        cs_block *next = b->next;
        block_destroy(b);
        b = next;
    }
}

/* The smallest idle block of `device` with at least `bytes`, unlinked. */
static cs_block *
take_best_fit(int device, size_t bytes)
{
    pthread_mutex_lock(&cache_mutex);
    cs_block **best = NULL;
    for (cs_block **at = &idle_blocks; *at != NULL; at = &(*at)->next) {
        const cs_block *b = *at;
        if (b->device == device && b->bytes >= bytes
            && (best == NULL || b->bytes < (*best)->bytes)) {
            best = at;
        }
    }
    cs_block *b = NULL;
    if (best != NULL) {
        b = *best;
        *best = b->next;
        b->next = NULL;
        idle_block_bytes -= b->bytes;
    }
    pthread_mutex_unlock(&cache_mutex);
    return b;
}

/* The bytes the idle blocks of `device` hold. */
static size_t
idle_bytes_of(int device)
{
    size_t sum = 0;
    pthread_mutex_lock(&cache_mutex);
    for (const cs_block *b = idle_blocks; b != NULL; b = b->next) {
        sum += b->device == device ? b->bytes : 0;
    }
    pthread_mutex_unlock(&cache_mutex);
    return sum;
}

static int
pick_device(const cs_block *b, const void *arg)
{
    return b->device == *(const int *)arg;
}

static double
mib(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

cs_status
cs_block_take(cs_cuda_ctx *ctx, size_t bytes, const char *what,
              cs_block **block)
{
    *block = NULL;
    cs_block *b = take_best_fit(ctx->device, bytes);
    if (b == NULL) {
        /* what can exist: free memory now, plus idle blocks we would
           free to make room; never rely on cudaMalloc failing */
        size_t free_bytes = 0, total_bytes = 0;
        CS_CUDA_CHECK(ctx, cudaMemGetInfo(&free_bytes, &total_bytes),
                      "cudaMemGetInfo");
        const size_t could = free_bytes + idle_bytes_of(ctx->device);
        if (bytes > could) {
            cs_cuda_message(ctx,
                            "%s need %.1f MiB of device memory; the device "
                            "has %.1f MiB free of %.1f MiB",
                            what, mib(bytes), mib(could), mib(total_bytes));
            return CS_ERR_DEVICE_NOMEM;
        }
        b = (cs_block *)calloc(1, sizeof(*b));
        if (b == NULL) {
            cs_cuda_message(ctx, "out of host memory (device block)");
            return CS_ERR_NOMEM;
        }
        b->device = ctx->device;
        b->bytes = bytes;
        cudaError_t e = cudaMalloc((void **)&b->ptr, bytes);
        if (e == cudaErrorMemoryAllocation) {
            /* idle blocks may be what is in the way */
            (void)cudaGetLastError();
            pthread_mutex_lock(&cache_mutex);
            cs_block *freed = unlink_idle(pick_device, &ctx->device);
            pthread_mutex_unlock(&cache_mutex);
            destroy_list(freed);
            e = cudaMalloc((void **)&b->ptr, bytes);
        }
        if (e == cudaSuccess) {
            e = cudaEventCreateWithFlags(&b->idle, cudaEventDisableTiming);
        }
        if (e != cudaSuccess) {
            if (b->idle == NULL && b->ptr != NULL) {
                (void)cudaFree(b->ptr);
            }
            b->ptr = NULL;
            b->idle = NULL;
            free(b);
            (void)cudaGetLastError();
            cs_cuda_message(ctx, "cudaMalloc of %.1f MiB (%zu bytes: %s) "
                                 "failed: %s",
                            mib(bytes), bytes, what, cudaGetErrorString(e));
            return e == cudaErrorMemoryAllocation ? CS_ERR_DEVICE_NOMEM
                                                  : CS_ERR_CUDA;
        }
    } else if (b->idle_recorded) {
        cudaError_t e = cudaStreamWaitEvent(ctx->stream, b->idle, 0);
        if (e != cudaSuccess) {
            cs_block_give(ctx, b);
            return cs_cuda_fail(ctx, e, "cudaStreamWaitEvent (device block)");
        }
    }
    *block = b;
    return CS_OK;
}

/* Idle blocks allowed on `device`: CONVSTENCIL_CACHE_BYTES or a share
   of its memory. */
static size_t
idle_limit(int device)
{
    const char *env = getenv("CONVSTENCIL_CACHE_BYTES");
    if (env != NULL && env[0] != '\0') {
        char *end = NULL;
        unsigned long long v = strtoull(env, &end, 10);
        if (end != env && *end == '\0') {
            return (size_t)v;
        }
    }
    pthread_mutex_lock(&cache_mutex);
    const size_t total = facts[device].total_bytes;
    pthread_mutex_unlock(&cache_mutex);
    return total / CS_CACHE_FRACTION;
}

static int
pick_this(const cs_block *b, const void *arg)
{
    return b == (const cs_block *)arg;
}

void
cs_block_give(cs_cuda_ctx *ctx, cs_block *block)
{
    if (block == NULL) {
        return;
    }
    if (cudaEventRecord(block->idle, ctx->stream) == cudaSuccess) {
        block->idle_recorded = 1;
    } else {
        (void)cudaGetLastError();
        (void)cudaStreamSynchronize(ctx->stream);
        (void)cudaGetLastError();
        block->idle_recorded = 0;
    }
    /* the limit is per device: evict that device's idle blocks given
       back longest ago.  Evicting the largest first evicted the block
       just given back where the others were of its size or a little
       smaller: the next call of the same shape then allocated it again
       (and a peer mapped it again; a distributed run's k sweep after
       other grids took 2.6 times as long a run) */
    const int device = block->device;
    const size_t limit = idle_limit(device);
    cs_block *evicted = NULL;
    pthread_mutex_lock(&cache_mutex);
    block->next = idle_blocks;
    idle_blocks = block;
    idle_block_bytes += block->bytes;
    size_t on_device = 0;
    for (const cs_block *b = idle_blocks; b != NULL; b = b->next) {
        on_device += b->device == device ? b->bytes : 0;
    }
    while (on_device > limit) {
        const cs_block *oldest = NULL; /* the list runs newest first */
        for (const cs_block *b = idle_blocks; b != NULL; b = b->next) {
            if (b->device == device) {
                oldest = b;
            }
        }
        cs_block *gone = unlink_idle(pick_this, oldest);
        on_device -= gone->bytes;
        gone->next = evicted;
        evicted = gone;
    }
    pthread_mutex_unlock(&cache_mutex);
    destroy_list(evicted);
}

/* ------------------------------------------------------------------------
 * clearing and reporting
 * --------------------------------------------------------------------- */

size_t
cs_cuda_clear_cache(void)
{
    pthread_mutex_lock(&cache_mutex);
    cs_block *blocks = unlink_idle(pick_all, NULL);
    cs_lane *lanes = idle_lanes;
    idle_lanes = NULL;
    /* read again on next use (a test may change what a device reports) */
    memset(facts, 0, sizeof(facts));
    for (cs_lane *l = lanes; l != NULL; l = l->next) {
        lanes_alive--;
    }
    pthread_mutex_unlock(&cache_mutex);
    size_t freed = 0;
    for (cs_block *b = blocks; b != NULL; b = b->next) {
        freed += b->bytes;
    }
    destroy_list(blocks);
    while (lanes != NULL) {
        cs_lane *next = lanes->next;
        freed += lanes->params_cap;
        lane_destroy(lanes);
        lanes = next;
    }
    return freed;
}

void
cs_cuda_cache_info(size_t *device_bytes, int *blocks, size_t *pinned_bytes,
                   int *lanes)
{
    pthread_mutex_lock(&cache_mutex);
    size_t dev = idle_block_bytes, pinned = 0;
    int count = 0;
    for (const cs_block *b = idle_blocks; b != NULL; b = b->next) {
        count++;
    }
    for (const cs_lane *l = idle_lanes; l != NULL; l = l->next) {
        dev += l->params_cap;
        for (int i = 0; i < CS_STAGE_COUNT; i++) {
            pinned += l->stage[i] != NULL ? CS_STAGE_BYTES : 0;
        }
    }
    *device_bytes = dev;
    *blocks = count;
    *pinned_bytes = pinned;
    *lanes = lanes_alive;
    pthread_mutex_unlock(&cache_mutex);
}
