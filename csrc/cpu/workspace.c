/*
 * workspace.c -- the CPU engine's kept host blocks (workspace.h): a few
 * slots behind a spin lock (held for a few loads and stores; calls that
 * run at once from several threads each take their own block).  A block
 * given back displaces the blocks given longest ago where the limits
 * would refuse it: the call just made is the likeliest to come again
 * (a user who tried several grids, then runs one), and a block that is
 * never kept costs its page faults on every call.
 */
#define _GNU_SOURCE

#include "workspace.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct slot {
    void *block;
    size_t size;
    unsigned long given;     /* when it was given back (gives counted) */
} slot;

static slot slots[CS_CPU_WORKSPACE_SLOTS];
static size_t kept_bytes;
static unsigned long gives;
static char lock_flag;

static void
lock(void)
{
    while (__atomic_test_and_set(&lock_flag, __ATOMIC_ACQUIRE)) {
        /* another thread is taking or giving: a few instructions */
    }
}

static void
unlock(void)
{
    __atomic_clear(&lock_flag, __ATOMIC_RELEASE);
}

/* The most bytes kept: CS_CPU_WORKSPACE_MAX_BYTES, and a sixteenth of
   the machine's memory. */
static size_t
limit(void)
{
    static size_t most = 0;
    size_t v = __atomic_load_n(&most, __ATOMIC_RELAXED);
    if (v == 0) {
        v = CS_CPU_WORKSPACE_MAX_BYTES;
        long pages = sysconf(_SC_PHYS_PAGES);
        long page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0
            && (size_t)pages / 16 * (size_t)page < v) {
            v = (size_t)pages / 16 * (size_t)page;
        }
        __atomic_store_n(&most, v, __ATOMIC_RELAXED);
    }
    return v;
}

void *
cs_cpu_workspace_take(size_t bytes, size_t *size)
{
    int best = -1;
    lock();
    for (int i = 0; i < CS_CPU_WORKSPACE_SLOTS; i++) {
        if (slots[i].block != NULL && slots[i].size >= bytes
            && (best < 0 || slots[i].size < slots[best].size)) {
            best = i;
        }
    }
    void *block = NULL;
    if (best >= 0) {
        block = slots[best].block;
        *size = slots[best].size;
        kept_bytes -= slots[best].size;
        slots[best].block = NULL;
        slots[best].size = 0;
    }
    unlock();
    if (block == NULL) {
        block = malloc(bytes > 0 ? bytes : 1);
        *size = bytes;
    }
    return block;
}

/* The kept slot given back longest ago, or -1 when none is kept. */
static int
oldest_slot(void)
{
    int oldest = -1;
    for (int i = 0; i < CS_CPU_WORKSPACE_SLOTS; i++) {
        if (slots[i].block != NULL
            && (oldest < 0 || slots[i].given < slots[oldest].given)) {
            oldest = i;
        }
    }
    return oldest;
}

void
cs_cpu_workspace_give(void *block, size_t size)
{
    if (block == NULL) {
        return;
    }
    void *displaced[CS_CPU_WORKSPACE_SLOTS];
    int ndisplaced = 0;
    int kept = 0;
    lock();
    if (size <= limit()) {
        /* room: in bytes, then a free slot, the oldest blocks going */
        int free_slot = -1;
        for (;;) {
            free_slot = -1;
            for (int i = 0; i < CS_CPU_WORKSPACE_SLOTS; i++) {
                if (slots[i].block == NULL) {
                    free_slot = i;
                    break;
                }
            }
            if (kept_bytes + size <= limit() && free_slot >= 0) {
                break;
            }
            const int oldest = oldest_slot();
            displaced[ndisplaced++] = slots[oldest].block;
            kept_bytes -= slots[oldest].size;
            slots[oldest].block = NULL;
            slots[oldest].size = 0;
        }
        slots[free_slot].block = block;
        slots[free_slot].size = size;
        slots[free_slot].given = ++gives;
        kept_bytes += size;
        kept = 1;
    }
    unlock();
    for (int i = 0; i < ndisplaced; i++) {
        free(displaced[i]);
    }
    if (!kept) {
        free(block);
    }
}

size_t
cs_cpu_workspace_clear(void)
{
    slot taken[CS_CPU_WORKSPACE_SLOTS];
    size_t freed;
    lock();
    for (int i = 0; i < CS_CPU_WORKSPACE_SLOTS; i++) {
        taken[i] = slots[i];
        slots[i].block = NULL;
        slots[i].size = 0;
    }
    freed = kept_bytes;
    kept_bytes = 0;
    unlock();
    for (int i = 0; i < CS_CPU_WORKSPACE_SLOTS; i++) {
        free(taken[i].block);
    }
    return freed;
}

size_t
cs_cpu_workspace_bytes(void)
{
    lock();
    size_t v = kept_bytes;
    unlock();
    return v;
}
