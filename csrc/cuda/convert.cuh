/*
 * convert.cuh -- reading one element of a caller's device array as
 * float64: to_double() for each element type a grid may arrive in
 * (cs_dtype), half and bfloat16 decoded from their bits, bool as 0/1.
 */
#ifndef CS_CUDA_CONVERT_CUH
#define CS_CUDA_CONVERT_CUH

#include <stdint.h>
#include <string.h>

#include "../stencil.h"

typedef struct f16_bits {
    uint16_t bits;
} f16_bits;

typedef struct bf16_bits {
    uint16_t bits;
} bf16_bits;

static __device__ __forceinline__ double
to_double(double v)
{
    return v;
}

static __device__ __forceinline__ double
to_double(float v)
{
    return (double)v;
}

static __device__ __forceinline__ double
to_double(f16_bits h)
{
    const int sign = h.bits >> 15;
    const int e = (h.bits >> 10) & 31;
    const int m = h.bits & 1023;
    unsigned long long b;
    if (e == 0) { /* zero or subnormal: exact in double */
        const double v = (double)m * (1.0 / 16777216.0); /* 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) { /* infinity or NaN, payload kept */
        b = 0x7ff0000000000000ull | ((unsigned long long)m << 42);
    } else {
        b = ((unsigned long long)(e - 15 + 1023) << 52)
            | ((unsigned long long)m << 42);
    }
    b |= (unsigned long long)sign << 63;
    double v;
    memcpy(&v, &b, sizeof(v));
    return v;
}

static __device__ __forceinline__ double
to_double(bf16_bits h)
{
    const uint32_t b = (uint32_t)h.bits << 16; /* the top half of a float */
    float f;
    memcpy(&f, &b, sizeof(f));
    return (double)f;
}

template <class T>
static __device__ __forceinline__ double
to_double(T v)
{
    return (double)v; /* integers */
}

/* bool: any nonzero byte is 1 */
typedef struct bool_byte {
    uint8_t v;
} bool_byte;

static __device__ __forceinline__ double
to_double(bool_byte b)
{
    return b.v != 0 ? 1.0 : 0.0;
}

/*
 * f(T()) for the element type T of `t` (the value stands for its type:
 * a launcher templated on T), or CS_ERR_INVALID for an unknown code.
 */
template <class F>
static inline cs_status
cs_dtype_dispatch(cs_dtype t, F f)
{
    switch (t) {
    case CS_DTYPE_FLOAT64:
        return f(double());
    case CS_DTYPE_FLOAT32:
        return f(float());
    case CS_DTYPE_FLOAT16:
        return f(f16_bits());
    case CS_DTYPE_BFLOAT16:
        return f(bf16_bits());
    case CS_DTYPE_INT8:
        return f(int8_t());
    case CS_DTYPE_INT16:
        return f(int16_t());
    case CS_DTYPE_INT32:
        return f(int32_t());
    case CS_DTYPE_INT64:
        return f(int64_t());
    case CS_DTYPE_UINT8:
        return f(uint8_t());
    case CS_DTYPE_UINT16:
        return f(uint16_t());
    case CS_DTYPE_UINT32:
        return f(uint32_t());
    case CS_DTYPE_UINT64:
        return f(uint64_t());
    case CS_DTYPE_BOOL:
        return f(bool_byte());
    default:
        return CS_ERR_INVALID;
    }
}

#endif /* CS_CUDA_CONVERT_CUH */
