/*
 * tc_params.cuh -- host side shared by the tensor-core launchers (tc1d,
 * tc2d, tc3d): filling the grid and tile fields that their kernel
 * parameter structs have in common (the same names in each), and the
 * check that the tile grid fits one launch.
 */
#ifndef CS_CUDA_TC_PARAMS_CUH
#define CS_CUDA_TC_PARAMS_CUH

#include <limits.h>

#include "kernels.cuh"

/*
 * The common fields of `p` from the grids and the plan, and tiles_x for
 * tiles of tile_rows x tile_cols outputs; CS_ERR_UNSUPPORTED, naming
 * `kernel`, when a plane needs more than INT_MAX tiles.  *blocks gets the
 * tiles of one plane.
 */
template <class Params>
static cs_status
tc_params_fill(cs_cuda_ctx *ctx, const cs_dgrid *in, const cs_dgrid *out,
               const cs_tc2d_plan *plan, int tile_rows, int tile_cols,
               const char *kernel, Params *p, ptrdiff_t *blocks)
{
    p->in = in->origin;
    p->out = out->origin;
    p->in_pitch = in->pitch;
    p->in_plane = in->plane;
    p->out_pitch = out->pitch;
    p->out_plane = out->plane;
    p->nz = in->n[0];
    p->ny = in->n[1];
    p->nx = in->n[2];
    p->lim_y = in->n[1] + in->halo[1];
    p->lim_x = in->n[2] + in->halo[2];
    p->ld = plan->ld;
    p->matrix_size = plan->matrix_size;
    p->lut = plan->lut;
    p->wa = plan->wa;
    p->wb = plan->wb;
    const ptrdiff_t tiles_x = CEIL_DIV(p->nx, (ptrdiff_t)tile_cols);
    const ptrdiff_t tiles_y = CEIL_DIV(p->ny, (ptrdiff_t)tile_rows);
    if (tiles_x * tiles_y > INT_MAX) {
        cs_cuda_message(ctx, "%s: a plane of %td x %td is too large", kernel,
                        p->ny, p->nx);
        return CS_ERR_UNSUPPORTED;
    }
    p->tiles_x = tiles_x;
    *blocks = tiles_x * tiles_y;
    return CS_OK;
}

#endif /* CS_CUDA_TC_PARAMS_CUH */
