// kvattn_append_kv and kvattn_combine validation: shapes, dtypes and (CPU) slot values.
#include "test_util.hpp"

namespace kvattn_test {
namespace {

using A = kvattn_append_params;
using C = kvattn_combine_params;

// 3 tokens of hk = 2, d = dv = 4 into 4 pages of 2 slots.
struct AppendCall : Call<A> {
  Buf *key, *value, *k_cache, *v_cache, *slot_mapping;
  AppendCall() {
    kvattn_append_params_init(&p);
    key = &attach(&A::key, F32, {3, 2, 4});
    value = &attach(&A::value, F32, {3, 2, 4});
    k_cache = &attach(&A::k_cache, F32, {4, 2, 2, 4});
    v_cache = &attach(&A::v_cache, F32, {4, 2, 2, 4});
    slot_mapping = &attach(&A::slot_mapping, I64, {3});
    for (int64_t t = 0; t < 3; ++t) slot_mapping->i64()[t] = 2 * t + 1;
  }
  Result run() {
    const kvattn_status s = kvattn_append_kv(&p);
    return {s, kvattn_last_error()};
  }
};

TEST(AppendValidation, RequiredTensors) {
  AppendCall c;
  c.p.slot_mapping.data = nullptr;
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT, {"slot_mapping: required"}));
}

TEST(AppendValidation, Shapes) {
  AppendCall c;
  c.attach(&A::key, F32, {3, 8});
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT, {"key: expected 3 dims (num_tokens, hk, d)"}));
  AppendCall c2;
  c2.attach(&A::value, F32, {2, 2, 4});
  EXPECT_TRUE(rejected(c2.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"value: expected shape (num_tokens, hk, dv) = (3, 2, *), got (2, 2, 4)"}));
  AppendCall c3;
  c3.attach(&A::k_cache, F32, {4, 2, 1, 4});
  EXPECT_TRUE(
      rejected(c3.run(), KVATTN_ERROR_INVALID_ARGUMENT,
               {"k_cache: expected shape (num_pages, page_size, hk, d) = (*, *, 2, 4), got (4, 2, 1, 4)"}));
  AppendCall c4;
  c4.attach(&A::v_cache, F32, {4, 3, 2, 4});
  EXPECT_TRUE(
      rejected(c4.run(), KVATTN_ERROR_INVALID_ARGUMENT, {"v_cache: expected shape", "got (4, 3, 2, 4)"}));
}

TEST(AppendValidation, SlotMappingIsInt64WithOneSlotPerToken) {
  AppendCall c;
  c.p.slot_mapping.dtype = I32;
  EXPECT_TRUE(
      rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT, {"slot_mapping: expected dtype int64, got int32"}));
  AppendCall c2;
  c2.attach(&A::slot_mapping, I64, {4});
  EXPECT_TRUE(rejected(c2.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"slot_mapping: expected shape (num_tokens,) = (3,), got (4,)"}));
}

TEST(AppendValidation, SlotsInsideTheCache) {
  AppendCall c;
  c.slot_mapping->i64()[2] = 8;
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"slot_mapping[2] = 8 is outside [0, 8) (num_pages * page_size of k_cache"}));
  EXPECT_EQ(c.k_cache->f32()[0], 0.f);
}

// 2 heads of 2^30 channels: a token's channels over its heads do not fit int32 (the CUDA kernels' loop
// bound). Descriptors only: hk's stride 0 and an 8-byte row validation never reads.
TEST(AppendValidation, ChannelsOfATokenFitInt32) {
  AppendCall c;
  const int64_t d = int64_t{1} << 30;
  for (kvattn_tensor* t : {&c.p.key, &c.p.k_cache}) {
    t->shape[t->ndim - 1] = d;
    for (int i = 0; i < t->ndim - 1; ++i) t->strides[i] = 0;
  }
  c.p.k_cache.strides[0] = 2 * d;  // pages apart (written: no two slots may share memory)
  c.p.k_cache.strides[1] = d;
  c.p.k_cache.strides[2] = 0;
  const Result r = c.run();
  EXPECT_EQ(r.status, KVATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("hk * d = 2147483648 does not fit in int32"), std::string::npos)
      << "[" << r.message << "]";
}

TEST(AppendValidation, Dtypes) {
  AppendCall c;
  c.p.value.dtype = F16;
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"value: dtype float16 does not match key (float32)"}));
  AppendCall c2;
  c2.p.key.dtype = c2.p.value.dtype = BF16;
  c2.p.k_cache.dtype = c2.p.v_cache.dtype = FP8;
  EXPECT_TRUE(ok(c2.run()));  // quantized on write
  AppendCall c4;              // f32 key into an fp8 cache: fp16/bf16 only
  c4.p.k_cache.dtype = c4.p.v_cache.dtype = FP8;
  EXPECT_TRUE(rejected(c4.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"k_cache: dtype float8_e4m3fn does not match key (float32)"}));
  AppendCall c3;
  c3.p.v_cache.dtype = F16;
  EXPECT_TRUE(rejected(c3.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"v_cache: dtype float16 does not match k_cache (float32)"}));
}

TEST(AppendValidation, ScalesOnlyWithFp8) {
  AppendCall c;
  c.attach(&A::k_scale, F32, {});
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"k_scale: must not be given with k_cache of dtype float32"}));
}

TEST(AppendValidation, PageSizeAtLeastOne) {
  AppendCall c;
  c.attach(&A::k_cache, F32, {4, 0, 2, 4});
  EXPECT_TRUE(
      rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT, {"k_cache: page_size (dim 1) must be >= 1, got 0"}));
}

// Combine of n = 2 partials over rows (3, 4) with dv = 8.
struct CombineCall : Call<C> {
  CombineCall() {
    kvattn_combine_params_init(&p);
    attach(&C::out_partials, F32, {2, 3, 4, 8});
    attach(&C::lse_partials, F32, {2, 3, 4});
    attach(&C::out, F32, {3, 4, 8});
  }
  Result run() {
    const kvattn_status s = kvattn_combine(&p);
    return {s, kvattn_last_error()};
  }
};

TEST(CombineValidation, OutPartialsRank) {
  CombineCall c;
  c.attach(&C::out_partials, F32, {2, 8});
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"out_partials: expected 3 to 5 dims (n, ..., dv)", "got 2 dims"}));
}

TEST(CombineValidation, PartialsAreF32) {
  CombineCall c;
  c.p.out_partials.dtype = BF16;
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"out_partials: expected dtype float32, got bfloat16"}));
  CombineCall c2;
  c2.p.lse_partials.dtype = F16;
  EXPECT_TRUE(rejected(c2.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"lse_partials: expected dtype float32, got float16"}));
}

TEST(CombineValidation, ShapesFollowOutPartials) {
  CombineCall c;
  c.attach(&C::lse_partials, F32, {2, 4, 3});
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"lse_partials: expected shape (n, r0, r1) = (2, 3, 4), got (2, 4, 3)"}));
  CombineCall c2;
  c2.attach(&C::out, F32, {3, 4, 4});
  EXPECT_TRUE(rejected(c2.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"out: expected shape (r0, r1, dv) = (3, 4, 8), got (3, 4, 4)"}));
  CombineCall c3;
  c3.attach(&C::lse, F32, {3});
  EXPECT_TRUE(
      rejected(c3.run(), KVATTN_ERROR_INVALID_ARGUMENT, {"lse: expected shape (r0, r1) = (3, 4), got (3,)"}));
}

TEST(CombineValidation, OutDtype) {
  CombineCall c;
  c.p.out.dtype = I32;
  EXPECT_TRUE(rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT,
                       {"out: expected dtype float32, float16 or bfloat16, got int32"}));
}

TEST(CombineValidation, SinksMatchTheLastRowDim) {
  CombineCall c;
  c.attach(&C::sinks, F32, {3});
  EXPECT_TRUE(
      rejected(c.run(), KVATTN_ERROR_INVALID_ARGUMENT, {"sinks: expected shape (r1,) = (4,), got (3,)"}));
}

}  // namespace
}  // namespace kvattn_test
