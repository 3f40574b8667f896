// Explicit instantiation of the attention launcher: f16, d = dv = 512 (Gemma's global layers; one file of
// its own, the slowest instantiation to compile).
#include "cuda/attention/launch.cuh"

namespace kvattn::cuda {
template kvattn_status launch_attention<DType::f16, DType::f16, 512, 512>(const AttnParams&,
                                                                          const AttentionPlan&, cudaStream_t);
}  // namespace kvattn::cuda
