// Explicit instantiations of the attention launchers: bf16, head dims 192 and 256 and the MLA shape
// (64, 512).
#include "cuda/attention/launch.cuh"

namespace kvattn::cuda {
template kvattn_status launch_attention<DType::bf16, DType::bf16, 192, 192>(const AttnParams&,
                                                                            const AttentionPlan&,
                                                                            cudaStream_t);
template kvattn_status launch_attention<DType::bf16, DType::bf16, 192, 128>(const AttnParams&,
                                                                            const AttentionPlan&,
                                                                            cudaStream_t);
template kvattn_status launch_attention<DType::bf16, DType::bf16, 256, 256>(const AttnParams&,
                                                                            const AttentionPlan&,
                                                                            cudaStream_t);
template kvattn_status launch_attention<DType::bf16, DType::bf16, 64, 512>(const AttnParams&,
                                                                           const AttentionPlan&,
                                                                           cudaStream_t);
}  // namespace kvattn::cuda
