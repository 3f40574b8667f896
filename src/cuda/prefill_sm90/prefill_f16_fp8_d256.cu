// Explicit instantiations of the sm_90a prefill launchers, f16 q over fp8 e4m3 caches, head dim 256 (one file
// a (dtype, head dim, cache dtype): the kernels compile in parallel).
#include "cuda/prefill_sm90/launch.cuh"

namespace kvattn::cuda::sm90 {
template bool prefill_kernel_loaded<half, 256, __nv_fp8_e4m3>();
template kvattn_status launch_prefill_kernel<half, 256, __nv_fp8_e4m3>(const AttnParams&, cudaStream_t, bool,
                                                                       bool);
}  // namespace kvattn::cuda::sm90
