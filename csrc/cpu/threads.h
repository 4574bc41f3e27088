/*
 * threads.h -- the threads of the CPU engines: how many a parallel region
 * gets (one choice, cs_threads_choose, made the same way by the stencil
 * engine, the scheme engine, the tensor-core emulation and the host
 * copies), and the barrier their step loops wait at.
 */
#ifndef CS_THREADS_H
#define CS_THREADS_H

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* This thread's index in its team, and the team's size (0 and 1 outside
   a parallel region, and in a build without OpenMP). */
static inline int
cs_team_thread(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline int
cs_team_size(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/*
 * The stencil and scheme engines' unit of work: one multiply-add of the
 * row kernel on one point (a point-tap), and CS_THREADS_POINT_TAPS more
 * per point and step for what a step does to a point beyond its taps
 * (loads, stores, halo copies: a 5-point and a 49-point kernel take
 * about the same 1 ns a point and step on one core, in cache).
 */
#define CS_THREADS_POINT_TAPS 16.0

/*
 * Each thread of a team gets CS_THREADS_MIN_WORK units of a step (the
 * work between two barriers) and CS_THREADS_MIN_CALL_WORK of the whole
 * call (waking a sleeping team costs a few tens of microseconds once per
 * call) or more: two threads run a step of 2e6 units in a call of 5e6.
 * Measured on two cores, one thread against two on the same calls
 * (benchmarks/bench_threads.py crossover, in
 * benchmarks/results/cpu2_threads_oversubscribed.md): heat2d on 256^2
 * (1.4e6 units a step) ran 0.96 to 0.99 times as long on two threads
 * for one to three steps and 0.83 for ten, on 362^2 (2.8e6) 0.75 for one
 * step and 0.56 for ten; box2d49p on 256^2 (2.3e6) 1.06 times for one
 * step, 0.87 for three and 0.73 for ten; heat1d on 2^16 points (1.25e6)
 * 2.24 for one step, on 2^18 (5e6) 1.02.  3D grids gain from two threads
 * a little earlier (heat3d on 32^3, 7.5e5 units, 0.77 for ten steps):
 * the rule leaves them on one thread up to 2e6.
 */
#define CS_THREADS_MIN_WORK 1.0e6
#define CS_THREADS_MIN_CALL_WORK 2.5e6

/*
 * Barriers closer than CS_THREADS_BUSY_WORK units (about 2.5 ms on one
 * core, a scheduler's time slice) stall the team whenever the scheduler
 * takes one of its threads away: on a machine whose other runnable
 * threads leave fewer idle cores than the team has threads, such a
 * region runs on the idle cores only (two threads at a step's barrier
 * next to one CPU-bound process took 1.3 to 2.2 times as long as one).
 */
#define CS_THREADS_BUSY_WORK 1.0e8

/*
 * The threads for a parallel region that does `work` units, `per_thread`
 * of them at least for each thread; `close`: whether its barriers are
 * close enough that a preempted thread stalls the others (see
 * CS_THREADS_BUSY_WORK).
 *   - requested > 0: exactly that many (a caller that knows: a test, a
 *     benchmark);
 *   - else OpenMP's default (OMP_NUM_THREADS, else every core this
 *     process may run on), cut to the work, and for a `close` region to
 *     the cores idle now (cs_threads_idle).
 * Always 1 or more; 1 in a build without OpenMP.  Every parallel region
 * of the CPU engines takes its team from here.
 */
int
cs_threads_choose(int requested, double work, double per_thread, int close);

/*
 * The rule of cs_threads_choose for a count not requested: at most
 * `ceiling` threads, each with `per_thread` of the `work` or more, and
 * for a `close` region no more than `idle` (< 0: not known) but 1.
 */
int
cs_threads_fit(int ceiling, int idle, double work, double per_thread,
               int close);

/*
 * The cores that the machine's other runnable threads leave idle now
 * (the running count of /proc/loadavg, less the caller; 0 where they
 * are more than the cores), or -1 where that says nothing about this
 * process's cores: not
 * Linux, a process confined to some of the machine's cores (a
 * container's cpuset), or OMP_DYNAMIC=false (no adjustment wanted).
 */
int
cs_threads_idle(void);

/*
 * cs_threads_choose for a step loop: `steps` steps of `step_work` units
 * each (CS_THREADS_POINT_TAPS included), `interval` units between two
 * of the team's barriers (a step, or a blocked pass of several).
 */
int
cs_threads_for_steps(int requested, double step_work, long steps,
                     double interval);

/*
 * A barrier for the threads of one OpenMP team that spins a short while
 * and then sleeps (a futex on Linux), so that a team whose other thread
 * was preempted does not hold a core another process could use.
 * Zero-initialised before the parallel region; every thread of the team
 * calls cs_barrier_wait with the team's size.
 */
typedef struct cs_barrier {
    unsigned arrived;        /* threads at the barrier this round */
    unsigned round;          /* rounds completed: the futex word */
    unsigned sleepers;       /* threads asleep on `round` */
} cs_barrier;

void
cs_barrier_wait(cs_barrier *b, int team);

/*
 * The start of pass `pass` (> 0) of a team's loop, by every thread:
 * thread 0 (the caller's) asks `intr` (`steps_done` so far; NULL:
 * never) and records `pass` in *stop_at when it says stop, then the
 * team meets at `bar`; returns whether the team stops here.  A stop
 * recorded for a later pass (thread 0 may run a pass ahead of a thread
 * still leaving this barrier) is never taken for this one, so every
 * thread leaves at the same pass.  *stop_at starts at -1; >= 0 after
 * the loop: it stopped.
 */
struct cs_interrupt;
int
cs_team_poll(const struct cs_interrupt *intr, long pass, long steps_done,
             long *stop_at, cs_barrier *bar);

/*
 * How long a thread spins at cs_barrier_wait before it sleeps, in
 * nanoseconds: < 0 spins until released, 0 sleeps at once.  The default
 * follows OMP_WAIT_POLICY as the process started with it: "active"
 * spins, "passive" sleeps, unset spins CS_BARRIER_SPIN_NS (a step's
 * threads on an idle machine arrive within a few microseconds; a
 * preempted one takes milliseconds).  The Python package sets it from
 * the policy the user gave, as it sets a passive policy for OpenMP's own
 * waits when the user gave none.
 */
#define CS_BARRIER_SPIN_NS 50000L

void
cs_barrier_set_spin(long ns);

long
cs_barrier_spin(void);

#ifdef __cplusplus
}
#endif

#endif /* CS_THREADS_H */
