/*
 * host_copy.c -- cs_host_copy and cs_host_prefault: large host memory
 * moves split into one contiguous share per OpenMP thread.
 */
#include "host_copy.h"
#include "cpu/threads.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Below this a single thread's memcpy is faster than waking the team. */
#define PARALLEL_MIN_BYTES ((size_t)1 << 20)
/* Each thread's share: at least this much, so that shares stay long. */
#define SHARE_MIN_BYTES ((size_t)256 << 10)

/* The team of a move of `bytes` (cpu/threads.h), SHARE_MIN_BYTES each;
   no barrier inside but the last, so a busy machine keeps the team. */
static int
team_size(size_t bytes)
{
    return cs_threads_choose(0, (double)bytes, (double)SHARE_MIN_BYTES, 0);
}

/* [begin, end) of share `id` of `count` over `bytes`, cut at 64 bytes. */
static void
share_of(size_t bytes, int id, int count, size_t *begin, size_t *end)
{
    size_t per = (bytes / (size_t)count + 63) / 64 * 64;
    *begin = per * (size_t)id < bytes ? per * (size_t)id : bytes;
    *end = *begin + per < bytes ? *begin + per : bytes;
}

/*
 * memcpy whose stores bypass the caches (SSE2 streaming stores, where
 * the compiler targets them): a plain store first reads the line it
 * writes, a third of the memory traffic of a large copy, and neither
 * side of these copies is read again soon by this core.
 */
static void
copy_streaming(char *dst, const char *src, size_t bytes)
{
#if defined(__SSE2__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > bytes) {
        head = bytes;
    }
    memcpy(dst, src, head);
    dst += head;
    src += head;
    bytes -= head;
    size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + i, src + i, bytes - i);
    _mm_sfence(); /* the streamed lines are out before anyone reads them */
#else
    memcpy(dst, src, bytes);
#endif
}

void
cs_host_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes < PARALLEL_MIN_BYTES) {
        memcpy(dst, src, bytes);
        return;
    }
    const int count = team_size(bytes);
#ifdef _OPENMP
#pragma omp parallel num_threads(count)
#endif
    {
#ifdef _OPENMP
        const int id = omp_get_thread_num();
        const int team = omp_get_num_threads();
#else
        const int id = 0;
        const int team = 1;
#endif
        size_t b, e;
        share_of(bytes, id, team, &b, &e);
        if (e > b) {
            copy_streaming((char *)dst + b, (const char *)src + b, e - b);
        }
    }
}

void
cs_host_prefault(void *p, size_t bytes)
{
    if (bytes == 0) {
        return;
    }
    long page_size = sysconf(_SC_PAGESIZE);
    const size_t page = page_size > 0 ? (size_t)page_size : 4096;
    const uintptr_t first = (uintptr_t)p / page * page;
    const uintptr_t last = ((uintptr_t)p + bytes - 1) / page * page;
    const size_t pages = (size_t)((last - first) / page) + 1;
    const int count = team_size(bytes);
#ifdef _OPENMP
#pragma omp parallel for num_threads(count) schedule(static)
#endif
    for (size_t i = 0; i < pages; i++) {
        /* a page's first byte inside [p, p + bytes) */
        uintptr_t at = first + i * page;
        if (at < (uintptr_t)p) {
            at = (uintptr_t)p;
        }
        volatile char *c = (volatile char *)at;
        *c = *c;
    }
}
