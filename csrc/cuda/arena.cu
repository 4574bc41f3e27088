/*
 * arena.cu -- the device block's layout for one call (arena.cuh).
 */
#include "arena.cuh"

#include <stdint.h>
#include <string.h>

#define ARENA_ALIGN 256 /* bytes: every piece of the arena starts aligned */

static ptrdiff_t
round_up(ptrdiff_t v, ptrdiff_t m)
{
    return (v + m - 1) / m * m;
}

/* a * b into *out unless it overflows size_t */
static int
mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) {
        return 0;
    }
    *out = a * b;
    return 1;
}

/* 0 when the sizes overflow. */
static int
geom_make(const ptrdiff_t n[3], const ptrdiff_t h[3], cs_grid_geom *g)
{
    for (int a = 0; a < 3; a++) {
        if (n[a] > PTRDIFF_MAX / 4 || h[a] > PTRDIFF_MAX / 4) {
            return 0;
        }
        g->n[a] = n[a];
        g->halo[a] = h[a];
    }
    g->lead = round_up(h[2], 8);
    g->pitch = round_up(g->lead + n[2] + h[2], 8);
    size_t rows = (size_t)(n[1] + 2 * h[1]);
    size_t planes = (size_t)(n[0] + 2 * h[0]);
    size_t plane, total, bytes;
    if (!mul_ok((size_t)g->pitch, rows, &plane) || plane > PTRDIFF_MAX
        || !mul_ok(plane, planes, &total)
        || !mul_ok(total, sizeof(double), &bytes)) {
        return 0;
    }
    g->plane = (ptrdiff_t)plane;
    g->bytes = bytes;
    return 1;
}

cs_dgrid
cs_geom_view(const cs_grid_geom *g, char *base)
{
    cs_dgrid v;
    v.origin = (double *)base + g->halo[0] * g->plane + g->halo[1] * g->pitch
               + g->lead;
    for (int a = 0; a < 3; a++) {
        v.n[a] = g->n[a];
        v.halo[a] = g->halo[a];
    }
    v.pitch = g->pitch;
    v.plane = g->plane;
    return v;
}

cs_dgrid
cs_contiguous_view(const ptrdiff_t n[3], char *base)
{
    cs_dgrid v;
    v.origin = (double *)base;
    for (int a = 0; a < 3; a++) {
        v.n[a] = n[a];
        v.halo[a] = 0;
    }
    v.pitch = n[2];
    v.plane = n[1] * n[2];
    return v;
}

int
cs_arena_take(size_t *top, size_t bytes, size_t *offset)
{
    size_t at = (*top + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (at < *top || bytes > SIZE_MAX - at) {
        return 0;
    }
    *offset = at;
    *top = at + bytes;
    return 1;
}

/* Two grids of `bytes` each (a ping-pong pair) at the end of the arena. */
static int
take_pair(cs_arena *arena, size_t bytes, size_t off[2])
{
    return cs_arena_take(&arena->bytes, bytes, &off[0])
           && cs_arena_take(&arena->bytes, bytes, &off[1]);
}

int
cs_arena_make(const cs_plan *plan, const cs_kernel *k,
              const ptrdiff_t main_halo[3], cs_arena *arena)
{
    memset(arena, 0, sizeof(*arena));
    int ok = geom_make(plan->run_shape, main_halo, &arena->main)
             && take_pair(arena, arena->main.bytes, arena->off_main);
    ptrdiff_t r[3];
    for (int a = 0; a < 3; a++) {
        r[a] = cs_kernel_radius(k, a);
    }
    for (int a = 0; a < 3 && ok; a++) {
        arena->has_strips[a] =
            plan->band == CS_BAND_STRIPS && plan->fusion.band[a] > 0;
        if (!arena->has_strips[a]) {
            continue;
        }
        ptrdiff_t n[3] = {plan->run_shape[0], plan->run_shape[1],
                          plan->run_shape[2]};
        n[a] = 2 * plan->fusion.strip[a];
        ok = geom_make(n, r, &arena->strip[a])
             && take_pair(arena, arena->strip[a].bytes, arena->off_strip[a]);
    }
    return ok;
}
