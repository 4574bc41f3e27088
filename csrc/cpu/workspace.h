/*
 * workspace.h -- the large host blocks of the CPU engine (its padded
 * grids, temporary grid and ring planes), kept between calls.
 *
 * A block the engine allocates afresh for each call costs page faults
 * on first touch, and on a virtual machine whose host reclaims freed
 * memory those took from 1 to 4 times the call's own work (a 2048^2
 * grid, a few steps); whether a block is fresh depends on the C
 * allocator's history (blocks of 32 MiB or more always are; smaller ones
 * when the heap was trimmed).  Kept blocks make a call's cost the same
 * every time: the next call of the same or a smaller size takes them.
 */
#ifndef CS_CPU_WORKSPACE_H
#define CS_CPU_WORKSPACE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kept blocks at most, and their bytes at most (and a sixteenth of the
   machine's memory). */
#define CS_CPU_WORKSPACE_SLOTS 4
#ifndef CS_CPU_WORKSPACE_MAX_BYTES
#define CS_CPU_WORKSPACE_MAX_BYTES ((size_t)256 << 20)
#endif

/*
 * A block of at least `bytes` (its contents undefined): the smallest kept
 * one that is large enough, else a new one.  *size receives its size,
 * to give back with it.  NULL when memory runs out.
 */
void *
cs_cpu_workspace_take(size_t bytes, size_t *size);

/* Give a block back: kept for a later call, the blocks given longest ago
   freed where the limits need the room; freed itself only when it alone
   exceeds them.  NULL is ignored. */
void
cs_cpu_workspace_give(void *block, size_t size);

/* Free every kept block; returns the bytes freed. */
size_t
cs_cpu_workspace_clear(void);

/* The bytes kept now. */
size_t
cs_cpu_workspace_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* CS_CPU_WORKSPACE_H */
