/*
 * engine.cuh -- what the GPU engine's two entry files share (engine.cu:
 * the call and its step loop; device_call.cu: device arrays in and out):
 * the state one call owns and the steps every call goes through.
 */
#ifndef CS_CUDA_ENGINE_CUH
#define CS_CUDA_ENGINE_CUH

#include "bands.cuh"
#include "cuda_engine.h"
#include "grid_io.cuh"
#include "kernels.cuh"
#include "resources.cuh"

/* What one call owns; released by cs_engine_release on every path. */
typedef struct cs_apply_state {
    cs_kernel composed;    /* the fused kernel */
    cs_layout2d layout;    /* its stencil2row layout (one z-plane's) */
    int layout_built;
    cs_tc3d_plan planes;   /* tc3d: which planes are dense, point, zero */
    double *plane_w;       /* tc3d: the dense planes' WA, then their WB */
    const double *wa_host; /* weight matrices to upload: the layout's, */
    const double *wb_host; /* or plane_w's two halves */
    size_t w_count;        /* doubles in each of them */
    cs_lane *lane;         /* streams, events, staging, parameters */
    cs_block *block;       /* device memory of the grids and strips */
    char *params_host;     /* the parameter block, as uploaded */
    int nonfinite;         /* the masked path ran */
} cs_apply_state;

/* The step loop's grids and what its kernels read. */
typedef struct cs_loop_args {
    cs_dgrid g[2];
    cs_band_job jobs[3];
    cs_dkernel dk, dkc;  /* the kernel; the fused one (cc3d) */
    cs_tc3d_plan tc3;    /* tc3d's planes; tc3.tile: every tensor-core pass */
} cs_loop_args;

/*
 * The plan of `steps` on `shape` (cs_plan_make with this device's
 * capabilities), and the passes it needs prepared in `s` (the fused
 * kernel, its layout).  `info` (may be NULL) gets the path and fusion.
 */
cs_status
cs_engine_plan(cs_cuda_ctx *ctx, cs_apply_state *s, const ptrdiff_t shape[3],
               const cs_kernel *kernel, cs_mode mode, long steps,
               cs_cuda_path path, cs_plan *plan, cs_run_info *info);

/* The arena (a block of s's), the two main grids (main_buf: their
   memory), the strips, and the parameters on the device. */
cs_status
cs_engine_setup_grids(cs_cuda_ctx *ctx, cs_apply_state *s,
                      const cs_plan *plan, const cs_kernel *kernel,
                      cs_loop_args *L, char *main_buf[2]);

/* The plan's fused passes and unfused steps from L->g[0]; *cur_out: the
   grid holding the result. */
cs_status
cs_engine_step_loop(cs_cuda_ctx *ctx, const cs_apply_state *s,
                    cs_loop_args *L, const cs_plan *plan, cs_mode mode,
                    double cval, int *cur_out);

/* The caller's array `a` of extents n as a grid for tb2d and tb3d to
   read or write at plain addresses: float64, unit x stride, rows and
   planes at positive whole-element strides that do not overlap, 8-byte
   aligned.  0 when it is not such an array. */
int
cs_engine_array_grid(const cs_darray *a, const ptrdiff_t n[3], cs_dgrid *g);

/* The context of one call: environment switches, message buffer. */
void
cs_engine_ctx_init(cs_cuda_ctx *ctx, const cs_interrupt *intr, char *err,
                   size_t err_len);

/* What last_run_info says before the plan is known. */
void
cs_engine_info_init(cs_run_info *info, long steps);

/* Argument checks: CS_OK or CS_ERR_INVALID with a message. */
cs_status
cs_engine_check_args(cs_cuda_ctx *ctx, const double *in, const double *out,
                     const ptrdiff_t shape[3], const cs_kernel *kernel,
                     cs_mode mode, long steps, cs_cuda_path path);

/*
 * Take a lane and set up the call's stream: the lane's own (the call then
 * waits for the result, and times the step loop: *timed), or the
 * caller's `streams->run`; the stream waits for the lane's last user and
 * for the producers' streams.
 */
cs_status
cs_engine_begin(cs_cuda_ctx *ctx, cs_apply_state *s,
                const cs_cuda_streams *streams, int *timed);

/* Give the lane and the block back (after the work queued on
   ctx->stream: the next user waits for it) and free the host side. */
void
cs_engine_release(cs_cuda_ctx *ctx, cs_apply_state *s);

/* Plan, take a lane, run with `io`, give everything back. */
cs_status
cs_engine_run(cs_cuda_ctx *ctx, const cs_grid_io *io,
              const ptrdiff_t shape[3], const cs_kernel *kernel,
              cs_mode mode, double cval, long steps, cs_cuda_path path,
              const cs_cuda_streams *streams, cs_run_info *info);

#endif /* CS_CUDA_ENGINE_CUH */
