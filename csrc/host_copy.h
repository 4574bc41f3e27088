/*
 * host_copy.h -- host memory moved by every core: the copies between a
 * caller's (pageable) arrays and the engine's pinned staging buffers,
 * and the first touch of a fresh result array.
 *
 * One thread copies pageable memory at a fraction of what the memory
 * system delivers, and the first write to each page of a fresh NumPy
 * array is a page fault (about 2.6 GB/s on one thread); both scale with
 * threads, so large moves are split over the OpenMP team.
 */
#ifndef CS_HOST_COPY_H
#define CS_HOST_COPY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* memcpy(dst, src, bytes) by up to every core (small copies by one). */
void
cs_host_copy(void *dst, const void *src, size_t bytes);

/*
 * Make every page of [p, p + bytes) resident and writeable, keeping its
 * content (each page's first byte is read and written back), by up to
 * every core.  Used on a result array while the GPU computes, so that
 * the download does not pay its page faults.
 */
void
cs_host_prefault(void *p, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* CS_HOST_COPY_H */
