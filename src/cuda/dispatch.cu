// The CUDA backend's entry points for attention. ONE table (kernel_table.hpp) of rows {arch, q dtype,
// cache dtype, head_dim, head_dim_v, supports, plan, launch}; one lookup per call (cuda_fwd_resolve, from
// validation) answers "supported?", picks the row and plans it; cuda_fwd launches what was resolved.
// The device's arch is a column: the highest arch the device runs wins, the portable sm_80 rows cover
// every problem, and KVATTN_FORCE_PORTABLE=1 (or params.force_portable) keeps to them.
// Head dims that are not in the table run on the smallest kernel whose dims cover them (channels past
// d / dv are zero in shared memory and never written), so every d, dv <= 512 is supported (d > 256, or
// dv > 256 with d > 64, on the (512, 512) kernel). The dtype pairs: (f16, f16), (bf16, bf16), (f16, fp8),
// (bf16, fp8) and (fp8, fp8), which runs the (bf16, fp8) kernel (fp8 q is converted to bf16 as it is loaded;
// out is bf16).
//   cuda_fwd: [append if k_new] -> [q rotation if the plan says so] -> attention -> [split combine if
//   splits > 1], all on p.stream, no host synchronization, no allocation, no host read of device data.
//
// Plugging in an architecture (docs/DESIGN.md): add rows with its arch, the launcher of the new kernel,
// its plan (or plan_portable) and a supports(problem) predicate for what it covers, as the two sm_90a
// kernels do (KVATTN_PREFILL_SM90, KVATTN_DECODE_SM90, KVATTN_MLA_SM90 below).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include "api/backend.hpp"
#include "cuda/append/append.hpp"
#include "cuda/attention/launch.hpp"
#include "cuda/common/host.hpp"
#include "cuda/decode_sm90/decode_sm90.hpp"
#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/mla_sm90/mla_sm90.hpp"
#include "cuda/prefill_sm90/launch.hpp"
#include "cuda/wide_sm90/wide_sm90.hpp"

namespace kvattn::cuda {
namespace {

#define KVATTN_PAIRS(ENTRY, q, kv, compute)                                                              \
  ENTRY(q, kv, compute, 64, 64), ENTRY(q, kv, compute, 96, 96), ENTRY(q, kv, compute, 128, 128),         \
      ENTRY(q, kv, compute, 192, 192), ENTRY(q, kv, compute, 256, 256), ENTRY(q, kv, compute, 192, 128), \
      ENTRY(q, kv, compute, 64, 512), ENTRY(q, kv, compute, 512, 512)
#define KVATTN_PORTABLE(q, kv, compute, d, dv)                                     \
  AttentionKernel {                                                                \
    kArchPortable, DType::q, DType::kv, DType::compute, d, dv,                     \
        dtype_built(DType::compute) && head_dim_built(d), nullptr, &plan_portable, \
        &launch_attention<DType::compute, DType::kv, d, dv>                        \
  }
// The sm_90a kernels, each with the supports predicate of what it covers: prefill at d = dv = 64, 128, 256
// and (d, dv) = (192, 128), 16-bit q over a cache of its dtype or of fp8 e4m3, fp8 q over fp8 (on the bf16
// kernel) (a problem runs on the row of its own head dim: the smallest covering row wins, and the predicate
// declines head dims without a built kernel), decode at d = dv = 128. Among rows of one arch and dims the
// first that supports a problem wins: the prefill rows come first, so a problem both take (a decode shape
// under KVATTN_FORCE_SM90_PREFILL=1) runs on the prefill kernel.
#define KVATTN_PREFILL_SM90(q, kv, dt, d)                                                          \
  AttentionKernel {                                                                                \
    kArchSm90, DType::q, DType::kv, DType::dt, d, sm90::prefill_head_dim_v(d),                     \
        sm90::prefill_built(DType::dt, d), &sm90::prefill_sm90_supports, &sm90::plan_prefill_sm90, \
        &sm90::launch_prefill_row<DType::dt, d, DType::kv>                                         \
  }
#define KVATTN_DECODE_SM90(q, kv, compute)                                                            \
  AttentionKernel {                                                                                   \
    kArchSm90, DType::q, DType::kv, DType::compute, 128, 128,                                         \
        dtype_built(DType::compute) && head_dim_built(128), &decode_sm90_supports, &plan_decode_sm90, \
        &launch_decode_sm90_row<DType::compute, DType::kv>                                            \
  }
// MLA decode at (d, dv) = (64, 512) with qv (mla_sm90: many query heads on one kv head, wgmma).
#define KVATTN_MLA_SM90(dt)                                                                   \
  AttentionKernel {                                                                           \
    kArchSm90, DType::dt, DType::dt, DType::dt, 64, 512, sm90::mla_built(DType::dt),          \
        &sm90::mla_sm90_supports, &sm90::plan_mla_sm90, &sm90::launch_mla_sm90_row<DType::dt> \
  }
// Decode at d = dv = 512 with <= 16 rows a kv head (wide_sm90: rows along wgmma's N, K and V slots).
#define KVATTN_WIDE_SM90(dt)                                                                     \
  AttentionKernel {                                                                              \
    kArchSm90, DType::dt, DType::dt, DType::dt, 512, 512, sm90::wide_built(DType::dt),           \
        &sm90::wide_sm90_supports, &sm90::plan_wide_sm90, &sm90::launch_wide_sm90_row<DType::dt> \
  }
constexpr AttentionKernel kAttentionTable[] = {
    KVATTN_PAIRS(KVATTN_PORTABLE, f16, f16, f16),
    KVATTN_PAIRS(KVATTN_PORTABLE, bf16, bf16, bf16),
    KVATTN_PAIRS(KVATTN_PORTABLE, f16, fp8_e4m3, f16),
    KVATTN_PAIRS(KVATTN_PORTABLE, bf16, fp8_e4m3, bf16),
    KVATTN_PAIRS(KVATTN_PORTABLE, fp8_e4m3, fp8_e4m3, bf16),
    KVATTN_PREFILL_SM90(f16, f16, f16, 64),
    KVATTN_PREFILL_SM90(bf16, bf16, bf16, 64),
    KVATTN_PREFILL_SM90(f16, f16, f16, 128),
    KVATTN_PREFILL_SM90(bf16, bf16, bf16, 128),
    KVATTN_PREFILL_SM90(f16, f16, f16, 192),
    KVATTN_PREFILL_SM90(bf16, bf16, bf16, 192),
    KVATTN_PREFILL_SM90(f16, f16, f16, 256),
    KVATTN_PREFILL_SM90(bf16, bf16, bf16, 256),
    KVATTN_PREFILL_SM90(f16, fp8_e4m3, f16, 64),
    KVATTN_PREFILL_SM90(bf16, fp8_e4m3, bf16, 64),
    KVATTN_PREFILL_SM90(f16, fp8_e4m3, f16, 128),
    KVATTN_PREFILL_SM90(bf16, fp8_e4m3, bf16, 128),
    KVATTN_PREFILL_SM90(f16, fp8_e4m3, f16, 192),
    KVATTN_PREFILL_SM90(bf16, fp8_e4m3, bf16, 192),
    KVATTN_PREFILL_SM90(f16, fp8_e4m3, f16, 256),
    KVATTN_PREFILL_SM90(bf16, fp8_e4m3, bf16, 256),
    KVATTN_PREFILL_SM90(fp8_e4m3, fp8_e4m3, bf16, 64),
    KVATTN_PREFILL_SM90(fp8_e4m3, fp8_e4m3, bf16, 128),
    KVATTN_PREFILL_SM90(fp8_e4m3, fp8_e4m3, bf16, 192),
    KVATTN_PREFILL_SM90(fp8_e4m3, fp8_e4m3, bf16, 256),
    KVATTN_DECODE_SM90(f16, f16, f16),
    KVATTN_DECODE_SM90(bf16, bf16, bf16),
    KVATTN_DECODE_SM90(f16, fp8_e4m3, f16),
    KVATTN_DECODE_SM90(bf16, fp8_e4m3, bf16),
    KVATTN_DECODE_SM90(fp8_e4m3, fp8_e4m3, bf16),
    KVATTN_MLA_SM90(f16),
    KVATTN_MLA_SM90(bf16),
    KVATTN_WIDE_SM90(f16),
    KVATTN_WIDE_SM90(bf16),
};
#undef KVATTN_WIDE_SM90
#undef KVATTN_MLA_SM90
#undef KVATTN_DECODE_SM90
#undef KVATTN_PREFILL_SM90
#undef KVATTN_PORTABLE
#undef KVATTN_PAIRS
constexpr size_t kAttentionRows = std::size(kAttentionTable);

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::f32:
      return "float32";
    case DType::fp8_e4m3:
      return "float8_e4m3fn";
    default:
      return "?";
  }
}

std::string supported_pairs() {
  std::string s;
  for (const AttentionKernel& e : kAttentionTable) {
    if (e.arch != kArchPortable || e.q_dtype != DType::f16 || e.kv_dtype != DType::f16) continue;
    if (!s.empty()) s += ", ";
    s += "(" + std::to_string(e.head_dim) + ", " + std::to_string(e.head_dim_v) + ")";
  }
  return s;
}

// The message of a failed pick (fail() called), naming the argument.
kvattn_status pick_failed(const FwdProblem& p, PickFailure failure) {
  switch (failure) {
    case PickFailure::dtypes:
      return fail(
          KVATTN_ERROR_UNSUPPORTED,
          std::string("q: dtype ") + dtype_name(p.q_dtype) + " with k_cache of dtype " +
              dtype_name(p.kv_dtype) +
              " is not supported by the CUDA backend (q float16/bfloat16 with a cache of q's dtype or "
              "float8_e4m3fn, or float8_e4m3fn q with a float8_e4m3fn cache)");
    case PickFailure::unbuilt:
      return fail(KVATTN_ERROR_UNSUPPORTED,
                  "head_dim=" + std::to_string(p.head_dim) + ", head_dim_v=" + std::to_string(p.head_dim_v) +
                      ", dtype " + dtype_name(p.q_dtype) +
                      ": unsupported in this developer build (configured with KVATTN_DEV_HEAD_DIM / "
                      "KVATTN_DEV_DTYPE); rebuild without them for every head dim");
    default:
      return fail(KVATTN_ERROR_UNSUPPORTED,
                  "head_dim=" + std::to_string(p.head_dim) + ", head_dim_v=" + std::to_string(p.head_dim_v) +
                      ": unsupported by the CUDA backend; its kernels are (head_dim, "
                      "head_dim_v) = " +
                      supported_pairs() + ", and smaller dims run on the smallest kernel covering them");
  }
}

}  // namespace
}  // namespace kvattn::cuda

namespace kvattn {
using namespace cuda;

kvattn_status cuda_fwd_resolve(const FwdProblem& p, CudaFwdCall* call) {
  // What the table can run at all is said before the device is asked (a machine without a GPU still
  // names the unsupported argument); the portable rows cover every supported problem.
  const Pick any = pick_kernel(kAttentionTable, kAttentionRows, p, kArchPortable, true);
  if (any.kernel == nullptr) return pick_failed(p, any.failure);
  const DeviceInfo* device = nullptr;
  if (const kvattn_status s = device_info(p.device_id, &device); s != KVATTN_OK) return s;
  if (device->shape.arch < kArchPortable) {
    return fail(KVATTN_ERROR_UNSUPPORTED,
                "device_id " + std::to_string(p.device_id) + ": compute capability " +
                    std::to_string(device->shape.arch / 10) + "." + std::to_string(device->shape.arch % 10) +
                    "; the CUDA backend needs 8.0 or newer");
  }
  const bool portable_only = p.force_portable || env_force_portable();
  const Pick pick =
      portable_only ? any : pick_kernel(kAttentionTable, kAttentionRows, p, device->shape.arch, false);
  if (pick.kernel == nullptr) return pick_failed(p, pick.failure);
  call->device = device;
  call->kernel = pick.kernel;
  call->plan = pick.kernel->plan(p, *pick.kernel, device->shape);
  const size_t smem = call->plan.smem_bytes + call->plan.static_smem_bytes;
  if (smem > static_cast<size_t>(device->shape.max_smem_per_block)) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "head_dim_v=" + std::to_string(p.head_dim_v) +
                                              ": the kernel needs " + std::to_string(smem) +
                                              " bytes of shared memory, this device has " +
                                              std::to_string(device->shape.max_smem_per_block));
  }
  // Only right behind the append kernel (which touches nothing but the K/V it writes), never behind a
  // kernel of the caller's.
  call->plan.early_launch =
      p.k_new.ptr != nullptr && p.batch > 0 && p.max_seqlen_k_new > 0 && device->shape.arch >= 90;
  // The append zeroes the persistent kernel's unit counter (no memset node between the kernels), so that
  // kernel is launched early too: W3 persistent chunks -1 to -2% (bench/NOTES.md, session 24).
  // KVATTN_SM90_COUNTER_BY_APPEND=0: the memset node (A/B, and the tests' other path).
  const char* by_append = std::getenv("KVATTN_SM90_COUNTER_BY_APPEND");
  call->plan.counter_by_append = call->plan.unit_counter && call->plan.early_launch &&
                                 (by_append == nullptr || std::strcmp(by_append, "0") != 0);
  return KVATTN_OK;
}

kvattn_status cuda_fwd(const FwdProblem& p, const CudaFwdCall& call) {
  DeviceGuard guard(p.device_id);
  if (const kvattn_status s = device_status(guard, p.device_id); s != KVATTN_OK) return s;
  // The workspace (size, alignment) was checked once, by validation (validate_fwd_workspace).
  DeviceErrorRecord* errors = call.device->errors;
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  kvattn_status status;
  // counter_by_append: the append zeroes the persistent prefill kernel's unit counter (the workspace's
  // first word, plan_prefill_sm90), where a memset node would sit between the kernels.
  int32_t* counter = call.plan.counter_by_append ? static_cast<int32_t*>(p.workspace) : nullptr;
  if (p.k_new.ptr != nullptr && (status = launch_append(p, errors, stream, counter)) != KVATTN_OK) {
    return status;
  }
  if (call.plan.m_blocks == 0 || p.batch == 0) return KVATTN_OK;
  const AttnParams params = make_attn_params(p, call.plan, errors);
  // KVATTN_SM90_QROT=1 (sm_90a prefill): q rotated once into the workspace, where params.q points.
  if (call.plan.q_rotated && (status = launch_rotate_q(p, params.q, errors, stream)) != KVATTN_OK)
    return status;
  if ((status = call.kernel->launch(params, call.plan, stream)) != KVATTN_OK) return status;
  if (call.plan.splits > 1 || call.plan.balanced) {
    return launch_split_combine(params, p.head_dim_v, p.out_dtype, call.device->shape.arch >= 90, stream);
  }
  return KVATTN_OK;
}

}  // namespace kvattn
