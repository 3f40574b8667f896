// The CUDA backend's entry points for attention. ONE table maps (q dtype, cache dtype, head_dim,
// head_dim_v) to a launcher; the same lookup answers cuda_fwd_supported and picks the kernel in cuda_fwd.
// Head dims that are not in the table run on the smallest kernel whose dims cover them (channels past
// d / dv are zero in shared memory and never written), so every d <= 256 (dv <= 512 with d <= 64) is
// supported; the listed pairs are the ones compiled for their own size. The dtype pairs: (f16, f16),
// (bf16, bf16), (f16, fp8), (bf16, fp8) and (fp8, fp8), which runs the (bf16, fp8) kernel (fp8 q is
// converted to bf16 as it is loaded; out is bf16).
//   cuda_fwd: [append if k_new] -> attention -> [split combine if splits > 1], all on p.stream, no host
//   synchronization, no allocation, no host read of device data.
#include <algorithm>
#include <string>

#include "api/backend.hpp"
#include "cuda/append/append.hpp"
#include "cuda/attention/launch.hpp"
#include "cuda/common/host.hpp"
#include "cuda/heuristics.hpp"
#include "cuda/prefill_sm90/launch.hpp"

namespace kvattn::cuda {
namespace {

struct AttentionEntry {
  DType q_dtype;
  DType kv_dtype;
  DType compute_dtype;  // of the tensor cores and out
  int head_dim;
  int head_dim_v;
  AttentionLauncher launch;
};

#define KVATTN_PAIRS(ENTRY, q, kv, compute)                                                              \
  ENTRY(q, kv, compute, 64, 64), ENTRY(q, kv, compute, 96, 96), ENTRY(q, kv, compute, 128, 128),         \
      ENTRY(q, kv, compute, 192, 192), ENTRY(q, kv, compute, 256, 256), ENTRY(q, kv, compute, 192, 128), \
      ENTRY(q, kv, compute, 64, 512)
#define KVATTN_ENTRY(q, kv, compute, d, dv)                                                         \
  AttentionEntry {                                                                                  \
    DType::q, DType::kv, DType::compute, d, dv, &launch_attention<DType::compute, DType::kv, d, dv> \
  }
constexpr AttentionEntry kAttentionTable[] = {
    KVATTN_PAIRS(KVATTN_ENTRY, f16, f16, f16),
    KVATTN_PAIRS(KVATTN_ENTRY, bf16, bf16, bf16),
    KVATTN_PAIRS(KVATTN_ENTRY, f16, fp8_e4m3, f16),
    KVATTN_PAIRS(KVATTN_ENTRY, bf16, fp8_e4m3, bf16),
    KVATTN_PAIRS(KVATTN_ENTRY, fp8_e4m3, fp8_e4m3, bf16),
};
#undef KVATTN_ENTRY
#undef KVATTN_PAIRS

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f32:
      return "f32";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    default:
      return "?";
  }
}

std::string supported_pairs() {
  std::string s;
  for (const AttentionEntry& e : kAttentionTable) {
    if (e.q_dtype != DType::f16 || e.kv_dtype != DType::f16) continue;  // the same pairs for every dtype
    if (!s.empty()) s += ", ";
    s += "(" + std::to_string(e.head_dim) + ", " + std::to_string(e.head_dim_v) + ")";
  }
  return s;
}

// The entry for p, or nullptr after fail() with a message naming the argument.
const AttentionEntry* find_entry(const FwdProblem& p, kvattn_status* status) {
  const bool dtypes_listed = std::any_of(
      std::begin(kAttentionTable), std::end(kAttentionTable),
      [&](const AttentionEntry& e) { return e.q_dtype == p.q_dtype && e.kv_dtype == p.kv_dtype; });
  if (!dtypes_listed) {
    *status = fail(KVATTN_ERROR_UNSUPPORTED,
                   std::string("q: dtype ") + dtype_name(p.q_dtype) + " with k_cache of dtype " +
                       dtype_name(p.kv_dtype) +
                       " is not supported by the CUDA backend (q f16/bf16 with a cache of q's dtype or "
                       "fp8_e4m3, or fp8_e4m3 q with an fp8_e4m3 cache)");
    return nullptr;
  }
  // The smallest kernel covering (d, dv), among the compiled ones (a developer build compiles a few).
  const AttentionEntry* best = nullptr;
  bool covered_unbuilt = false;
  for (const AttentionEntry& e : kAttentionTable) {
    if (e.q_dtype != p.q_dtype || e.kv_dtype != p.kv_dtype || e.head_dim < p.head_dim ||
        e.head_dim_v < p.head_dim_v) {
      continue;
    }
    if (!dtype_built(e.compute_dtype) || !head_dim_built(e.head_dim)) {
      covered_unbuilt = true;
      continue;
    }
    if (best == nullptr || e.head_dim + e.head_dim_v < best->head_dim + best->head_dim_v) best = &e;
  }
  if (best != nullptr) {
    *status = KVATTN_OK;
    return best;
  }
  if (covered_unbuilt) {
    *status = fail(KVATTN_ERROR_UNSUPPORTED,
                   "head_dim=" + std::to_string(p.head_dim) + ", head_dim_v=" + std::to_string(p.head_dim_v) +
                       ", dtype " + dtype_name(p.q_dtype) +
                       ": unsupported in this developer build (configured with KVATTN_DEV_HEAD_DIM / "
                       "KVATTN_DEV_DTYPE); rebuild without them for every head dim");
    return nullptr;
  }
  *status = fail(KVATTN_ERROR_UNSUPPORTED,
                 "head_dim=" + std::to_string(p.head_dim) + ", head_dim_v=" + std::to_string(p.head_dim_v) +
                     ": unsupported by the CUDA backend; its kernels are (head_dim, "
                     "head_dim_v) = " +
                     supported_pairs() + ", and smaller dims run on the smallest kernel covering them");
  return nullptr;
}

}  // namespace
}  // namespace kvattn::cuda

namespace kvattn {
using namespace cuda;

kvattn_status cuda_fwd_supported(const FwdProblem& p) {
  kvattn_status status;
  const AttentionEntry* entry = find_entry(p, &status);
  if (entry == nullptr) return status;
  DeviceGuard guard(p.device_id);
  if (const kvattn_status s = device_status(guard, p.device_id); s != KVATTN_OK) return s;
  DeviceLimits limits;
  if ((status = current_device_limits(&limits)) != KVATTN_OK) return status;
  // Either variant may run; the static row pointers come on top of the dynamic shared memory.
  const bool fp8 = p.kv_dtype == DType::fp8_e4m3;
  size_t smem = 0;
  for (const bool key_split : {false, true}) {
    smem = std::max(
        smem, attention_smem_bytes(entry->head_dim, entry->head_dim_v, p.qv.ptr != nullptr, key_split, fp8) +
                  attention_static_smem_bytes(entry->head_dim, entry->head_dim_v, key_split));
  }
  if (smem > static_cast<size_t>(limits.max_smem_per_block)) {
    return fail(KVATTN_ERROR_UNSUPPORTED,
                "head_dim_v=" + std::to_string(p.head_dim_v) + ": the kernel needs " + std::to_string(smem) +
                    " bytes of shared memory, this device has " + std::to_string(limits.max_smem_per_block));
  }
  return KVATTN_OK;
}

kvattn_status cuda_fwd_workspace_size(const FwdProblem& p, size_t* bytes) {
  DeviceGuard guard(p.device_id);
  if (const kvattn_status s = device_status(guard, p.device_id); s != KVATTN_OK) return s;
  DeviceLimits limits;
  if (current_device_limits(&limits) != KVATTN_OK) return KVATTN_ERROR_CUDA;
  kvattn_status status;
  const AttentionEntry* entry = find_entry(p, &status);
  if (entry == nullptr) return status;
  *bytes = plan_attention(p, entry->head_dim, entry->head_dim_v, limits.sm_count, limits.smem_per_sm)
               .workspace_bytes;
  return KVATTN_OK;
}

kvattn_status cuda_fwd(const FwdProblem& p) {
  kvattn_status status;
  const AttentionEntry* entry = find_entry(p, &status);
  if (entry == nullptr) return status;
  DeviceGuard guard(p.device_id);
  if (const kvattn_status s = device_status(guard, p.device_id); s != KVATTN_OK) return s;
  DeviceLimits limits;
  if ((status = current_device_limits(&limits)) != KVATTN_OK) return status;
  AttentionPlan plan =
      plan_attention(p, entry->head_dim, entry->head_dim_v, limits.sm_count, limits.smem_per_sm);
  // Only right behind the append kernel (which touches nothing but the K/V it writes), never behind a
  // kernel of the caller's.
  plan.early_launch = p.k_new.ptr != nullptr && p.batch > 0 && p.max_seqlen_k_new > 0 && limits.cc_major >= 9;
  // The workspace (size, alignment) was checked once, by validation (validate_fwd_workspace).
  DeviceErrorRecord* errors = nullptr;
  if ((status = device_error_record(&errors)) != KVATTN_OK) return status;
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);

  if (p.k_new.ptr != nullptr && (status = launch_append(p, errors, stream)) != KVATTN_OK) return status;
  if (plan.m_blocks == 0 || p.batch == 0) return KVATTN_OK;
  const AttnParams params = make_attn_params(p, plan, errors);
  // Hopper prefill shapes run on the sm_90a kernel when it covers the problem (prefill_sm90/launch.hpp).
  if (sm90::prefill_takes(p, params, limits)) return sm90::launch_prefill(p, params, stream);
  if ((status = entry->launch(params, plan, stream)) != KVATTN_OK) return status;
  if (plan.splits > 1 || plan.balanced) {
    return launch_split_combine(params, p.head_dim_v, p.out_dtype, limits.cc_major >= 9, stream);
  }
  return KVATTN_OK;
}

}  // namespace kvattn
