// Explicit instantiations of the sm_90a head-dim-512 decode launcher, f16.
#include "cuda/wide_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {
template bool wide_kernel_loaded<half>();
template kvattn_status launch_wide_kernel<half>(const AttnParams&, cudaStream_t, bool);
}  // namespace kvattn::cuda::sm90
