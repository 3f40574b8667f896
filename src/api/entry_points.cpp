// The C ABI's operations: check the header, validate (validate_*.cpp), then run on the backend of
// device_type. Nothing crosses the boundary as an exception (entry.hpp). A kvattn_fwd call is validated,
// looked up and planned once (validate_fwd fills the CudaFwdCall that the launch reads).
#include <cstddef>
#include <cstring>

#include "api/backend.hpp"
#include "api/entry.hpp"
#include "api/status.hpp"
#include "api/validate.hpp"

namespace kvattn {
namespace {

// kvattn_fwd_params as first released: every field before force_portable.
constexpr size_t kFwdParamsFirstSize = offsetof(kvattn_fwd_params, force_portable);

// Header and full validation of kvattn_fwd's arguments. A struct from an older header (smaller
// struct_size) is read over the _init defaults of the fields it lacks: args.get() is what was validated
// (the caller's struct, or that copy), and what later checks read (the workspace's).
struct FwdArgs {
  const kvattn_fwd_params* given = nullptr;
  kvattn_fwd_params full;  // filled only for a smaller struct_size
  const kvattn_fwd_params& get() const { return given != nullptr ? *given : full; }
};

kvattn_status validated_fwd(const kvattn_fwd_params* params, FwdArgs* args, FwdProblem* p,
                            CudaFwdCall* cuda) {
  if (kvattn_status s = check_header(params, "kvattn_fwd_params", kFwdParamsFirstSize); s != KVATTN_OK) {
    return s;
  }
  if (params->struct_size < sizeof(kvattn_fwd_params)) {
    kvattn_fwd_params_init(&args->full);
    std::memcpy(&args->full, params, params->struct_size);
    args->full.struct_size = sizeof(args->full);
  } else {
    args->given = params;
  }
  return validate_fwd(args->get(), p, cuda);
}

kvattn_status run_fwd(const FwdProblem& p, const CudaFwdCall& cuda) {
  return p.device_type == KVATTN_DEVICE_CPU ? cpu_fwd(p) : cuda_fwd(p, cuda);
}

}  // namespace
}  // namespace kvattn

using kvattn::guarded;

extern "C" {

KVATTN_API kvattn_status kvattn_check(const kvattn_fwd_params* params) {
  return guarded([&] {
    kvattn::FwdArgs args;
    kvattn::FwdProblem p;
    kvattn::CudaFwdCall cuda;
    if (kvattn_status s = kvattn::validated_fwd(params, &args, &p, &cuda); s != KVATTN_OK) return s;
    return kvattn::validate_fwd_workspace(args.get(), cuda.plan.workspace_bytes);
  });
}

KVATTN_API kvattn_status kvattn_fwd_workspace_size(const kvattn_fwd_params* params, size_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) return kvattn::fail(KVATTN_ERROR_INVALID_ARGUMENT, "bytes: NULL output pointer");
    *bytes = 0;
    kvattn::FwdArgs args;
    kvattn::FwdProblem p;
    kvattn::CudaFwdCall cuda;  // the CPU backend needs no workspace: its plan stays empty
    if (kvattn_status s = kvattn::validated_fwd(params, &args, &p, &cuda); s != KVATTN_OK) return s;
    *bytes = cuda.plan.workspace_bytes;
    return KVATTN_OK;
  });
}

namespace {
// kvattn_fwd and kvattn_fwd_sized: one validation, the workspace check, the run; `needed` (optional)
// receives the workspace size the call needs once validation passed.
kvattn_status validate_and_run_fwd(const kvattn_fwd_params* params, size_t* needed) {
  kvattn::FwdArgs args;
  kvattn::FwdProblem p;
  kvattn::CudaFwdCall cuda;
  if (kvattn_status s = kvattn::validated_fwd(params, &args, &p, &cuda); s != KVATTN_OK) return s;
  if (needed != nullptr) *needed = cuda.plan.workspace_bytes;
  if (kvattn_status s = kvattn::validate_fwd_workspace(args.get(), cuda.plan.workspace_bytes); s != KVATTN_OK)
    return s;
  return kvattn::run_fwd(p, cuda);
}
}  // namespace

KVATTN_API kvattn_status kvattn_fwd(const kvattn_fwd_params* params) {
  return guarded([&] { return validate_and_run_fwd(params, nullptr); });
}

KVATTN_API kvattn_status kvattn_fwd_sized(const kvattn_fwd_params* params, size_t* workspace_bytes_needed) {
  return guarded([&] {
    if (workspace_bytes_needed == nullptr) {
      return kvattn::fail(KVATTN_ERROR_INVALID_ARGUMENT, "workspace_bytes_needed: NULL output pointer");
    }
    *workspace_bytes_needed = 0;
    return validate_and_run_fwd(params, workspace_bytes_needed);
  });
}

KVATTN_API kvattn_status kvattn_append_kv(const kvattn_append_params* params) {
  return guarded([&] {
    if (kvattn_status s = kvattn::check_header(params, "kvattn_append_params"); s != KVATTN_OK) return s;
    kvattn::AppendProblem p;
    if (kvattn_status s = kvattn::validate_append(*params, &p); s != KVATTN_OK) return s;
    return p.device_type == KVATTN_DEVICE_CPU ? kvattn::cpu_append(p) : kvattn::cuda_append(p);
  });
}

KVATTN_API kvattn_status kvattn_combine(const kvattn_combine_params* params) {
  return guarded([&] {
    if (kvattn_status s = kvattn::check_header(params, "kvattn_combine_params"); s != KVATTN_OK) return s;
    kvattn::CombineProblem p;
    if (kvattn_status s = kvattn::validate_combine(*params, &p); s != KVATTN_OK) return s;
    return p.device_type == KVATTN_DEVICE_CPU ? kvattn::cpu_combine(p) : kvattn::cuda_combine(p);
  });
}

// The CPU backend reports its errors at once, so only a usable CUDA backend can have a record to read.
KVATTN_API kvattn_status kvattn_device_errors(int32_t device_id, void* stream) {
  return guarded([&] {
    if (!kvattn::cuda_available()) return KVATTN_OK;
    return kvattn::cuda_device_errors(device_id, stream);
  });
}

}  // extern "C"
