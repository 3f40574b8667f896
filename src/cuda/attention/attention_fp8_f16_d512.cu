// Explicit instantiation of the attention launcher: fp8 e4m3 caches under f16 compute (f16 q), d = dv = 512
// (Gemma's global layers; one file of its own, the slowest instantiation to compile).
#include "cuda/attention/launch.cuh"

namespace kvattn::cuda {
template kvattn_status launch_attention<DType::f16, DType::fp8_e4m3, 512, 512>(const AttnParams&,
                                                                               const AttentionPlan&,
                                                                               cudaStream_t);
}  // namespace kvattn::cuda
