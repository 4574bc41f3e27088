/*
 * test_engine.cpp -- cs_cuda_apply, built against the CPU emulation
 * (run.sh), against a naive step-by-step correlate with scipy.ndimage's
 * boundary modes: relative error <= 1e-12, the path and fusion depth it
 * reports, no device memory or stream left behind, and the status and
 * message of each error path.  Prints "N passed, N failed".
 */
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_engine.h"
#include "cuda_runtime.h"  // the emulation's, for kernels.cuh
#include "cuda/kernels.cuh"
#include "stencil.h"

size_t cs_emu_allocated(void);
int cs_emu_streams_alive(void);
int cs_emu_events_alive(void);
int cs_emu_host_allocs_alive(void);

// Nothing left behind once the engine's cache is cleared: device memory,
// streams, events, pinned memory, and no lane still taken.
static bool leaked(void) {
    cs_cuda_clear_cache();
    size_t dev = 0, pinned = 0;
    int blocks = 0, lanes = 0;
    cs_cuda_cache_info(&dev, &blocks, &pinned, &lanes);
    return cs_emu_allocated() != 0 || cs_emu_streams_alive() != 0
           || cs_emu_events_alive() != 0 || cs_emu_host_allocs_alive() != 0
           || dev != 0 || blocks != 0 || pinned != 0 || lanes != 0;
}

static uint64_t rng = 88172645463325252ull;
static double urand() {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (rng >> 11) * (1.0 / 9007199254740992.0);
}

static void ref_step(const std::vector<double> &in, std::vector<double> &out,
                     const ptrdiff_t n[3], const cs_kernel &k, cs_mode mode,
                     double cval) {
    ptrdiff_t r[3];
    for (int a = 0; a < 3; a++) r[a] = (k.size[a] - 1) / 2;
    for (ptrdiff_t z = 0; z < n[0]; z++)
        for (ptrdiff_t y = 0; y < n[1]; y++)
            for (ptrdiff_t x = 0; x < n[2]; x++) {
                double s = 0;
                for (ptrdiff_t dz = 0; dz < k.size[0]; dz++)
                    for (ptrdiff_t dy = 0; dy < k.size[1]; dy++)
                        for (ptrdiff_t dx = 0; dx < k.size[2]; dx++) {
                            double w = k.weights[(dz * k.size[1] + dy) * k.size[2] + dx];
                            ptrdiff_t iz = cs_extend_index(z + dz - r[0], n[0], mode);
                            ptrdiff_t iy = cs_extend_index(y + dy - r[1], n[1], mode);
                            ptrdiff_t ix = cs_extend_index(x + dx - r[2], n[2], mode);
                            double v = (iz < 0 || iy < 0 || ix < 0)
                                           ? cval
                                           : in[(iz * n[1] + iy) * n[2] + ix];
                            s += w * v;
                        }
                out[(z * n[1] + y) * n[2] + x] = s;
            }
}

struct Kern {
    std::string name;
    int ndim;
    ptrdiff_t size[3];
    std::vector<double> w;
};

static Kern make_kernel(const std::string &name, int ndim, ptrdiff_t kz,
                        ptrdiff_t ky, ptrdiff_t kx, bool star = false,
                        bool signed_w = false) {
    Kern k{name, ndim, {kz, ky, kx}, {}};
    k.w.resize(kz * ky * kx);
    double sum = 0;
    for (ptrdiff_t z = 0; z < kz; z++)
        for (ptrdiff_t y = 0; y < ky; y++)
            for (ptrdiff_t x = 0; x < kx; x++) {
                int off = (z != kz / 2) + (y != ky / 2) + (x != kx / 2);
                double v = (star && off > 1) ? 0.0 : 0.2 + urand();
                if (signed_w && v != 0.0 && urand() < 0.3) v = -0.5 * v;
                k.w[(z * ky + y) * kx + x] = v;
                sum += v;
            }
    for (double &v : k.w) v /= sum;  // keeps values bounded over steps
    return k;
}

// A 3D kernel of kz planes, plane dz as planes[dz] says: 'd' dense
// (random, signed), 'p' one nonzero weight off the centre, '0' zero.
static Kern make_planes(const std::string &name, ptrdiff_t ky, ptrdiff_t kx,
                        const std::string &planes) {
    const ptrdiff_t kz = (ptrdiff_t)planes.size();
    Kern k{name, 3, {kz, ky, kx}, {}};
    k.w.assign(kz * ky * kx, 0.0);
    double sum = 0;
    for (ptrdiff_t z = 0; z < kz; z++) {
        double *w = k.w.data() + z * ky * kx;
        if (planes[z] == 'p') {
            // a corner (first or last weight): checks the tap's offset
            ptrdiff_t at = (z % 2 == 0) ? 0 : ky * kx - 1;
            w[at] = 0.2 + urand();
            sum += w[at];
        } else if (planes[z] == 'd') {
            for (ptrdiff_t e = 0; e < ky * kx; e++) {
                w[e] = 0.2 + urand();
                if (urand() < 0.3) w[e] *= -0.5;
                sum += w[e];
            }
        }
    }
    for (double &v : k.w) v /= sum;
    return k;
}

// A K x K x K kernel with random signed weights on the taps within
// distance (K-1)/2 of the centre in the 1-norm (a star's fused powers),
// zero elsewhere.
static Kern make_diamond(const std::string &name, ptrdiff_t k) {
    Kern K{name, 3, {k, k, k}, {}};
    K.w.assign(k * k * k, 0.0);
    const ptrdiff_t r = (k - 1) / 2;
    double sum = 0;
    for (ptrdiff_t z = 0; z < k; z++)
        for (ptrdiff_t y = 0; y < k; y++)
            for (ptrdiff_t x = 0; x < k; x++) {
                if (std::labs(z - r) + std::labs(y - r) + std::labs(x - r) > r) continue;
                double v = 0.2 + urand();
                if (urand() < 0.3) v *= -0.5;
                K.w[(z * k + y) * k + x] = v;
                sum += v;
            }
    for (double &v : K.w) v /= sum;
    return K;
}

// A 2D k x k kernel col (x) row of random signed factors, some zero
// (cc2d computes it as a pass along x and one along y); `nudge` adds
// 1e-9 to one corner, which makes it full rank (the direct taps).
static Kern make_rank1(const std::string &name, ptrdiff_t k, bool nudge = false) {
    Kern K{name, 2, {1, k, k}, {}};
    std::vector<double> col(k), row(k);
    for (ptrdiff_t d = 0; d < k; d++) {
        col[d] = urand() < 0.2 ? 0.0 : (urand() < 0.3 ? -0.4 : 1.0) * (0.2 + urand());
        row[d] = urand() < 0.2 ? 0.0 : (urand() < 0.3 ? -0.4 : 1.0) * (0.2 + urand());
    }
    col[k / 2] = row[k / 2] = 1.0;  // never all zero
    double sum = 0;
    for (ptrdiff_t y = 0; y < k; y++)
        for (ptrdiff_t x = 0; x < k; x++) {
            K.w.push_back(col[y] * row[x]);
            sum += K.w.back();
        }
    if (nudge) K.w[0] += 1e-9;
    for (double &v : K.w) v /= sum;
    return K;
}

static int failures = 0, passes = 0;
static const char *mode_names[] = {"constant", "wrap", "nearest", "reflect", "mirror"};

static void run_case(const Kern &K, ptrdiff_t nz, ptrdiff_t ny, ptrdiff_t nx,
                     cs_mode mode, double cval, long steps, cs_cuda_path path,
                     bool alias = false, const char *want_path = nullptr,
                     int want_depth = -1) {
    const ptrdiff_t n[3] = {nz, ny, nx};
    cs_kernel k{};
    if (cs_kernel_init(&k, 3, K.size, K.w.data()) != CS_OK) abort();
    k.ndim = K.ndim;
    const size_t count = nz * ny * nx;
    std::vector<double> in(count), ref(count), tmp(count), out(count, -7.0);
    for (double &v : in) v = urand() - 0.3;
    ref = in;
    for (long s = 0; s < steps; s++) {
        ref_step(ref, tmp, n, k, mode, cval);
        ref.swap(tmp);
    }
    cs_run_info info{};
    char err[512] = "";
    const std::vector<double> orig = in;
    std::vector<double> io = in;
    const auto t0 = std::chrono::steady_clock::now();
    cs_status st = alias ? cs_cuda_apply(io.data(), io.data(), n, &k, mode, cval,
                                         steps, path, &info, nullptr, err, sizeof err)
                         : cs_cuda_apply(in.data(), out.data(), n, &k, mode,
                                         cval, steps, path, &info, nullptr, err,
                                         sizeof err);
    if (alias) out = io;
    const double secs = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0).count();
    double num = 0, den = 0;
    for (size_t i = 0; i < count; i++) {
        double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    bool ok = st == CS_OK && rel <= 1e-12 && std::isfinite(rel);
    if (want_path && (!info.path || strcmp(info.path, want_path) != 0)) ok = false;
    if (want_depth >= 0 && info.fused_depth != want_depth) ok = false;
    if (in != orig) {  // the input is never modified
        printf("  input modified\n");
        ok = false;
    }
    if (leaked()) {
        printf("  LEAK: %zu bytes, %d streams, %d events, %d pinned\n",
               cs_emu_allocated(), cs_emu_streams_alive(),
               cs_emu_events_alive(), cs_emu_host_allocs_alive());
        ok = false;
    }
    printf("%s %-10s %3tdx%3tdx%4td %-8s steps=%-2ld path=%d -> %-11s depth=%d passes=%ld rem=%ld rel=%.2e %.1fs %s%s\n",
           ok ? "ok  " : "FAIL", K.name.c_str(), nz, ny, nx, mode_names[mode], steps,
           (int)path, info.path ? info.path : "?", info.fused_depth, info.fused_passes,
           info.unfused_steps, rel, secs, st != CS_OK ? "status " : "",
           st != CS_OK ? err : "");
    if (!ok) {
        failures++;
        // first bad index
        for (size_t i = 0; i < count; i++) {
            if (!(std::fabs(out[i] - ref[i]) <= 1e-12 * (1 + std::fabs(ref[i])))) {
                size_t x = i % nx, y = (i / nx) % ny, z = i / (nx * ny);
                printf("    first mismatch at z=%zu y=%zu x=%zu: got %.17g want %.17g\n", z, y, x, out[i], ref[i]);
                break;
            }
        }
    } else {
        passes++;
    }
    fflush(stdout);
    cs_kernel_free(&k);
}

// How cc2d computes K (cs_cc2d_taps): the taps, or as an outer
// product, which the comparison with the reference cannot tell apart.
static void expect_cc2d_shape(const Kern &K, int want) {
    const int size[3] = {(int)K.size[0], (int)K.size[1], (int)K.size[2]};
    const int got = cs_cc2d_taps(size, K.w.data());
    printf("%s cc2d route of %-10s %d (expected %d)\n", got == want ? "ok  " : "FAIL",
           K.name.c_str(), got, want);
    got == want ? passes++ : failures++;
}

// A stop request that comes at the poll number `at` (1 = the first);
// `last` is the step count the last poll reported.
struct StopAt {
    int at, polls;
    long last;
};
static int stop_at(void *arg, long steps_done) {
    StopAt *s = static_cast<StopAt *>(arg);
    s->last = steps_done;
    return ++s->polls >= s->at;
}

// The status of a 3-step run (steps: `steps`), with no leak; with `intr`,
// also that `out` is left as it was when the run is interrupted.
static void expect_status(const char *what, const Kern &K, ptrdiff_t nz,
                          ptrdiff_t ny, ptrdiff_t nx, cs_cuda_path path,
                          cs_status want, const cs_interrupt *intr = nullptr,
                          long steps = 3) {
    const ptrdiff_t n[3] = {nz, ny, nx};
    cs_kernel k{};
    cs_kernel_init(&k, 3, K.size, K.w.data());
    k.ndim = K.ndim;
    std::vector<double> in(nz * ny * nx, 1.0), out(in.size(), -7.0);
    char err[512] = "";
    cs_run_info info{};
    cs_status st = cs_cuda_apply(in.data(), out.data(), n, &k, CS_MODE_CONSTANT,
                                 0.0, steps, path, &info, intr, err, sizeof err);
    bool untouched = true;
    for (double v : out) untouched = untouched && v == -7.0;
    bool ok = st == want && !leaked()
              && (want != CS_ERR_INTERRUPTED || untouched);
    printf("%s %-40s status=%d (%s) msg=\"%s\"\n", ok ? "ok  " : "FAIL", what,
           (int)st, cs_status_string(st), err);
    ok ? passes++ : failures++;
    cs_kernel_free(&k);
}

// Every 3D case on tensor cores (tc3d; a planar 1x1x1 kernel runs tc2d),
// in "constant" (cval != 0) and "wrap", steps 1, 2, 3, 5 (fusion
// remainders), with CONVSTENCIL_CUDA_MAX_DEPTH unset and = 1.
static void tc3d_cases(bool quick) {
    const cs_cuda_path TC = CS_CUDA_PATH_TENSOR_CORE, AUTO = CS_CUDA_PATH_AUTO;
    const cs_mode C = CS_MODE_CONSTANT, W = CS_MODE_WRAP;
    Kern heat3d = make_kernel("heat3d", 3, 3, 3, 3, true);
    Kern box27 = make_kernel("box3d27p", 3, 3, 3, 3);
    Kern r111 = make_kernel("r1x1x1", 3, 1, 1, 1);
    Kern r333 = make_kernel("r3x3x3", 3, 3, 3, 3, false, true);
    Kern r357 = make_kernel("r3x5x7", 3, 3, 5, 7, false, true);
    Kern r777 = make_kernel("r7x7x7", 3, 7, 7, 7, false, true);
    Kern r513 = make_kernel("r5x1x3", 3, 5, 1, 3, false, true);
    Kern p3 = make_planes("pd0", 3, 3, "pd0");          // point, dense, zero
    Kern p5 = make_planes("p0d0p", 5, 7, "p0d0p");      // zero planes between
    Kern pp = make_planes("ppp", 3, 3, "ppp");          // no dense plane
    Kern z3 = make_planes("0d0", 7, 7, "0d0");          // planar in effect

    // quick: every template height (ky 1, 3, 5, 7), kz 3, 5 and 7, dense,
    // point and zero planes, fused depths 1..3 with the band along z, y
    // and x and a remainder, partial tiles in y and x, the cap
    // 3D fuses only when CONVSTENCIL_CUDA_MAX_DEPTH asks for it
    run_case(heat3d, 10, 12, 20, C, 0.5, 5, TC, false, "tensor-core", 1);
    run_case(box27, 3, 33, 130, W, 0.0, 2, AUTO, false, "cuda-core", 1);  // cc3d streams it
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "3", 1);
    run_case(heat3d, 10, 12, 20, C, 0.5, 5, TC, false, "tensor-core", 3);
    run_case(heat3d, 9, 12, 20, C, -0.75, 3, TC, false, "tensor-core", 2);  // 9 planes: strips of depth 2, not 3
    run_case(box27, 3, 33, 130, W, 0.0, 2, TC, false, "tensor-core", 2);
    run_case(box27, 5, 7, 9, C, 1.5, 2, TC, false, "tensor-core", 1);
    run_case(r111, 5, 7, 9, C, 2.0, 3, TC, false, "tensor-core", 1);
    run_case(r111, 1, 1, 1, W, 0.0, 2, TC, false, "tensor-core", 1);
    run_case(heat3d, 1, 1, 1, C, 0.5, 3, TC, false, "tensor-core", 1);
    run_case(r333, 6, 9, 20, W, 0.0, 5, TC, false, "tensor-core", 3);
    run_case(r357, 5, 7, 9, C, -1.0, 2, TC, false, "tensor-core", 1);
    run_case(r777, 7, 9, 20, W, 0.0, 1, TC, false, "tensor-core", 1);
    run_case(r513, 9, 8, 140, C, 0.25, 3, TC, false, "tensor-core", 1);
    run_case(p3, 5, 7, 9, W, 0.0, 2, TC, false, "tensor-core", 2);
    run_case(p5, 9, 8, 20, C, 0.5, 1, TC, false, "tensor-core", 1);
    run_case(pp, 5, 7, 9, W, 0.0, 3, TC, false, "tensor-core", 3);
    run_case(z3, 6, 7, 9, W, 0.0, 1, TC, false, "tensor-core", 1);
    run_case(heat3d, 10, 10, 12, CS_MODE_REFLECT, 0.0, 5, AUTO, true,
             "cuda-core", 3);                             // auto: tb3d, in == out
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "1", 1);
    run_case(heat3d, 6, 9, 20, C, 0.5, 3, TC, false, "tensor-core", 1);
    run_case(p3, 5, 7, 9, W, 0.0, 2, TC, false, "tensor-core", 1);
    run_case(pp, 5, 7, 9, C, 1.0, 3, TC, false, "tensor-core", 1);
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "2", 1);
    run_case(heat3d, 6, 9, 20, W, 0.0, 5, TC, false, "tensor-core", 2);
    unsetenv("CONVSTENCIL_CUDA_MAX_DEPTH");
    if (quick) return;
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "3", 1);  // fused 3D passes
    // full: both modes x steps 1, 2, 3, 5 on small grids, the sizes
    // 3x33x130 and 9x40x257 (several tiles per plane, partial ones) once
    // per mode, the cap at 1, and the other modes
    const cs_mode modes[2] = {C, W};
    for (cs_mode mode : modes) {
        const double cval = mode == C ? 0.75 : 0.0;
        for (long steps : {1L, 2L, 3L, 5L}) {
            run_case(heat3d, 10, 12, 20, mode, cval, steps, TC);
            run_case(box27, 5, 7, 9, mode, cval, steps, TC);
            run_case(r333, 6, 9, 20, mode, cval, steps, TC);
            run_case(p3, 10, 12, 20, mode, cval, steps, TC);
            run_case(p5, 10, 12, 20, mode, cval, steps, TC);
            run_case(pp, 6, 7, 9, mode, cval, steps, TC);
        }
        run_case(heat3d, 9, 40, 257, mode, cval, 5, TC);
        run_case(heat3d, 12, 33, 130, mode, cval, 5, TC, false,
                 "tensor-core", 3);
        run_case(r777, 7, 33, 130, mode, cval, 2, TC);
        run_case(r357, 3, 33, 130, mode, cval, 3, TC);
        run_case(r513, 9, 40, 257, mode, cval, 2, TC);
        run_case(box27, 3, 33, 130, mode, cval, 5, TC);
        run_case(r111, 1, 1, 1, mode, cval, 5, TC);
        run_case(r111, 9, 40, 257, mode, cval, 1, TC);
        setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "1", 1);
        for (long steps : {2L, 3L}) {
            run_case(heat3d, 10, 12, 20, mode, cval, steps, TC, false,
                     "tensor-core", 1);
            run_case(r333, 5, 7, 9, mode, cval, steps, TC, false,
                     "tensor-core", 1);
        }
        setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "3", 1);
    }
    for (int m = 2; m < CS_MODE_COUNT; m++) {
        run_case(heat3d, 10, 12, 20, (cs_mode)m, 0.0, 5, TC, false,
                 "tensor-core", 3);
        run_case(p5, 9, 8, 20, (cs_mode)m, 0.0, 2, TC);
    }
    unsetenv("CONVSTENCIL_CUDA_MAX_DEPTH");
}

// A device array's element type, written from double.
template <class T> static void put(void *p, double v) { T t = (T)v; memcpy(p, &t, sizeof t); }
static void put_f16(void *p, double v) {  // v: a small integer, exact in half
    uint16_t h = 0;
    if (v != 0) {
        int e = 0;
        double m = frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1)
        h = (uint16_t)(((e - 1 + 15) << 10) | ((int)((m * 2 - 1) * 1024) & 1023));
        if (v < 0) h |= 0x8000;
    }
    memcpy(p, &h, 2);
}

// cs_cuda_apply_device on arrays in (emulated) device memory: element
// types, C and F order, a negative stride, out the grid itself, folded
// 1D grids, rows of C-order arrays `pad` elements longer than the grid's;
// against the reference on the same values as float64.  `copies`: which
// of the load into the engine's layout and the store out of it the call
// must run (COPIES_NONE: tb2d between the arrays, a fold whose first pass
// is tc1d's and last step unfused; COPIES_STORE: a fold whose first pass
// reads the array and last is fused; COPIES_ANY: not checked).
enum { COPIES_ANY = -1, COPIES_NONE, COPIES_BOTH, COPIES_STORE, COPIES_LOAD };

static void device_array_case(const Kern &K, ptrdiff_t nz, ptrdiff_t ny,
                              ptrdiff_t nx, cs_dtype dtype, size_t size,
                              void (*write)(void *, double), bool fortran,
                              bool flip_x, bool in_place, cs_mode mode,
                              long steps, cs_cuda_path path,
                              ptrdiff_t pad = 0, int copies = COPIES_ANY) {
    const ptrdiff_t n[3] = {nz, ny, nx};
    const size_t count = nz * ny * nx;
    cs_kernel k{};
    if (cs_kernel_init(&k, 3, K.size, K.w.data()) != CS_OK) abort();
    k.ndim = K.ndim;
    std::vector<double> vals(count), ref, tmp(count);
    for (double &v : vals) v = dtype == CS_DTYPE_FLOAT64 ? urand() - 0.3
                                : dtype == CS_DTYPE_BOOL ? (urand() < 0.5)
                                                         : (double)(int)(urand() * 20 - 5);
    if (dtype >= CS_DTYPE_UINT8 && dtype <= CS_DTYPE_UINT64)
        for (double &v : vals) v = std::fabs(v);
    ref = vals;
    for (long s = 0; s < steps; s++) { ref_step(ref, tmp, n, k, mode, 0.5); ref.swap(tmp); }
    // strides of the layout, in elements, then bytes
    const ptrdiff_t row = nx + pad;
    ptrdiff_t st[3] = {ny * row, row, 1};
    if (fortran) { st[2] = nz * ny; st[1] = nz; st[0] = 1; }
    void *din = nullptr, *dout = nullptr;
    cudaMalloc(&din, nz * ny * row * size);
    cudaMalloc(&dout, nz * ny * row * 8);
    cs_darray a{din, dtype, {st[0] * (ptrdiff_t)size, st[1] * (ptrdiff_t)size,
                             st[2] * (ptrdiff_t)size}};
    if (flip_x) {  // element (z, y, 0) at the far end of each row
        a.data = (char *)din + (nx - 1) * a.strides[2];
        a.strides[2] = -a.strides[2];
    }
    for (ptrdiff_t z = 0; z < nz; z++)
        for (ptrdiff_t y = 0; y < ny; y++)
            for (ptrdiff_t x = 0; x < nx; x++)
                write((char *)a.data + z * a.strides[0] + y * a.strides[1] + x * a.strides[2],
                      vals[(z * ny + y) * nx + x]);
    cs_darray o{dout, CS_DTYPE_FLOAT64, {ny * row * 8, row * 8, 8}};
    if (in_place) o = a;
    cs_cuda_streams streams{{0, 0}, 0};
    cs_run_info info{};
    char err[512] = "";
    cs_emu_reset_launches();
    cs_status stt = cs_cuda_apply_device(&a, &o, n, &k, mode, 0.5, steps, path,
                                         &streams, &info, nullptr, err, sizeof err);
    const long loads = cs_emu_launches("load_array_kernel");
    const long stores = cs_emu_launches("store_array_kernel");
    double num = 0, den = 0;
    for (ptrdiff_t z = 0; z < nz; z++)
        for (ptrdiff_t y = 0; y < ny; y++)
            for (ptrdiff_t x = 0; x < nx; x++) {
                double v;
                memcpy(&v, (char *)o.data + z * o.strides[0] + y * o.strides[1] + x * o.strides[2], 8);
                double d = v - ref[(z * ny + y) * nx + x];
                num += d * d;
                den += ref[(z * ny + y) * nx + x] * ref[(z * ny + y) * nx + x];
            }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    cudaFree(din);
    cudaFree(dout);
    const bool want_load = copies == COPIES_BOTH || copies == COPIES_LOAD;
    const bool want_store = copies == COPIES_BOTH || copies == COPIES_STORE;
    const bool copies_ok = copies == COPIES_ANY
                           || ((loads > 0) == want_load
                               && (stores > 0) == want_store);
    bool ok = stt == CS_OK && rel <= 1e-12 && std::isfinite(rel) && copies_ok
              && !leaked();
    printf("%s device %-9s %tdx%tdx%td dtype=%d %s%s%s%s mode=%d steps=%ld -> %s %ldx%d+%ld loads=%ld stores=%ld rel=%.2e %s\n",
           ok ? "ok  " : "FAIL", K.name.c_str(), nz, ny, nx, (int)dtype,
           fortran ? "F" : "C", pad ? " padded" : "", flip_x ? " flipped" : "",
           in_place ? " in-place" : "", (int)mode,
           steps, info.path ? info.path : "?", info.fused_passes,
           info.fused_depth, info.unfused_steps, loads, stores, rel,
           stt != CS_OK ? err : "");
    ok ? passes++ : failures++;
    cs_kernel_free(&k);
}

// A session: `rounds` rounds of `k` steps on a device grid kept in the
// engine's layout; between rounds one cell of the grid is overwritten
// through the session's view (the next round must read it, as the
// reference does), then the grid is stored.  Against the step-by-step
// reference of the same rounds and writes.
static void session_case(const Kern &K, ptrdiff_t nz, ptrdiff_t ny,
                         ptrdiff_t nx, cs_mode mode, long k, long rounds,
                         cs_cuda_path path, cs_status want = CS_OK) {
    const ptrdiff_t n[3] = {nz, ny, nx};
    const size_t count = nz * ny * nx;
    cs_kernel kern{};
    if (cs_kernel_init(&kern, 3, K.size, K.w.data()) != CS_OK) abort();
    kern.ndim = K.ndim;
    std::vector<double> ref(count), tmp(count);
    for (double &v : ref) v = urand() - 0.3;
    void *din = nullptr, *dout = nullptr;
    cudaMalloc(&din, count * 8);
    cudaMalloc(&dout, count * 8);
    memcpy(din, ref.data(), count * 8);
    cs_darray a{din, CS_DTYPE_FLOAT64, {ny * nx * 8, nx * 8, 8}};
    cs_darray o{dout, CS_DTYPE_FLOAT64, {ny * nx * 8, nx * 8, 8}};
    char err[512] = "";
    cs_cuda_session *x = nullptr;
    const ptrdiff_t at[3] = {0, 0, 0};
    cs_status st = cs_cuda_session_open(&a, n, at, n, &kern, mode, 0.5, k,
                                        path, 0, &x, err, sizeof err);
    bool ok = st == want;
    double rel = 0;
    int nonfinite = -1;
    if (st == CS_OK) {
        for (long r = 0; r < rounds && st == CS_OK; r++) {
            int split = -1;
            st = cs_cuda_session_run(x, nullptr, nullptr, &split, err, sizeof err);
            ok = ok && split == 0;
            for (long s = 0; s < k; s++) { ref_step(ref, tmp, n, kern, mode, 0.5); ref.swap(tmp); }
            cs_darray v;
            ptrdiff_t vn[3];
            cs_cuda_session_view(x, &v, vn);
            ok = ok && vn[0] == nz && vn[1] == ny && vn[2] == nx;
            // the cell at the far corner: wrap's halo refresh carries it over
            const ptrdiff_t z = nz - 1, y = ny - 1, xx = nx - 1 - r % nx;
            const double put = 2.0 + r;
            memcpy((char *)v.data + z * v.strides[0] + y * v.strides[1] + xx * v.strides[2], &put, 8);
            ref[(z * ny + y) * nx + xx] = put;
            // a box out (checked against the reference) and one in (two
            // rows of the last plane; the first two columns of every row)
            const ptrdiff_t rows = ny < 2 ? ny : 2, cols = nx < 2 ? nx : 2;
            const ptrdiff_t out_at[3] = {nz - 1, ny - rows, 0}, out_n[3] = {1, rows, nx};
            const ptrdiff_t in_at[3] = {0, 0, 0}, in_n[3] = {nz, ny, cols};
            std::vector<double> box(nz * ny * nx);
            void *dbox = nullptr;
            cudaMalloc(&dbox, box.size() * 8);
            if (st == CS_OK) st = cs_cuda_session_copy(x, out_at, out_n, dbox, 0, err, sizeof err);
            memcpy(box.data(), dbox, rows * nx * 8);
            for (ptrdiff_t yy = 0; yy < rows; yy++)
                for (ptrdiff_t c = 0; c < nx; c++)
                    ok = ok && std::fabs(box[yy * nx + c]
                                         - ref[((nz - 1) * ny + ny - rows + yy) * nx + c]) <= 1e-12;
            for (ptrdiff_t i = 0; i < nz * ny * cols; i++) box[i] = urand();
            memcpy(dbox, box.data(), nz * ny * cols * 8);
            if (st == CS_OK) st = cs_cuda_session_copy(x, in_at, in_n, dbox, 1, err, sizeof err);
            for (ptrdiff_t zz = 0; zz < nz; zz++)
                for (ptrdiff_t yy = 0; yy < ny; yy++)
                    for (ptrdiff_t c = 0; c < cols; c++)
                        ref[(zz * ny + yy) * nx + c] = box[(zz * ny + yy) * cols + c];
            cudaFree(dbox);
        }
        if (st == CS_OK) st = cs_cuda_session_close(x, &o, &nonfinite, err, sizeof err);
        double num = 0, den = 0;
        for (size_t i = 0; i < count; i++) {
            double got;
            memcpy(&got, (char *)dout + i * 8, 8);
            num += (got - ref[i]) * (got - ref[i]);
            den += ref[i] * ref[i];
        }
        rel = std::sqrt(num / den);
        ok = ok && st == CS_OK && nonfinite == 0 && rel <= 1e-12;
    }
    cs_cuda_session_free(x);
    cudaFree(din);
    cudaFree(dout);
    ok = ok && !leaked();
    printf("%s session %-9s %tdx%tdx%td mode=%d k=%ld rounds=%ld path=%d rel=%.2e %s\n",
           ok ? "ok  " : "FAIL", K.name.c_str(), nz, ny, nx, (int)mode, k,
           rounds, (int)path, rel, st != CS_OK ? err : "");
    ok ? passes++ : failures++;
    cs_kernel_free(&kern);
}

static void session_cases() {
    const cs_cuda_path AUTO = CS_CUDA_PATH_AUTO, TC = CS_CUDA_PATH_TENSOR_CORE,
                       CC = CS_CUDA_PATH_CUDA_CORE;
    Kern heat2d = make_kernel("heat2d", 2, 1, 3, 3, true);
    Kern box49 = make_kernel("box2d49p", 2, 1, 7, 7, false, true);
    Kern heat3d = make_kernel("heat3d", 3, 3, 3, 3, true);
    Kern heat1d = make_kernel("heat1d", 1, 1, 1, 3);
    session_case(heat2d, 1, 37, 45, CS_MODE_WRAP, 3, 3, TC);
    session_case(heat2d, 1, 37, 45, CS_MODE_WRAP, 4, 2, CC);
    session_case(heat2d, 1, 37, 45, CS_MODE_CONSTANT, 5, 2, AUTO);
    session_case(box49, 1, 40, 50, CS_MODE_REFLECT, 2, 2, TC);
    session_case(heat3d, 12, 10, 20, CS_MODE_WRAP, 2, 2, AUTO);
    session_case(heat1d, 1, 1, 500, CS_MODE_WRAP, 4, 1, AUTO,
                 CS_ERR_UNSUPPORTED);
}

static void device_array_cases(bool quick) {
    const cs_cuda_path AUTO = CS_CUDA_PATH_AUTO, TC = CS_CUDA_PATH_TENSOR_CORE;
    Kern heat2d = make_kernel("heat2d", 2, 1, 3, 3, true);
    Kern heat1d = make_kernel("heat1d", 1, 1, 1, 3);
    Kern heat3d = make_kernel("heat3d", 3, 3, 3, 3, true);
    const cs_mode C = CS_MODE_CONSTANT, W = CS_MODE_WRAP, R = CS_MODE_REFLECT;
    device_array_case(heat2d, 1, 37, 45, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, C, 4, AUTO);
    device_array_case(heat2d, 1, 37, 45, CS_DTYPE_FLOAT64, 8, put<double>, true, false, false, R, 4, TC);
    device_array_case(heat2d, 1, 37, 45, CS_DTYPE_FLOAT64, 8, put<double>, false, true, true, W, 3, AUTO);
    device_array_case(heat2d, 1, 20, 33, CS_DTYPE_FLOAT32, 4, put<float>, false, false, false, C, 2, AUTO);
    device_array_case(heat2d, 1, 20, 33, CS_DTYPE_FLOAT16, 2, put_f16, true, false, false, C, 2, AUTO);
    device_array_case(heat2d, 1, 20, 33, CS_DTYPE_INT32, 4, put<int32_t>, false, true, false, R, 1, AUTO);
    device_array_case(heat2d, 1, 20, 33, CS_DTYPE_UINT8, 1, put<uint8_t>, false, false, false, W, 0, AUTO);
    device_array_case(heat2d, 1, 20, 33, CS_DTYPE_BOOL, 1, put<uint8_t>, false, false, false, C, 1, AUTO);
    device_array_case(heat2d, 1, 20, 33, CS_DTYPE_INT64, 8, put<int64_t>, false, false, false, C, 3, AUTO);
    // folded 1D grids: several rows and a tail, a flipped stride, in place
    device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT64, 8, put<double>, false, true, false, R, 5, AUTO);
    device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT64, 8, put<double>, false, false, true, C, 4, AUTO);
    device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT32, 4, put<float>, false, false, false, C, 4, AUTO);
    // one step: the direct kernel, every mode, a negative stride, 3D
    for (int m = 0; m < CS_MODE_COUNT; m++)
        device_array_case(heat2d, 1, 23, 31, CS_DTYPE_FLOAT32, 4, put<float>, false, true,
                          false, (cs_mode)m, 1, AUTO);
    device_array_case(heat3d, 5, 6, 7, CS_DTYPE_FLOAT64, 8, put<double>, true, false, false, R, 1, AUTO);
    device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_INT32, 4, put<int32_t>, false, false, false, W, 1, AUTO);
    // one step in place: the padded path
    device_array_case(heat2d, 1, 23, 31, CS_DTYPE_FLOAT64, 8, put<double>, false, false, true, C, 1, AUTO);
    if (!quick) {
        device_array_case(heat3d, 9, 10, 11, CS_DTYPE_FLOAT64, 8, put<double>, true, true, false, C, 3, AUTO);
    }
    device_array_case(heat3d, 7, 6, 9, CS_DTYPE_INT16, 2, put<int16_t>, false, false, false, W, 2, AUTO);
    // a host pointer is refused, naming the problem
    {
        std::vector<double> host(20 * 33, 1.0), hout(20 * 33);
        cs_darray a{host.data(), CS_DTYPE_FLOAT64, {0, 33 * 8, 8}};
        cs_darray o{hout.data(), CS_DTYPE_FLOAT64, {0, 33 * 8, 8}};
        const ptrdiff_t n[3] = {1, 20, 33};
        cs_kernel k{};
        cs_kernel_init(&k, 3, heat2d.size, heat2d.w.data());
        char err[512] = "";
        cs_status st = cs_cuda_apply_device(&a, &o, n, &k, C, 0.0, 1, AUTO, nullptr,
                                            nullptr, nullptr, err, sizeof err);
        bool ok = st == CS_ERR_INVALID && strstr(err, "not in device memory") && !leaked();
        printf("%s device: host pointer refused: \"%s\"\n", ok ? "ok  " : "FAIL", err);
        ok ? passes++ : failures++;
        cs_kernel_free(&k);
    }
}

// One step between float64 arrays with unit x stride (onestep.cu): the
// kernel that must take it (`want`: "cs_os_tile_kernel",
// "cs_os_1d_l1_kernel", "cs_os_3d_kernel" or "direct_step_kernel"),
// under CONVSTENCIL_ONESTEP = `variant` (nullptr: unset); rows `pad`
// elements longer than the grid's, the arrays `shift` elements past an
// allocation's start (8 bytes: not 16-byte aligned); `specials` NaNs and
// infinities among the values.  Against a reference that skips zero
// weights as scipy.ndimage does: NaN where it has NaN, the same
// infinities, relative error <= 1e-12 elsewhere, and the non-finite flag
// set exactly when a result is not finite.
static void onestep_case(const Kern &K, ptrdiff_t nz, ptrdiff_t ny,
                         ptrdiff_t nx, cs_mode mode, const char *want,
                         const char *variant = nullptr, ptrdiff_t pad = 0,
                         ptrdiff_t shift = 0, int specials = 0,
                         int on_stream = 0) {
    const ptrdiff_t n[3] = {nz, ny, nx};
    const ptrdiff_t row = nx + pad, count = nz * ny * nx;
    const double cval = 0.5;
    cs_kernel k{};
    if (cs_kernel_init(&k, 3, K.size, K.w.data()) != CS_OK) abort();
    k.ndim = K.ndim;
    std::vector<double> vals(count), ref(count);
    for (double &v : vals) v = urand() - 0.3;
    const double odd[3] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < specials; i++)
        vals[(size_t)(urand() * count) % count] = odd[i % 3];
    ptrdiff_t r[3];
    for (int a = 0; a < 3; a++) r[a] = (K.size[a] - 1) / 2;
    for (ptrdiff_t z = 0; z < nz; z++)
        for (ptrdiff_t y = 0; y < ny; y++)
            for (ptrdiff_t x = 0; x < nx; x++) {
                double acc = 0;
                for (ptrdiff_t dz = 0; dz < K.size[0]; dz++)
                    for (ptrdiff_t dy = 0; dy < K.size[1]; dy++)
                        for (ptrdiff_t dx = 0; dx < K.size[2]; dx++) {
                            const double w = K.w[(dz * K.size[1] + dy) * K.size[2] + dx];
                            if (w == 0.0) continue;  // as scipy.ndimage
                            ptrdiff_t iz = cs_extend_index(z + dz - r[0], nz, mode);
                            ptrdiff_t iy = cs_extend_index(y + dy - r[1], ny, mode);
                            ptrdiff_t ix = cs_extend_index(x + dx - r[2], nx, mode);
                            acc += w * ((iz < 0 || iy < 0 || ix < 0)
                                            ? cval : vals[(iz * ny + iy) * nx + ix]);
                        }
                ref[(z * ny + y) * nx + x] = acc;
            }
    const ptrdiff_t elems = nz * ny * row + shift;
    void *din = nullptr, *dout = nullptr;
    cudaMalloc(&din, elems * 8);
    cudaMalloc(&dout, elems * 8);
    double *in = (double *)din + shift, *out = (double *)dout + shift;
    for (ptrdiff_t i = 0; i < nz * ny * row; i++) out[i] = -7.0;  // poison
    for (ptrdiff_t z = 0; z < nz; z++)
        for (ptrdiff_t y = 0; y < ny; y++)
            for (ptrdiff_t x = 0; x < nx; x++)
                in[(z * ny + y) * row + x] = vals[(z * ny + y) * nx + x];
    cs_darray a{in, CS_DTYPE_FLOAT64, {ny * row * 8, row * 8, 8}};
    cs_darray o{out, CS_DTYPE_FLOAT64, {ny * row * 8, row * 8, 8}};
    if (variant) setenv("CONVSTENCIL_ONESTEP", variant, 1);
    cs_run_info info{};
    char err[512] = "";
    // on_stream: queued on a stream of the caller's, which the arrays'
    // producer names too (1) or another (2): no flag is read
    cudaStream_t user = nullptr, other = nullptr;
    cs_cuda_streams streams{{0, 0}, 0};
    if (on_stream) {
        cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking);
        cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
        streams = {{(uintptr_t)(on_stream == 1 ? user : other), 0}, (uintptr_t)user};
    }
    cs_emu_reset_launches();
    cs_status st = cs_cuda_apply_device(&a, &o, n, &k, mode, cval, 1, CS_CUDA_PATH_AUTO,
                                        on_stream ? &streams : nullptr, &info, nullptr,
                                        err, sizeof err);
    unsetenv("CONVSTENCIL_ONESTEP");
    if (on_stream) {
        cudaStreamSynchronize(user);
        cudaStreamDestroy(user);
        cudaStreamDestroy(other);
    }
    const char *kernels[] = {"cs_os_tile_kernel", "cs_os_1d_l1_kernel",
                             "cs_os_3d_kernel", "direct_step_kernel"};
    bool ran_ok = true;
    for (const char *name : kernels)
        ran_ok = ran_ok && (cs_emu_launches(name) > 0) == (strcmp(name, want) == 0);
    double num = 0, den = 0;
    bool specials_ok = true, any_bad = false;
    for (ptrdiff_t z = 0; z < nz; z++)
        for (ptrdiff_t y = 0; y < ny; y++)
            for (ptrdiff_t x = 0; x < nx; x++) {
                const double got = out[(z * ny + y) * row + x];
                const double want_v = ref[(z * ny + y) * nx + x];
                if (!std::isfinite(want_v)) {
                    any_bad = true;
                    specials_ok = specials_ok
                                  && (std::isnan(want_v) ? std::isnan(got) : got == want_v);
                    continue;
                }
                num += (got - want_v) * (got - want_v);
                den += want_v * want_v;
            }
    // the padding past each row is never written
    for (ptrdiff_t i = 0; i < nz * ny && pad > 0; i++)
        for (ptrdiff_t x = nx; x < row; x++)
            specials_ok = specials_ok && out[i * row + x] == -7.0;
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    cudaFree(din);
    cudaFree(dout);
    const int want_flag = on_stream ? -1 : (int)any_bad;
    const bool ok = st == CS_OK && ran_ok && rel <= 1e-12 && specials_ok
                    && info.nonfinite == want_flag && !leaked();
    printf("%s onestep %-10s %tdx%tdx%td mode=%d %s%s%s%s%s -> %s (want %s) "
           "nonfinite=%d rel=%.2e %s\n",
           ok ? "ok  " : "FAIL", K.name.c_str(), nz, ny, nx, (int)mode,
           variant ? variant : "default", pad ? " padded" : "",
           shift ? " shifted" : "", specials ? " specials" : "",
           on_stream ? (on_stream == 1 ? " on-stream" : " on-stream-waits") : "",
           info.path ? info.path : "?", want, info.nonfinite, rel,
           st != CS_OK ? err : "");
    ok ? passes++ : failures++;
    cs_kernel_free(&k);
}

static void onestep_cases(bool quick) {
    const char *TILE = "cs_os_tile_kernel", *L1 = "cs_os_1d_l1_kernel",
               *K3D = "cs_os_3d_kernel", *GEN = "direct_step_kernel";
    const cs_mode C = CS_MODE_CONSTANT, W = CS_MODE_WRAP, N = CS_MODE_NEAREST,
                  R = CS_MODE_REFLECT, M = CS_MODE_MIRROR;
    const cs_mode modes[] = {C, W, N, R, M};
    // 1D: 3, 5 and 7 taps; the L1 kernel (default) and the tile kernel
    // (1D runs of tiles); grids shorter than the kernel, one block's
    // 2048 points and more, ends inside a pair
    Kern h3 = make_kernel("1d3", 1, 1, 1, 3, false, true);
    Kern h5 = make_kernel("1d5", 1, 1, 1, 5, false, true);
    Kern h7 = make_kernel("1d7", 1, 1, 1, 7, false, true);
    for (cs_mode m : modes) {
        onestep_case(h3, 1, 1, 4099, m, L1, "l1");
        onestep_case(h5, 1, 1, 2, m, L1, "l1");
        onestep_case(h7, 1, 1, 6151, m, L1, "l1");
        onestep_case(h3, 1, 1, 1, m, TILE, "persist");
        onestep_case(h5, 1, 1, 8195, m, TILE, "persist");
        onestep_case(h7, 1, 1, 9000, m, TILE);
        onestep_case(h3, 1, 1, 4097, m, TILE);
    }
    onestep_case(h5, 1, 1, 5001, R, TILE, "l1", 0, 1);  // not 16-byte aligned
    onestep_case(h3, 1, 1, 5000, C, L1, "l1", 0, 0, 9);
    onestep_case(h5, 1, 1, 7000, N, TILE, nullptr, 0, 0, 9);
    onestep_case(h7, 1, 1, 8300, M, TILE, "persist", 0, 0, 9);
    onestep_case(h5, 1, 1, 700, W, GEN, "generic");
    // planar: pluses, boxes, outer products of sides 3, 5, 7
    Kern p3 = make_kernel("plus3", 2, 1, 3, 3, true, true);
    Kern b3 = make_kernel("box3", 2, 1, 3, 3, false, true);
    Kern p5 = make_kernel("plus5", 2, 1, 5, 5, true, true);
    Kern b5 = make_kernel("box5", 2, 1, 5, 5, false, true);
    Kern p7 = make_kernel("plus7", 2, 1, 7, 7, true, true);
    Kern b7 = make_kernel("box7", 2, 1, 7, 7, false, true);
    // outer products: random factors (some may be zero) and factors
    // without zeros (signed rows)
    Kern o5z = make_rank1("outer5z", 5), o7z = make_rank1("outer7z", 7);
    Kern o5 = o5z, o7 = o7z;
    o5.name = "outer5";
    o7.name = "outer7";
    {
        std::vector<double> col(7), row(7);
        for (int d = 0; d < 7; d++) {
            col[d] = 0.3 + urand();
            row[d] = (urand() < 0.3 ? -0.5 : 1.0) * (0.2 + urand());
        }
        for (int kk : {5, 7}) {
            Kern &K = kk == 5 ? o5 : o7;
            for (int y = 0; y < kk; y++)
                for (int x = 0; x < kk; x++) K.w[y * kk + x] = col[y] * row[x];
        }
    }
    const Kern *planar[] = {&p3, &b3, &p5, &b5, &o5, &p7, &b7, &o7};
    for (const Kern *K : planar) {
        for (cs_mode m : modes) {
            onestep_case(*K, 1, 70, 131, m, TILE, "persist");  // past both far edges
            if (!quick) onestep_case(*K, 1, 33, 129, m, TILE);
        }
        onestep_case(*K, 1, 1, 1, W, TILE);
        onestep_case(*K, 1, 2, 3, R, TILE, "persist");
        onestep_case(*K, 2, 5, 9, M, TILE, nullptr, 3);    // two planes, padded rows
        onestep_case(*K, 1, 65, 140, N, TILE, "deep", 1, 1);
        onestep_case(*K, 1, 40, 150, C, TILE, nullptr, 0, 0, 12);
    }
    // a zero among a box's weights (or a plus's), and an outer product
    // with a zero factor: direct.cu's kernel, which skips them
    Kern b3z = b3, p7z = p7;
    b3z.w[4] = 0.0;
    p7z.w[3] = 0.0;
    onestep_case(b3z, 1, 20, 30, R, GEN);
    onestep_case(p7z, 1, 20, 30, C, GEN, nullptr, 0, 0, 5);
    for (const Kern *K : {&o5z, &o7z}) {
        bool zero = false;
        for (double v : K->w) zero = zero || v == 0.0;
        onestep_case(*K, 1, 21, 33, W, zero ? GEN : TILE);
    }
    // 3D: the 7-point star and the 3 x 3 x 3 box
    Kern s3 = make_kernel("star3d", 3, 3, 3, 3, true, true);
    Kern c3 = make_kernel("box3d", 3, 3, 3, 3, false, true);
    for (const Kern *K : {&s3, &c3}) {
        for (cs_mode m : modes) {
            onestep_case(*K, 19, 17, 67, m, K3D);
            onestep_case(*K, 2, 3, 5, m, K3D);
        }
        onestep_case(*K, 1, 1, 1, N, K3D);
        onestep_case(*K, 70, 3, 4, R, K3D, nullptr, 1, 1);  // two z blocks
        onestep_case(*K, 9, 20, 65, C, K3D, nullptr, 0, 0, 10);
        for (const char *v : {"blocks", "deep"}) {  // other rings, occupancies
            onestep_case(*K, 21, 17, 67, W, K3D, v);
            onestep_case(*K, 70, 3, 4, M, K3D, v, 1, 1);
            onestep_case(*K, 9, 20, 65, C, K3D, v, 0, 0, 10);
        }
    }
    Kern c3z = c3;
    c3z.w[0] = 0.0;
    onestep_case(c3z, 5, 6, 7, M, GEN);
    // arrays of other kinds: not taken (direct.cu's kernel or the engine)
    onestep_case(b3, 1, 20, 30, C, GEN, "generic");
    // queued on the caller's stream: launched at once (1), or through a
    // lane that waits for the producer's other stream (2)
    for (int on : {1, 2}) {
        onestep_case(h3, 1, 1, 9001, W, TILE, nullptr, 0, 0, 3, on);
        onestep_case(p7, 1, 70, 131, R, TILE, nullptr, 0, 0, 3, on);
        onestep_case(s3, 19, 17, 67, M, K3D, nullptr, 0, 0, 3, on);
        onestep_case(b3z, 1, 20, 30, C, GEN, nullptr, 0, 0, 0, on);
    }
}

// cs_cuda_set_device / cs_cuda_current_device: device 0 of one, an
// invalid index named with the visible range, or `none` without a device.
static void expect_device_selection(cs_status none) {
    char msg[256] = "";
    int dev = -1;
    cs_status got = cs_cuda_current_device(&dev, msg, sizeof msg);
    cs_status set0 = cs_cuda_set_device(0, msg, sizeof msg);
    cs_status set1 = cs_cuda_set_device(1, msg, sizeof msg);
    const bool ok = none == CS_OK
        ? got == CS_OK && dev == 0 && set0 == CS_OK && set1 == CS_ERR_INVALID
              && strstr(msg, "0 to 0") != nullptr
        : got == none && set0 == none && set1 == none;
    if (!ok) {
        printf("FAIL device selection (expected %d): current %d (device %d), "
               "set(0) %d, set(1) %d: %s\n", (int)none, (int)got, dev,
               (int)set0, (int)set1, msg);
        failures++;
    } else {
        passes++;
    }
}

// tb2d (cuda-core path, planar 3 x 3 (a plus, an outer product, a box)
// and pluses, outer products and full-rank boxes of sides 5 and 7):
// every mode, passes of the most steps and a tail pass of every depth,
// strips moved back at the far edges, edges inside a lane (widths odd),
// grids narrower than a strip, several planes and segments.
static void tb2d_cases(bool quick) {
    const cs_cuda_path CC = CS_CUDA_PATH_CUDA_CORE;
    Kern heat2d = make_kernel("heat2d", 2, 1, 3, 3, true);
    Kern r33 = make_kernel("r3x3", 2, 1, 3, 3, false, true);
    Kern p5 = make_kernel("plus5", 2, 1, 5, 5, true, true);
    Kern p7 = make_kernel("plus7", 2, 1, 7, 7, true, true);
    Kern o3 = make_rank1("rank1_3x3", 3);
    Kern o5 = make_rank1("rank1_5x5", 5);
    Kern o7 = make_rank1("rank1_7x7", 7);
    Kern b5 = make_kernel("box5x5", 2, 1, 5, 5, false, true);
    Kern b7 = make_kernel("box7x7", 2, 1, 7, 7, false, true);
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        cs_mode mode = (cs_mode)m;
        // full-rank boxes of sides 5 and 7 (every tap; 3 and 1 steps a
        // pass)
        run_case(b5, 2, 23, 45, mode, 0.25, 7, CC, false, "cuda-core", 3);
        run_case(b7, 1, 40, 90, mode, 0.5, 3, CC, false, "cuda-core", 1);
        device_array_case(b5, 1, 33, 70, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 5, CC, 0, COPIES_NONE);
        // outer products of sides 5 and 7 (box2d49p's shape)
        run_case(o7, 1, 40, 90, mode, 0.5, 7, CC, false, "cuda-core", 3);
        run_case(o5, 2, 23, 45, mode, 0.25, 9, CC, false, "cuda-core", 4);
        device_array_case(o7, 1, 33, 70, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 5, CC, 0, COPIES_NONE);
        run_case(o3, 1, 37, 101, mode, 0.5, 11, CC, false, "cuda-core", 8);
        device_array_case(o3, 1, 21, 50, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 3, CC, 0, COPIES_NONE);
        run_case(p7, 1, 40, 90, mode, 0.5, 9, CC, false, "cuda-core", 3);
        run_case(p7, 1, 16, 17, mode, -1.5, 3, CC, false, "cuda-core", 3);
        run_case(p5, 2, 23, 45, mode, 0.25, 7, CC, false, "cuda-core", 4);
        device_array_case(p7, 1, 33, 70, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 6, CC, 0, COPIES_NONE);
        run_case(heat2d, 1, 70, 150, mode, 0.5, 11, CC, false, "cuda-core", 8);
        run_case(r33, 2, 17, 16, mode, -1.5, 5, CC, false, "cuda-core", 5);
        run_case(r33, 1, 19, 23, mode, 0.25, 7, CC, false, "cuda-core", 7);
        // between float64 device arrays: the first pass reads the input
        // and the last writes the result (one pass alone: both); other
        // layouts go through the padded grids
        device_array_case(heat2d, 1, 70, 150, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 11, CC, 0, COPIES_NONE);
        device_array_case(r33, 2, 17, 16, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 5, CC, 3, COPIES_NONE);
        device_array_case(r33, 1, 19, 23, CS_DTYPE_FLOAT64, 8, put<double>, true, false, false, mode, 9, CC, 0, COPIES_BOTH);
        device_array_case(r33, 1, 19, 23, CS_DTYPE_FLOAT64, 8, put<double>, false, true, false, mode, 9, CC, 0, COPIES_BOTH);
        device_array_case(heat2d, 1, 19, 23, CS_DTYPE_FLOAT64, 8, put<double>, false, false, true, mode, 9, CC, 0, COPIES_BOTH);
        if (quick) continue;
        run_case(heat2d, 1, 41, 131, mode, -0.5, 19, CC, false, "cuda-core", 8);
        run_case(r33, 3, 16, 117, mode, 2.0, 3, CC, false, "cuda-core", 3);
        run_case(p7, 2, 57, 131, mode, 0.75, 11, CC, false, "cuda-core", 3);
        run_case(p5, 1, 16, 16, mode, 1.0, 13, CC, false, "cuda-core", 4);
        run_case(o7, 1, 16, 17, mode, -1.5, 3, CC, false, "cuda-core", 3);
        run_case(o5, 1, 57, 131, mode, 0.75, 11, CC, false, "cuda-core", 4);
        run_case(b5, 1, 16, 17, mode, -1.5, 2, CC, false, "cuda-core", 2);
        run_case(b7, 2, 57, 131, mode, 0.75, 2, CC, false, "cuda-core", 1);
    }
}

// An outer product of three random vectors (box3d27p's shape).
static Kern make_rank1_3d(const std::string &name) {
    Kern K{name, 3, {3, 3, 3}, {}};
    double f[3][3];
    for (auto &v : f)
        for (double &x : v) x = (urand() < 0.3 ? -0.5 : 1.0) * (0.25 + urand());
    double sum = 0;
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 3; x++) {
                K.w.push_back(f[0][z] * f[1][y] * f[2][x]);
                sum += K.w.back();
            }
    for (double &v : K.w) v /= sum;
    return K;
}

// tb3d (cuda-core path, 3 x 3 x 3 stars and outer products): every mode,
// passes of the most steps (3) and a tail pass, tiles moved back at the
// far edges, tiles inside the grid beside tiles at its edges, several
// segments, grids of the least extent, and between device arrays
// without a load or a store.
static void tb3d_cases(bool quick) {
    const cs_cuda_path CC = CS_CUDA_PATH_CUDA_CORE;
    Kern star = make_kernel("star3d", 3, 3, 3, 3, true, true);
    Kern o3 = make_rank1_3d("rank1_3d");
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        cs_mode mode = (cs_mode)m;
        run_case(star, 9, 37, 70, mode, 0.5, 5, CC, false, "cuda-core", 3);
        device_array_case(star, 10, 20, 70, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 6, CC, 0, COPIES_NONE);
        device_array_case(o3, 9, 17, 30, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 4, CC, 0, COPIES_NONE);
        // a device with 99 KB of shared memory per block: a star's pass
        // of 3 steps does not fit (104448 bytes), one of 2 does
        setenv("EMU_SMEM_OPTIN", "101376", 1);
        run_case(star, 9, 37, 70, mode, 0.5, 5, CC, false, "cuda-core", 2);
        unsetenv("EMU_SMEM_OPTIN");
        if (quick) continue;
        run_case(o3, 12, 33, 131, mode, -1.5, 7, CC, false, "cuda-core", 3);
        run_case(star, 8, 8, 8, mode, 0.25, 3, CC, false, "cuda-core", 3);
        run_case(star, 40, 60, 140, mode, 0.75, 11, CC, false, "cuda-core", 3);
        run_case(o3, 8, 70, 20, mode, 1.0, 2, CC, false, "cuda-core", 2);
        run_case(o3, 10, 60, 140, mode, 0.5, 6, CC, false, "cuda-core", 3);
        run_case(star, 12, 61, 150, mode, -0.5, 1, CC, false, "cuda-core", 1);
    }
}

// A folded 1D grid between float64 device arrays: the first tc1d pass
// reads the caller's array (points beyond either end as the mode maps
// them) and the last unfused step writes the result, each where the plan
// has one; every mode, a tail row of one point and of many.
static void fold_cases() {
    const cs_cuda_path AUTO = CS_CUDA_PATH_AUTO, TC = CS_CUDA_PATH_TENSOR_CORE,
                       CC = CS_CUDA_PATH_CUDA_CORE;
    Kern heat1d = make_kernel("heat1d", 1, 1, 1, 3);
    Kern p1d5 = make_kernel("1d5p", 1, 1, 1, 5);
    Kern k1d9 = make_kernel("k1d9", 1, 1, 1, 9);
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        const cs_mode mode = (cs_mode)m;
        // two fused passes and an unfused step: neither load nor store
        device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 17, TC, 0, COPIES_NONE);
        device_array_case(p1d5, 1, 1, 4097, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 16, TC, 0, COPIES_NONE);
        device_array_case(k1d9, 1, 1, 8193, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 5, TC, 0, COPIES_NONE);
        // enough full rows that the tiles away from the ends read the
        // array as plain loads (tc1d_flat_inside): payloads 31 and 15
        device_array_case(heat1d, 1, 1, 4096 * 12 + 517, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 17, TC, 0, COPIES_NONE);
        device_array_case(k1d9, 1, 1, 4096 * 17 + 5, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 1, TC, 0, COPIES_STORE);
        // passes only: the result is stored from the fold
        device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 30, TC, 0, COPIES_STORE);
        // unfused steps only: the grid is loaded into the fold
        device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT64, 8, put<double>, false, false, false, mode, 3, CC, 0, COPIES_LOAD);
        // in place: the result waits for the verdict, stored from the fold
        device_array_case(p1d5, 1, 1, 9001, CS_DTYPE_FLOAT64, 8, put<double>, false, false, true, mode, 16, AUTO, 0, COPIES_STORE);
        // a negative stride, another dtype: loaded into the fold (the
        // result, a fresh float64 array, written by the last step); in
        // place with a negative stride: both through the fold
        device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT64, 8, put<double>, false, true, false, mode, 17, TC, 0, COPIES_LOAD);
        device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT32, 4, put<float>, false, false, false, mode, 17, TC, 0, COPIES_LOAD);
        device_array_case(heat1d, 1, 1, 9000, CS_DTYPE_FLOAT64, 8, put<double>, false, true, true, mode, 17, TC, 0, COPIES_BOTH);
    }
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    if (argc > 1 && strncmp(argv[1], "tc3d", 4) == 0) {
        // development: the 3D tensor-core cases alone ("tc3d": the full
        // set, "tc3d-quick": quick's)
        tc3d_cases(strcmp(argv[1], "tc3d-quick") == 0);
        printf("%d passed, %d failed\n", passes, failures);
        return failures != 0;
    }
    if (argc > 1 && strcmp(argv[1], "tb3d") == 0) {
        // development: the tb3d cases alone
        tb3d_cases(false);
        printf("%d passed, %d failed\n", passes, failures);
        return failures ? 1 : 0;
    }
    if (argc > 1 && strcmp(argv[1], "fold") == 0) {
        // development: the fold's device-array cases alone
        fold_cases();
        printf("%d passed, %d failed\n", passes, failures);
        return failures ? 1 : 0;
    }
    if (argc > 1 && strcmp(argv[1], "tb2d") == 0) {
        // development: the tb2d cases alone
        tb2d_cases(false);
        printf("%d passed, %d failed\n", passes, failures);
        return failures ? 1 : 0;
    }
    if (argc > 1 && strcmp(argv[1], "onestep") == 0) {
        // development: the one-step kernels' cases alone
        onestep_cases(false);
        printf("%d passed, %d failed\n", passes, failures);
        return failures != 0;
    }
    if (argc > 1 && strcmp(argv[1], "session") == 0) {
        // development: the session cases alone
        session_cases();
        printf("%d passed, %d failed\n", passes, failures);
        return failures != 0;
    }
    char msg[256];
    int c = cs_cuda_device_count(msg, sizeof msg);
    printf("device_count=%d: %s\n", c, msg);

    const cs_cuda_path TC = CS_CUDA_PATH_TENSOR_CORE, CC = CS_CUDA_PATH_CUDA_CORE,
                       AUTO = CS_CUDA_PATH_AUTO;
    Kern heat2d = make_kernel("heat2d", 2, 1, 3, 3, true);
    Kern box9 = make_kernel("box2d9p", 2, 1, 3, 3);
    Kern star13 = make_kernel("star2d13p", 2, 1, 7, 7, true);
    Kern box49 = make_kernel("box2d49p", 2, 1, 7, 7, false, true);
    Kern k55 = make_kernel("k5x5", 2, 1, 5, 5, false, true);
    Kern k13 = make_kernel("k1x3", 2, 1, 1, 3);
    Kern k31 = make_kernel("k3x1", 2, 1, 3, 1);
    Kern k11 = make_kernel("k1x1", 2, 1, 1, 1);
    Kern k37 = make_kernel("k3x7", 2, 1, 3, 7, false, true);
    Kern k53 = make_kernel("k5x3", 2, 1, 5, 3);
    Kern heat1d = make_kernel("heat1d", 1, 1, 1, 3);
    Kern p1d5 = make_kernel("1d5p", 1, 1, 1, 5);
    Kern heat3d = make_kernel("heat3d", 3, 3, 3, 3, true);
    Kern box27 = make_kernel("box3d27p", 3, 3, 3, 3);
    Kern k1d801 = make_kernel("k1d801", 1, 1, 1, 801);
    Kern k35x3 = make_kernel("k35x3", 2, 1, 35, 3);
    Kern k3x67 = make_kernel("k3x67", 2, 1, 3, 67);
    Kern k9x9 = make_kernel("k9x9", 2, 1, 9, 9);
    Kern k3d513 = make_kernel("k5x1x3", 3, 5, 1, 3);
    Kern k1d7 = make_kernel("k1d7", 1, 1, 1, 7);
    Kern k1d1 = make_kernel("k1d1", 1, 1, 1, 1);
    Kern k1d9 = make_kernel("k1d9", 1, 1, 1, 9);

    tb2d_cases(quick);
    tb3d_cases(quick);
    fold_cases();
    run_case(box9, 1, 15, 40, CS_MODE_REFLECT, 0.0, 4, CC, false, "cuda-core", 1);  // too small for tb2d

    // ---- tensor-core path: every mode, fused depths 1..3, remainders
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        cs_mode mode = (cs_mode)m;
        run_case(heat2d, 1, 37, 131, mode, 0.5, 7, TC, false, "tensor-core", 3);
        run_case(box49, 1, 40, 140, mode, -0.25, 2, TC, false, "tensor-core", 1);
        if (quick) continue;
        run_case(box9, 1, 33, 129, mode, 1.5, 5, TC, false, "tensor-core", 3);
        run_case(k55, 1, 45, 150, mode, 0.0, 3, TC, false, "tensor-core", 1);
        run_case(k13, 1, 20, 260, mode, 2.0, 4, TC, false, "tensor-core", 3);
        run_case(k31, 1, 70, 20, mode, 2.0, 4, TC, false, "tensor-core", 3);
        run_case(k53, 1, 25, 30, mode, 0.3, 3, TC, false, "tensor-core", 1);
    }
    run_case(star13, 1, 64, 256, CS_MODE_REFLECT, 0.0, 2, TC);
    run_case(k37, 1, 31, 127, CS_MODE_MIRROR, 0.0, 2, TC);
    run_case(k11, 1, 9, 10, CS_MODE_CONSTANT, 3.0, 3, TC);
    run_case(heat2d, 2, 33, 140, CS_MODE_NEAREST, 0.0, 4, TC, false, "tensor-core", 3);
    run_case(heat2d, 1, 1, 300, CS_MODE_WRAP, 0.0, 3, TC);          // ny=1: no y band
    run_case(heat2d, 1, 9, 8, CS_MODE_CONSTANT, 1.0, 3, TC, false, "tensor-core", 2);  // too small for depth 3
    run_case(heat2d, 1, 5, 8, CS_MODE_CONSTANT, 1.0, 3, TC, false, "tensor-core", 1);  // too small to fuse
    run_case(heat2d, 1, 10, 10, CS_MODE_REFLECT, 0.0, 3, TC, false, "tensor-core", 3); // exactly 2*strip
    run_case(box9, 1, 12, 400, CS_MODE_MIRROR, 0.0, 6, TC, true, "tensor-core", 3);     // in == out
    run_case(heat1d, 1, 1, 700, CS_MODE_REFLECT, 0.0, 3, TC);
    run_case(heat2d, 1, 37, 131, CS_MODE_CONSTANT, 0.0, 0, TC);     // steps 0 copies
    run_case(heat2d, 1, 37, 131, CS_MODE_WRAP, 0.0, 5, AUTO, false, "tensor-core", 3);

    // ---- 1D, folded into rows of 4096 points: one row, several rows, a
    // partial last row shorter than the halo, fused ends, both paths
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        cs_mode mode = (cs_mode)m;
        run_case(heat1d, 1, 1, 9000, mode, 0.5, 7, TC, false, "tensor-core", 7);
        run_case(heat1d, 1, 1, 8194, mode, -1.5, 4, CC, false, "cuda-core", 1);
        if (quick) continue;
        run_case(p1d5, 1, 1, 4097, mode, 0.25, 3, TC, false, "tensor-core", 3);
        run_case(k1d7, 1, 1, 12289, mode, 2.0, 2, TC, false, "tensor-core", 2);
        run_case(heat1d, 1, 1, 4096, mode, 1.0, 5, AUTO, false, "tensor-core", 5);
        run_case(k1d9, 1, 1, 5000, mode, 1.0, 3, TC, false, "tensor-core", 3);
        run_case(p1d5, 1, 1, 9001, mode, -0.5, 16, TC, false, "tensor-core", 7);
    }
    run_case(heat1d, 1, 1, 1, CS_MODE_WRAP, 0.0, 5, TC, false, "tensor-core", 5);
    run_case(heat1d, 1, 1, 1, CS_MODE_CONSTANT, 0.5, 5, TC, false, "tensor-core", 1);
    run_case(heat1d, 1, 1, 7, CS_MODE_REFLECT, 0.0, 4, TC);
    run_case(heat1d, 1, 1, 10, CS_MODE_CONSTANT, 0.5, 3, TC, false, "tensor-core", 3);  // exactly 2*strip
    run_case(heat1d, 1, 1, 8193, CS_MODE_CONSTANT, -0.5, 50, TC, false, "tensor-core", 10);  // 5 launches, not 3 + 5
    run_case(heat1d, 1, 1, 8193, CS_MODE_REFLECT, 0.0, 30, TC, false, "tensor-core", 15);  // 31 points, banded
    run_case(heat1d, 1, 1, 8193, CS_MODE_WRAP, 0.0, 6, TC, true, "tensor-core", 6);    // in == out
    run_case(k1d1, 1, 1, 5000, CS_MODE_CONSTANT, 0.5, 3, TC, false, "tensor-core");
    run_case(p1d5, 1, 1, 129, CS_MODE_WRAP, 0.0, 3, AUTO, false, "tensor-core", 3);
    run_case(k1d9, 1, 1, 4099, CS_MODE_CONSTANT, 0.5, 2, AUTO, false, "tensor-core", 2);
    run_case(k1d9, 1, 1, 300, CS_MODE_REFLECT, 0.0, 2, TC, false, "tensor-core", 2);
    run_case(heat1d, 1, 1, 100, CS_MODE_MIRROR, 0.0, 8, TC, false, "tensor-core", 8);
    run_case(heat1d, 1, 1, 20000, CS_MODE_NEAREST, 0.0, 20, TC, false, "tensor-core", 10);
    run_case(k1d801, 1, 1, 300, CS_MODE_WRAP, 0.0, 2, CC);      // radius > row
    run_case(k1d801, 1, 1, 300, CS_MODE_CONSTANT, 1.0, 1, CC);
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "2", 1);
    run_case(heat1d, 1, 1, 9000, CS_MODE_CONSTANT, 0.5, 5, TC, false, "tensor-core", 2);
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "1", 1);
    run_case(heat2d, 1, 40, 50, CS_MODE_CONSTANT, 0.5, 5, TC, false, "tensor-core", 1);
    unsetenv("CONVSTENCIL_CUDA_MAX_DEPTH");

    // ---- tensor-core path, 3D
    tc3d_cases(quick);

    // ---- CUDA-core path
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        cs_mode mode = (cs_mode)m;
        run_case(heat1d, 1, 1, 1000, mode, 0.5, 3, CC, false, "cuda-core", 1);
        run_case(heat3d, 9, 12, 40, mode, 0.5, 2, CC, false, "cuda-core", 2);
        run_case(star13, 1, 15, 300, mode, 0.5, 2, CC, false, "cuda-core", 1);  // cc2d: under tb2d's 16 rows
        if (quick) continue;
        run_case(p1d5, 1, 1, 300, mode, -1.0, 2, CC);
        run_case(box27, 6, 35, 33, mode, 0.0, 2, CC);
        run_case(box49, 1, 40, 70, mode, 0.25, 2, CC);
        run_case(k9x9, 1, 4, 5, mode, 0.25, 2, CC);  // radius > grid
    }
    run_case(k1d801, 1, 1, 900, CS_MODE_REFLECT, 0.0, 1, CC);   // x chunks
    run_case(k35x3, 1, 50, 40, CS_MODE_MIRROR, 0.0, 1, CC);     // y chunks
    run_case(k3x67, 1, 20, 90, CS_MODE_NEAREST, 0.0, 1, CC);    // x chunks
    run_case(k3d513, 7, 1, 50, CS_MODE_WRAP, 0.0, 2, CC);
    run_case(heat2d, 1, 1, 1, CS_MODE_MIRROR, 0.0, 3, CC);
    run_case(box27, 5, 6, 7, CS_MODE_CONSTANT, 1.0, 3, CC, true);

    // ---- cc3d (3D cubes of side 3, 5, 7 streamed along z): several z
    // blocks of 8 planes and a partial one, partial x and y tiles, box and
    // diamond tap sets, a grid thinner than the kernel; heat3d on grids
    // with an extent under 8 (tb3d takes larger ones)
    Kern box5 = make_kernel("box5x5x5", 3, 5, 5, 5, false, true);
    Kern dia5 = make_diamond("dia5x5x5", 5);
    Kern dia7 = make_diamond("dia7x7x7", 7);
    Kern star5 = make_kernel("star5x5x5", 3, 5, 5, 5, true, true);
    run_case(heat3d, 20, 7, 33, CS_MODE_CONSTANT, 0.5, 3, CC, false, "cuda-core", 2);
    run_case(box27, 17, 35, 70, CS_MODE_WRAP, 0.0, 2, CC, false, "cuda-core", 1);
    run_case(dia5, 19, 33, 40, CS_MODE_REFLECT, 0.0, 2, CC, false, "cuda-core", 1);
    run_case(box5, 11, 20, 37, CS_MODE_NEAREST, 0.0, 2, CC, false, "cuda-core", 1);
    run_case(star5, 9, 34, 31, CS_MODE_CONSTANT, -1.0, 1, CC, false, "cuda-core", 1);
    run_case(dia7, 13, 9, 40, CS_MODE_MIRROR, 0.0, 2, CC, false, "cuda-core", 1);
    run_case(heat3d, 2, 3, 4, CS_MODE_CONSTANT, 0.25, 2, CC, false, "cuda-core", 1);
    run_case(box27, 10, 140, 16, CS_MODE_REFLECT, 0.0, 1, CC, false, "cuda-core", 1);  // narrow
    run_case(heat3d, 9, 130, 7, CS_MODE_WRAP, 0.0, 3, CC, false, "cuda-core", 2);     // narrow
    // planar squares of side 5 and 7 (tb2d: full-rank boxes 1 and 3 steps
    // a pass): AUTO takes CUDA cores; a planar kernel on every plane of a
    // 3D grid; side 3 stays on tensor cores, which fuse it
    run_case(box49, 1, 70, 131, CS_MODE_CONSTANT, 1.0, 2, AUTO, false, "cuda-core", 1);
    run_case(k55, 3, 40, 131, CS_MODE_WRAP, 0.0, 2, CC, false, "cuda-core", 2);
    run_case(star13, 2, 9, 7, CS_MODE_MIRROR, 0.0, 3, AUTO, false, "cuda-core", 1);
    run_case(box9, 1, 70, 15, CS_MODE_NEAREST, 0.0, 2, CC, false, "cuda-core", 1);  // cc2d: under tb2d's 16 columns
    // outer products (a pass along x, then y), and one nudged off rank one
    Kern r7 = make_rank1("rank1_7x7", 7), r5 = make_rank1("rank1_5x5", 5),
         r3 = make_rank1("rank1_3x3", 3), n7 = make_rank1("nudged_7x7", 7, true);
    // (under tb2d's 16 rows or columns: tb2d takes larger ones)
    run_case(r7, 1, 70, 15, CS_MODE_CONSTANT, 0.5, 2, AUTO, false, "cuda-core", 1);
    run_case(r7, 2, 9, 7, CS_MODE_REFLECT, 0.0, 3, CC, false, "cuda-core", 1);
    run_case(r5, 1, 15, 140, CS_MODE_WRAP, 0.0, 2, CC, false, "cuda-core", 1);
    run_case(r3, 1, 65, 15, CS_MODE_MIRROR, 0.0, 2, CC, false, "cuda-core", 1);     // cc2d, as above
    run_case(n7, 1, 40, 131, CS_MODE_NEAREST, 0.0, 2, CC, false, "cuda-core", 1);
    // ... and that these took the route meant for them
    expect_cc2d_shape(r7, CS_CC2D_RANK1);
    expect_cc2d_shape(r5, CS_CC2D_RANK1);
    expect_cc2d_shape(r3, CS_CC2D_RANK1);
    expect_cc2d_shape(n7, CS_CC2D_BOX);
    expect_cc2d_shape(box49, CS_CC2D_BOX);
    expect_cc2d_shape(star13, CS_CC2D_PLUS);
    // on a grid with an extent under 8 (tb3d's least), a 7-point star
    // fuses two steps into one pass of its square on the CUDA-core path
    // (its band recomputed in place but for wrap); AUTO takes that path
    run_case(heat3d, 19, 7, 70, CS_MODE_CONSTANT, 0.5, 5, CC, false, "cuda-core", 2);
    run_case(heat3d, 12, 13, 7, CS_MODE_WRAP, 0.0, 4, AUTO, false, "cuda-core", 2);
    run_case(heat3d, 12, 7, 20, CS_MODE_REFLECT, 0.0, 3, AUTO, false, "cuda-core", 2);
    run_case(heat3d, 5, 13, 20, CS_MODE_NEAREST, 0.0, 3, CC, false, "cuda-core", 1);  // < 2 strips
    run_case(box27, 12, 13, 20, CS_MODE_CONSTANT, 1.0, 3, AUTO, false, "cuda-core", 1);
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "1", 1);
    run_case(heat3d, 12, 13, 20, CS_MODE_MIRROR, 0.0, 3, CC, false, "cuda-core", 1);
    unsetenv("CONVSTENCIL_CUDA_MAX_DEPTH");

    // ---- errors: no leak, the right status
    // a stop request before the first pass, and one in the middle of the
    // fused passes (heat2d: 3 steps per pass) and of the single steps
    StopAt first{1, 0, 0}, middle{3, 0, 0}, remainder{3, 0, 0},
        never{1000, 0, 0};
    cs_interrupt i_first{stop_at, &first}, i_middle{stop_at, &middle},
        i_remainder{stop_at, &remainder}, i_never{stop_at, &never};
    expect_status("interrupted before the first pass", heat2d, 1, 40, 40, TC,
                  CS_ERR_INTERRUPTED, &i_first, 20);
    expect_status("interrupted between fused passes", heat2d, 1, 40, 40, TC,
                  CS_ERR_INTERRUPTED, &i_middle, 20);
    expect_status("interrupted between single steps", heat3d, 12, 7, 20, CC,
                  CS_ERR_INTERRUPTED, &i_remainder, 5);
    expect_status("polled, never stopped", heat2d, 1, 40, 40, TC, CS_OK,
                  &i_never, 20);
    expect_status("tensor-core with a 9x9 kernel", k9x9, 1, 20, 20, TC, CS_ERR_UNSUPPORTED);
    Kern k9x3x3 = make_kernel("k9x3x3", 3, 9, 3, 3);
    Kern k3x9x3 = make_kernel("k3x9x3", 3, 3, 9, 3);
    expect_status("tensor-core with a 9x3x3 kernel", k9x3x3, 12, 20, 20, TC, CS_ERR_UNSUPPORTED);
    expect_status("tensor-core with a 3x9x3 kernel", k3x9x3, 4, 20, 20, TC, CS_ERR_UNSUPPORTED);
    run_case(k9x3x3, 12, 10, 20, CS_MODE_WRAP, 0.0, 2, AUTO, false, "cuda-core", 1);
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "0", 1);
    expect_status("CONVSTENCIL_CUDA_MAX_DEPTH=0", heat3d, 12, 20, 20, TC, CS_ERR_INVALID);
    setenv("CONVSTENCIL_CUDA_MAX_DEPTH", "2x", 1);
    expect_status("CONVSTENCIL_CUDA_MAX_DEPTH=2x", heat3d, 12, 20, 20, AUTO, CS_ERR_INVALID);
    unsetenv("CONVSTENCIL_CUDA_MAX_DEPTH");
    setenv("EMU_MALLOC_LIMIT", "1000", 1);
    expect_status("device out of memory", heat2d, 1, 40, 40, AUTO, CS_ERR_DEVICE_NOMEM);
    unsetenv("EMU_MALLOC_LIMIT");
    setenv("EMU_NO_DEVICE", "1", 1);
    expect_status("no device", heat2d, 1, 40, 40, AUTO, CS_ERR_NO_DEVICE);
    c = cs_cuda_device_count(msg, sizeof msg);
    printf("no device: device_count=%d: %s\n", c, msg);
    expect_device_selection(CS_ERR_NO_DEVICE);
    unsetenv("EMU_NO_DEVICE");
    expect_device_selection(CS_OK);
    setenv("EMU_NO_DRIVER", "1", 1);
    expect_status("no driver", heat2d, 1, 40, 40, AUTO, CS_ERR_NO_DEVICE);
    c = cs_cuda_device_count(msg, sizeof msg);
    printf("no driver: device_count=%d: %s\n", c, msg);
    unsetenv("EMU_NO_DRIVER");
    setenv("EMU_CC_MAJOR", "8", 1);
    expect_status("tensor-core on sm_80", heat2d, 1, 40, 40, TC, CS_ERR_UNSUPPORTED);
    run_case(heat2d, 1, 20, 30, CS_MODE_REFLECT, 0.0, 3, AUTO, false, "cuda-core", 3);  // tb2d
    unsetenv("EMU_CC_MAJOR");

    if (never.polls != 8 || never.last != 19) {
        // 6 fused passes and 2 single steps: 20 = 6*3 + 2; the last poll
        // comes before the last step
        printf("FAIL polls: %d (last at step %ld), expected 8 (19)\n",
               never.polls, never.last);
        failures++;
    }
    device_array_cases(quick);
    onestep_cases(quick);
    session_cases();
    printf("%d passed, %d failed\n", passes, failures);
    return failures != 0;
}
