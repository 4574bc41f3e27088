/*
 * arena.cuh -- where the pieces of one call live in its device block:
 * the two padded ping-pong grids and, per axis whose band a fused pass
 * fixes in strips, the strips' two grids; as offsets into one block
 * (resources.cu keeps blocks between calls), each 256-byte aligned.
 */
#ifndef CS_CUDA_ARENA_CUH
#define CS_CUDA_ARENA_CUH

#include "kernels.cuh"

/*
 * A padded grid of extents n with halo h: planes of rows of `pitch`
 * doubles; the interior starts `lead` doubles into its row, lead >= h[2]
 * and a multiple of 8, pitch a multiple of 8, so that interior rows start
 * 64-byte aligned.
 */
typedef struct cs_grid_geom {
    ptrdiff_t n[3], halo[3];
    ptrdiff_t lead, pitch, plane;
    size_t bytes;
} cs_grid_geom;

/* The grid of geometry g at `base`. */
cs_dgrid
cs_geom_view(const cs_grid_geom *g, char *base);

/* The grid n as a C-contiguous array at `base` (no halo). */
cs_dgrid
cs_contiguous_view(const ptrdiff_t n[3], char *base);

/*
 * Reserve `bytes` at the end of a block laid out as offsets (`*top`: its
 * size so far), 256-byte aligned: *offset is where they start.  0 when
 * the size overflows.  The arena's layout and the parameter block's.
 */
int
cs_arena_take(size_t *top, size_t bytes, size_t *offset);

typedef struct cs_arena {
    cs_grid_geom main;        /* the ping-pong grids */
    cs_grid_geom strip[3];    /* axis a's band strips, both edges stacked */
    int has_strips[3];
    size_t off_main[2], off_strip[3][2];
    size_t bytes;             /* the block's size */
} cs_arena;

/*
 * The arena of `plan` for kernel k: main grids of plan->run_shape with
 * halo `main_halo` (the reach of what runs on them), strips of width
 * 2 * strip[a] along each axis a whose band the plan fixes in strips
 * (halo: k's radius).  0 when the sizes overflow.
 */
int
cs_arena_make(const cs_plan *plan, const cs_kernel *k,
              const ptrdiff_t main_halo[3], cs_arena *arena);

#endif /* CS_CUDA_ARENA_CUH */
