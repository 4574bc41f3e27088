/*
 * tc_params.cuh -- host side shared by the tensor-core launchers (tc1d,
 * tc2d, tc3d): filling the grid and tile fields that their kernel
 * parameter structs have in common (the same names in each), the check
 * that the tile grid fits one launch, the launch over planes of a
 * kernel's ky instances, and the check that a layout's lookup table puts
 * every element where layout.h says.
 */
#ifndef CS_CUDA_TC_PARAMS_CUH
#define CS_CUDA_TC_PARAMS_CUH

#include <limits.h>
#include <stdlib.h>

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
    cs_params_grids(p, in, out);
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

/*
 * Let `kernel` (named `name`) take `smem` bytes of dynamic shared memory,
 * with as much shared memory as the SM has, so that several blocks fit.
 */
template <class Kernel>
static cs_status
tc_allow_smem(cs_cuda_ctx *ctx, Kernel *kernel, size_t smem, const char *name)
{
    CS_TRY(cs_cuda_allow_smem(ctx, kernel, smem, name));
    CS_CUDA_CHECK(ctx,
                  cudaFuncSetAttribute(
                      kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                      (int)cudaSharedmemCarveoutMaxShared),
                  "cudaFuncSetAttribute (shared memory carveout)");
    return CS_OK;
}

/*
 * Launch the KY instance of a kernel over every plane of p.nz, at most
 * 65535 planes (grid.y) per launch: Launcher::run<KY>(ctx, p, grid, smem,
 * name) launches one, for KY = 1, 3, 5 or 7 (ky).
 */
template <class Launcher, class Params>
static cs_status
tc_launch_planes(cs_cuda_ctx *ctx, Params &p, int ky, ptrdiff_t tiles,
                 size_t smem, const char *const names[4])
{
    for (p.z0 = 0; p.z0 < p.nz; p.z0 += 65535) {
        const ptrdiff_t planes = p.nz - p.z0 < 65535 ? p.nz - p.z0 : 65535;
        dim3 grid((unsigned)tiles, (unsigned)planes);
        cs_status st;
        switch (ky) {
        case 1:
            st = Launcher::template run<1>(ctx, p, grid, smem, names[0]);
            break;
        case 3:
            st = Launcher::template run<3>(ctx, p, grid, smem, names[1]);
            break;
        case 5:
            st = Launcher::template run<5>(ctx, p, grid, smem, names[2]);
            break;
        default:
            st = Launcher::template run<7>(ctx, p, grid, smem, names[3]);
            break;
        }
        CS_TRY(st);
    }
    return CS_OK;
}

/* Where layout.h puts real element (x, y) of the tile: -1 for a dirty one. */
static inline ptrdiff_t
tc_expected_slot(const cs_layout2d *L, int matrix, int x, int y)
{
    const int P = L->payload, G = L->group;
    const int u = matrix == 0 ? y : y - P;
    if (u < 0 || u % G == G - 1 || u / G >= L->tile_groups) {
        return -1;
    }
    return (ptrdiff_t)(u / G) * L->ld + P * x + u % G;
}

/*
 * Does every element of the input tile land where layout.h puts it (row
 * stride P), or in a dump slot of its own?  NULL when it does, else what
 * is wrong; *nomem is set when the check could not allocate.
 */
static inline const char *
tc_layout_slots_wrong(const cs_layout2d *L, int *nomem)
{
    *nomem = 0;
    unsigned char *used =
        (unsigned char *)calloc(2 * (size_t)L->matrix_size, 1);
    if (used == NULL) {
        *nomem = 1;
        return "out of host memory";
    }
    const char *bad = NULL;
    for (int y = 0; y < L->in_cols && bad == NULL; y++) {
        for (int m = 0; m < 2 && bad == NULL; m++) {
            const ptrdiff_t off = L->lut[4 * y + 2 * m];
            const ptrdiff_t stride = L->lut[4 * y + 2 * m + 1];
            if (stride != L->payload) {
                /* the loaders of tc1d and tc3d take the stride as P */
                bad = "a lookup-table row stride is not P";
                break;
            }
            for (int x = 0; x < L->in_rows; x++) {
                const ptrdiff_t slot = off + x * stride;
                const ptrdiff_t want = tc_expected_slot(L, m, x, y);
                if (want >= 0 ? slot != want
                              : slot < L->dump_base || slot >= L->matrix_size) {
                    bad = "an element is not where layout.h puts it";
                    break;
                }
                if (used[m * (size_t)L->matrix_size + slot]++) {
                    bad = "two elements share a shared-memory slot";
                    break;
                }
            }
        }
    }
    free(used);
    return bad;
}

#endif /* CS_CUDA_TC_PARAMS_CUH */
