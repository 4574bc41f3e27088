/*
 * grid_io.cuh -- the grid into the engine and the result out of it: from
 * and to host memory (through the lane's pinned staging) or device
 * arrays of any dtype and strides, a folded 1D grid's points repacked
 * into and out of its rows; the non-finite flags; and the masked path
 * that reruns a grid holding NaN or infinite values (grid_io.cu).
 */
#ifndef CS_CUDA_GRID_IO_CUH
#define CS_CUDA_GRID_IO_CUH

#include "cuda_engine.h"
#include "kernels.cuh"
#include "resources.cuh"

/* Where the grid comes from and goes to: host arrays, or device arrays. */
typedef struct cs_grid_io {
    const double *host_in;
    double *host_out;
    const cs_darray *dev_in;
    const cs_darray *dev_out;
    int out_reads_in; /* dev_out overlaps dev_in: a rerun could not read
                         the input once the result is stored */
} cs_grid_io;

/* Points of the caller's grid (a fold's points, not its rows' padding). */
size_t
cs_io_points(const cs_plan *plan);

/*
 * The grid into g (its interior), from the caller's memory, noting in
 * the lane's flag 0 whether it holds a value that is not finite; `spare`
 * is the other main grid, free until the first pass (a host grid goes
 * there first, contiguous).
 */
cs_status
cs_load_grid(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
             const cs_plan *plan, const cs_dgrid *g, char *spare);

/*
 * The result in g ready to leave, flag 1 noting whether it holds a value
 * that is not finite: a host grid's is repacked into `spare` (free: the
 * loop is over), contiguous; a device grid's is stored, unless `out`
 * overlaps the input, which a rerun reads: then it is only checked, and
 * the store waits for the verdict.  *stored says which.
 */
cs_status
cs_stage_result(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
                const cs_plan *plan, const cs_dgrid *g, char *spare,
                int *stored);

/* The staged result into the caller's memory (host: complete on
   return). */
cs_status
cs_store_grid(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
              const cs_plan *plan, const cs_dgrid *g, char *spare);

/* Flags 0 and 1 (input, result) on the host, once the queued work is
   done. */
cs_status
cs_read_flags(cs_cuda_ctx *ctx, cs_lane *lane, int flags[2]);

/*
 * The masked path, for grids that hold NaN or infinite values: every
 * step by direct.cu's kernel over the nonzero taps only, with the
 * boundary mode applied per tap (so values are NaN or infinite exactly
 * where scipy.ndimage.correlate, repeated, puts them), ping-pong between
 * buf[0] and buf[1] used as contiguous arrays of `shape`, from the input
 * read again; then the result goes out as the fast path's would.
 */
cs_status
cs_run_masked(cs_cuda_ctx *ctx, cs_lane *lane, const cs_grid_io *io,
              const ptrdiff_t shape[3], const cs_kernel *kernel,
              cs_mode mode, double cval, long steps, char *buf[2]);

#endif /* CS_CUDA_GRID_IO_CUH */
