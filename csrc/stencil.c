/*
 * stencil.c -- kernels, boundary index mapping and temporal fusion.
 *
 * Composition: applying W (radius r) twice is one correlation with the
 * full convolution W (*) W (radius 2r), because
 *   out[p] = sum_b W[b] sum_a W[a] in[p + a + b - 2r].
 * Fusing k steps is therefore exact wherever no intermediate value would
 * have been read from outside the grid: at distance >= (k-1)*r from every
 * edge.  Closer than that, the fused pass is wrong for every mode except
 * wrap, and the band is recomputed step by step (cs_cpu_fix_bands).
 */
#include "stencil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *
cs_status_string(cs_status status)
{
    switch (status) {
    case CS_OK:
        return "success";
    case CS_ERR_NOMEM:
        return "out of host memory";
    case CS_ERR_INVALID:
        return "invalid argument";
    case CS_ERR_UNSUPPORTED:
        return "not supported by this backend";
    case CS_ERR_CUDA:
        return "CUDA error";
    case CS_ERR_NO_DEVICE:
        return "no CUDA device";
    case CS_ERR_DEVICE_NOMEM:
        return "out of device memory";
    case CS_ERR_INTERRUPTED:
        return "interrupted";
    }
    return "unknown status";
}

void
cs_say(char *msg, size_t msg_len, const char *fmt, ...)
{
    if (msg == NULL || msg_len == 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
}

int
cs_interrupt_requested(const cs_interrupt *intr, long steps_done)
{
    return intr != NULL && intr->poll != NULL
           && intr->poll(intr->arg, steps_done) != 0;
}

ptrdiff_t
cs_kernel_count(const cs_kernel *k)
{
    return k->size[0] * k->size[1] * k->size[2];
}

ptrdiff_t
cs_kernel_radius(const cs_kernel *k, int axis)
{
    return (k->size[axis] - 1) / 2;
}

void
cs_kernel_free(cs_kernel *k)
{
    free(k->weights);
    k->weights = NULL;
}

cs_status
cs_kernel_init(cs_kernel *k, int ndim, const ptrdiff_t *size,
               const double *weights)
{
    if (ndim < 1 || ndim > CS_MAX_NDIM || weights == NULL) {
        return CS_ERR_INVALID;
    }
    k->ndim = ndim;
    for (int a = 0; a < CS_MAX_NDIM; a++) {
        k->size[a] = 1;
    }
    for (int a = 0; a < ndim; a++) {
        ptrdiff_t s = size[a];
        if (s < 1 || s % 2 == 0) {
            return CS_ERR_INVALID;
        }
        k->size[CS_MAX_NDIM - ndim + a] = s;
    }
    size_t count = (size_t)cs_kernel_count(k);
    k->weights = malloc(count * sizeof(double));
    if (k->weights == NULL) {
        return CS_ERR_NOMEM;
    }
    memcpy(k->weights, weights, count * sizeof(double));
    return CS_OK;
}

/* out = full convolution of a and b (both 3D boxes); out zeroed/freed. */
static cs_status
kernel_convolve(const cs_kernel *a, const cs_kernel *b, cs_kernel *out)
{
    ptrdiff_t size[3];
    for (int ax = 0; ax < 3; ax++) {
        size[ax] = a->size[ax] + b->size[ax] - 1;
    }
    double *w = calloc((size_t)(size[0] * size[1] * size[2]), sizeof(double));
    if (w == NULL) {
        return CS_ERR_NOMEM;
    }
    for (ptrdiff_t az = 0; az < a->size[0]; az++) {
        for (ptrdiff_t ay = 0; ay < a->size[1]; ay++) {
            for (ptrdiff_t ax = 0; ax < a->size[2]; ax++) {
                double wa = a->weights[(az * a->size[1] + ay) * a->size[2]
                                       + ax];
                if (wa == 0.0) {
                    continue;
                }
                for (ptrdiff_t bz = 0; bz < b->size[0]; bz++) {
                    for (ptrdiff_t by = 0; by < b->size[1]; by++) {
                        const double *wb =
                            b->weights + (bz * b->size[1] + by) * b->size[2];
                        double *wo = w + ((az + bz) * size[1] + ay + by)
                                             * size[2] + ax;
                        for (ptrdiff_t bx = 0; bx < b->size[2]; bx++) {
                            wo[bx] += wa * wb[bx];
                        }
                    }
                }
            }
        }
    }
    out->ndim = a->ndim;
    for (int ax = 0; ax < 3; ax++) {
        out->size[ax] = size[ax];
    }
    out->weights = w;
    return CS_OK;
}

cs_status
cs_kernel_compose(const cs_kernel *k, int times, cs_kernel *out)
{
    if (times < 1) {
        return CS_ERR_INVALID;
    }
    cs_kernel acc = {0};
    cs_status st = cs_kernel_init(&acc, CS_MAX_NDIM, k->size, k->weights);
    if (st != CS_OK) {
        return st;
    }
    acc.ndim = k->ndim;
    for (int t = 1; t < times; t++) {
        cs_kernel next = {0};
        st = kernel_convolve(&acc, k, &next);
        cs_kernel_free(&acc);
        if (st != CS_OK) {
            return st;
        }
        acc = next;
    }
    *out = acc;
    return CS_OK;
}

/* Does k fused steps of a kernel of extents `size` fit max_side? */
static int
depth_fits(const ptrdiff_t size[3], const ptrdiff_t max_side[3], int depth)
{
    for (int a = 0; a < 3; a++) {
        ptrdiff_t fused = depth * (size[a] - 1) + 1;
        if (fused > max_side[a]) {
            return 0;
        }
    }
    return 1;
}

static void
plan_bands(const cs_kernel *k, cs_mode mode, cs_fusion_plan *plan)
{
    plan->needs_band = (plan->depth > 1 && mode != CS_MODE_WRAP);
    for (int a = 0; a < 3; a++) {
        ptrdiff_t r = cs_kernel_radius(k, a);
        plan->band[a] = plan->needs_band ? (plan->depth - 1) * r : 0;
        plan->strip[a] = plan->needs_band ? (2 * plan->depth - 1) * r : 0;
    }
}

cs_status
cs_fusion_plan_make(const cs_kernel *k, long steps, cs_mode mode,
                    const ptrdiff_t shape[3], const ptrdiff_t max_side[3],
                    cs_fusion_plan *plan)
{
    if (steps < 0) {
        return CS_ERR_INVALID;
    }
    for (int a = 0; a < 3; a++) {
        if (max_side[a] < 1 || max_side[a] % 2 == 0 || shape[a] < 1) {
            return CS_ERR_INVALID;
        }
    }
    int depth = 1;
    if (depth_fits(k->size, max_side, 1)) {
        /* a kernel of radius 0 on every axis never grows: no fusion */
        int grows = 0;
        for (int a = 0; a < 3; a++) {
            grows |= k->size[a] > 1;
        }
        while (grows && depth < steps
               && depth_fits(k->size, max_side, depth + 1)) {
            depth++;
        }
    }
    /* the band fix-up needs both edge strips of every banded axis inside
       the grid: the deepest depth whose strips fit */
    for (plan->depth = depth;; plan->depth--) {
        plan_bands(k, mode, plan);
        int fits = 1;
        for (int a = 0; a < 3 && plan->needs_band; a++) {
            fits &= plan->band[a] == 0 || shape[a] >= 2 * plan->strip[a];
        }
        if (fits || plan->depth == 1) {
            break;
        }
    }
    plan->passes = steps / plan->depth;
    plan->remainder = steps % plan->depth;
    return CS_OK;
}
