// Explicit instantiations of the sm_90a prefill launchers, fp16, head dim 128.
#include "cuda/prefill_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {
template bool prefill_kernel_loaded<half, 128>();
template kvattn_status launch_prefill_kernel<half, 128>(const AttnParams&, cudaStream_t, bool, bool);
}  // namespace kvattn::cuda::sm90
