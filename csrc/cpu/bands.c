/*
 * bands.c -- cs_cpu_fix_bands: after a fused pass (several steps in one
 * composed kernel, see stencil.h), the outputs near an edge are not
 * exact for any mode but "wrap"; they are recomputed by replaying single
 * steps of the unfused kernel on edge strips of the pass's input and
 * copying back the band.
 */
#include "cpu_private.h"

#include <stdlib.h>
#include <string.h>

/* Copy the box [slo, slo + ext) of grid src (extents sn) to dst at dlo. */
static void
copy_box(double *dst, const ptrdiff_t dn[3], const ptrdiff_t dlo[3],
         const double *src, const ptrdiff_t sn[3], const ptrdiff_t slo[3],
         const ptrdiff_t ext[3])
{
    for (ptrdiff_t z = 0; z < ext[0]; z++) {
        for (ptrdiff_t y = 0; y < ext[1]; y++) {
            double *d = dst + ((dlo[0] + z) * dn[1] + dlo[1] + y) * dn[2]
                        + dlo[2];
            const double *s = src + ((slo[0] + z) * sn[1] + slo[1] + y)
                                    * sn[2] + slo[2];
            memcpy(d, s, (size_t)ext[2] * sizeof(double));
        }
    }
}

cs_status
cs_cpu_fix_bands(const double *in, double *out, const ptrdiff_t shape[3],
                 const cs_kernel *kernel, const cs_fusion_plan *plan,
                 cs_mode mode, double cval, int num_threads)
{
    cs_status st = cs_cpu_check_args(in, out, shape, kernel, mode, 0);
    if (st != CS_OK || plan == NULL) {
        return st != CS_OK ? st : CS_ERR_INVALID;
    }
    if (!plan->needs_band) {
        return CS_OK;
    }
    /* one scratch strip, as large as the largest one */
    size_t most = 0;
    for (int a = 0; a < 3; a++) {
        if (plan->band[a] <= 0) {
            continue;
        }
        if (plan->strip[a] > shape[a] || plan->band[a] > plan->strip[a]) {
            return CS_ERR_INVALID;
        }
        size_t size = (size_t)plan->strip[a];
        for (int b = 0; b < 3; b++) {
            size *= (size_t)(b == a ? 1 : shape[b]);
        }
        most = MAX(most, size);
    }
    double *strip = malloc(MAX(most, (size_t)1) * sizeof(double));
    if (strip == NULL) {
        return CS_ERR_NOMEM;
    }
    static const ptrdiff_t origin[3] = {0, 0, 0};
    for (int a = 0; a < 3 && st == CS_OK; a++) {
        if (plan->band[a] <= 0) {
            continue;
        }
        ptrdiff_t sshape[3] = {shape[0], shape[1], shape[2]};
        sshape[a] = plan->strip[a];
        for (int side = 0; side < 2 && st == CS_OK; side++) {
            /*
             * The strip's inner edge is artificial, but what it corrupts
             * travels depth*r inwards and never reaches the band.
             */
            ptrdiff_t glo[3] = {0, 0, 0};
            glo[a] = side == 0 ? 0 : shape[a] - plan->strip[a];
            copy_box(strip, sshape, origin, in, shape, glo, sshape);
            st = cs_cpu_apply(strip, strip, sshape, kernel, mode, cval,
                              plan->depth, num_threads, NULL, NULL);
            if (st != CS_OK) {
                break;
            }
            ptrdiff_t ext[3] = {shape[0], shape[1], shape[2]};
            ptrdiff_t slo[3] = {0, 0, 0};
            ptrdiff_t olo[3] = {0, 0, 0};
            ext[a] = plan->band[a];
            slo[a] = side == 0 ? 0 : plan->strip[a] - plan->band[a];
            olo[a] = side == 0 ? 0 : shape[a] - plan->band[a];
            copy_box(out, shape, olo, strip, sshape, slo, ext);
        }
    }
    free(strip);
    return st;
}
