/*
 * session.cu -- a grid kept in the engine's own padded layout across
 * calls: load once, run rounds of the same plan, let the caller read and
 * write the grid between rounds, store once.
 *
 * A distributed run on device blocks exchanges ghost layers every k
 * steps.  Run as one engine call per round, each round pays the load of
 * the block into the engine's padded grid and the store back (two passes
 * over the block, several steps' time on a GPU).  A session pays them
 * once per run.  Between rounds the caller sees the current grid as a
 * strided device array (its interior, without the engine's halo) and may
 * write into it: the next round's halo refresh reads what it wrote.
 *
 * The non-finite check stays the store's: the load flags an input that
 * holds NaN or infinity and the store a result that does; a session
 * cannot rerun its rounds on the masked path (their exchanges are the
 * caller's), so it reports the flags and the caller runs again without a
 * session.  1D grids (folded into rows) are not served.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.cuh"
#include "transfer.cuh"

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
};

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

cs_status
cs_cuda_session_open(const cs_darray *in, const ptrdiff_t shape[3],
                     const ptrdiff_t at[3], const ptrdiff_t box[3],
                     const cs_kernel *kernel, cs_mode mode, double cval,
                     long round_steps, cs_cuda_path path,
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
        st = check(ctx,
                   cudaMemsetAsync(x->s.lane->flags, 0,
                                           2 * sizeof(int), ctx->stream),
                           "cudaMemsetAsync (non-finite flags)");
    }
    if (st == CS_OK) {
        /* a session's plan never folds: the array goes in as it is */
        st = cs_cuda_load_array(ctx, &x->L.g[0], at, in, box,
                                x->s.lane->flags + 0);
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

cs_status
cs_cuda_session_run(cs_cuda_session *x, char *err, size_t err_len)
{
    cs_cuda_ctx *ctx = session_ctx(x, err, err_len);
    int cur = 0;
    CS_TRY(cs_engine_step_loop(ctx, &x->s, &x->L, &x->plan, x->mode, x->cval,
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
    /* the caller reads and writes the grid next, on other streams */
    return check(ctx, cudaStreamSynchronize(ctx->stream),
                         "cudaStreamSynchronize (session round)");
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
    const cs_grid_io io = {NULL, NULL, NULL, out, 0};
    int stored = 0;
    CS_TRY(cs_stage_result(ctx, x->s.lane, &io, &x->plan, &x->L.g[0],
                           x->buf[1], &stored));
    if (!stored) {
        CS_TRY(cs_store_grid(ctx, x->s.lane, &io, &x->plan, &x->L.g[0],
                             x->buf[1]));
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
    cs_engine_release(&x->ctx, &x->s);
    cs_kernel_free(&x->kernel);
    free(x);
}
