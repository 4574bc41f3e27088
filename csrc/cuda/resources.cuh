/*
 * resources.cuh -- what the GPU engine keeps between calls, so that a
 * call does not pay for setting up again what the last one released:
 *
 * - the device's facts (SM count, shared memory a block may opt into,
 *   compute capability), read once per device;
 * - lanes: the streams, events, pinned staging buffers and device-side
 *   parameter block one apply() runs with, handed to one call at a time;
 * - device blocks: the arenas that hold the padded grids, kept by size
 *   and handed to the next call that needs as much or less.
 *
 * All of it is process-wide, guarded by one mutex held only while the
 * lists change (never across a run: a nested call, from a callback,
 * takes a lane and blocks of its own).  Work queued by one call on a
 * resource is ordered before the next call's by events: a lane or block
 * given back records an event on the stream that used it, and the next
 * taker's stream waits for it on the device (no host wait).
 *
 * Idle device blocks are kept up to a limit (CS_CACHE_FRACTION of the
 * device's memory, or CONVSTENCIL_CACHE_BYTES), those given back
 * longest ago freed first; when a cudaMalloc fails, every idle block is
 * freed and it is tried once more.  cs_cuda_clear_cache() frees every
 * idle lane and block.
 */
#ifndef CS_CUDA_RESOURCES_CUH
#define CS_CUDA_RESOURCES_CUH

#include "check.cuh"
#include "cuda_engine.h"

#define CS_STAGE_COUNT 4                   /* pinned staging buffers */
#define CS_STAGE_BYTES ((size_t)16 << 20)  /* bytes in each */
#define CS_CACHE_FRACTION 4 /* idle blocks: at most 1/4 of device memory */
#define CS_LANE_FLAGS 4     /* ints of a lane's flag block */

/* One call's streams, events, staging and parameters. */
typedef struct cs_lane {
    int device;
    cudaStream_t stream;      /* the engine's own stream */
    cudaStream_t band_stream; /* band fix-ups beside a pass, high priority */
    cudaEvent_t loop_start, loop_stop;  /* time the step loop */
    cudaEvent_t src_ready, band_done;   /* order the band stream */
    cudaEvent_t producer;     /* a producer's stream, waited for */
    cudaEvent_t done;         /* the last call's work, on its stream */
    int done_recorded;
    cudaStream_t done_stream; /* that stream: a taker on it need not wait */
    /* pinned host staging (NULL until first needed, or when pinned
       memory could not be had: then copies go from pageable memory) */
    char *stage[CS_STAGE_COUNT];
    cudaEvent_t stage_idle[CS_STAGE_COUNT]; /* its last DMA is over */
    int stage_tried;
    /* kernel parameters on the device, and the bytes they were made
       from, so that a call with the same weights uploads nothing */
    int *flags; /* device: CS_LANE_FLAGS ints: 0 and 1 the non-finite
                   checks, 2 a session's band count (session.cu) */
    char *params;
    size_t params_cap;
    unsigned char *params_key;
    size_t params_len;
    struct cs_lane *next;
} cs_lane;

/* Device memory for one call's grids. */
typedef struct cs_block {
    char *ptr;
    size_t bytes;
    int device;
    cudaEvent_t idle; /* the last work that used it, on its stream */
    int idle_recorded;
    struct cs_block *next;
} cs_block;

/*
 * The current device and its facts into ctx (device, sms, smem_optin,
 * cc_major): CS_ERR_NO_DEVICE when there is none, with the reason.
 */
cs_status
cs_cuda_device_facts(cs_cuda_ctx *ctx);

/* A lane of ctx->device for this call (an idle one, or a new one). */
cs_status
cs_lane_take(cs_cuda_ctx *ctx, cs_lane **lane);

/*
 * Give a lane back once its work is queued on `used` (the stream it ran
 * on); the next taker waits for that work.  Never fails: a lane whose
 * event cannot be recorded is synchronized and kept, or destroyed.
 */
void
cs_lane_give(cs_lane *lane, cudaStream_t used);

/*
 * Make `stream` wait for what lane's last user queued.  A taker calls
 * this once it knows the stream it runs on.
 */
cs_status
cs_lane_wait_done(cs_cuda_ctx *ctx, cs_lane *lane, cudaStream_t stream);

/*
 * A block of at least `bytes` for ctx->device, ordered after its last
 * use on ctx->stream.  First checks that `bytes` can exist on the device
 * (cudaMemGetInfo plus idle blocks): CS_ERR_DEVICE_NOMEM naming the
 * sizes when not.  `what` names the contents for that message.
 */
cs_status
cs_block_take(cs_cuda_ctx *ctx, size_t bytes, const char *what,
              cs_block **block);

/* Give a block back after its last use on ctx->stream. */
void
cs_block_give(cs_cuda_ctx *ctx, cs_block *block);

/*
 * The lane's parameter block holding `len` bytes equal to `host`:
 * uploaded on ctx->stream unless it holds them already.  *dev gets it.
 */
cs_status
cs_lane_params(cs_cuda_ctx *ctx, cs_lane *lane, const void *host,
               size_t len, char **dev);

/*
 * The lane's pinned staging buffers, allocated on first use; 0 when
 * pinned memory cannot be had (copies then go from pageable memory).
 */
int
cs_lane_has_stage(cs_lane *lane);

#endif /* CS_CUDA_RESOURCES_CUH */
