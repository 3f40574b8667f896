// Explicit instantiations of the attention launchers: f16, head dims up to 128.
#include "cuda/attention/launch.cuh"

namespace kvattn::cuda {
template kvattn_status launch_attention<DType::f16, DType::f16, 64, 64>(const AttnParams&,
                                                                        const AttentionPlan&, cudaStream_t);
template kvattn_status launch_attention<DType::f16, DType::f16, 96, 96>(const AttnParams&,
                                                                        const AttentionPlan&, cudaStream_t);
template kvattn_status launch_attention<DType::f16, DType::f16, 128, 128>(const AttnParams&,
                                                                          const AttentionPlan&, cudaStream_t);
}  // namespace kvattn::cuda
