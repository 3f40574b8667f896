// Explicit instantiations of the attention launchers: fp8 e4m3 caches under f16 compute (f16 q),
// head dims 192 and 256 and the MLA shape (64, 512).
#include "cuda/attention/launch.cuh"

namespace kvattn::cuda {
template kvattn_status launch_attention<DType::f16, DType::fp8_e4m3, 192, 192>(const AttnParams&,
                                                                               const AttentionPlan&,
                                                                               cudaStream_t);
template kvattn_status launch_attention<DType::f16, DType::fp8_e4m3, 192, 128>(const AttnParams&,
                                                                               const AttentionPlan&,
                                                                               cudaStream_t);
template kvattn_status launch_attention<DType::f16, DType::fp8_e4m3, 256, 256>(const AttnParams&,
                                                                               const AttentionPlan&,
                                                                               cudaStream_t);
template kvattn_status launch_attention<DType::f16, DType::fp8_e4m3, 64, 512>(const AttnParams&,
                                                                              const AttentionPlan&,
                                                                              cudaStream_t);
}  // namespace kvattn::cuda
