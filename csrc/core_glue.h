/*
 * core_glue.h -- what module.c shares with the other glue files that
 * run an engine (scheme_glue.c, device_glue.c, ...): the backend codes,
 * the run record as a dict, the poll that watches Ctrl-C and reports
 * progress, a status code as an exception, and the exception of a build
 * without CUDA.  Defined in module.c.
 */
#ifndef CS_CORE_GLUE_H
#define CS_CORE_GLUE_H

#include <Python.h>

#include "stencil.h"

/* Backend codes, exported as BACKEND_* (src/convstencil/_backends.py). */
enum {
    BACKEND_CPU = 0,
    BACKEND_CPU_TC = 1,
    BACKEND_CUDA = 2
};

/* What a run did, as the dict last_run_info() returns; NULL with an
   exception set on failure. */
PyObject *
cs_py_info_to_dict(const cs_run_info *info);

/* The state of one run's poll (cs_py_make_poll). */
typedef struct cs_py_poll {
    double next;        /* clock reading of the next look */
    int check_signals;  /* the main thread: run the signal handlers */
    PyObject *progress; /* NULL, or called with the steps done so far */
} cs_py_poll;

/*
 * The poll of one run, kept in *sp: with `interruptible`, Python's signal
 * handlers run (a raising one, KeyboardInterrupt on Ctrl-C, stops the
 * run, its exception left set); `progress` (None or a callable) is
 * called with the steps done.  At most every tenth of a second; no poll
 * at all when there is nothing to look at.  Made with the GIL held; the
 * engine calls it without.
 */
cs_interrupt
cs_py_make_poll(cs_py_poll *sp, int interruptible, PyObject *progress);

/* Raise the exception of a failed engine call: MemoryError, ValueError
   (invalid, unsupported) or RuntimeError, naming the backend and
   `detail` (may be NULL or empty). */
void
cs_py_raise_status(cs_status status, const char *backend,
                   const char *detail);

/* Why this build has no CUDA engine (setup.py defines it where it left
   CUDA out). */
#ifndef CS_NO_CUDA_REASON
#define CS_NO_CUDA_REASON "built without the CUDA engine"
#endif

/* Raise RuntimeError for a call that needs the CUDA engine this build
   lacks, saying why it was left out; returns NULL. */
PyObject *
cs_py_no_cuda_engine(void);

#endif /* CS_CORE_GLUE_H */
