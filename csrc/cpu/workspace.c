/*
 * workspace.c -- the CPU engine's kept host blocks (workspace.h): a few
 * slots behind a spin lock (held for a few loads and stores; calls that
 * run at once from several threads each take their own block).
 */
#define _GNU_SOURCE

#include "workspace.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct slot {
    void *block;
    size_t size;
} slot;

static slot slots[CS_CPU_WORKSPACE_SLOTS];
static size_t kept_bytes;
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

void
cs_cpu_workspace_give(void *block, size_t size)
{
    if (block == NULL) {
        return;
    }
    int kept = 0;
    lock();
    if (kept_bytes + size <= limit()) {
        for (int i = 0; i < CS_CPU_WORKSPACE_SLOTS && !kept; i++) {
            if (slots[i].block == NULL) {
                slots[i].block = block;
                slots[i].size = size;
                kept_bytes += size;
                kept = 1;
            }
        }
    }
    unlock();
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
