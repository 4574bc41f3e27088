/*
 * threads.c -- the thread count of every parallel region of the CPU
 * engines, and the barrier of their step loops (threads.h).
 *
 * How many: OpenMP's default cut to the work (a small grid runs on one
 * thread), and where the team meets often, to the cores that other
 * runnable threads leave idle.  /proc/loadavg's running count is read
 * for that (2 us), only for a region that would otherwise get several
 * threads.
 *
 * Why a barrier of our own: OpenMP's waits either spin (libgomp's
 * default: about 300000 pauses, 4 ms on a current Xeon, during which a
 * preempted partner's core is held and other processes starve) or, under
 * OMP_WAIT_POLICY=passive, sleep at once (a wake-up then costs tens of
 * microseconds, several times a short step).  The step loops wait at
 * barriers whose partners nearly always arrive within microseconds on an
 * idle machine: this one spins that long, then sleeps.
 */
#define _GNU_SOURCE

#include "threads.h"

#include "../stencil.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__linux__)
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

/* ------------------------------------------------------------------ */
/* How many threads                                                     */
/* ------------------------------------------------------------------ */

int
cs_threads_fit(int ceiling, int idle, double work, double per_thread,
               int close)
{
    int nt = ceiling < 1 ? 1 : ceiling;
    if (per_thread > 0.0) {
        double useful = work / per_thread;
        if (useful < nt) {
            nt = useful < 1.0 ? 1 : (int)useful;
        }
    }
    if (close && idle >= 0 && idle < nt) {
        nt = idle < 1 ? 1 : idle;
    }
    return nt;
}

/* Whether /proc/loadavg speaks for this process's cores: 0 not known. */
static int load_usable = 0;
static int load_cores = 0;

#if defined(__linux__)
static int
check_load_usable(void)
{
    const char *dynamic = getenv("OMP_DYNAMIC");
    if (dynamic != NULL && (strcasecmp(dynamic, "false") == 0
                            || strcmp(dynamic, "0") == 0)) {
        return -1;
    }
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof(set), &set) != 0 || online < 1
        || CPU_COUNT(&set) != online) {
        return -1;
    }
    __atomic_store_n(&load_cores, (int)online, __ATOMIC_RELAXED);
    return 1;
}

/* The running count of /proc/loadavg ("0.52 0.58 0.59 2/80 1234"). */
static int
running_now(void)
{
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    buf[n] = '\0';
    char *p = buf;
    for (int field = 0; field < 3; field++) {
        p = strchr(p, ' ');
        if (p == NULL) {
            return -1;
        }
        p++;
    }
    char *end;
    long running = strtol(p, &end, 10);
    return end == p || *end != '/' || running < 0 ? -1 : (int)running;
}
#endif

int
cs_threads_idle(void)
{
#if defined(__linux__)
    int usable = __atomic_load_n(&load_usable, __ATOMIC_RELAXED);
    if (usable == 0) {
        usable = check_load_usable();
        __atomic_store_n(&load_usable, usable, __ATOMIC_RELAXED);
    }
    int running = usable > 0 ? running_now() : -1;
    if (running < 0) {
        return -1;
    }
    if (running > 1) {
        /* a kernel thread woken for a moment (by this very read, often)
           counts as running: a second look, the smaller count */
        sched_yield();
        int again = running_now();
        if (again >= 0 && again < running) {
            running = again;
        }
    }
    /* the caller's thread is one of the running */
    int others = running > 0 ? running - 1 : 0;
    int idle = __atomic_load_n(&load_cores, __ATOMIC_RELAXED) - others;
    return idle > 0 ? idle : 0;
#else
    return -1;
#endif
}

int
cs_threads_choose(int requested, double work, double per_thread, int close)
{
#ifdef _OPENMP
    if (requested > 0) {
        return requested;
    }
    int nt = cs_threads_fit(omp_get_max_threads(), -1, work, per_thread, 0);
    if (nt > 1 && close) {
        nt = cs_threads_fit(nt, cs_threads_idle(), work, per_thread, 1);
    }
    return nt;
#else
    (void)requested;
    (void)work;
    (void)per_thread;
    (void)close;
    return 1;
#endif
}

/*
 * The smaller of the step's work and the call's, on the step's scale:
 * the barriers are paid once a step, the team's start once a call.
 */
int
cs_threads_for_steps(int requested, double step_work, long steps,
                     double interval)
{
    double call = step_work * (double)(steps > 0 ? steps : 1)
                  * (CS_THREADS_MIN_WORK / CS_THREADS_MIN_CALL_WORK);
    return cs_threads_choose(requested, call < step_work ? call : step_work,
                             CS_THREADS_MIN_WORK,
                             interval < CS_THREADS_BUSY_WORK);
}

/* ------------------------------------------------------------------ */
/* The barrier                                                          */
/* ------------------------------------------------------------------ */

/* The spin budget, LONG_MIN until known. */
static long spin_ns = LONG_MIN;

static long
spin_from_env(void)
{
    const char *policy = getenv("OMP_WAIT_POLICY");
    if (policy != NULL && strcasecmp(policy, "active") == 0) {
        return -1;
    }
    if (policy != NULL && strcasecmp(policy, "passive") == 0) {
        return 0;
    }
    return CS_BARRIER_SPIN_NS;
}

void
cs_barrier_set_spin(long ns)
{
    __atomic_store_n(&spin_ns, ns, __ATOMIC_RELAXED);
}

long
cs_barrier_spin(void)
{
    long ns = __atomic_load_n(&spin_ns, __ATOMIC_RELAXED);
    if (ns == LONG_MIN) {
        ns = spin_from_env();
        __atomic_store_n(&spin_ns, ns, __ATOMIC_RELAXED);
    }
    return ns;
}

static double
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Sleep while *word == value (or return at once: the caller re-checks). */
static void
sleep_on(unsigned *word, unsigned value)
{
#if defined(__linux__)
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
#else
    (void)word;
    (void)value;
    sched_yield();
#endif
}

static void
wake_all(unsigned *word)
{
#if defined(__linux__)
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

/* Whether round `round` of b is over, spinning at most `ns` (< 0: ever). */
static int
spin_until(const cs_barrier *b, unsigned round, long ns)
{
    double end = ns > 0 ? now_ns() + (double)ns : 0.0;
    for (unsigned i = 1; ns != 0; i++) {
        if (__atomic_load_n(&b->round, __ATOMIC_ACQUIRE) != round) {
            return 1;
        }
        CPU_RELAX();
        if (ns > 0 && i % 64 == 0 && now_ns() > end) {
            break;
        }
    }
    return __atomic_load_n(&b->round, __ATOMIC_ACQUIRE) != round;
}

/*
 * The round is read before arriving: it cannot end without this thread.
 * The last thread to arrive resets the count, then ends the round (the
 * others read the reset after they see the round end) and wakes the
 * sleepers.  A sleeper counts itself before it checks the round, and the
 * last thread ends the round before it reads the count (both sequentially
 * consistent): one of them sees the other.
 */
void
cs_barrier_wait(cs_barrier *b, int team)
{
    if (team <= 1) {
        return;
    }
    unsigned round = __atomic_load_n(&b->round, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&b->arrived, 1, __ATOMIC_ACQ_REL)
        == (unsigned)team) {
        __atomic_store_n(&b->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->round, round + 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&b->sleepers, __ATOMIC_SEQ_CST) > 0) {
            wake_all(&b->round);
        }
        return;
    }
    if (spin_until(b, round, cs_barrier_spin())) {
        return;
    }
    __atomic_add_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&b->round, __ATOMIC_SEQ_CST) == round) {
        sleep_on(&b->round, round);
    }
    __atomic_sub_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
}

int
cs_team_poll(const cs_interrupt *intr, long pass, long steps_done,
             long *stop_at, cs_barrier *bar)
{
    if (cs_team_thread() == 0 && cs_interrupt_requested(intr, steps_done)) {
        __atomic_store_n(stop_at, pass, __ATOMIC_RELEASE);
    }
    cs_barrier_wait(bar, cs_team_size());
    return __atomic_load_n(stop_at, __ATOMIC_ACQUIRE) == pass;
}
