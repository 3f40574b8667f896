// The C ABI's operations: check the header, validate (validate_*.cpp), then run on the backend of
// device_type. Nothing crosses the boundary as an exception (entry.hpp).
#include "api/backend.hpp"
#include "api/entry.hpp"
#include "api/status.hpp"
#include "api/validate.hpp"

namespace kvattn {
namespace {

// Header and full validation of kvattn_fwd's arguments.
kvattn_status validated_fwd(const kvattn_fwd_params* params, FwdProblem* p) {
  if (kvattn_status s = check_header(params, "kvattn_fwd_params"); s != KVATTN_OK) return s;
  return validate_fwd(*params, p);
}

}  // namespace
}  // namespace kvattn

using kvattn::guarded;

extern "C" {

KVATTN_API kvattn_status kvattn_check(const kvattn_fwd_params* params) {
  return guarded([&] {
    kvattn::FwdProblem p;
    if (kvattn_status s = kvattn::validated_fwd(params, &p); s != KVATTN_OK) return s;
    return kvattn::validate_fwd_workspace(p);
  });
}

KVATTN_API kvattn_status kvattn_fwd_workspace_size(const kvattn_fwd_params* params, size_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) return kvattn::fail(KVATTN_ERROR_INVALID_ARGUMENT, "bytes: NULL output pointer");
    *bytes = 0;
    kvattn::FwdProblem p;
    if (kvattn_status s = kvattn::validated_fwd(params, &p); s != KVATTN_OK) return s;
    if (p.device_type == KVATTN_DEVICE_CPU) return KVATTN_OK;  // the CPU backend needs no workspace
    return kvattn::cuda_fwd_workspace_size(p, bytes);
  });
}

KVATTN_API kvattn_status kvattn_fwd(const kvattn_fwd_params* params) {
  return guarded([&] {
    kvattn::FwdProblem p;
    if (kvattn_status s = kvattn::validated_fwd(params, &p); s != KVATTN_OK) return s;
    if (kvattn_status s = kvattn::validate_fwd_workspace(p); s != KVATTN_OK) return s;
    return p.device_type == KVATTN_DEVICE_CPU ? kvattn::cpu_fwd(p) : kvattn::cuda_fwd(p);
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
