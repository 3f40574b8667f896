// Explicit instantiations of the attention launchers: fp8 e4m3 caches under bf16 compute (bf16 q, and fp8 q),
// head dims up to 128.
#include "cuda/attention/launch.cuh"

namespace kvattn::cuda {
template kvattn_status launch_attention<DType::bf16, DType::fp8_e4m3, 64, 64>(const AttnParams&,
                                                                              const AttentionPlan&,
                                                                              cudaStream_t);
template kvattn_status launch_attention<DType::bf16, DType::fp8_e4m3, 96, 96>(const AttnParams&,
                                                                              const AttentionPlan&,
                                                                              cudaStream_t);
template kvattn_status launch_attention<DType::bf16, DType::fp8_e4m3, 128, 128>(const AttnParams&,
                                                                                const AttentionPlan&,
                                                                                cudaStream_t);
}  // namespace kvattn::cuda
