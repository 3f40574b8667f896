// kvattn_append_kv's arguments -> AppendProblem (vLLM reshape_and_cache_flash): token t of key/value goes
// to slot slot_mapping[t] of a paged cache; negative slots are skipped.
#include <string>

#include "api/checks.hpp"
#include "api/extent.hpp"
#include "api/validate.hpp"

namespace kvattn {
namespace {

void check_append(const kvattn_append_params& a, AppendProblem& p) {
  expect_device(a.device_type, a.device_id);
  for (const auto& [name, t] : {std::pair<const char*, const kvattn_tensor&>{"key", a.key},
                                {"value", a.value},
                                {"k_cache", a.k_cache},
                                {"v_cache", a.v_cache},
                                {"slot_mapping", a.slot_mapping},
                                {"k_scale", a.k_scale},
                                {"v_scale", a.v_scale}}) {
    expect_well_formed(name, t);
  }
  expect_given("key", a.key);
  expect_given("value", a.value);
  expect_given("k_cache", a.k_cache);
  expect_given("v_cache", a.v_cache);
  expect_given("slot_mapping", a.slot_mapping);

  // key (num_tokens, hk, d), value (num_tokens, hk, dv), caches (num_pages, page_size, hk, d / dv).
  expect_ndim("key", a.key, 3, "(num_tokens, hk, d)");
  expect_dim_at_least("key", a.key, 1, "hk", 1);
  expect_dim_at_least("key", a.key, 2, "d", 1);
  const int64_t num_tokens = a.key.shape[0], hk = a.key.shape[1], d = a.key.shape[2];
  expect_shape("value", a.value, {{num_tokens, "num_tokens"}, {hk, "hk"}, {kAny, "dv"}});
  expect_dim_at_least("value", a.value, 2, "dv", 1);
  const int64_t dv = a.value.shape[2];
  // A token's channels over its heads: the CUDA kernels' 32-bit loop bound.
  to_int32("key: hk * d", hk * d);
  to_int32("value: hk * dv", hk * dv);
  expect_ndim("k_cache", a.k_cache, 4, "(num_pages, page_size, hk, d)");
  expect_shape("k_cache", a.k_cache, {{kAny, "num_pages"}, {kAny, "page_size"}, {hk, "hk"}, {d, "d"}});
  expect_dim_at_least("k_cache", a.k_cache, 1, "page_size", 1);
  const int64_t num_pages = a.k_cache.shape[0], page_size = a.k_cache.shape[1];
  expect_shape("v_cache", a.v_cache,
               {{num_pages, "num_pages"}, {page_size, "page_size"}, {hk, "hk"}, {dv, "dv"}});
  expect_shape("slot_mapping", a.slot_mapping, {{num_tokens, "num_tokens"}});
  expect_dtype("slot_mapping", a.slot_mapping, KVATTN_DTYPE_I64);

  // key/value f32 (CPU only), f16, bf16; caches as key, or fp8 under f16/bf16.
  expect_dtype_in("key", a.key, {kF32, kF16, kBF16});
  if (a.device_type == KVATTN_DEVICE_CUDA && a.key.dtype == kF32) {
    reject(KVATTN_ERROR_UNSUPPORTED,
           "key: dtype float32 is supported on the CPU backend only (device_type=CUDA)");
  }
  expect_dtype_as("value", a.value, "key", a.key.dtype);
  if (!(a.key.dtype != kF32 && a.k_cache.dtype == kFP8))
    expect_dtype_as("k_cache", a.k_cache, "key", a.key.dtype);
  expect_dtype_as("v_cache", a.v_cache, "k_cache", a.k_cache.dtype);
  const bool fp8 = a.k_cache.dtype == kFP8;

  // k_scale, v_scale: fp8 caches only; () or (hk,) fp32, the same shape when both are given.
  for (const auto& [name, t] :
       {std::pair<const char*, const kvattn_tensor&>{"k_scale", a.k_scale}, {"v_scale", a.v_scale}}) {
    if (!given(t)) continue;
    if (!fp8) {
      expect_absent(name, t,
                    std::string("with k_cache of dtype ") + dtype_name(a.k_cache.dtype) +
                        " (scales apply to float8_e4m3fn caches only)");
    }
    expect_dtype(name, t, kF32);
    if (t.ndim != 0) expect_shape(name, t, {{hk, "hk"}});
  }
  if (given(a.k_scale) && given(a.v_scale) && a.k_scale.ndim != a.v_scale.ndim) {
    invalid("v_scale: shape " + shape_str(a.v_scale) + " does not match k_scale " + shape_str(a.k_scale));
  }

  // The caches are written in place (and may be views of one buffer); key, value, slot_mapping and the
  // scales are only read.
  expect_disjoint_outputs({{"k_cache", &a.k_cache, true}, {"v_cache", &a.v_cache, true}},
                          {{"key", &a.key},
                           {"value", &a.value},
                           {"slot_mapping", &a.slot_mapping},
                           {"k_scale", &a.k_scale},
                           {"v_scale", &a.v_scale}});

  // Host data on the CPU backend: every slot that is not skipped lies in the cache.
  const int64_t slots = num_pages * page_size;
  if (a.device_type == KVATTN_DEVICE_CPU) {
    const int64_t* slot_mapping = static_cast<const int64_t*>(a.slot_mapping.data);
    for (int64_t t = 0; t < num_tokens; ++t) {
      if (slot_mapping[t] >= slots) {
        expect_in_range("slot_mapping[" + std::to_string(t) + "]", slot_mapping[t], 0, slots,
                        "num_pages * page_size of k_cache; negative = skip");
      }
    }
  }

  p.device_type = a.device_type;
  p.device_id = a.device_id;
  p.stream = a.stream;
  p.num_tokens = num_tokens;
  p.num_kv_heads = to_int32("key: hk", hk);
  p.head_dim = to_int32("key: d", d);
  p.head_dim_v = to_int32("value: dv", dv);
  p.num_pages = num_pages;
  p.page_size = page_size;
  p.src_dtype = static_cast<DType>(a.key.dtype);
  p.cache_dtype = static_cast<DType>(a.k_cache.dtype);
  p.key = {a.key.data, 0, a.key.strides[0], a.key.strides[1]};
  p.value = {a.value.data, 0, a.value.strides[0], a.value.strides[1]};
  p.k_cache = {a.k_cache.data, a.k_cache.strides[0], a.k_cache.strides[1], a.k_cache.strides[2]};
  p.v_cache = {a.v_cache.data, a.v_cache.strides[0], a.v_cache.strides[1], a.v_cache.strides[2]};
  p.slot_mapping = static_cast<const int64_t*>(a.slot_mapping.data);
  p.k_scale = static_cast<const float*>(a.k_scale.data);
  p.v_scale = static_cast<const float*>(a.v_scale.data);
  p.scale_per_head = (given(a.k_scale) && a.k_scale.ndim == 1) || (given(a.v_scale) && a.v_scale.ndim == 1);
}

}  // namespace

kvattn_status validate_append(const kvattn_append_params& args, AppendProblem* problem) {
  AppendProblem p;
  kvattn_append_params used = args;  // every tensor with_used_strides (checks.hpp)
  for (kvattn_tensor* t : {&used.key, &used.value, &used.k_cache, &used.v_cache, &used.slot_mapping,
                           &used.k_scale, &used.v_scale}) {
    *t = with_used_strides(*t);
  }
  const kvattn_status status = run_checks([&] { check_append(used, p); });
  if (status == KVATTN_OK) *problem = p;
  return status;
}

}  // namespace kvattn
