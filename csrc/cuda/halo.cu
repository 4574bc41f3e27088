/*
 * halo.cu -- data movement on padded device grids: the halo fill that
 * implements the boundary modes, and a box copy (repacking between the
 * contiguous upload/download layout and the padded one, gathering and
 * scattering the edge strips of the band fix-up).
 *
 * Halo fill: the halo of a grid with halo widths h is the union of three
 * disjoint slabs, enumerated by one flat index:
 *   z-slabs  z in [-hz, 0) or [nz, nz+hz),  every y and x of the padded box
 *   y-slabs  z in [0, nz),  y outside [0, ny),  every x of the padded box
 *   x-slabs  z, y inside,   x outside [0, nx)
 * Each halo element takes cval (constant mode) or the interior element
 * at (ext(z), ext(y), ext(x)), ext being scipy.ndimage's per-axis index
 * mapping (cs_extend_index, host_device.h: the same code as the CPU's).
 * Halo elements read only interior ones, so one launch has no
 * read-after-write race, and corners come out as scipy extends them
 * (axis by axis).  The flat index is decoded with divisions: the halo is
 * a thin shell, the cost is small next to a stencil pass.
 */
#include "kernels.cuh"

/* ------------------------------------------------------------------------
 * kernels
 * --------------------------------------------------------------------- */

typedef struct halo_params {
    double *origin;
    ptrdiff_t pitch, plane;
    ptrdiff_t nz, ny, nx;
    ptrdiff_t hz, hy, hx;
    ptrdiff_t count_z, count_y, count_x; /* elements in each slab kind */
    cs_mode mode;
    double cval;
} halo_params;

__global__ void
halo_fill_kernel(const halo_params p)
{
    const ptrdiff_t ex = p.nx + 2 * p.hx; /* padded extents */
    const ptrdiff_t ey = p.ny + 2 * p.hy;
    const ptrdiff_t total = p.count_z + p.count_y + p.count_x;
    const ptrdiff_t stride = (ptrdiff_t)gridDim.x * blockDim.x;
    for (ptrdiff_t idx = (ptrdiff_t)blockIdx.x * blockDim.x + threadIdx.x;
         idx < total; idx += stride) {
        ptrdiff_t z, y, x, t;
        if (idx < p.count_z) {
            x = idx % ex - p.hx;
            t = idx / ex;
            y = t % ey - p.hy;
            t = t / ey; /* 0 .. 2hz-1 */
            z = t < p.hz ? t - p.hz : p.nz + t - p.hz;
        } else if (idx < p.count_z + p.count_y) {
            ptrdiff_t i = idx - p.count_z;
            x = i % ex - p.hx;
            t = i / ex;
            ptrdiff_t yy = t % (2 * p.hy);
            z = t / (2 * p.hy);
            y = yy < p.hy ? yy - p.hy : p.ny + yy - p.hy;
        } else {
            ptrdiff_t i = idx - p.count_z - p.count_y;
            ptrdiff_t xx = i % (2 * p.hx);
            t = i / (2 * p.hx);
            y = t % p.ny;
            z = t / p.ny;
            x = xx < p.hx ? xx - p.hx : p.nx + xx - p.hx;
        }
        double v;
        if (p.mode == CS_MODE_CONSTANT) {
            v = p.cval;
        } else {
            v = p.origin[cs_extend_index(z, p.nz, p.mode) * p.plane
                         + cs_extend_index(y, p.ny, p.mode) * p.pitch
                         + cs_extend_index(x, p.nx, p.mode)];
        }
        p.origin[z * p.plane + y * p.pitch + x] = v;
    }
}

typedef struct copy_params {
    double *dst;       /* box corner in dst */
    const double *src; /* box corner in src */
    ptrdiff_t dst_pitch, dst_plane, src_pitch, src_plane;
    ptrdiff_t ey, ex;  /* box extents in y and x */
    ptrdiff_t rows;    /* ez * ey */
    int row_threads;   /* threads per row of a block: a power of two */
} copy_params;

/*
 * A block is blockDim.x / row_threads rows of row_threads threads, so
 * that a narrow box (the 3 columns of a band) does not leave most of a
 * block idle; grid.x covers a row, grid.y strides over the box's rows
 * (z, y).
 */
__global__ void
copy_box_kernel(const copy_params p)
{
    const int tx = threadIdx.x & (p.row_threads - 1);
    const int ty = threadIdx.x / p.row_threads;
    const int block_rows = blockDim.x / p.row_threads;
    const ptrdiff_t x = (ptrdiff_t)blockIdx.x * p.row_threads + tx;
    if (x >= p.ex) {
        return;
    }
    for (ptrdiff_t r = (ptrdiff_t)blockIdx.y * block_rows + ty; r < p.rows;
         r += (ptrdiff_t)gridDim.y * block_rows) {
        const ptrdiff_t z = cs_plane_of_row(r, p.ey, p.rows);
        const ptrdiff_t y = r - z * p.ey;
        p.dst[z * p.dst_plane + y * p.dst_pitch + x] =
            p.src[z * p.src_plane + y * p.src_pitch + x];
    }
}

/* ------------------------------------------------------------------------
 * launchers
 * --------------------------------------------------------------------- */

static int
grid_is_valid(const cs_dgrid *g)
{
    if (g->origin == NULL) {
        return 0;
    }
    for (int a = 0; a < 3; a++) {
        if (g->n[a] < 1 || g->halo[a] < 0) {
            return 0;
        }
    }
    return g->pitch >= g->n[2] + 2 * g->halo[2]
           && g->plane >= g->pitch * (g->n[1] + 2 * g->halo[1]);
}

cs_status
cs_cuda_fill_halo(cs_cuda_ctx *ctx, const cs_dgrid *g, cs_mode mode,
                  double cval)
{
    if (!grid_is_valid(g) || (int)mode < 0 || (int)mode >= CS_MODE_COUNT) {
        cs_cuda_message(ctx, "cs_cuda_fill_halo: invalid grid or mode");
        return CS_ERR_INVALID;
    }
    halo_params p;
    p.origin = g->origin;
    p.pitch = g->pitch;
    p.plane = g->plane;
    p.nz = g->n[0];
    p.ny = g->n[1];
    p.nx = g->n[2];
    p.hz = g->halo[0];
    p.hy = g->halo[1];
    p.hx = g->halo[2];
    const ptrdiff_t ex = p.nx + 2 * p.hx;
    const ptrdiff_t ey = p.ny + 2 * p.hy;
    p.count_z = 2 * p.hz * ey * ex;
    p.count_y = p.nz * 2 * p.hy * ex;
    p.count_x = p.nz * p.ny * 2 * p.hx;
    p.mode = mode;
    p.cval = cval;
    const ptrdiff_t total = p.count_z + p.count_y + p.count_x;
    if (total == 0) {
        return CS_OK;
    }
    /* grid-stride loop: a bounded grid covers any halo */
    halo_fill_kernel<<<cs_stride_blocks(total, 256), 256, 0, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "halo_fill_kernel");
}

/* Is the box [at, at + ext) inside g's padded box on every axis? */
static int
box_inside(const cs_dgrid *g, const ptrdiff_t at[3], const ptrdiff_t ext[3])
{
    for (int a = 0; a < 3; a++) {
        if (at[a] < -g->halo[a] || at[a] + ext[a] > g->n[a] + g->halo[a]) {
            return 0;
        }
    }
    return 1;
}

cs_status
cs_cuda_copy_box(cs_cuda_ctx *ctx, const cs_dgrid *dst,
                 const ptrdiff_t dst_at[3], const cs_dgrid *src,
                 const ptrdiff_t src_at[3], const ptrdiff_t ext[3])
{
    if (!grid_is_valid(dst) || !grid_is_valid(src)
        || !box_inside(dst, dst_at, ext) || !box_inside(src, src_at, ext)) {
        cs_cuda_message(ctx, "cs_cuda_copy_box: box outside its grid");
        return CS_ERR_INVALID;
    }
    if (ext[0] <= 0 || ext[1] <= 0 || ext[2] <= 0) {
        return CS_OK;
    }
    copy_params p;
    p.dst = dst->origin + dst_at[0] * dst->plane + dst_at[1] * dst->pitch
            + dst_at[2];
    p.src = src->origin + src_at[0] * src->plane + src_at[1] * src->pitch
            + src_at[2];
    p.dst_pitch = dst->pitch;
    p.dst_plane = dst->plane;
    p.src_pitch = src->pitch;
    p.src_plane = src->plane;
    p.ey = ext[1];
    p.ex = ext[2];
    p.rows = ext[0] * ext[1];
    const int block = 256;
    dim3 grid;
    if (!cs_row_blocks(p.ex, p.rows, block, &p.row_threads, &grid)) {
        cs_cuda_message(ctx, "cs_cuda_copy_box: rows too long");
        return CS_ERR_UNSUPPORTED;
    }
    copy_box_kernel<<<grid, block, 0, ctx->stream>>>(p);
    return cs_cuda_check_launch(ctx, "copy_box_kernel");
}
