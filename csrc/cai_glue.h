/*
 * cai_glue.h -- a CUDA Array Interface of the plain kind read in C
 * (cai_glue.c), for the short path of one step between device arrays.
 *
 * A scheme written as apply(steps=1) calls passes the same kind of array
 * thousands of times; reading its interface here instead of in Python
 * (src/convstencil/_device.py) saves most of a call's host time.  Only
 * the plain kind is read: anything else is left to the Python reader,
 * which accepts every valid interface and names what is wrong with an
 * invalid one.
 */
#ifndef CS_CAI_GLUE_H
#define CS_CAI_GLUE_H

#include <Python.h>

#include <stddef.h>
#include <stdint.h>

typedef struct cs_cai_plain {
    uintptr_t data;
    int ndim;
    ptrdiff_t shape[3];   /* 3D, leading unit axes */
    ptrdiff_t strides[3]; /* in bytes, 3D (leading zeros) */
    int readonly;
    uintptr_t stream; /* the producer's stream, 0: none */
} cs_cai_plain;

/* Make the dict keys once, at import; -1 with an exception on failure. */
int
cs_cai_keys_init(void);

/*
 * 1 where `cai` is a dict of the CUDA Array Interface, version 3, of a
 * float64 array ("<f8") of 1 to 3 non-empty axes: shape and strides
 * tuples of ints (strides multiples of 8, or None: C order), data a
 * tuple (int >= 0, bool), no mask, stream None or an int > 0; *out is
 * then filled.  0 for anything else, with no exception set.
 */
int
cs_cai_plain_read(PyObject *cai, cs_cai_plain *out);

#endif /* CS_CAI_GLUE_H */
