// The C ABI's queries and params initializers.
#include <cstring>

#include "api/backend.hpp"
#include "api/checks.hpp"
#include "api/status.hpp"
#include "cpu/parallel.hpp"
#include "kvattn/kvattn.h"

extern "C" {

KVATTN_API int32_t kvattn_abi_version(void) {
  return KVATTN_ABI_VERSION;
}

KVATTN_API const char* kvattn_last_error(void) {
  return kvattn::last_error();
}

KVATTN_API int32_t kvattn_has_backend(kvattn_device_type device_type) {
  try {
    const int32_t device = kvattn::raw_enum(device_type);  // any int may come from C
    if (device == KVATTN_DEVICE_CPU) return 1;
    if (device == KVATTN_DEVICE_CUDA) return kvattn::cuda_available() ? 1 : 0;
  } catch (...) {
  }
  return 0;
}

KVATTN_API int32_t kvattn_cpu_num_threads(void) {
  try {
    return kvattn::cpu::pool_size();
  } catch (...) {
    return 1;
  }
}

KVATTN_API void kvattn_interrupt(void) {
  kvattn::cpu::g_interrupts.fetch_add(1, std::memory_order_relaxed);
}

// Every field zero, then the non-zero defaults of kvattn.h.
KVATTN_API void kvattn_fwd_params_init(kvattn_fwd_params* params) {
  if (params == nullptr) return;
  std::memset(params, 0, sizeof(*params));
  params->struct_size = sizeof(*params);
  params->abi_version = KVATTN_ABI_VERSION;
  params->cache_seqlens_value = -1;  // full capacity
  params->window_left = -1;
  params->window_right = -1;
  params->rotary_interleaved = 1;
  params->pack_gqa = -1;  // choose
}

KVATTN_API void kvattn_append_params_init(kvattn_append_params* params) {
  if (params == nullptr) return;
  std::memset(params, 0, sizeof(*params));
  params->struct_size = sizeof(*params);
  params->abi_version = KVATTN_ABI_VERSION;
}

KVATTN_API void kvattn_combine_params_init(kvattn_combine_params* params) {
  if (params == nullptr) return;
  std::memset(params, 0, sizeof(*params));
  params->struct_size = sizeof(*params);
  params->abi_version = KVATTN_ABI_VERSION;
}

}  // extern "C"
