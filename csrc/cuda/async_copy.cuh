/*
 * async_copy.cuh -- asynchronous global-to-shared copies (cp.async, sm_80
 * and newer) for the CUDA-core kernels that stream tiles (cc2d.cu,
 * cc3d.cu): loads in flight that need no registers to hold them.  Under
 * the CPU emulation a copy happens at once and the group calls do
 * nothing.
 *
 * Each thread starts copies, closes them into a group with
 * cs_copy_commit, and waits with cs_copy_wait<N> until at most N of its
 * groups are still in flight; a barrier after the wait makes every
 * thread's copies visible to the block.
 */
#ifndef CS_CUDA_ASYNC_COPY_CUH
#define CS_CUDA_ASYNC_COPY_CUH

/* Start copying one double from global to shared memory; when !ok the
   destination is zero-filled and nothing is read (src must still be a
   valid address: callers pass the grid's origin). */
static __device__ __forceinline__ void
cs_copy_async8(double *dst, const double *src, bool ok)
{
#if defined(CS_CUDA_EMULATION)
    *dst = ok ? *src : 0.0;
#else
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
                 :
                 : "r"(s), "l"(src), "r"(ok ? 8 : 0)
                 : "memory");
#endif
}

/* Close the group of copies this thread started since the last one. */
static __device__ __forceinline__ void
cs_copy_commit()
{
#if !defined(CS_CUDA_EMULATION)
    asm volatile("cp.async.commit_group;" : : : "memory");
#endif
}

/* Wait until at most N of this thread's groups are still in flight. */
template <int N>
static __device__ __forceinline__ void
cs_copy_wait()
{
#if !defined(CS_CUDA_EMULATION)
    asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory");
#endif
}

#endif /* CS_CUDA_ASYNC_COPY_CUH */
