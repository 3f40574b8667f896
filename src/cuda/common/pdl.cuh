// Programmatic dependent launch (sm_90+): a kernel launched with programmatic stream serialization may
// start before the kernel ahead of it on the stream has finished, once every CTA of that kernel has called
// allow_dependent_launch (or exited); it must call wait_for_prior_grid before reading that kernel's
// results. Both are no-ops on older architectures and on launches without the attribute.
#pragma once

namespace kvattn::cuda {

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace kvattn::cuda
