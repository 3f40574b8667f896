// Explicit instantiations of the sm_90a MLA decode launcher, bf16.
#include "cuda/mla_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {
template bool mla_kernel_loaded<__nv_bfloat16>();
template kvattn_status launch_mla_kernel<__nv_bfloat16>(const AttnParams&, cudaStream_t, bool);
}  // namespace kvattn::cuda::sm90
