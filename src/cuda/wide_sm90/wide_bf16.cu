// Explicit instantiations of the sm_90a head-dim-512 decode launcher, bf16.
#include "cuda/wide_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {
template bool wide_kernel_loaded<__nv_bfloat16>();
template kvattn_status launch_wide_kernel<__nv_bfloat16>(const AttnParams&, cudaStream_t, bool);
}  // namespace kvattn::cuda::sm90
