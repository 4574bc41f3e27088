/*
 * layout.h -- the stencil2row layout builder for dual tessellation.
 *
 * Conventions (2D; a 1D kernel is a 2D kernel with ky = 1):
 *
 * The kernel (ky rows x kx columns, odd) is embedded, centred, into a
 * kernel `payload` = P columns wide (P + 1 a multiple of 8: P = 7 for
 * kx <= 7, P = 15 for kx <= 15, P = 31 for kx <= 31); its x-halo is
 * (P - 1) / 2.  Let X be the grid extended by ry = (ky-1)/2 rows and
 * (P-1)/2 columns on each side, so output (i, j) reads X[i + dy][j + t]
 * for dy < ky, t < P.
 *
 * Column group g covers X columns g*G .. g*G + G - 1 with G = P + 1: its
 * G outputs per row.  stencil2row matrix A, row g, holds for each input
 * row x the group's first P columns: A[g][P*x + t] = X[x][g*G + t];
 * matrix B the same shifted right by P: B[g][P*x + t] = X[x][g*G + P + t].
 * Output row i of group g needs entries P*i .. P*i + ky*P - 1 of both
 * rows, and
 *     out[i][g*G + c] = sum_k A[g][P*i + k] * WA[k][c]
 *                     + sum_k B[g][P*i + k] * WB[k][c]
 * with WA[P*dy + t][c] = W[dy][t - c] for t >= c (lower triangles) and
 * WB[P*dy + t][c] = W[dy][t + P - c] for t < c (upper triangles), W the
 * embedded kernel.  K = ky*P is padded to kpad (a multiple of the MMA's
 * k = 4) with zero weight rows.
 *
 * Tile plan (one thread block on the GPU, one tile in the emulation):
 * tile_groups (= MMA M) column groups by tile_rows output rows, i.e.
 * tile_rows x tile_groups*G outputs, read from an input tile of
 * in_rows = tile_rows + ky - 1 rows by in_cols = tile_groups*G + P - 1
 * columns of X.  In shared memory each matrix is tile_groups rows of
 * stride ld (>= P*(tile_rows-1) + kpad, and ld % 16 == 7: see layout.c
 * for the shared-memory bank plan this serves), followed by a dump area
 * where unused input elements ("dirty bits") land, one slot each, so the
 * loader needs no branch and no two threads ever write one slot.  The entries between P*in_rows and ld of each row are
 * never written by the loader; the kernel zeroes them once (the last
 * k-step of the last row reads up to kpad - ky*P of them, times zero
 * weights).
 *
 * Lookup table: for each input tile column y, four ints
 *     lut[4*y + 0] = offset of X-tile element (0, y) in matrix A
 *     lut[4*y + 1] = stride between rows x in matrix A (P, in the dump
 *                    area too)
 *     lut[4*y + 2], lut[4*y + 3] = the same for matrix B
 * so tile element (x, y) goes to A[lut[4y] + x*lut[4y+1]] and
 * B[lut[4y+2] + x*lut[4y+3]]: no division, no branch.
 */
#ifndef CS_LAYOUT_H
#define CS_LAYOUT_H

#include "stencil.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CS_MMA_M 16       /* column groups per MMA tile (m16n8k4) */
#define CS_MMA_N 8        /* output columns per MMA (one 8-wide block) */
#define CS_MMA_K 4        /* K per MMA step */
#define CS_LAYOUT_MAX_KX 31
#define CS_LAYOUT_MAX_KY 15

typedef struct cs_layout2d {
    /* kernel geometry */
    int ky, kx;          /* the kernel's rows and columns (odd) */
    int payload;         /* P */
    int group;           /* G = P + 1, a multiple of CS_MMA_N */
    int halo_x;          /* (P - 1) / 2 */
    int halo_y;          /* (ky - 1) / 2 */
    int kdim;            /* ky * P */
    int kpad;            /* kdim rounded up to CS_MMA_K */
    double *weight_a;    /* kpad x group, row-major, owned */
    double *weight_b;    /* kpad x group, row-major, owned */
    /* tile plan */
    int tile_groups;
    int tile_rows;
    int tile_cols;       /* tile_groups * group output columns */
    int in_rows;         /* tile_rows + ky - 1 */
    int in_cols;         /* tile_cols + P - 1 */
    int ld;              /* row stride of a stencil2row matrix (doubles) */
    int dump_base;       /* tile_groups * ld: first dump slot */
    int matrix_size;     /* doubles per matrix: rows, then the dump area,
                            rounded up to 16 (128-byte aligned matrices) */
    int *lut;            /* 4 * in_cols ints, owned */
} cs_layout2d;

/*
 * Build the layout for weights `w` (ky x kx, C order) and a tile plan of
 * tile_groups x tile_rows.  `out` must be zeroed or freed; free it with
 * cs_layout2d_free, also after a failure.
 */
cs_status
cs_layout2d_build(const double *w, int ky, int kx, int tile_groups,
                  int tile_rows, cs_layout2d *out);

/*
 * Fill weight_a / weight_b (kpad x group doubles each, row-major, as
 * above) from other weights `w` of the layout's extents (ky x kx, C
 * order), leaving the layout unchanged: a 3D kernel is a sum of 2D
 * kernels over its z-planes, which share one layout and lookup table and
 * differ only in their weight matrices.  Every entry is written (the
 * rows past kdim with zeros).
 */
cs_status
cs_layout2d_weights(const cs_layout2d *layout, const double *w,
                    double *weight_a, double *weight_b);

void
cs_layout2d_free(cs_layout2d *layout);

#ifdef __cplusplus
}
#endif

#endif /* CS_LAYOUT_H */
