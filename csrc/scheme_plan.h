/*
 * scheme_plan.h -- the host's plan of a scheme's run on the GPU, in plain
 * C so that every build has it (explain() prices GPU runs on machines
 * without one): each stage's terms and nonzero weights as the kernels
 * read them, which buffer holds each field and where each stage writes
 * (the one-step passes, csrc/cuda/scheme.cu, and the slots of the
 * blocked ones, csrc/cuda/scheme_tb.cu), and the choice between the two
 * with its model of their cost.
 */
#ifndef CS_SCHEME_PLAN_H
#define CS_SCHEME_PLAN_H

#include "scheme.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SCH_MAX_SCRATCH (CS_SCHEME_MAX_FIELDS + 1)
#define SCH_MAX_BUFFERS (2 * CS_SCHEME_MAX_FIELDS + SCH_MAX_SCRATCH)
#define SCH_HISTORY 64   /* step states kept to find the period */
#define SCH_GRID_YZ 65535 /* blocks of a launch along y and z */
/* the largest tables a one-step launch carries: taps and terms a stage */
#define SCH_LARGE_TAPS 512
#define SCH_LARGE_TERMS 128

/* blocked passes (scheme_tb.cu) */
#define SCH_TB_COLUMNS 64     /* a region's width */
#define SCH_TB_THREADS 512    /* 32 x 16 */
#define SCH_TB_STAGES 4       /* stages of a scheme the pass takes */
#define SCH_TB_INSTANCES 64   /* steps x stages of a pass */
#define SCH_TB_TERMS 64       /* terms of all stages together */
#define SCH_TB_TAPS 256       /* nonzero weights of all stages together */

/* A term, as the kernel reads it. */
typedef struct sch_term {
    double coef;
    int kind;       /* CS_TERM_STENCIL or CS_TERM_MONOMIAL */
    int param;      /* the parameter field, -1: none */
    int field;      /* stencil: the field correlated */
    int tap0;       /* stencil: its taps, [tap0, tap0 + ntaps) */
    int ntaps;
    unsigned pow;   /* monomial: 4 bits of power per pointwise slot */
} sch_term;

/* An output of a launch: a sum of terms, or a copy of a pointwise slot
   (a rename the last stage writes). */
typedef struct sch_out {
    int first_term;
    int term_count;
    int copy;       /* the slot copied, or -1: the sum */
} sch_out;

/* The plan of a stage: its updates, which are renames, the fields its
   sums read through stencils and at the point, and its terms and taps. */
typedef struct sch_stage_plan {
    int count;                         /* its updates */
    int target[CS_SCHEME_MAX_FIELDS];  /* per update: the field it sets */
    int rename[CS_SCHEME_MAX_FIELDS];  /* per update: the field it copies
                                          (a rename), or -1 (a sum) */
    unsigned targets, stencil_read;    /* a bit per field */
    sch_out out[CS_SCHEME_MAX_FIELDS]; /* per update: a sum's terms */
    int npw;                           /* pointwise slots of its sums */
    int pw_field[CS_SCHEME_MAX_FIELDS];
    int r[3];
    int nterms, ntaps;
    sch_term *terms;                   /* nterms, host memory */
    double *tap_w;                     /* ntaps each */
    ptrdiff_t *tap_off;
    int (*tap_d)[3];
} sch_stage_plan;

/* A grid as the one-step kernel indexes it: extents z, y, x and the
   element strides of a row and a plane. */
typedef struct sch_grid {
    ptrdiff_t n[3];
    ptrdiff_t sy, sz;
} sch_grid;

typedef struct sch_buffers {
    double *ptr[SCH_MAX_BUFFERS];
    unsigned char writable[SCH_MAX_BUFFERS]; /* an out or a scratch array */
    int count;                      /* the caller's; scratch k: count + k */
    int fields;
    int out[CS_SCHEME_MAX_FIELDS];  /* the buffer of each field's out */
} sch_buffers;

typedef struct sch_state {
    int cur[CS_SCHEME_MAX_FIELDS];  /* the buffer holding each field */
    int scratch;                    /* scratch arrays in play */
} sch_state;

enum { SCH_SUM = 0, SCH_RENAME = 1, SCH_COPY = 2 };

/* What one stage does: per update of the stage, how and where. */
typedef struct sch_assign {
    int how[CS_SCHEME_MAX_FIELDS];
    int dst[CS_SCHEME_MAX_FIELDS];  /* SUM and COPY: the buffer written */
    int from[CS_SCHEME_MAX_FIELDS]; /* each field's buffer as it began */
} sch_assign;

/* A copy at the end of the run. */
typedef struct sch_move {
    int from, to;
} sch_move;

/* The orders in which a sum away from the last stage looks for a buffer
   (after its own, when free, in place): its field's out first (runs of
   the right parity end in the outs), last (the other parity), or new
   scratch arrays before any out (outs that are the ins swapped).  The
   plan simulates each and keeps the one that ends with the fewest
   copies. */
enum { SCH_OWN_OUT_FIRST = 0, SCH_OWN_OUT_LAST, SCH_SCRATCH_FIRST,
       SCH_ORDERS };

/* The slots of a pass, stage by stage (instance i = step x stages +
   stage).  from[i][f]: the slot holding field f as instance i begins
   (from[steps x stages]: after the pass); dst[i][j]: the slot update j
   of the instance writes, -1 for a rename (nothing is written). */
typedef struct sch_tb_schedule {
    int steps;   /* of a full pass */
    int rows;    /* the region's rows: 32 or 64 */
    int halo[2]; /* rows and columns spent on each side */
    int slots;   /* field slots in shared memory, K and scratch ones */
    unsigned char from[SCH_TB_INSTANCES + 1][CS_SCHEME_MAX_FIELDS];
    signed char dst[SCH_TB_INSTANCES][CS_SCHEME_MAX_FIELDS];
} sch_tb_schedule;

/* Streamed passes: a one-stage scheme of up to SST_FIELDS fields under
   wrap or constant, carried through several steps in registers; in 2D
   (scheme_stream.cu) its stencils fit 3 x 3, in 3D (scheme_stream3.cu)
   the 7-point star.  Each update's sum is
   regrouped per field read, plain or scaled by the update's one
   parameter field: its stencil terms (their taps apart, each weight
   times its term's coefficient) as one 3 x 3 (x 3) pattern, and its terms
   linear in that field at the point as up to SST_CENTRES coefficients of
   its centre, each multiplied on its own (summed weights would turn the
   reference's Inf - Inf = NaN into a finite weight times Inf); a number
   alone is a constant; the rest (products, powers, parameter fields at
   the point) stay pointwise terms. */
#define SST_FIELDS 2     /* fields of a streamed scheme */
#define SST_POINTWISE 8  /* pointwise terms an update keeps */
#define SST_CENTRES 3    /* centre coefficients a group keeps */
/* the patterns: SST_PLUS and SST_BOX in 2D, SST_STAR3 (all 7 taps of
   the 3D star) in 3D, SST_MASK any other set of taps */
enum { SST_NONE = 0, SST_CENTRE, SST_PLUS, SST_BOX, SST_MASK, SST_STAR3 };
/* a pattern's taps: bit 3 (dy + 1) + dx + 1 in 2D, 9 (dz + 1) + 3 (dy +
   1) + dx + 1 in 3D (the 3D star: SST_TAP3_*) */
#define SST_TAPS 27
enum { SST_TAP3_ZM = 4, SST_TAP3_YM = 10, SST_TAP3_XM = 12,
       SST_TAP3_CENTRE = 13, SST_TAP3_XP = 14, SST_TAP3_YP = 16,
       SST_TAP3_ZP = 22 };
#define SST_STAR3_MASK                                                        \
    ((1u << SST_TAP3_ZM) | (1u << SST_TAP3_YM) | (1u << SST_TAP3_XM)         \
     | (1u << SST_TAP3_CENTRE) | (1u << SST_TAP3_XP) | (1u << SST_TAP3_YP)   \
     | (1u << SST_TAP3_ZP))

typedef struct sch_stream_tables {
    int ndim;                      /* 2 or 3 */
    int fields;                    /* K */
    int scaled;                    /* updates with a scaled sum: the
                                      kernel's fields 0 .. scaled - 1 */
    int pointwise;                 /* some update keeps pointwise terms */
    int order[SST_FIELDS];         /* kernel field i is field order[i] */
    int updated[SST_FIELDS];       /* kernel field i is written */
    int scale_param[SST_FIELDS];   /* the parameter of i's scaled sum */
    int copy[SST_FIELDS];          /* the kernel field update i copies
                                      unchanged (a rename; a field no
                                      update sets: itself), -1: a sum */
    /* [update i][0 plain, 1 scaled][field f read]: the taps' pattern
       (SST_*), their bits and weights (indexed by bit) */
    int kind[SST_FIELDS][2][SST_FIELDS];
    unsigned mask[SST_FIELDS][2][SST_FIELDS];
    double w[SST_FIELDS][2][SST_FIELDS][SST_TAPS];
    int ncentre[SST_FIELDS][2][SST_FIELDS];
    double centre[SST_FIELDS][2][SST_FIELDS][SST_CENTRES];
    double constant[SST_FIELDS];
    int npw[SST_FIELDS];
    double pw_coef[SST_FIELDS][SST_POINTWISE];
    int pw_param[SST_FIELDS][SST_POINTWISE];       /* -1: none */
    unsigned char pw_power[SST_FIELDS][SST_POINTWISE][SST_FIELDS];
} sch_stream_tables;

/* The patterns of every group of tables t as one number: 5 bits a
   group (the pattern, and its centre coefficients' count times 8),
   group (i, c, f) at bit 5 ((2 i + c) K + f); and SST_CONSTANT(i) where
   update i adds a constant. */
#define SST_CONSTANT(i) (1ull << (40 + (i)))
unsigned long long
sch_stream_signature(const sch_stream_tables *t);

/* Signatures scheme_stream.cu compiles with their patterns fixed (a
   push per group known while compiling: no branches, no shuffles for a
   field read at its centre alone, no constant where none is added):
   the leapfrog wave (u: L(u), u, up; up: u), the wave with a velocity
   field (the Laplacian scaled), two fields each diffusing with a
   constant in the first (Gray-Scott's F), one field under a plus (with
   or without a constant) or a 3 x 3 box. */
#define SST_GROUP(kind, centres, g)                                          \
    ((unsigned long long)((kind) | (centres) << 3) << (5 * (g)))
#define SST_SIG_WAVE                                                         \
    (SST_GROUP(SST_PLUS, 1, 0) | SST_GROUP(SST_NONE, 1, 1)                   \
     | SST_GROUP(SST_NONE, 1, 4))
#define SST_SIG_WAVE_SCALED                                                  \
    (SST_GROUP(SST_NONE, 1, 0) | SST_GROUP(SST_NONE, 1, 1)                   \
     | SST_GROUP(SST_PLUS, 0, 2) | SST_GROUP(SST_NONE, 1, 4))
#define SST_SIG_DIFFUSING_PAIR                                               \
    (SST_GROUP(SST_PLUS, 2, 0) | SST_GROUP(SST_PLUS, 2, 5) | SST_CONSTANT(0))
#define SST_SIG_DIFFUSING_PAIR_MERGED /* like terms summed: 0.96 u */      \
    (SST_GROUP(SST_PLUS, 1, 0) | SST_GROUP(SST_PLUS, 1, 5) | SST_CONSTANT(0))
#define SST_SIG_PLUS SST_GROUP(SST_PLUS, 1, 0)
#define SST_SIG_PLUS_SOURCE (SST_SIG_PLUS | SST_CONSTANT(0))
#define SST_SIG_PLUS_REACTING SST_GROUP(SST_PLUS, 2, 0)
#define SST_SIG_BOX SST_GROUP(SST_BOX, 1, 0)
/* 3D (scheme_stream3.cu): the leapfrog wave with the 7-point star, and
   one field under the star (heat) */
#define SST_SIG_WAVE3                                                        \
    (SST_GROUP(SST_STAR3, 1, 0) | SST_GROUP(SST_NONE, 1, 1)                  \
     | SST_GROUP(SST_NONE, 1, 4))
#define SST_SIG_STAR3 SST_GROUP(SST_STAR3, 1, 0)

/* The pointwise terms of tables t as one number, where every update has
   at most SST_PW_COMPILED of them: per update i (bits from 20 i) their
   count, then each term's power of each field (3 bits), and from bit 40
   which terms a parameter field scales; 0 otherwise. */
#define SST_PW_COMPILED 3
#define SST_PW_COUNT(i, n) ((unsigned long long)(n) << (20 * (i)))
#define SST_PW_POWER(i, m, f, power)                                         \
    ((unsigned long long)(power)                                             \
     << (20 * (i) + 2 + 3 * ((m) * SST_FIELDS + (f))))
#define SST_PW_PARAM(i, m) (1ull << (40 + SST_PW_COMPILED * (i) + (m)))
unsigned long long
sch_stream_pw_signature(const sch_stream_tables *t);

/* Pointwise signatures compiled in: Gray-Scott's u v^2 in both updates,
   a cube of one field (Allen-Cahn). */
#define SST_PWSIG_GRAY_SCOTT                                                 \
    (SST_PW_COUNT(0, 1) | SST_PW_POWER(0, 0, 0, 1) | SST_PW_POWER(0, 0, 1, 2) \
     | SST_PW_COUNT(1, 1) | SST_PW_POWER(1, 0, 0, 1)                         \
     | SST_PW_POWER(1, 0, 1, 2))
#define SST_PWSIG_CUBE (SST_PW_COUNT(0, 1) | SST_PW_POWER(0, 0, 0, 3))

/* Whether scheme_stream.cu has an instance with the pointwise terms of
   tables t compiled in (the signatures above). */
int
sch_stream_pw_compiled(const sch_stream_tables *t);

/* Whether the kernel instance that runs tables t has their group patterns
   (and pointwise terms) compiled in: scheme_stream.cu's dispatch, whose
   list of signatures this mirrors. */
int
sch_stream_compiled(const sch_stream_tables *t);

/* The most steps a streamed pass of tables t carries (the registers
   of its kernel instance hold that many levels). */
int
sch_stream_max_depth(const sch_stream_tables *t);

/* 3D streamed passes (scheme_stream3.cu): a block streams a tile of
   SST3_TILE_ROWS x SST3_TILE_COLS cells of a plane down the planes.
   Fields go through shared planes (a pair a level, SST3_PLANE_BYTES
   each; sch_stream3_shared's bits): in the instances with the patterns
   compiled in those read with taps beside the centre or by a copy, in
   the others every field.  A copy (sch_stream_tables' copy) the
   compiled instances take from the shared planes; the others run it as
   the sum it also is in the tables. */
#define SST3_TILE_ROWS 32
#define SST3_TILE_COLS 64
#define SST3_MIN_EXTENT 8
#define SST3_PLANE_BYTES ((SST3_TILE_ROWS + 2) * SST3_TILE_COLS * 8)
unsigned
sch_stream3_shared(const sch_stream_tables *t);

/* The shared memory a 3D streamed pass of tables t takes at `depth`. */
size_t
sch_stream3_smem_bytes(const sch_stream_tables *t, int depth);

/* The tables of a streamed pass of scheme s under `mode`; 0 when the
   scheme is not one streamed passes take. */
int
sch_stream_tables_make(const cs_scheme *s, cs_mode mode,
                       sch_stream_tables *t);

/* ---- stages ---- */

/* Stage gi's plan (sp->terms and the tap arrays allocated: free with
   sch_stage_plan_free); `tap0` holds stencil_count ints of scratch.
   CS_ERR_UNSUPPORTED beyond SCH_LARGE_TERMS terms or SCH_LARGE_TAPS
   taps, CS_ERR_NOMEM; what was wrong in msg. */
cs_status
sch_stage_plan_make(const cs_scheme *s, int gi, const sch_grid *g, int *tap0,
                    sch_stage_plan *sp, char *msg, size_t msg_len);

void
sch_stage_plan_free(sch_stage_plan *sp);

/* The pointwise slot of field f among *npw, added when new. */
int
sch_pw_slot(int *npw, int *pw_field, int f);

/* ---- buffers of the one-step passes ---- */

/* The caller's buffer at p, added when new. */
int
sch_buffer_of(sch_buffers *B, double *p, int writable);

/* Where stage sp writes from state st (updated); -1 if no buffer. */
int
sch_assign_stage(const sch_buffers *B, sch_state *st, const sch_stage_plan *sp,
                 int final, int order, sch_assign *a);

/* The copies that bring every field into its out; -1 if no scratch. */
int
sch_plan_moves(const sch_buffers *B, sch_state *st, sch_move *moves,
               int *count);

/* The buffer order whose run ends with the fewest copies; -1 if none. */
int
sch_choose_order(const sch_buffers *B, const sch_state *init,
                 const sch_stage_plan *plans, int stages, long steps,
                 int *scratch);

/* ---- blocked passes and the choice ---- */

/* Bytes of shared memory a block of schedule `sc` takes. */
size_t
sch_tb_smem(const sch_tb_schedule *sc, int nparams);

/* Can the blocked passes take these plans at all (their tables)? */
int
sch_tb_fits(const sch_stage_plan *plans, int stages);

/* The model's seconds a grid point and step of the one-step passes on
   a grid of `shape` (z, y, x). */
double
sch_onestep_cost(const sch_stage_plan *plans, int stages,
                 const ptrdiff_t shape[3]);

/* The passes a run takes (sch_choose_passes). */
typedef struct sch_passes {
    int kind;                  /* SCH_PASSES_ONESTEP, _BLOCKED, _STREAMED */
    int depth;                 /* steps a blocked or streamed pass */
    sch_tb_schedule sc;        /* BLOCKED: the schedule */
    sch_stream_tables stream;  /* STREAMED: the tables */
    /* the model's seconds a grid point and step of each kind (0 where
       none fits) */
    double onestep_cost, blocked_cost, stream_cost;
} sch_passes;

enum { SCH_PASSES_ONESTEP = 0, SCH_PASSES_BLOCKED, SCH_PASSES_STREAMED };

/*
 * The passes of a scheme's run under `mode`: streamed where they are
 * taken and the model prices them lowest, else blocked where they pay
 * (below 0.9 of the one-step passes), else one-step.  `setting` is
 * CONVSTENCIL_SCHEME_BLOCK (NULL: unset): "off" (one-step), "ROWSxSTEPS"
 * (32 or 64 rows: that blocked pass wherever it fits), "streamN" (N
 * steps a streamed pass, wherever they are taken), "nostream" (the
 * choice without streamed passes); anything else is CS_ERR_INVALID.
 * `streamed_ok`: whether the device's kernel image holds the streamed
 * passes (sm_90 images; kernels.cuh): where it does not, none is taken,
 * forced or not, and the choice is among the others.
 */
cs_status
sch_choose_passes(const cs_scheme *s, const sch_stage_plan *plans,
                  const ptrdiff_t shape[3], cs_mode mode, long steps,
                  int smem_optin, int streamed_ok, const char *setting,
                  sch_passes *out, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif

#endif /* CS_SCHEME_PLAN_H */
