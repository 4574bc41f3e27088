/*
 * session.cu -- a grid kept in the engine's own padded layout across
 * calls: load once, run rounds of the same plan, let the caller read and
 * write the grid between rounds, store once (or let the last round write
 * the result: cs_cuda_session_run's `out`).
 *
 * A distributed run on device blocks exchanges ghost layers every k
 * steps.  Run as one engine call per round, each round pays the load of
 * the block into the engine's padded grid and the store back (two passes
 * over the block, several steps' time on a GPU).  A session pays them
 * once per run.  Between rounds the caller sees the current grid as a
 * strided device array (its interior, without the engine's halo) and may
 * write into it: the next round's halo refresh reads what it wrote.
 *
 * Opened with `ends`, a session loads only that many planes (rows of a
 * 2D grid) at each end of the box along the axis the passes take
 * windows along, where the box spans the other axes whole: what the
 * first exchange sends.  The first round's first pass reads the rest
 * from the caller's array (a second input, cs_box_input), checked as
 * the load would; a copy that needs the box before then, or a close
 * without a round, loads the rest first (complete_load).  A distributed
 * run's load of the block then costs nothing (0.58 ms of weak heat3d's
 * 88 on two GPUs before).
 *
 * The non-finite check stays the store's: the load flags an input that
 * holds NaN or infinity and the store a result that does; a session
 * cannot rerun its rounds on the masked path (their exchanges are the
 * caller's), so it reports the flags and the caller runs again without a
 * session.  1D grids (folded into rows) are not served.
 *
 * Rounds of tb2d (2D grids) and tb3d run each pass on the planes (rows)
 * along the grid's first axis that the rest of the round reads for the
 * box (the owned block) to come out exact: the caller's ghosts along
 * that axis go stale by the kernel's radius a step, so each pass skips
 * what already went stale, and the last writes the box alone.  A round
 * may also split its last pass (cs_cuda_session_run's `bands`): the
 * planes at the ends of the box that the neighbours receive go first
 * (the first blocks of the pass's launch: split_pass), the interior
 * after them, and the session's exchange stream waits for the bands
 * alone, so that an exchange queued there (or started once
 * cs_cuda_session_wait_bands returns) runs while the box's interior is
 * computed.  The last round's last pass may write the caller's result
 * instead of the grid (the box along that axis): the store then costs
 * nothing.  The ghosts it writes are cells that pass
 * neither reads nor writes; the next round waits for the exchange
 * (cs_cuda_session_exchanged).  A cell's value does not depend on the
 * passes' windows: the results are those of whole passes, bit for bit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine.cuh"
#include "transfer.cuh"

/* cuStreamWaitValue32: `stream` waits until the 32-bit word at `addr`,
   counting up, has passed `value` (flags CU_STREAM_WAIT_VALUE_GEQ);
   0 on success (a CUresult). */
typedef int (*stream_wait_fn)(cudaStream_t stream, unsigned long long addr,
                              unsigned value, unsigned flags);
#define STREAM_WAIT_VALUE_GEQ 0x0u

struct cs_cuda_session {
    cs_cuda_ctx ctx;
    cs_apply_state s;
    cs_plan plan;
    cs_loop_args L;
    char *buf[2];
    cs_kernel kernel;  /* a copy: rounds read its weights on the host
                          (the loop's cs_dkernel.host_weights) */
    cs_mode mode;
    double cval;
    ptrdiff_t at[3], box[3]; /* the box in the grid */
    long round_steps;
    cudaStream_t exchange_stream; /* the caller's exchange, beside the
                                     last pass's interior */
    cudaEvent_t exchanged;        /* recorded there when it is queued */
    int exchange_pending;         /* the next round waits for it */
    cudaEvent_t bands_written;    /* on the exchange stream: what it sends
                                     is written */
    /* a split last pass (split_pass) whose bands lead its launch: the
       value the exchange stream waits for their count (band_count) to
       reach, and the driver's wait; NULL: the bands run apart
       (split_apart), each on a stream of its own */
    unsigned band_target;
    stream_wait_fn wait_value;
    cudaStream_t band_stream[2];
    cudaEvent_t pass_ready; /* the passes before, on the main stream */
    cudaEvent_t band_done[2];
    const void *result_at; /* the array the last round wrote its result
                              into (cs_cuda_session_run's out), or NULL */
    /* opened with ends: the caller's array (`in`, the box) and the
       planes loaded at each end of the box along the window axis; while
       box_pending, the first pass reads the box from box_in */
    cs_darray in;
    ptrdiff_t ends;
    cs_box_input box_in;
    int box_pending;
};

/* The count a split pass's leading bands add to: the lane's flag 2. */
static unsigned *
band_count(const cs_cuda_session *x)
{
    return (unsigned *)(x->s.lane->flags + 2);
}

/* Point the session's context at this call's message buffer. */
static cs_cuda_ctx *
session_ctx(cs_cuda_session *x, char *err, size_t err_len)
{
    x->ctx.err = err;
    x->ctx.err_len = err_len;
    x->ctx.intr = NULL;
    if (err != NULL && err_len > 0) {
        err[0] = '\0';
    }
    return &x->ctx;
}

/* CS_OK, or the CUDA error as a message and CS_ERR_CUDA. */
static cs_status
check(cs_cuda_ctx *ctx, cudaError_t e, const char *what)
{
    return e == cudaSuccess ? CS_OK : cs_cuda_fail(ctx, e, what);
}

static cs_status
copy_kernel(cs_cuda_ctx *ctx, const cs_kernel *k, cs_kernel *out)
{
    const cs_status st = cs_kernel_init(out, k->ndim,
                                        k->size + 3 - k->ndim, k->weights);
    if (st != CS_OK) {
        cs_cuda_message(ctx, "out of host memory for the kernel");
    }
    return st;
}

/* The plan of one round, refused where a session cannot keep the grid. */
static cs_status
plan_round(cs_cuda_session *x, const ptrdiff_t shape[3], long steps,
           cs_cuda_path path)
{
    cs_cuda_ctx *ctx = &x->ctx;
    CS_TRY(cs_engine_plan(ctx, &x->s, shape, &x->kernel, x->mode, steps,
                          path, &x->plan, NULL));
    if (x->plan.fold) {
        cs_cuda_message(ctx, "a session keeps 2D and 3D grids; a 1D grid "
                             "is folded into rows");
        return CS_ERR_UNSUPPORTED;
    }
    for (int a = 0; a < 3; a++) {
        if (x->plan.run_shape[a] != shape[a]) {
            cs_cuda_message(ctx, "the engine would run a %td x %td x %td "
                                 "grid, not the caller's",
                            x->plan.run_shape[0], x->plan.run_shape[1],
                            x->plan.run_shape[2]);
            return CS_ERR_UNSUPPORTED;
        }
    }
    return CS_OK;
}

/* Whether the box of extents `box` at `at` lies in a grid of `shape`. */
static int
box_inside(const ptrdiff_t shape[3], const ptrdiff_t at[3],
           const ptrdiff_t box[3])
{
    for (int a = 0; a < 3; a++) {
        if (at[a] < 0 || box[a] < 1 || at[a] > shape[a] - box[a]) {
            return 0;
        }
    }
    return 1;
}

/* A stream of priority `priority` and no implicit order with stream 0. */
static cs_status
make_stream(cs_cuda_ctx *ctx, int priority, cudaStream_t *stream)
{
    CS_CUDA_CHECK(ctx,
                  cudaStreamCreateWithPriority(stream, cudaStreamNonBlocking,
                                               priority),
                  "cudaStreamCreateWithPriority (session)");
    return CS_OK;
}

/* cuStreamWaitValue32 through the runtime's driver entry points, or
   NULL where the driver has none or CONVSTENCIL_SPLIT_BANDS=apart asks
   for the bands' launches of their own (for comparison). */
static stream_wait_fn
find_stream_wait(void)
{
    const char *env = getenv("CONVSTENCIL_SPLIT_BANDS");
    if (env != NULL && strcmp(env, "apart") == 0) {
        return NULL;
    }
    void *found = NULL;
    cudaDriverEntryPointQueryResult result;
    const cudaError_t e = cudaGetDriverEntryPointByVersion(
        "cuStreamWaitValue32", &found, 12000, cudaEnableDefault, &result);
    if (e != cudaSuccess || result != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return (stream_wait_fn)found;
}

/* The exchange stream and the band streams, of the highest priority
   (the exchange's kernels take SMs before the interior's blocks), and
   the events that order them. */
static cs_status
make_side_streams(cs_cuda_session *x)
{
    cs_cuda_ctx *ctx = &x->ctx;
    int least = 0, greatest = 0;
    CS_CUDA_CHECK(ctx, cudaDeviceGetStreamPriorityRange(&least, &greatest),
                  "cudaDeviceGetStreamPriorityRange (session)");
    CS_TRY(make_stream(ctx, greatest, &x->exchange_stream));
    CS_TRY(make_stream(ctx, greatest, &x->band_stream[0]));
    CS_TRY(make_stream(ctx, greatest, &x->band_stream[1]));
    cudaEvent_t *events[] = {&x->exchanged, &x->bands_written,
                             &x->pass_ready, &x->band_done[0],
                             &x->band_done[1]};
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        CS_CUDA_CHECK(ctx,
                      cudaEventCreateWithFlags(events[i],
                                               cudaEventDisableTiming),
                      "cudaEventCreateWithFlags (session)");
    }
    return CS_OK;
}

static int
window_axis(const cs_cuda_session *x);

/* The part of the box from `from` to `to` along axis a, from the
   caller's array into the grid, noting a non-finite input in flag 0. */
static cs_status
load_part(cs_cuda_session *x, int a, ptrdiff_t from, ptrdiff_t to)
{
    ptrdiff_t at[3], ext[3];
    cs_darray part = x->in;
    for (int b = 0; b < 3; b++) {
        at[b] = x->at[b];
        ext[b] = x->box[b];
    }
    at[a] += from;
    ext[a] = to - from;
    part.data = (char *)part.data + from * part.strides[a];
    return cs_cuda_load_array(&x->ctx, &x->L.g[0], at, &part, ext,
                              x->s.lane->flags + 0);
}

/* Load the box whole, or with `ends` (see the top) only its ends where
   the first pass can read the rest from the caller's array: the passes
   take windows, a round has two passes or more (the first is then
   neither split nor the result's), the box spans the other axes whole
   and the caller's array is one the passes read. */
static cs_status
load_box(cs_cuda_session *x, ptrdiff_t ends)
{
    const int a = window_axis(x);
    const cs_fusion_plan *f = &x->plan.fusion;
    int partial = a >= 0 && ends > 0 && 2 * ends < x->box[a]
                  && f->passes + (f->remainder > 0) >= 2;
    for (int b = 0; b < 3 && partial; b++) {
        partial = b == a || (x->at[b] == 0
                             && x->box[b] == x->L.g[0].n[b]);
    }
    if (partial) {
        memset(&x->box_in, 0, sizeof(x->box_in));
        partial = cs_engine_array_grid(&x->in, x->box, &x->box_in.grid);
        x->box_in.at = x->at[a];
    }
    if (!partial) {
        return load_part(x, 0, 0, x->box[0]);
    }
    x->ends = ends;
    CS_TRY(load_part(x, a, 0, ends));
    CS_TRY(load_part(x, a, x->box[a] - ends, x->box[a]));
    x->box_pending = 1;
    return CS_OK;
}

/* The rest of a box loaded at its ends, where something needs it before
   the first pass has read it. */
static cs_status
complete_load(cs_cuda_session *x)
{
    if (!x->box_pending) {
        return CS_OK;
    }
    const int a = window_axis(x);
    CS_TRY(load_part(x, a, x->ends, x->box[a] - x->ends));
    x->box_pending = 0;
    return CS_OK;
}

cs_status
cs_cuda_session_open(const cs_darray *in, const ptrdiff_t shape[3],
                     const ptrdiff_t at[3], const ptrdiff_t box[3],
                     const cs_kernel *kernel, cs_mode mode, double cval,
                     long round_steps, cs_cuda_path path, ptrdiff_t ends,
                     cs_cuda_session **out, char *err, size_t err_len)
{
    *out = NULL;
    cs_cuda_session *x = (cs_cuda_session *)calloc(1, sizeof(*x));
    if (x == NULL) {
        cs_say(err, err_len, "out of host memory for a session");
        return CS_ERR_NOMEM;
    }
    cs_engine_ctx_init(&x->ctx, NULL, err, err_len);
    cs_cuda_ctx *ctx = &x->ctx;
    x->mode = mode;
    x->cval = cval;
    x->round_steps = round_steps;
    x->in = *in;
    for (int a = 0; a < 3; a++) {
        x->at[a] = at[a];
        x->box[a] = box[a];
    }
    cs_status st = cs_engine_check_args(ctx, (const double *)in->data,
                                        (const double *)in->data, shape,
                                        kernel, mode, round_steps, path);
    if (st == CS_OK && (in->dtype != CS_DTYPE_FLOAT64 || round_steps < 1)) {
        cs_cuda_message(ctx, "a session loads a float64 grid and runs "
                             "rounds of at least one step");
        st = CS_ERR_INVALID;
    }
    if (st == CS_OK && !box_inside(shape, at, box)) {
        cs_cuda_message(ctx, "the box at %td, %td, %td of %td x %td x %td "
                             "is not in the %td x %td x %td grid",
                        at[0], at[1], at[2], box[0], box[1], box[2],
                        shape[0], shape[1], shape[2]);
        st = CS_ERR_INVALID;
    }
    if (st == CS_OK) {
        st = copy_kernel(ctx, kernel, &x->kernel);
    }
    if (st == CS_OK) {
        st = plan_round(x, shape, round_steps, path);
    }
    int timed = 0;
    if (st == CS_OK) {
        st = cs_engine_begin(ctx, &x->s, NULL, &timed);
    }
    if (st == CS_OK) {
        st = cs_engine_setup_grids(ctx, &x->s, &x->plan, &x->kernel, &x->L,
                                   x->buf);
    }
    if (st == CS_OK) {
        st = make_side_streams(x);
    }
    if (st == CS_OK) {
        /* the non-finite flags and the band count */
        st = check(ctx,
                   cudaMemsetAsync(x->s.lane->flags, 0, 3 * sizeof(int),
                                   ctx->stream),
                   "cudaMemsetAsync (session flags)");
        /* (images before sm_90 run checked kernels only, which tb3d's
           bands have not) */
        x->wait_value = cs_cuda_checked_only(ctx) ? NULL
                                                  : find_stream_wait();
    }
    if (st == CS_OK && ends < 0) {
        cs_cuda_message(ctx, "a session loads ends of 0 planes or more, "
                             "not %td", ends);
        st = CS_ERR_INVALID;
    }
    if (st == CS_OK) {
        /* a session's plan never folds: the array goes in as it is */
        st = load_box(x, ends);
    }
    if (st == CS_OK) {
        st = check(ctx, cudaStreamSynchronize(ctx->stream),
                           "cudaStreamSynchronize (session load)");
    }
    if (st != CS_OK) {
        cs_cuda_session_free(x);
        return st;
    }
    *out = x;
    return CS_OK;
}

/* ------------------------------------------------------------------------
 * windowed rounds
 * --------------------------------------------------------------------- */

typedef cs_status (*blocked_pass_fn)(cs_cuda_ctx *, const cs_dgrid *,
                                     const cs_dgrid *, const cs_dkernel *,
                                     int, cs_mode, double, int *, int *,
                                     const ptrdiff_t *, cs_lead_bands *,
                                     const cs_box_input *);

/* The axis (of the three) along which the passes take windows: the
   planes of tb3d, the rows of tb2d on a 2D grid; -1: whole passes. */
static int
window_axis(const cs_cuda_session *x)
{
    if (x->plan.pass == CS_PASS_TB3D) {
        return 0;
    }
    return x->plan.pass == CS_PASS_TB2D && x->plan.run_shape[0] == 1 ? 1
                                                                     : -1;
}

/* The cells along axis a that the pass ending after `done` of the
   round's steps writes: the box and, on each side with ghosts, the cells
   the round's remaining steps read from there (the kernel's radius a
   step).  Cells beyond are stale by then, or ghosts the next exchange
   writes. */
static void
pass_window(const cs_cuda_session *x, int a, long done, ptrdiff_t w[2])
{
    const ptrdiff_t n = x->L.g[0].n[a];
    const ptrdiff_t end = x->at[a] + x->box[a];
    const ptrdiff_t reach =
        (ptrdiff_t)(x->round_steps - done) * ((x->L.dk.size[a] - 1) / 2);
    w[0] = x->at[a] > reach ? x->at[a] - reach : 0;
    w[1] = n - end > reach ? end + reach : n;
}

/* The exchange stream waits for `ready` (recorded on the stream that
   wrote what it sends), then marks the bands written. */
static cs_status
exchange_after(cs_cuda_session *x, cs_cuda_ctx *ctx, cudaEvent_t ready)
{
    CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(x->exchange_stream, ready, 0),
                  "cudaStreamWaitEvent (session exchange)");
    CS_CUDA_CHECK(ctx, cudaEventRecord(x->bands_written, x->exchange_stream),
                  "cudaEventRecord (session bands written)");
    return CS_OK;
}

/* The bands of a split pass, ends[0] and ends[1] (those not empty), in
   front of the interior `inner` in one launch; the exchange stream waits
   for their count.  A driver that refuses the wait gets the exchange
   after the whole pass, and the bands apart from then on. */
static cs_status
split_lead(cs_cuda_session *x, cs_cuda_ctx *ctx, blocked_pass_fn run,
           const cs_dgrid *src, const cs_dgrid *dst, int depth,
           const ptrdiff_t inner[2], const ptrdiff_t ends[2][2])
{
    cs_lead_bands lead;
    memset(&lead, 0, sizeof(lead));
    for (int b = 0; b < 2; b++) {
        if (ends[b][0] < ends[b][1]) {
            lead.at[lead.count][0] = ends[b][0];
            lead.at[lead.count][1] = ends[b][1];
            lead.count++;
        }
    }
    lead.done = band_count(x);
    CS_TRY(run(ctx, src, dst, &x->L.dk, depth, x->mode, x->cval, NULL, NULL,
               inner, &lead, NULL));
    x->band_target += lead.arrivals;
    const int r = x->wait_value(x->exchange_stream,
                                (unsigned long long)(uintptr_t)lead.done,
                                x->band_target, STREAM_WAIT_VALUE_GEQ);
    if (r != 0) {
        x->wait_value = NULL;
        CS_CUDA_CHECK(ctx, cudaEventRecord(x->pass_ready, ctx->stream),
                      "cudaEventRecord (session pass done)");
        return exchange_after(x, ctx, x->pass_ready);
    }
    CS_CUDA_CHECK(ctx, cudaEventRecord(x->bands_written, x->exchange_stream),
                  "cudaEventRecord (session bands written)");
    return CS_OK;
}

/* The same with launches of their own: each band on a band stream of its
   own, by themselves, then the interior on the main stream; the exchange
   stream waits for the bands.  (Launched beside the interior, even on
   streams of a higher priority, the bands waited about 108 us for the
   interior's blocks to free SMs and took as long in the end; with NCCL's
   kernels beside it the interior ran 13% slower:
   trace_multigpu.py's h200x2_trace_weak_heat3d_{e764309,
   split_wait_*_9e36fca}.md.) */
static cs_status
split_apart(cs_cuda_session *x, cs_cuda_ctx *ctx, blocked_pass_fn run,
            const cs_dgrid *src, const cs_dgrid *dst, int depth,
            const ptrdiff_t inner[2], const ptrdiff_t ends[2][2])
{
    CS_CUDA_CHECK(ctx, cudaEventRecord(x->pass_ready, ctx->stream),
                  "cudaEventRecord (session last pass ready)");
    CS_CUDA_CHECK(ctx,
                  cudaStreamWaitEvent(x->exchange_stream, x->pass_ready, 0),
                  "cudaStreamWaitEvent (session exchange)");
    cs_cuda_ctx side = *ctx;
    for (int b = 0; b < 2; b++) {
        if (ends[b][0] == ends[b][1]) {
            continue;
        }
        side.stream = x->band_stream[b];
        CS_CUDA_CHECK(ctx,
                      cudaStreamWaitEvent(side.stream, x->pass_ready, 0),
                      "cudaStreamWaitEvent (session band)");
        CS_TRY(run(&side, src, dst, &x->L.dk, depth, x->mode, x->cval,
                   NULL, NULL, ends[b], NULL, NULL));
        CS_CUDA_CHECK(ctx, cudaEventRecord(x->band_done[b], side.stream),
                      "cudaEventRecord (session band done)");
        CS_CUDA_CHECK(ctx,
                      cudaStreamWaitEvent(ctx->stream, x->band_done[b], 0),
                      "cudaStreamWaitEvent (session interior)");
        CS_CUDA_CHECK(ctx,
                      cudaStreamWaitEvent(x->exchange_stream,
                                          x->band_done[b], 0),
                      "cudaStreamWaitEvent (session exchange)");
    }
    CS_CUDA_CHECK(ctx, cudaEventRecord(x->bands_written, x->exchange_stream),
                  "cudaEventRecord (session bands written)");
    return run(ctx, src, dst, &x->L.dk, depth, x->mode, x->cval, NULL, NULL,
               inner, NULL, NULL);
}

/* The last pass of a split round: bands[0] and bands[1] planes at the
   ends of the window `w` (the box) go first, the rest after them, and
   the exchange stream waits for the bands alone: the exchange runs
   while the interior is computed.  Where the driver lets a stream wait
   for a count in memory, the bands are the first blocks of the pass's
   one launch (split_lead): they take the SMs first, and the interior's
   blocks fill the rest of the GPU at once.  Otherwise they run apart
   (split_apart), and the GPU runs the bands alone for a while.  A box
   without an interior between its bands runs whole, and the exchange
   waits for it (*split = 0). */
static cs_status
split_pass(cs_cuda_session *x, cs_cuda_ctx *ctx, blocked_pass_fn run,
           const cs_dgrid *src, const cs_dgrid *dst, int depth,
           const ptrdiff_t w[2], const ptrdiff_t bands[2], int *split)
{
    const ptrdiff_t inner[2] = {w[0] + bands[0], w[1] - bands[1]};
    *split = inner[0] < inner[1];
    if (!*split) {
        CS_TRY(run(ctx, src, dst, &x->L.dk, depth, x->mode, x->cval, NULL,
                   NULL, w, NULL, NULL));
        CS_CUDA_CHECK(ctx, cudaEventRecord(x->pass_ready, ctx->stream),
                      "cudaEventRecord (session pass done)");
        return exchange_after(x, ctx, x->pass_ready);
    }
    const ptrdiff_t ends[2][2] = {{w[0], inner[0]}, {inner[1], w[1]}};
    if (x->wait_value != NULL) {
        return split_lead(x, ctx, run, src, dst, depth, inner, ends);
    }
    return split_apart(x, ctx, run, src, dst, depth, inner, ends);
}

/* A round of tb2d's or tb3d's passes in windows along axis a (see the
   top); bands non-NULL: the last pass split; result non-NULL: the last
   pass writes it instead of a main grid (noting a value that is not
   finite in the lane's flag 1, as the store would).  *cur_out as
   cs_engine_step_loop's. */
static cs_status
windowed_passes(cs_cuda_session *x, cs_cuda_ctx *ctx, int a,
                const ptrdiff_t bands[2], const cs_dgrid *result, int *split,
                int *cur_out)
{
    const blocked_pass_fn run = x->plan.pass == CS_PASS_TB3D
                                    ? cs_cuda_tb3d_pass
                                    : cs_cuda_tb2d_pass;
    const cs_fusion_plan *f = &x->plan.fusion;
    const long total = f->passes + (f->remainder > 0);
    long done = 0;
    for (long i = 0; i < total; i++) {
        const int depth = (int)(i < f->passes ? f->depth : f->remainder);
        const cs_dgrid *src = &x->L.g[i % 2], *dst = &x->L.g[(i + 1) % 2];
        done += depth;
        ptrdiff_t w[2];
        pass_window(x, a, done, w);
        const int last = i + 1 == total;
        if (last && bands != NULL) {
            CS_TRY(split_pass(x, ctx, run, src, dst, depth, w, bands,
                              split));
        } else if (last && result != NULL) {
            CS_TRY(run(ctx, src, result, &x->L.dk, depth, x->mode, x->cval,
                       NULL, x->s.lane->flags + 1, w, NULL, NULL));
        } else if (i == 0 && x->box_pending) {
            /* the box from the caller's array (load_box) */
            CS_TRY(run(ctx, src, dst, &x->L.dk, depth, x->mode, x->cval,
                       x->s.lane->flags + 0, NULL, w, NULL, &x->box_in));
            x->box_pending = 0;
        } else {
            CS_TRY(run(ctx, src, dst, &x->L.dk, depth, x->mode, x->cval,
                       NULL, NULL, w, NULL, NULL));
        }
    }
    *cur_out = (int)(total % 2);
    return CS_OK;
}

/* The round's passes: windowed where the plan allows, else the engine's
   step loop (an exchange then waits for all of it; `result` is left to
   the caller). */
static cs_status
round_passes(cs_cuda_session *x, cs_cuda_ctx *ctx, const ptrdiff_t bands[2],
             const cs_dgrid *result, int *split, int *cur)
{
    const int a = window_axis(x);
    if (a >= 0) {
        return windowed_passes(x, ctx, a, bands, result, split, cur);
    }
    CS_TRY(cs_engine_step_loop(ctx, &x->s, &x->L, &x->plan, x->mode, x->cval,
                               cur));
    if (bands == NULL) {
        return CS_OK;
    }
    CS_CUDA_CHECK(ctx, cudaEventRecord(x->pass_ready, ctx->stream),
                  "cudaEventRecord (session round done)");
    return exchange_after(x, ctx, x->pass_ready);
}

/* The grid (g[0]) into the caller's float64 device array `out`, whole,
   noting a value that is not finite in the lane's flag 1. */
static cs_status
store_result(cs_cuda_session *x, cs_cuda_ctx *ctx, const cs_darray *out)
{
    const cs_grid_io io = {NULL, NULL, NULL, out, 0};
    int stored = 0;
    CS_TRY(cs_stage_result(ctx, x->s.lane, &io, &x->plan, &x->L.g[0],
                           x->buf[1], &stored));
    if (!stored) {
        CS_TRY(cs_store_grid(ctx, x->s.lane, &io, &x->plan, &x->L.g[0],
                             x->buf[1]));
    }
    return CS_OK;
}

/* Refuse what a round cannot be given (see cs_cuda_session_run). */
static cs_status
check_round(cs_cuda_session *x, cs_cuda_ctx *ctx, const ptrdiff_t *bands,
            const cs_darray *out)
{
    if (x->result_at != NULL) {
        cs_cuda_message(ctx, "the session's last round has run: its result "
                             "is in the array that round was given");
        return CS_ERR_INVALID;
    }
    if (bands != NULL && out != NULL) {
        cs_cuda_message(ctx, "the last round (the one given the result's "
                             "array) has no exchange after it to split for");
        return CS_ERR_INVALID;
    }
    if (out != NULL && out->dtype != CS_DTYPE_FLOAT64) {
        cs_cuda_message(ctx, "a session's result goes into a float64 array");
        return CS_ERR_INVALID;
    }
    if (bands != NULL && (bands[0] < 0 || bands[1] < 0)) {
        cs_cuda_message(ctx, "a split round's bands are planes at the ends "
                             "of the box, not %td and %td", bands[0],
                        bands[1]);
        return CS_ERR_INVALID;
    }
    return CS_OK;
}

cs_status
cs_cuda_session_run(cs_cuda_session *x, const ptrdiff_t *bands,
                    const cs_darray *out, int *split, char *err,
                    size_t err_len)
{
    cs_cuda_ctx *ctx = session_ctx(x, err, err_len);
    int cur = 0;
    *split = 0;
    CS_TRY(check_round(x, ctx, bands, out));
    /* the last pass writes the result where it takes windows and `out`
       is an array it can write (not the store's two passes over it) */
    cs_dgrid result;
    const int direct = out != NULL && window_axis(x) >= 0
                       && cs_engine_array_grid(out, x->plan.run_shape,
                                               &result);
    if (x->exchange_pending) {
        CS_CUDA_CHECK(ctx, cudaStreamWaitEvent(ctx->stream, x->exchanged, 0),
                      "cudaStreamWaitEvent (session exchanged)");
        x->exchange_pending = 0;
    }
    CS_TRY(round_passes(x, ctx, bands, direct ? &result : NULL, split,
                        &cur));
    if (cur == 1) {
        /* the result's grid becomes g[0], where the next round starts */
        const cs_dgrid g = x->L.g[0];
        char *b = x->buf[0];
        x->L.g[0] = x->L.g[1];
        x->L.g[1] = g;
        x->buf[0] = x->buf[1];
        x->buf[1] = b;
    }
    if (out != NULL) {
        if (!direct) {
            CS_TRY(store_result(x, ctx, out));
        }
        x->result_at = out->data;
    } else if (bands != NULL) {
        return CS_OK; /* queued: the caller's exchange follows */
    }
    /* the caller reads and writes the grid (or the result) next, on
       other streams */
    return check(ctx, cudaStreamSynchronize(ctx->stream),
                 "cudaStreamSynchronize (session round)");
}

void *
cs_cuda_session_exchange_stream(const cs_cuda_session *x)
{
    return (void *)x->exchange_stream;
}

cs_status
cs_cuda_session_wait_bands(cs_cuda_session *x, char *err, size_t err_len)
{
    cs_cuda_ctx *ctx = session_ctx(x, err, err_len);
    return check(ctx, cudaEventSynchronize(x->bands_written),
                 "cudaEventSynchronize (session bands)");
}

cs_status
cs_cuda_session_exchanged(cs_cuda_session *x, char *err, size_t err_len)
{
    cs_cuda_ctx *ctx = session_ctx(x, err, err_len);
    CS_TRY(check(ctx, cudaEventRecord(x->exchanged, x->exchange_stream),
                 "cudaEventRecord (session exchanged)"));
    x->exchange_pending = 1;
    return CS_OK;
}

const char *
cs_cuda_session_bands(const cs_cuda_session *x)
{
    return x->wait_value != NULL ? "lead" : "apart";
}

const char *
cs_cuda_session_path(const cs_cuda_session *x)
{
    return x->plan.path == CS_CUDA_PATH_TENSOR_CORE ? "tensor-core"
                                                    : "cuda-core";
}

void
cs_cuda_session_view(const cs_cuda_session *x, cs_darray *view,
                     ptrdiff_t shape[3])
{
    const cs_dgrid *g = &x->L.g[0];
    view->data = g->origin;
    view->dtype = CS_DTYPE_FLOAT64;
    view->strides[0] = g->plane * (ptrdiff_t)sizeof(double);
    view->strides[1] = g->pitch * (ptrdiff_t)sizeof(double);
    view->strides[2] = (ptrdiff_t)sizeof(double);
    for (int a = 0; a < 3; a++) {
        shape[a] = g->n[a];
    }
}

void
cs_cuda_session_halo(const cs_cuda_session *x, ptrdiff_t halo[3])
{
    for (int a = 0; a < 3; a++) {
        halo[a] = x->L.g[0].halo[a];
    }
}

/* Whether a copy of the box at `starts` of `sizes` (put: into the grid)
   needs the box loaded whole before the first pass: a put into the box
   (the first pass would read the caller's array there), a read of its
   cells between the ends. */
static int
needs_box(const cs_cuda_session *x, const ptrdiff_t starts[3],
          const ptrdiff_t sizes[3], int put)
{
    if (!x->box_pending) {
        return 0;
    }
    const int a = window_axis(x);
    ptrdiff_t lo = x->at[a], hi = x->at[a] + x->box[a];
    if (!put) { /* the cells between the ends */
        lo += x->ends;
        hi -= x->ends;
    }
    return starts[a] < hi && starts[a] + sizes[a] > lo;
}

cs_status
cs_cuda_session_copy(cs_cuda_session *x, const ptrdiff_t starts[3],
                     const ptrdiff_t sizes[3], void *buf, int put,
                     char *err, size_t err_len)
{
    cs_cuda_ctx *ctx = session_ctx(x, err, err_len);
    const cs_dgrid *g = &x->L.g[0];
    for (int a = 0; a < 3; a++) {
        if (starts[a] < 0 || sizes[a] < 0 || starts[a] > g->n[a] - sizes[a]) {
            cs_cuda_message(ctx, "the box at %td, %td, %td of %td x %td x "
                                 "%td is not in the %td x %td x %td grid",
                            starts[0], starts[1], starts[2], sizes[0],
                            sizes[1], sizes[2], g->n[0], g->n[1], g->n[2]);
            return CS_ERR_INVALID;
        }
    }
    if (sizes[0] == 0 || sizes[1] == 0 || sizes[2] == 0) {
        return CS_OK;
    }
    if (needs_box(x, starts, sizes, put)) {
        CS_TRY(complete_load(x));
    }
    /* the grid's planes are whole numbers of rows: one pitched 3D copy */
    const size_t row = sizeof(double);
    cudaPitchedPtr grid = make_cudaPitchedPtr(
        g->origin + starts[0] * g->plane + starts[1] * g->pitch + starts[2],
        (size_t)g->pitch * row, (size_t)sizes[2] * row,
        (size_t)(g->plane / g->pitch));
    cudaPitchedPtr box = make_cudaPitchedPtr(buf, (size_t)sizes[2] * row,
                                             (size_t)sizes[2] * row,
                                             (size_t)sizes[1]);
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof(p));
    p.srcPtr = put ? box : grid;
    p.dstPtr = put ? grid : box;
    p.extent = make_cudaExtent((size_t)sizes[2] * row, (size_t)sizes[1],
                               (size_t)sizes[0]);
    p.kind = cudaMemcpyDeviceToDevice;
    CS_TRY(check(ctx, cudaMemcpy3DAsync(&p, ctx->stream),
                 "cudaMemcpy3DAsync (session box)"));
    return check(ctx, cudaStreamSynchronize(ctx->stream),
                 "cudaStreamSynchronize (session box)");
}

cs_status
cs_cuda_session_close(cs_cuda_session *x, const cs_darray *out,
                      int *nonfinite, char *err, size_t err_len)
{
    cs_cuda_ctx *ctx = session_ctx(x, err, err_len);
    *nonfinite = 0;
    if (x->result_at == NULL) {
        CS_TRY(complete_load(x));
        CS_TRY(store_result(x, ctx, out));
    } else if (x->result_at != out->data) {
        cs_cuda_message(ctx, "the session's last round wrote its result "
                             "into another array");
        return CS_ERR_INVALID;
    }
    int flags[2] = {0, 0};
    CS_TRY(cs_read_flags(ctx, x->s.lane, flags));
    *nonfinite = flags[0] || flags[1];
    return check(ctx, cudaStreamSynchronize(ctx->stream),
                         "cudaStreamSynchronize (session store)");
}

void
cs_cuda_session_free(cs_cuda_session *x)
{
    if (x == NULL) {
        return;
    }
    /* the last caller's message buffer may be gone */
    x->ctx.err = NULL;
    x->ctx.err_len = 0;
    if (x->exchange_pending) { /* the lane's next user waits for it */
        (void)cudaStreamWaitEvent(x->ctx.stream, x->exchanged, 0);
    }
    cs_engine_release(&x->ctx, &x->s);
    cudaEvent_t events[] = {x->exchanged, x->bands_written, x->pass_ready,
                            x->band_done[0], x->band_done[1]};
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        if (events[i] != NULL) {
            (void)cudaEventDestroy(events[i]);
        }
    }
    /* work still queued on a stream ends before its resources go */
    cudaStream_t streams[] = {x->exchange_stream, x->band_stream[0],
                              x->band_stream[1]};
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        if (streams[i] != NULL) {
            (void)cudaStreamDestroy(streams[i]);
        }
    }
    cs_kernel_free(&x->kernel);
    free(x);
}
