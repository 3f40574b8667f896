// Explicit instantiations of the sm_90a prefill launchers, bf16, (d, dv) = (192, 128) (one file a (dtype,
// head dim): the kernels compile in parallel).
#include "cuda/prefill_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {
template bool prefill_kernel_loaded<__nv_bfloat16, 192>();
template kvattn_status launch_prefill_kernel<__nv_bfloat16, 192>(const AttnParams&, cudaStream_t, bool, bool);
}  // namespace kvattn::cuda::sm90
