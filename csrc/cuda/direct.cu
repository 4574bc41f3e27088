/*
 * direct.cu -- one step straight from a caller's device array into a
 * float64 device array: no padded grid, no halo fill, no repacking.
 *
 * A single time step on the padded path costs a load (repack into the
 * padded grid), a halo fill, the step and a store: four launches and
 * three round trips of the grid through memory.  Here one launch reads
 * the input array where it is (any real dtype, any strides), applies the
 * boundary mode per tap where a point is within reach of an edge
 * (cs_extend_index's mapping, host_device.h; constant mode reads
 * cval), and writes the output array.  The taps are the kernel's nonzero
 * weights only, so a zero weight never multiplies a NaN or an infinity
 * (scipy.ndimage skips them too).  A scheme of many steps=1 calls on
 * device arrays runs it (device_call.cu, cs_cuda_apply_device) where
 * onestep.cu's kernels, built for float64 arrays with unit x stride and
 * the common kernel shapes, do not take the call.
 */
#include "direct.cuh"
#include "convert.cuh"
#include "kernels.cuh"

#include <stdint.h>

/* ------------------------------------------------------------------------
 * kernel
 * --------------------------------------------------------------------- */

typedef struct direct_params {
    const char *in;        /* element (0, 0, 0) */
    ptrdiff_t in_s[3];     /* bytes */
    char *out;
    ptrdiff_t out_s[3];
    ptrdiff_t n[3];        /* extents z, y, x */
    int r[3];              /* the kernel's radius per axis */
    const double *tap_w;   /* ntaps weights, device */
    const int *tap_d;      /* 3 * ntaps offsets (dz, dy, dx) - r, device */
    int ntaps;
    cs_mode mode;
    double cval;
    int row_threads;       /* threads per row of a block: a power of two */
    int *nonfinite;        /* NULL, or set to 1 where a result is not finite */
} direct_params;

/* Element (z, y, x) of the input as float64. */
template <class T>
static __device__ __forceinline__ double
read_in(const direct_params &p, ptrdiff_t z, ptrdiff_t y, ptrdiff_t x)
{
    return to_double(
        *(const T *)(p.in + z * p.in_s[0] + y * p.in_s[1] + x * p.in_s[2]));
}

/* A point within reach of an edge: each tap through the boundary map. */
template <class T>
static __device__ double
edge_point(const direct_params &p, ptrdiff_t z, ptrdiff_t y, ptrdiff_t x)
{
    double s = 0.0;
    for (int t = 0; t < p.ntaps; t++) {
        const ptrdiff_t i[3] = {z + p.tap_d[3 * t], y + p.tap_d[3 * t + 1],
                                x + p.tap_d[3 * t + 2]};
        double v;
        if (i[0] >= 0 && i[0] < p.n[0] && i[1] >= 0 && i[1] < p.n[1]
            && i[2] >= 0 && i[2] < p.n[2]) {
            v = read_in<T>(p, i[0], i[1], i[2]);
        } else if (p.mode == CS_MODE_CONSTANT) {
            v = p.cval;
        } else {
            v = read_in<T>(p, cs_extend_index(i[0], p.n[0], p.mode),
                           cs_extend_index(i[1], p.n[1], p.mode),
                           cs_extend_index(i[2], p.n[2], p.mode));
        }
        s += p.tap_w[t] * v;
    }
    return s;
}

/* Blocks of rows as in halo.cu's copy_box_kernel: grid.x covers a row,
   grid.y strides over the rows (z, y). */
template <class T>
__global__ void
direct_step_kernel(const direct_params p)
{
    const int tx = threadIdx.x & (p.row_threads - 1);
    const int ty = threadIdx.x / p.row_threads;
    const int block_rows = blockDim.x / p.row_threads;
    const ptrdiff_t x = (ptrdiff_t)blockIdx.x * p.row_threads + tx;
    if (x >= p.n[2]) {
        return;
    }
    const int inner_x = x >= p.r[2] && x < p.n[2] - p.r[2];
    const ptrdiff_t rows = p.n[0] * p.n[1];
    for (ptrdiff_t row = (ptrdiff_t)blockIdx.y * block_rows + ty; row < rows;
         row += (ptrdiff_t)gridDim.y * block_rows) {
        const ptrdiff_t z = cs_plane_of_row(row, p.n[1], rows);
        const ptrdiff_t y = row - z * p.n[1];
        double s = 0.0;
        if (inner_x && y >= p.r[1] && y < p.n[1] - p.r[1] && z >= p.r[0]
            && z < p.n[0] - p.r[0]) {
            for (int t = 0; t < p.ntaps; t++) {
                s += p.tap_w[t] * read_in<T>(p, z + p.tap_d[3 * t],
                                             y + p.tap_d[3 * t + 1],
                                             x + p.tap_d[3 * t + 2]);
            }
        } else {
            s = edge_point<T>(p, z, y, x);
        }
        *(double *)(p.out + z * p.out_s[0] + y * p.out_s[1]
                    + x * p.out_s[2]) = s;
        if (p.nonfinite != NULL && !isfinite(s)) {
            *p.nonfinite = 1;
        }
    }
}

/* ------------------------------------------------------------------------
 * launcher
 * --------------------------------------------------------------------- */

size_t
cs_direct_taps_bytes(const cs_kernel *k)
{
    const size_t n = (size_t)cs_kernel_count(k);
    return n * sizeof(double) + 3 * n * sizeof(int);
}

int
cs_direct_taps(const cs_kernel *k, void *block)
{
    const ptrdiff_t count = cs_kernel_count(k);
    double *w = (double *)block;
    int *d = (int *)(w + count);
    int t = 0;
    for (ptrdiff_t z = 0; z < k->size[0]; z++) {
        for (ptrdiff_t y = 0; y < k->size[1]; y++) {
            for (ptrdiff_t x = 0; x < k->size[2]; x++) {
                const double v =
                    k->weights[(z * k->size[1] + y) * k->size[2] + x];
                if (v != 0.0) {
                    w[t] = v;
                    d[3 * t] = (int)(z - cs_kernel_radius(k, 0));
                    d[3 * t + 1] = (int)(y - cs_kernel_radius(k, 1));
                    d[3 * t + 2] = (int)(x - cs_kernel_radius(k, 2));
                    t++;
                }
            }
        }
    }
    return t;
}

template <class T>
static cs_status
launch(cs_cuda_ctx *ctx, const direct_params *p, dim3 grid)
{
    direct_step_kernel<T><<<grid, 256, 0, ctx->stream>>>(*p);
    return cs_cuda_check_launch(ctx, "direct_step_kernel");
}

cs_status
cs_cuda_direct_step(cs_cuda_ctx *ctx, const cs_darray *in,
                    const cs_darray *out, const ptrdiff_t shape[3],
                    const cs_kernel *k, const void *dev_taps, int ntaps,
                    cs_mode mode, double cval, int *nonfinite)
{
    if (out->dtype != CS_DTYPE_FLOAT64 || (int)mode < 0
        || (int)mode >= CS_MODE_COUNT || ntaps < 0) {
        cs_cuda_message(ctx, "cs_cuda_direct_step: invalid arguments");
        return CS_ERR_INVALID;
    }
    direct_params p;
    p.in = (const char *)in->data;
    p.out = (char *)out->data;
    for (int a = 0; a < 3; a++) {
        p.in_s[a] = in->strides[a];
        p.out_s[a] = out->strides[a];
        p.n[a] = shape[a];
        p.r[a] = (int)cs_kernel_radius(k, a);
    }
    const ptrdiff_t count = cs_kernel_count(k);
    p.tap_w = (const double *)dev_taps;
    p.tap_d = (const int *)((const double *)dev_taps + count);
    p.ntaps = ntaps;
    p.mode = mode;
    p.cval = cval;
    p.nonfinite = nonfinite;
    dim3 grid;
    if (!cs_row_blocks(p.n[2], p.n[0] * p.n[1], 256, &p.row_threads,
                       &grid)) {
        cs_cuda_message(ctx, "cs_cuda_direct_step: rows too long");
        return CS_ERR_UNSUPPORTED;
    }
    const cs_status st = cs_dtype_dispatch(in->dtype, [&](auto element) {
        return launch<decltype(element)>(ctx, &p, grid);
    });
    if (st == CS_ERR_INVALID) {
        cs_cuda_message(ctx, "cs_cuda_direct_step: unknown dtype %d",
                        (int)in->dtype);
    }
    return st;
}
