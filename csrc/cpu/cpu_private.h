/*
 * cpu_private.h -- what the files of the direct CPU engine share, and
 * nothing its callers need (their interface is cpu_engine.h): the vector
 * geometry of lane-split rows, the engine, box, row_halo and tiling
 * structs, the small helpers every path inlines, and the functions one
 * file defines for another.
 *
 * Helpers that the step loops inline are `static inline` here, so they
 * still inline into loops in other files; the row kernels, which must
 * inline into one another, live together in row_kernels.c.  Functions
 * shared between files are hidden (CS_CPU_PRIVATE): calls bind inside the
 * module, without the PLT, and a file may still inline its own, as it did
 * when they were static (under -fPIC a default-visibility function could
 * be interposed and would never be inlined).
 */
#ifndef CS_CPU_PRIVATE_H
#define CS_CPU_PRIVATE_H

#include "cpu_engine.h"
#include "threads.h"

#include <stddef.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__)
#define CS_CPU_PRIVATE __attribute__((visibility("hidden")))
#else
#define CS_CPU_PRIVATE
#endif

/*
 * The row kernel's register block: VECS vectors of LANES doubles.  With
 * AVX-512 that is eight zmm accumulators, with AVX2 eight ymm (of 16
 * registers): one broadcast weight feeds them all, and they stay in
 * registers across every tap.
 */
#define LANES 8
#ifdef __AVX512F__
#define VECS 8
#else
#define VECS 4
#endif
#define ROW_BLOCK (VECS * LANES)
#define ALIGN_BYTES (LANES * sizeof(double))

/*
 * Widest x factor the separable row kernel takes: its VECS + width - 1
 * column sums must stay in registers (32 zmm with AVX-512; with AVX2 a
 * vector is two of 16 ymm).
 */
#ifdef __AVX512F__
#define SEP_MAX_WIDTH 7
#else
#define SEP_MAX_WIDTH 3
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* Everything a run needs, read-only once built. */
typedef struct engine {
    ptrdiff_t n[3];          /* grid extents */
    ptrdiff_t r[3];          /* kernel radius per axis */
    ptrdiff_t lane_len;      /* M: points per lane of a lane-split row */
    ptrdiff_t stride[2];     /* plane and row strides of every buffer */
    cs_mode mode;
    double cval;
    int ntaps;
    double *w;               /* the non-zero weights, in kernel order */
    int *tz;                 /* plane of each tap in its window, 0..2*r[0] */
    int *ty;                 /* row of each tap in its plane, 0..2*r[1] */
    int *tx;                 /* point of each tap in its row, 0..2*r[2] */
    ptrdiff_t *toff;         /* offset in that plane from the window corner */
    int sep_width;           /* 0, or x-separable: see try_separable */
    double xw[SEP_MAX_WIDTH];    /* the x factor of a separable kernel */
} engine;

/*
 * The part of the grid a buffer holds, [lo, hi) per axis, plus r halo
 * cells per side.  An `edge` side lies on the real grid edge: its halo is
 * refilled from the mode.  Other sides are internal: nothing fills them,
 * and the valid region shrinks by r per step from them.
 */
typedef struct box {
    ptrdiff_t lo[3];
    ptrdiff_t hi[3];
    int edge_lo[3];
    int edge_hi[3];
} box;

/*
 * The x halo refresh of one row of a box, the same for every row: moves
 * row[dst[i]] = row[src[i]] (or cval where src[i] < 0), first the mode's
 * values beyond edges, then the lanes' halo vectors.  At most
 * ROW_HALO_MOVES(r) moves.
 */
typedef struct row_halo {
    int count;
    ptrdiff_t *dst;
    ptrdiff_t *src;
} row_halo;

#define ROW_HALO_MOVES(rx) (2 * (rx) + 2 * LANES * (rx))

/* How a blocked run cuts the grid (blocked.c). */
typedef struct tiling {
    int depth;              /* T: steps per pass */
    ptrdiff_t tile[3];      /* output extent of a tile per axis */
    ptrdiff_t count[3];     /* tiles per axis */
} tiling;

/* ------------------------------------------------------------------ */
/* Threads                                                              */
/* ------------------------------------------------------------------ */

/* Every thread of the team at `b` (threads.h: a short spin, then sleep). */
static inline void
team_barrier(cs_barrier *b)
{
    cs_barrier_wait(b, cs_team_size());
}

/* This thread's share [*begin, *end) of n items, in contiguous blocks. */
static inline void
thread_share(ptrdiff_t n, ptrdiff_t *begin, ptrdiff_t *end)
{
    ptrdiff_t id = cs_team_thread();
    ptrdiff_t count = cs_team_size();
    *begin = n * id / count;
    *end = n * (id + 1) / count;
}

/* ------------------------------------------------------------------ */
/* Lane-split rows (lanes.c)                                            */
/* ------------------------------------------------------------------ */


/* raw rounded up to a vector boundary (raw has LANES spare elements). */
static inline double *
align_up(double *raw)
{
    size_t pad = (ALIGN_BYTES - (uintptr_t)raw % ALIGN_BYTES) % ALIGN_BYTES;
    return (double *)(void *)((char *)raw + pad);
}

/* Offset of row y of box b in a plane. */
static inline ptrdiff_t
row_offset(const engine *e, const box *b, ptrdiff_t y)
{
    return (y - b->lo[1] + e->r[1]) * e->stride[1];
}

/* Offset in a row of cell p of lane `lane`; p < 0 or >= M is halo. */
static inline ptrdiff_t
lane_pos(const engine *e, ptrdiff_t lane, ptrdiff_t p)
{
    return (p + e->r[2]) * LANES + lane;
}

/* Offset, from a window's corner, of the output cell it computes. */
static inline ptrdiff_t
corner_offset(const engine *e)
{
    return e->r[1] * e->stride[1] + e->r[2] * LANES;
}

/* The inverse of cs_cpu_load_plane: lanes back to grid rows. */
CS_CPU_PRIVATE void
cs_cpu_lanes_to_row(const engine *e, const box *b, const double *row,
                    double *dst, ptrdiff_t x0, ptrdiff_t x1);

CS_CPU_PRIVATE void
cs_cpu_load_plane(const engine *e, const box *b, const double *g,
                  ptrdiff_t z, double *plane, double *scratch);

/* Store the rows of sub-box `part` in plane z of box b into grid g. */
static inline void
store_plane(const engine *e, const box *b, const box *part,
            const double *plane, ptrdiff_t z, double *g)
{
    for (ptrdiff_t y = part->lo[1]; y < part->hi[1]; y++) {
        cs_cpu_lanes_to_row(e, b, plane + row_offset(e, b, y),
                            g + (z * e->n[1] + y) * e->n[2],
                            part->lo[2], part->hi[2]);
    }
}

/* ------------------------------------------------------------------ */
/* The row kernel (row_kernels.c)                                       */
/* ------------------------------------------------------------------ */

/*
 * n outputs of one row, dst[x] = sum_t w[t] * tap[t][at + x], n a
 * multiple of LANES.
 */
CS_CPU_PRIVATE void
cs_cpu_row_apply(double *restrict dst, const double *const *restrict tap,
                 ptrdiff_t at, const engine *e, ptrdiff_t n);

/* FMAs per output point and step of the row kernel. */
static inline double
taps_per_point(const engine *e)
{
    if (e->sep_width > 0) {
        return e->ntaps * (VECS + e->sep_width - 1.0) / VECS
               + e->sep_width;
    }
    return MAX(e->ntaps, 1);
}

/* ------------------------------------------------------------------ */
/* Halo (halo.c)                                                        */
/* ------------------------------------------------------------------ */

/* The x halo refresh of every row of box b, into h (its arrays given). */
CS_CPU_PRIVATE void
cs_cpu_row_halo_build(const engine *e, const box *b, row_halo *h);

/* Both halos of `axis` (0 or 1; edge sides only) of box b. */
CS_CPU_PRIVATE void
cs_cpu_fill_line(const engine *e, const box *b, double *base, int axis);

/* The x halo of rows [y0, y1) of a plane, and unless x_only its y halo. */
CS_CPU_PRIVATE void
cs_cpu_fill_plane_halo(const engine *e, const box *b, const row_halo *h,
                       double *plane, ptrdiff_t y0, ptrdiff_t y1,
                       int x_only);

/* ------------------------------------------------------------------ */
/* Setup (cpu_engine.c), the two paths (direct.c, blocked.c)           */
/* ------------------------------------------------------------------ */

CS_CPU_PRIVATE cs_status
cs_cpu_check_args(const double *in, const double *out,
                  const ptrdiff_t shape[3], const cs_kernel *k, cs_mode mode,
                  long steps);

CS_CPU_PRIVATE cs_status
cs_cpu_run_direct(const engine *e, const double *in, double *out,
                  long steps, int nt, const cs_interrupt *intr);

/* The cheapest tiling for `steps` steps on nt threads; 0: run direct. */
CS_CPU_PRIVATE int
cs_cpu_plan_tiling(const engine *e, long steps, int nt, tiling *best);

/* Grid points a tile holds along axis a. */
CS_CPU_PRIVATE ptrdiff_t
cs_cpu_tile_held(const engine *e, const tiling *tl, int a);

/* Per output point of a pass: points computed a step, points loaded;
   whether the rings spill from L2. */
CS_CPU_PRIVATE void
cs_cpu_tiling_factors(const engine *e, const tiling *tl, double *computed,
                      double *loaded, int *spills);

/* The bytes of one thread's ring planes, every level. */
CS_CPU_PRIVATE double
cs_cpu_ring_bytes(const engine *e, const tiling *tl);

CS_CPU_PRIVATE cs_status
cs_cpu_run_blocked(const engine *e, const tiling *tl, const double *in,
                   double *out, long steps, int nt, const cs_interrupt *intr);

#endif /* CS_CPU_PRIVATE_H */
