// What every C ABI entry point does first: catch every C++ exception at the boundary and check the params
// header (struct_size, abi_version).
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "api/status.hpp"

namespace kvattn {

// fail() that cannot throw (it may be reached while handling std::bad_alloc).
inline kvattn_status fail_quietly(kvattn_status status, const char* message) noexcept {
  try {
    return fail(status, message);
  } catch (...) {
    return status;
  }
}

// Runs `body` (returning kvattn_status) after clear_error(); any exception becomes KVATTN_ERROR_INTERNAL.
template <class Body>
kvattn_status guarded(Body&& body) noexcept {
  try {
    clear_error();
    return body();
  } catch (const std::bad_alloc&) {
    return fail_quietly(KVATTN_ERROR_INTERNAL, "internal error: out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    try {
      return fail(KVATTN_ERROR_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
      return KVATTN_ERROR_INTERNAL;
    }
  } catch (...) {
    return fail_quietly(KVATTN_ERROR_INTERNAL, "internal error: unknown exception");
  }
}

// The caller's struct must come from a header of this ABI version and be at least `min_size` large: the
// size of the struct's first release (kvattn.h's versioning rule; a smaller one would make us read past
// its end). Fields past a smaller struct_size are read as their defaults (see entry_points.cpp).
template <class Params>
kvattn_status check_header(const Params* params, const char* struct_name, size_t min_size = sizeof(Params)) {
  if (params == nullptr)
    return fail(KVATTN_ERROR_INVALID_ARGUMENT, std::string("params: NULL ") + struct_name);
  if (params->abi_version != KVATTN_ABI_VERSION) {
    return fail(KVATTN_ERROR_INVALID_ARGUMENT,
                std::string(struct_name) + ".abi_version: " + std::to_string(params->abi_version) +
                    " does not match the ABI version " + std::to_string(KVATTN_ABI_VERSION) +
                    " of this library; initialize with " + struct_name + "_init");
  }
  if (params->struct_size < min_size) {
    return fail(KVATTN_ERROR_INVALID_ARGUMENT,
                std::string(struct_name) + ".struct_size: " + std::to_string(params->struct_size) +
                    " is smaller than " + std::to_string(min_size) +
                    ", the smallest size this library knows; initialize with " + struct_name + "_init");
  }
  return KVATTN_OK;
}

}  // namespace kvattn
