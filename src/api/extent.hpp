// The memory a tensor argument reaches, and the rules on it that every tensor passes before a backend
// computes one offset: the extent fits int64 (so no later offset arithmetic can overflow), the data pointer
// is aligned to the dtype, and written tensors overlap neither the tensors read nor each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kvattn/kvattn.h"

namespace kvattn {

int64_t dtype_size(kvattn_dtype dtype);  // bytes per element; 0 for NONE and unknown codes

// Element offsets [lo, hi] that indices inside the shape reach, over every dim of size >= 1 (an empty
// view's other dims count too: a backend may still compute row offsets of an empty tensor). numel = 0 for
// an empty view, whose bytes are then [begin, begin).
struct Extent {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t numel = 0;
  uintptr_t begin = 0;  // bytes [begin, end) that the view's elements occupy (an interval hull)
  uintptr_t end = 0;
};

// Throws Rejection: the offsets or the element count overflow int64, the bytes wrap the address space,
// or the data pointer is not a multiple of the element size. `t` is given and its ndim/dtype are known.
Extent expect_extent(const char* name, const kvattn_tensor& t);

// Whether two extents share a byte (an empty one shares none).
bool overlap(const Extent& a, const Extent& b);

// One tensor argument for the overlap rule.
struct Access {
  const char* name;
  const kvattn_tensor* tensor;
  bool shared_state = false;  // written k_cache / v_cache: may overlap each other (views of one buffer)
};

// A written tensor overlaps no tensor that is only read, no other written tensor (except two shared_state
// ones), and itself (two indices never reach one element). Absent tensors are skipped. Overlap is decided
// on byte intervals [begin, end): conservative for interleaved views of one buffer, exact otherwise.
// At most kMaxAccesses of each (the extents live on the stack: no allocation on the success path).
constexpr size_t kMaxAccesses = 32;
void expect_disjoint_outputs(const Access* written, size_t n_written, const Access* read, size_t n_read);
inline void expect_disjoint_outputs(std::initializer_list<Access> written,
                                    std::initializer_list<Access> read) {
  expect_disjoint_outputs(written.begin(), written.size(), read.begin(), read.size());
}

}  // namespace kvattn
