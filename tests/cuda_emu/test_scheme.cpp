/*
 * test_scheme.cpp -- cs_cuda_scheme_apply_device (csrc/cuda/scheme.cu),
 * built against the CPU emulation (run.sh scheme), against a plain
 * evaluation of the same tables written for clarity: scheme.h's order
 * of sums and products, scipy.ndimage's boundary modes, zero weights
 * skipped.  Each case checks every field's relative error (<= 1e-12),
 * that inputs which are no outputs are untouched, the launches (one per
 * stage that writes), the scratch arrays taken, and that nothing is
 * left behind; then the error paths.  Prints "N passed, N failed".
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_engine.h"
#include "cuda_runtime.h"
#include "scheme.h"
#include "stencil.h"

size_t cs_emu_allocated(void);
int cs_emu_streams_alive(void);
int cs_emu_events_alive(void);
int cs_emu_host_allocs_alive(void);

static int failures = 0, passes = 0;
static const char *mode_names[] = {"constant", "wrap", "nearest", "reflect",
                                   "mirror"};

// Nothing left behind once the engine's cache is cleared (device memory
// beyond `own` bytes of the test's arrays, streams, events, lanes).
static bool leaked(size_t own = 0) {
    cs_cuda_clear_cache();
    size_t dev = 0, pinned = 0;
    int blocks = 0, lanes = 0;
    cs_cuda_cache_info(&dev, &blocks, &pinned, &lanes);
    return cs_emu_allocated() != own || cs_emu_streams_alive() != 0
           || cs_emu_events_alive() != 0 || cs_emu_host_allocs_alive() != 0
           || dev != 0 || blocks != 0 || pinned != 0 || lanes != 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (rng >> 11) * (1.0 / 9007199254740992.0);
}
static int irand(int n) { return (int)(urand() * n) % n; }

// ---- a scheme's tables, owned ---------------------------------------

struct Stencil {
    ptrdiff_t size[3];
    std::vector<double> w;
};

struct Scheme {
    std::string name;
    int ndim = 2, K = 1, P = 0;
    std::vector<Stencil> stencils;
    std::vector<cs_term> terms;
    std::vector<cs_update> updates;
    std::vector<cs_stage> stages;
    std::vector<cs_kernel> kernels;  // built by view()

    int stencil(ptrdiff_t kz, ptrdiff_t ky, ptrdiff_t kx,
                double zero_share = 0.0) {
        Stencil s{{kz, ky, kx}, std::vector<double>(kz * ky * kx)};
        for (double &v : s.w) {
            v = urand() < zero_share ? 0.0 : 0.2 + urand();
            if (v != 0.0 && urand() < 0.3) v = -0.5 * v;
        }
        double sum = 0;
        for (double v : s.w) sum += std::fabs(v);
        for (double &v : s.w) v /= sum;
        stencils.push_back(s);
        return (int)stencils.size() - 1;
    }
    int lap(bool three_d) {  // the 5- or 7-point Laplacian
        const ptrdiff_t kz = three_d ? 3 : 1;
        Stencil s{{kz, 3, 3}, std::vector<double>(kz * 9, 0.0)};
        const ptrdiff_t c = three_d ? 13 : 4;
        s.w[c] = three_d ? -6.0 : -4.0;
        s.w[c - 1] = s.w[c + 1] = s.w[c - 3] = s.w[c + 3] = 1.0;
        if (three_d) s.w[c - 9] = s.w[c + 9] = 1.0;
        stencils.push_back(s);
        return (int)stencils.size() - 1;
    }
    void st(double coef, int field, int sten, int param = -1) {
        cs_term t{};
        t.kind = CS_TERM_STENCIL;
        t.coef = coef;
        t.param = param;
        t.field = field;
        t.stencil = sten;
        terms.push_back(t);
    }
    void mono(double coef, std::vector<int> pow, int param = -1) {
        cs_term t{};
        t.kind = CS_TERM_MONOMIAL;
        t.coef = coef;
        t.param = param;
        t.field = -1;
        t.stencil = -1;
        for (size_t f = 0; f < pow.size(); f++) t.power[f] = (unsigned char)pow[f];
        terms.push_back(t);
    }
    // an update of `target` from the terms added since `first`
    void update(int target, int first) {
        updates.push_back({target, first, (int)terms.size() - first});
    }
    void stage(int first_update) {
        stages.push_back({first_update, (int)updates.size() - first_update});
    }
    cs_scheme view() {
        for (cs_kernel &k : kernels) cs_kernel_free(&k);
        kernels.assign(stencils.size(), cs_kernel{});
        for (size_t i = 0; i < stencils.size(); i++) {
            const Stencil &s = stencils[i];
            cs_kernel_init(&kernels[i], ndim, s.size + 3 - ndim, s.w.data());
        }
        cs_scheme v{};
        v.ndim = ndim;
        v.field_count = K;
        v.param_count = P;
        v.stencil_count = (int)kernels.size();
        v.stencils = kernels.data();
        v.term_count = (int)terms.size();
        v.terms = terms.data();
        v.update_count = (int)updates.size();
        v.updates = updates.data();
        v.stage_count = (int)stages.size();
        v.stages = stages.data();
        return v;
    }
    ~Scheme() {
        for (cs_kernel &k : kernels) cs_kernel_free(&k);
    }
};

// ---- the reference ----------------------------------------------------

typedef std::vector<std::vector<double>> Fields;

static double ref_stencil(const std::vector<double> &f, const Stencil &s,
                          const ptrdiff_t n[3], ptrdiff_t z, ptrdiff_t y,
                          ptrdiff_t x, cs_mode mode, double cval) {
    double sum = 0.0;
    for (ptrdiff_t dz = 0; dz < s.size[0]; dz++)
        for (ptrdiff_t dy = 0; dy < s.size[1]; dy++)
            for (ptrdiff_t dx = 0; dx < s.size[2]; dx++) {
                const double w = s.w[(dz * s.size[1] + dy) * s.size[2] + dx];
                if (w == 0.0) continue;  // as scipy.ndimage
                const ptrdiff_t iz = cs_extend_index(z + dz - s.size[0] / 2, n[0], mode);
                const ptrdiff_t iy = cs_extend_index(y + dy - s.size[1] / 2, n[1], mode);
                const ptrdiff_t ix = cs_extend_index(x + dx - s.size[2] / 2, n[2], mode);
                const double v = (iz < 0 || iy < 0 || ix < 0)
                                     ? cval : f[(iz * n[1] + iy) * n[2] + ix];
                sum += w * v;
            }
    return sum;
}

static void ref_run(const Scheme &S, Fields &f, const Fields &par,
                    const ptrdiff_t n[3], cs_mode mode, double cval,
                    long steps) {
    const size_t count = n[0] * n[1] * n[2];
    for (long step = 0; step < steps; step++) {
        for (const cs_stage &g : S.stages) {
            const Fields old = f;
            for (int j = 0; j < g.update_count; j++) {
                const cs_update &u = S.updates[g.first_update + j];
                std::vector<double> acc(count, 0.0);
                for (int t = u.first_term; t < u.first_term + u.term_count; t++) {
                    const cs_term &term = S.terms[t];
                    for (ptrdiff_t z = 0; z < n[0]; z++)
                        for (ptrdiff_t y = 0; y < n[1]; y++)
                            for (ptrdiff_t x = 0; x < n[2]; x++) {
                                const size_t p = (z * n[1] + y) * n[2] + x;
                                double v = 1.0;
                                if (term.kind == CS_TERM_STENCIL) {
                                    v = ref_stencil(old[term.field],
                                                    S.stencils[term.stencil], n,
                                                    z, y, x, mode, cval);
                                } else {
                                    for (int fi = 0; fi < S.K; fi++)
                                        for (int k = 0; k < term.power[fi]; k++)
                                            v *= old[fi][p];
                                }
                                const double c = term.coef
                                                 * (term.param >= 0 ? par[term.param][p] : 1.0);
                                acc[p] += c * v;
                            }
                }
                f[u.target] = acc;
            }
        }
    }
}

// ---- one case -----------------------------------------------------------

enum Alias { FRESH, INPLACE, SWAPPED, MIXED };
static const char *alias_names[] = {"fresh", "in-place", "swapped", "mixed"};

static double rel_error(const std::vector<double> &a, const std::vector<double> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// want_launches: scheme_stage_kernel launches expected (-1: any);
// want_scratch: 0 none taken, 1 some, -1 either.
static void run_case(Scheme &S, ptrdiff_t nz, ptrdiff_t ny, ptrdiff_t nx,
                     cs_mode mode, double cval, long steps, Alias alias,
                     long want_launches = -1, int want_scratch = -1,
                     const std::vector<std::vector<int>> &nonfinite = {}) {
    const ptrdiff_t n[3] = {nz, ny, nx};
    const size_t count = nz * ny * nx, bytes = count * sizeof(double);
    Fields f0(S.K, std::vector<double>(count)), par(S.P, std::vector<double>(count));
    for (auto &v : f0)
        for (double &x : v) x = 0.2 + urand();
    for (auto &v : par)
        for (double &x : v) x = 0.5 + urand();
    // NaN and infinities at chosen points: {field, index, kind}
    for (const auto &e : nonfinite)
        f0[e[0]][e[1] % count] = e[2] == 0 ? NAN : e[2] > 0 ? INFINITY : -INFINITY;
    Fields ref = f0;
    ref_run(S, ref, par, n, mode, cval, steps);

    std::vector<double *> din(S.K), dout(S.K);
    std::vector<const double *> dpar(S.P);
    std::vector<void *> owned;
    auto alloc = [&](const std::vector<double> *init) {
        void *p = nullptr;
        cudaMalloc(&p, bytes ? bytes : 8);
        if (init) memcpy(p, init->data(), bytes);
        owned.push_back(p);
        return (double *)p;
    };
    for (int k = 0; k < S.K; k++) din[k] = alloc(&f0[k]);
    for (int q = 0; q < S.P; q++) dpar[q] = alloc(&par[q]);
    for (int k = 0; k < S.K; k++) {
        Alias a = alias == MIXED ? (k % 2 ? INPLACE : FRESH) : alias;
        if (a == INPLACE) dout[k] = din[k];
        else if (a == SWAPPED) dout[k] = din[(k + 1) % S.K];
        else dout[k] = alloc(nullptr);
    }
    cs_scheme sv = S.view();
    cs_run_info info{};
    char err[512] = "";
    cs_emu_reset_launches();
    cs_status st = cs_cuda_scheme_apply_device(&sv, din.data(), dout.data(), dpar.data(),
                                               n, mode, cval, steps, 0, &info,
                                               nullptr, err, sizeof err);
    const long launches = cs_emu_launches("scheme_stage_kernel");
    size_t cached = 0, pinned = 0;
    int blocks = 0, lanes = 0;
    cs_cuda_cache_info(&cached, &blocks, &pinned, &lanes);
    double worst = 0;
    bool exact_nonfinite = true;
    for (int k = 0; k < S.K; k++) {
        std::vector<double> got(dout[k], dout[k] + count);
        // non-finite values land where the reference puts them
        std::vector<double> a = got, b = ref[k];
        for (size_t i = 0; i < count; i++) {
            if (!std::isfinite(b[i]) || !std::isfinite(a[i])) {
                const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
                exact_nonfinite = exact_nonfinite && same;
                a[i] = b[i] = 0.0;
            }
        }
        const double r = rel_error(a, b);
        worst = !std::isfinite(r) ? INFINITY : std::max(worst, r);
    }
    bool inputs_kept = true;
    for (int k = 0; k < S.K; k++) {
        bool is_out = false;
        for (int j = 0; j < S.K; j++) is_out = is_out || dout[j] == din[k];
        if (!is_out) inputs_kept = inputs_kept && memcmp(din[k], f0[k].data(), bytes) == 0;
    }
    for (void *p : owned) cudaFree(p);
    const bool lk = leaked();
    bool ok = st == CS_OK && worst <= 1e-12 && exact_nonfinite && inputs_kept && !lk
              && (want_launches < 0 || launches == want_launches)
              && (want_scratch < 0 || (blocks > 0) == (want_scratch > 0))
              && info.path
              && ((strcmp(info.path, "scheme") == 0 && info.unfused_steps == steps
                   && info.fused_depth == 1)
                  || (strcmp(info.path, "scheme-blocked") == 0 && info.fused_depth >= 2
                      && info.unfused_steps == 0
                      && info.fused_passes == (steps + info.fused_depth - 1) / info.fused_depth))
              && (steps == 0 || count == 0 || info.device_seconds >= 0);
    printf("%s %-12s %3tdx%3tdx%3td %-8s %-8s steps=%ld launches=%ld scratch=%d "
           "rel=%.2e%s%s%s %s\n",
           ok ? "ok  " : "FAIL", S.name.c_str(), nz, ny, nx, mode_names[mode],
           alias_names[alias], steps, launches, blocks, worst,
           exact_nonfinite ? "" : " NONFINITE-MISPLACED",
           inputs_kept ? "" : " INPUT-WRITTEN", lk ? " LEAK" : "",
           st != CS_OK ? err : "");
    fflush(stdout);
    ok ? passes++ : failures++;
}

// ---- schemes ---------------------------------------------------------

// u <- 2u - up + C L(u), up <- u: one launch a step, up renamed.
static void wave(Scheme &S, int ndim, bool param) {
    S.name = param ? "wave-c2" : "wave";
    S.ndim = ndim;
    S.K = 2;
    S.P = param ? 1 : 0;
    const int L = ndim == 3 ? S.lap(true) : ndim == 2 ? S.lap(false) : -1;
    int l = L;
    if (ndim == 1) {
        Stencil s{{1, 1, 3}, {1.0, -2.0, 1.0}};
        S.stencils.push_back(s);
        l = 0;
    }
    int t0 = (int)S.terms.size();
    S.mono(2.0, {1, 0});
    S.mono(-1.0, {0, 1});
    S.st(param ? 0.1 : 0.15, 0, l, param ? 0 : -1);
    S.update(0, t0);
    t0 = (int)S.terms.size();
    S.mono(1.0, {1, 0});
    S.update(1, t0);
    S.stage(0);
}

// Gray-Scott: two fields, each a stencil and monomials up to u v^2.
static void gray_scott(Scheme &S, int ndim) {
    S.name = "gray-scott";
    S.ndim = ndim;
    S.K = 2;
    const int L = ndim == 3 ? S.lap(true) : S.lap(false);
    const double dt = 0.5, Du = 0.2, Dv = 0.1, F = 0.04, k = 0.06;
    int t0 = (int)S.terms.size();
    S.mono(1.0, {1, 0});
    S.st(dt * Du, 0, L);
    S.mono(-dt, {1, 2});
    S.mono(dt * F, {0, 0});
    S.mono(-dt * F, {1, 0});
    S.update(0, t0);
    t0 = (int)S.terms.size();
    S.mono(1.0, {0, 1});
    S.st(dt * Dv, 1, L);
    S.mono(dt, {1, 2});
    S.mono(-dt * (F + k), {0, 1});
    S.update(1, t0);
    S.stage(0);
}

// Heun's method for a reaction-diffusion field: two stages, a helper
// field w (stage 1: w <- u + dt f(u); stage 2: u <- u/2 + w/2 + dt/2 f(w)).
static void heun(Scheme &S, int ndim) {
    S.name = "heun";
    S.ndim = ndim;
    S.K = 2;
    S.P = 1;
    const int L = ndim == 3 ? S.lap(true) : ndim == 2 ? S.lap(false) : S.stencil(1, 1, 5);
    const double dt = 0.1;
    int t0 = (int)S.terms.size();
    S.mono(1.0, {1, 0});
    S.st(dt, 0, L, 0);
    S.mono(-dt, {3, 0});
    S.update(1, t0);
    S.stage(0);
    t0 = (int)S.terms.size();
    S.mono(0.5, {1, 0});
    S.mono(0.5, {0, 1});
    S.st(0.5 * dt, 1, L, 0);
    S.mono(-0.5 * dt, {0, 3});
    S.update(0, t0);
    S.stage(1);
}

// Random tables: K fields, P params, random stencils (zero weights among
// them), monomials of powers 0..4, `stages` stages, each field updated
// at most once a stage, some renames.
static void random_scheme(Scheme &S, int ndim, int K, int P, int stages,
                          int max_radius) {
    S.name = "random-K" + std::to_string(K);
    S.ndim = ndim;
    S.K = K;
    S.P = P;
    const int nst = 1 + irand(3);
    for (int i = 0; i < nst; i++) {
        ptrdiff_t sz[3] = {1, 1, 1};
        for (int a = 3 - ndim; a < 3; a++) sz[a] = 2 * irand(max_radius + 1) + 1;
        S.stencil(sz[0], sz[1], sz[2], 0.3);
    }
    for (int g = 0; g < stages; g++) {
        const int first = (int)S.updates.size();
        for (int f = 0; f < K; f++) {
            if (urand() < 0.25 && g > 0) continue;  // kept through the stage
            const int t0 = (int)S.terms.size();
            if (urand() < 0.2 && K > 1) {  // a rename
                std::vector<int> pow(K, 0);
                pow[irand(K)] = 1;
                S.mono(1.0, pow);
                S.update(f, t0);
                continue;
            }
            std::vector<int> self(K, 0);
            self[f] = 1;
            S.mono(0.5, self);
            const int nt = 1 + irand(3);
            for (int t = 0; t < nt; t++) {
                const int param = P > 0 && urand() < 0.4 ? irand(P) : -1;
                if (urand() < 0.5) {
                    S.st(0.3 / nt, irand(K), irand(nst), param);
                } else {
                    std::vector<int> pow(K, 0);
                    int budget = 4;
                    for (int k = 0; k < K; k++) {
                        pow[k] = irand(budget + 1) * (urand() < 0.5);
                        budget -= pow[k];
                    }
                    S.mono(0.1 / nt, pow, param);
                }
            }
            S.update(f, t0);
        }
        S.stage(first);
    }
}

// ---- error paths --------------------------------------------------------

static void expect_status(const char *what, cs_status got, cs_status want,
                          const char *err, size_t own = 0) {
    const bool ok = got == want && !leaked(own);
    printf("%s %-46s status=%d (%s) msg=\"%s\"\n", ok ? "ok  " : "FAIL", what,
           (int)got, cs_status_string(got), err);
    ok ? passes++ : failures++;
}

static int stop_now(void *, long) { return 1; }

static void error_cases() {
    Scheme S;
    wave(S, 2, false);
    const ptrdiff_t n[3] = {1, 20, 30};
    const size_t bytes = 600 * sizeof(double);
    double *a = nullptr, *b = nullptr, *c = nullptr;
    cudaMalloc((void **)&a, bytes);
    cudaMalloc((void **)&b, bytes);
    cudaMalloc((void **)&c, bytes);
    const size_t own = 3 * bytes;
    char err[512];
    cs_run_info info{};
    cs_scheme sv = S.view();
    double *in[2] = {a, b}, *out[2] = {c, c};
    expect_status("two fields into one out", cs_cuda_scheme_apply_device(
                      &sv, in, out, nullptr, n, CS_MODE_WRAP, 0, 3, 0, &info,
                      nullptr, err, sizeof err), CS_ERR_INVALID, err, own);
    double *shifted[2] = {a + 1, c};
    expect_status("an out overlapping an in", cs_cuda_scheme_apply_device(
                      &sv, in, shifted, nullptr, n, CS_MODE_WRAP, 0, 3, 0, &info,
                      nullptr, err, sizeof err), CS_ERR_INVALID, err, own);
    std::vector<double> host(600, 1.0);
    double *hostin[2] = {host.data(), b}, *fine[2] = {c, a};
    expect_status("host memory as a field", cs_cuda_scheme_apply_device(
                      &sv, hostin, fine, nullptr, n, CS_MODE_WRAP, 0, 3, 0, &info,
                      nullptr, err, sizeof err), CS_ERR_INVALID, err, own);
    double *outs[2] = {c, a};
    expect_status("steps < 0", cs_cuda_scheme_apply_device(
                      &sv, in, outs, nullptr, n, CS_MODE_WRAP, 0, -1, 0, &info,
                      nullptr, err, sizeof err), CS_ERR_INVALID, err, own);
    expect_status("unknown mode", cs_cuda_scheme_apply_device(
                      &sv, in, outs, nullptr, n, (cs_mode)9, 0, 1, 0, &info,
                      nullptr, err, sizeof err), CS_ERR_INVALID, err, own);
    S.updates[0].first_term = 40;  // out of the table
    sv = S.view();
    expect_status("a table index out of range", cs_cuda_scheme_apply_device(
                      &sv, in, outs, nullptr, n, CS_MODE_WRAP, 0, 1, 0, &info,
                      nullptr, err, sizeof err), CS_ERR_INVALID, err, own);
    S.updates[0].first_term = 0;
    sv = S.view();
    cs_interrupt stop{stop_now, nullptr};
    expect_status("interrupted", cs_cuda_scheme_apply_device(
                      &sv, in, outs, nullptr, n, CS_MODE_WRAP, 0, 5, 0, &info,
                      &stop, err, sizeof err), CS_ERR_INTERRUPTED, err, own);
    {
        Scheme big;
        big.name = "big";
        big.ndim = 2;
        big.K = 1;
        const int s0 = big.stencil(1, 25, 25);  // 625 taps
        big.st(1.0, 0, s0);
        big.update(0, 0);
        big.stage(0);
        cs_scheme bv = big.view();
        double *i1[1] = {a}, *o1[1] = {c};
        expect_status("625 taps in a stage", cs_cuda_scheme_apply_device(
                          &bv, i1, o1, nullptr, n, CS_MODE_WRAP, 0, 1, 0, &info,
                          nullptr, err, sizeof err), CS_ERR_UNSUPPORTED, err, own);
    }
    setenv("EMU_NO_DEVICE", "1", 1);
    expect_status("no device", cs_cuda_scheme_apply_device(
                      &sv, in, outs, nullptr, n, CS_MODE_WRAP, 0, 1, 0, &info,
                      nullptr, err, sizeof err), CS_ERR_NO_DEVICE, err, own);
    unsetenv("EMU_NO_DEVICE");
    // a queued call (stream given): same result, no device time
    {
        std::vector<double> u(600), up(600);
        for (size_t i = 0; i < 600; i++) {
            u[i] = urand();
            up[i] = urand();
        }
        memcpy(a, u.data(), bytes);
        memcpy(b, up.data(), bytes);
        Fields ref = {u, up};
        ref_run(S, ref, {}, n, CS_MODE_REFLECT, 0, 4);
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        double *o2[2] = {b, a};  // swapped
        cs_status st = cs_cuda_scheme_apply_device(&sv, in, o2, nullptr, n,
                                                   CS_MODE_REFLECT, 0, 4,
                                                   (uintptr_t)s, &info, nullptr,
                                                   err, sizeof err);
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
        const double r = std::max(rel_error(std::vector<double>(b, b + 600), ref[0]),
                                  rel_error(std::vector<double>(a, a + 600), ref[1]));
        const bool ok = st == CS_OK && r <= 1e-12 && info.device_seconds < 0;
        printf("%s queued on the caller's stream rel=%.2e seconds=%g %s\n",
               ok ? "ok  " : "FAIL", r, info.device_seconds, err);
        ok ? passes++ : failures++;
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    expect_status("nothing left behind", CS_OK, CS_OK, "");
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    // the cases count the one-step passes' launches and scratch arrays:
    // the engine's own choice would run 2D waves in blocked passes
    // (scheme_tb.cu), which the last section checks
    setenv("CONVSTENCIL_SCHEME_BLOCK", "off", 1);
    const cs_mode C = CS_MODE_CONSTANT, W = CS_MODE_WRAP;
    const Alias aliases[] = {FRESH, INPLACE, SWAPPED, MIXED};

    // ---- the leapfrog wave: one launch a step, no scratch array unless
    // in place (and then only for the last step), every alias
    for (int nd = 1; nd <= 3; nd++) {
        Scheme S;
        wave(S, nd, false);
        const ptrdiff_t nz = nd == 3 ? 9 : 1, ny = nd >= 2 ? 37 : 1,
                        nx = nd == 1 ? 1500 : 45;
        for (Alias a : aliases) {
            for (long steps : {0L, 1L, 2L, 5L}) {
                // fresh outs never need one, swapped outs not for one
                // step, in place for an odd count
                const int scratch = a == FRESH ? 0
                                    : a == SWAPPED ? (steps == 1 ? 0 : -1)
                                    : a == INPLACE ? (steps % 2 == 1 ? 1 : 0)
                                                   : -1;
                run_case(S, nz, ny, nx, (cs_mode)(steps % 5), 0.25, steps, a,
                         steps, scratch);
            }
        }
    }
    // ---- every mode, 1D/2D/3D, a parameter field, Gray-Scott, two stages
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        const cs_mode mode = (cs_mode)m;
        for (int nd = 1; nd <= 3; nd++) {
            const ptrdiff_t nz = nd == 3 ? 11 : 1, ny = nd >= 2 ? 34 : 1,
                            nx = nd == 1 ? 2100 : 40;
            Scheme wc, hn;
            wave(wc, nd, true);
            heun(hn, nd);
            run_case(wc, nz, ny, nx, mode, -0.5, 5, aliases[m % 4], 5);
            run_case(hn, nz, ny, nx, mode, 0.75, 3, aliases[(m + 1) % 4], 6);
            if (nd >= 2) {
                Scheme gs;
                gray_scott(gs, nd);
                run_case(gs, nz, ny, nx, mode, 0.5, 5, aliases[(m + 2) % 4], 5);
            }
        }
    }
    // ---- Gray-Scott in place: two scratch arrays; swapped outs: a cycle
    {
        Scheme gs;
        gray_scott(gs, 2);
        run_case(gs, 1, 33, 35, W, 0.0, 1, INPLACE, 1, 1);
        run_case(gs, 1, 33, 35, W, 0.0, 4, INPLACE, 4, 1);
        run_case(gs, 1, 33, 35, W, 0.0, 0, SWAPPED, 0, 1);  // the swap needs one aside
        run_case(gs, 1, 33, 35, W, 0.0, 3, FRESH, 3, 1);
    }
    // ---- tiny grids: radii beyond the grid, every mode
    for (int m = 0; m < CS_MODE_COUNT; m++) {
        for (ptrdiff_t s : {1, 2, 3}) {
            Scheme S;
            random_scheme(S, 2, 2, 1, 1, 2);
            run_case(S, 1, s, s + 1, (cs_mode)m, 1.5, 3, aliases[s % 4]);
            Scheme T;
            random_scheme(T, 1, 1, 0, 1, 3);
            run_case(T, 1, 1, s, (cs_mode)m, -1.0, 2, aliases[m % 2]);
            Scheme U;
            random_scheme(U, 3, 3, 1, 2, 1);
            run_case(U, s, 2, s + 2, (cs_mode)m, 0.5, 2, aliases[(m + s) % 4]);
        }
    }
    // ---- random tables: K = 1..4, 1..3 stages, params, all aliases
    const int rounds = quick ? 2 : 6;
    static const long some_steps[3] = {0, 1, 5};
    for (int r = 0; r < rounds; r++) {
        for (int K = 1; K <= 4; K++) {
            for (int nd = 1; nd <= 3; nd++) {
                Scheme S;
                random_scheme(S, nd, K, r % 3, 1 + (r + K) % 3, nd == 3 ? 1 : 2);
                const ptrdiff_t nz = nd == 3 ? 6 + r : 1, ny = nd >= 2 ? 20 + 3 * r : 1,
                                nx = nd == 1 ? 1100 + 7 * r : 33 + K;
                run_case(S, nz, ny, nx, (cs_mode)((r + K + nd) % 5), 0.3,
                         some_steps[(r + nd) % 3], aliases[(r + K) % 4]);
            }
        }
    }
    // ---- K = 8 (pointwise slots of the widest kernel), many taps
    {
        Scheme S;
        random_scheme(S, 2, 8, 2, 2, 3);
        run_case(S, 1, 40, 70, C, 0.1, 3, MIXED);
        Scheme T;
        T.name = "many-taps";
        T.ndim = 2;
        T.K = 1;
        const int s0 = T.stencil(1, 13, 13, 0.1);  // large tables
        T.mono(0.5, {1});
        T.st(0.5, 0, s0);
        T.update(0, 0);
        T.stage(0);
        run_case(T, 1, 50, 60, (cs_mode)4, 0.0, 2, INPLACE, 2);
    }
    // ---- NaN and infinities land where the reference puts them
    {
        Scheme S;
        wave(S, 2, false);
        run_case(S, 1, 40, 40, C, 0.0, 3, FRESH, 3, -1,
                 {{0, 0, 0}, {0, 850, 1}, {1, 1200, -1}, {0, 1599, 0}});
        Scheme G;
        gray_scott(G, 2);
        run_case(G, 1, 40, 40, W, 0.0, 2, INPLACE, 2, -1,
                 {{1, 41, 0}, {0, 777, 1}});
        Scheme Z;  // a zero weight never meets the NaN beside it
        Z.name = "zero-weights";
        Z.ndim = 2;
        Z.K = 1;
        Z.stencils.push_back({{1, 3, 3}, {0, 0, 0, 0, 1.0, 0.5, 0, 0, 0}});
        Z.st(1.0, 0, 0);
        Z.update(0, 0);
        Z.stage(0);
        run_case(Z, 1, 10, 10, C, 0.0, 1, FRESH, 1, -1, {{0, 44, 0}});
    }
    // ---- blocked passes forced wherever they fit (2D): the results of
    // every alias and mode, step counts that are no multiple of a pass
    for (const char *shape : {"32x3", "64x2"}) {
        setenv("CONVSTENCIL_SCHEME_BLOCK", shape, 1);
        for (int m = 0; m < CS_MODE_COUNT; m++) {
            Scheme wc, gs, S;
            wave(wc, 2, true);
            gray_scott(gs, 2);
            random_scheme(S, 3, 2, 1, 1, 2);
            run_case(wc, 1, 45, 70, (cs_mode)m, -0.5, 7, aliases[m % 4]);
            run_case(gs, 1, 29, 97, (cs_mode)m, 0.5, 5, aliases[(m + 1) % 4]);
            run_case(S, 1, 13, 6, (cs_mode)m, 1.5, 4, aliases[(m + 2) % 4]);
        }
    }
    setenv("CONVSTENCIL_SCHEME_BLOCK", "off", 1);
    error_cases();
    printf("%d passed, %d failed\n", passes, failures);
    return failures != 0;
}
