// Explicit instantiations of the attention launchers: bf16, head dims up to 128.
#include "cuda/attention/launch.cuh"

namespace kvattn::cuda {
template kvattn_status launch_attention<DType::bf16, DType::bf16, 64, 64>(const AttnParams&,
                                                                          const AttentionPlan&, cudaStream_t);
template kvattn_status launch_attention<DType::bf16, DType::bf16, 96, 96>(const AttnParams&,
                                                                          const AttentionPlan&, cudaStream_t);
template kvattn_status launch_attention<DType::bf16, DType::bf16, 128, 128>(const AttnParams&,
                                                                            const AttentionPlan&,
                                                                            cudaStream_t);
}  // namespace kvattn::cuda
