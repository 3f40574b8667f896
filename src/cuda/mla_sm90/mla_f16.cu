// Explicit instantiations of the sm_90a MLA decode launcher, f16.
#include "cuda/mla_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {
template bool mla_kernel_loaded<half>();
template kvattn_status launch_mla_kernel<half>(const AttnParams&, cudaStream_t, bool);
}  // namespace kvattn::cuda::sm90
