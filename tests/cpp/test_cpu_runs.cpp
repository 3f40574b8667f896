// Tiny runs on the CPU backend, checked by hand, and the guarantee that a rejected call writes nothing.
#include <cmath>

#include "test_util.hpp"

namespace kvattn_test {
namespace {

using P = kvattn_fwd_params;

// One sequence, one query head, one KV head, d = dv = 2, contiguous cache of 4 slots.
struct TinyCall : Call<P> {
  Buf *q, *k_cache, *v_cache, *out, *lse, *cache_seqlens;
  TinyCall() {
    kvattn_fwd_params_init(&p);
    q = &attach(&P::q, F32, {1, 1, 1, 2});
    k_cache = &attach(&P::k_cache, F32, {1, 4, 1, 2});
    v_cache = &attach(&P::v_cache, F32, {1, 4, 1, 2});
    out = &attach(&P::out, F32, {1, 1, 1, 2});
    lse = &attach(&P::lse, F32, {1, 1, 1});
    cache_seqlens = &attach(&P::cache_seqlens, I32, {1});
    out->fill_f32(kNaN);
    lse->fill_f32(kNaN);
  }
  void set_v(int64_t slot, float v0, float v1) {
    v_cache->f32()[2 * slot] = v0;
    v_cache->f32()[2 * slot + 1] = v1;
  }
};

TEST(CpuRun, OneKeyGivesItsValue) {
  TinyCall c;
  c.q->f32()[0] = 0.3f;
  c.q->f32()[1] = -1.2f;
  c.k_cache->f32()[0] = 2.f;
  c.k_cache->f32()[1] = 0.5f;
  c.set_v(0, 4.f, -3.f);
  c.set_v(1, 100.f, 100.f);  // beyond cache_seqlens: invisible
  c.cache_seqlens->set_i32({1});
  ASSERT_TRUE(ok(fwd(c.p)));
  EXPECT_FLOAT_EQ(c.out->f32()[0], 4.f);
  EXPECT_FLOAT_EQ(c.out->f32()[1], -3.f);
  const float score = (0.3f * 2.f - 1.2f * 0.5f) / std::sqrt(2.f);
  EXPECT_NEAR(c.lse->f32()[0], score, 1e-6);
}

TEST(CpuRun, EqualScoresGiveTheMean) {
  TinyCall c;
  c.q->f32()[0] = 1.f;  // keys are all zero: every score is 0
  c.set_v(0, 1.f, 2.f);
  c.set_v(1, 3.f, 6.f);
  c.set_v(2, 5.f, -2.f);
  c.cache_seqlens->set_i32({3});
  ASSERT_TRUE(ok(fwd(c.p)));
  EXPECT_NEAR(c.out->f32()[0], 3.f, 1e-6);
  EXPECT_NEAR(c.out->f32()[1], 2.f, 1e-6);
  EXPECT_NEAR(c.lse->f32()[0], std::log(3.f), 1e-6);
}

TEST(CpuRun, LeftpadHidesSlots) {
  TinyCall c;
  c.set_v(0, 100.f, 100.f);
  c.set_v(1, 1.f, 1.f);
  c.set_v(2, 3.f, 5.f);
  c.cache_seqlens->set_i32({3});
  c.attach(&P::cache_leftpad, I32, {1}).set_i32({1});
  ASSERT_TRUE(ok(fwd(c.p)));
  EXPECT_NEAR(c.out->f32()[0], 2.f, 1e-6);
  EXPECT_NEAR(c.out->f32()[1], 3.f, 1e-6);
}

TEST(CpuRun, AppendWritesTheCacheAndIsAttended) {
  TinyCall c;
  c.cache_seqlens->set_i32({0});
  Buf& k = c.attach(&P::k, F32, {1, 1, 1, 2});
  Buf& v = c.attach(&P::v, F32, {1, 1, 1, 2});
  k.f32()[0] = 0.5f;
  k.f32()[1] = 0.25f;
  v.f32()[0] = 7.f;
  v.f32()[1] = 8.f;
  ASSERT_TRUE(ok(fwd(c.p)));
  EXPECT_FLOAT_EQ(c.k_cache->f32()[0], 0.5f);
  EXPECT_FLOAT_EQ(c.k_cache->f32()[1], 0.25f);
  EXPECT_FLOAT_EQ(c.v_cache->f32()[0], 7.f);
  EXPECT_FLOAT_EQ(c.out->f32()[0], 7.f);
  EXPECT_FLOAT_EQ(c.out->f32()[1], 8.f);
}

TEST(CpuRun, EmptyRowGivesZeroAndMinusInfinity) {
  TinyCall c;
  c.cache_seqlens->set_i32({0});
  ASSERT_TRUE(ok(fwd(c.p)));
  EXPECT_EQ(c.out->f32()[0], 0.f);
  EXPECT_EQ(c.out->f32()[1], 0.f);
  EXPECT_TRUE(std::isinf(c.lse->f32()[0]) && c.lse->f32()[0] < 0);
}

TEST(CpuRun, CheckAgreesWithFwdOnValidCalls) {
  FwdCall c;
  c.add_new_tokens(2);
  c.make_paged(8, 4, 4);
  EXPECT_TRUE(ok(check(c.p)));
  EXPECT_TRUE(ok(fwd(c.p)));
  for (int64_t i = 0; i < c.out->numel(); ++i) EXPECT_TRUE(std::isfinite(c.out->f32()[i])) << i;
}

TEST(CpuRun, AppendKvWritesSlotsAndSkipsNegativeOnes) {
  using A = kvattn_append_params;
  Call<A> c;
  kvattn_append_params_init(&c.p);
  Buf& key = c.attach(&A::key, F32, {2, 1, 2});
  Buf& value = c.attach(&A::value, F32, {2, 1, 2});
  Buf& k_cache = c.attach(&A::k_cache, F32, {2, 2, 1, 2});
  Buf& v_cache = c.attach(&A::v_cache, F32, {2, 2, 1, 2});
  Buf& slots = c.attach(&A::slot_mapping, I64, {2});
  key.fill_f32(1.5f);
  value.fill_f32(2.5f);
  slots.i64()[0] = 3;  // page 1, offset 1
  slots.i64()[1] = -1;
  ASSERT_EQ(kvattn_append_kv(&c.p), KVATTN_OK) << kvattn_last_error();
  for (int64_t i = 0; i < 8; ++i) {
    const bool written = i >= 6;
    EXPECT_EQ(k_cache.f32()[i], written ? 1.5f : 0.f) << i;
    EXPECT_EQ(v_cache.f32()[i], written ? 2.5f : 0.f) << i;
  }
}

TEST(CpuRun, CombineOfEqualLsesIsTheMean) {
  using C = kvattn_combine_params;
  Call<C> c;
  kvattn_combine_params_init(&c.p);
  Buf& op = c.attach(&C::out_partials, F32, {2, 1, 2});
  Buf& lp = c.attach(&C::lse_partials, F32, {2, 1});
  Buf& out = c.attach(&C::out, F32, {1, 2});
  Buf& lse = c.attach(&C::lse, F32, {1});
  op.f32()[0] = 1.f;
  op.f32()[1] = 2.f;
  op.f32()[2] = 3.f;
  op.f32()[3] = 6.f;
  lp.f32()[0] = lp.f32()[1] = 0.5f;
  ASSERT_EQ(kvattn_combine(&c.p), KVATTN_OK) << kvattn_last_error();
  EXPECT_NEAR(out.f32()[0], 2.f, 1e-6);
  EXPECT_NEAR(out.f32()[1], 4.f, 1e-6);
  EXPECT_NEAR(lse.f32()[0], 0.5f + std::log(2.f), 1e-6);
}

// A rejected call writes nothing: out stays NaN-poisoned, the caches keep their contents.
void expect_nothing_written(FwdCall& c, std::initializer_list<const char*> fragments) {
  const std::vector<float> k_before(c.k_cache->f32(), c.k_cache->f32() + c.k_cache->numel());
  const std::vector<float> v_before(c.v_cache->f32(), c.v_cache->f32() + c.v_cache->numel());
  EXPECT_TRUE(invalid(c.p, fragments));
  for (int64_t i = 0; i < c.out->numel(); ++i) EXPECT_TRUE(std::isnan(c.out->f32()[i])) << i;
  EXPECT_TRUE(std::equal(k_before.begin(), k_before.end(), c.k_cache->f32()));
  EXPECT_TRUE(std::equal(v_before.begin(), v_before.end(), c.v_cache->f32()));
}

TEST(NothingWritten, WhenAPageTableEntryIsOutOfRange) {
  FwdCall c;
  Buf& table = c.make_paged(8, 4, 4);
  c.k_cache->fill_f32(-3.f);
  c.v_cache->fill_f32(-4.f);
  c.add_new_tokens(2);
  table.i32()[1 * 4 + 1] = 8;  // sequence 0 is fine and would be written first
  expect_nothing_written(c, {"page_table[1, 1] = 8"});
}

TEST(NothingWritten, WhenARotaryPositionIsOutOfRange) {
  FwdCall c;
  c.add_new_tokens(3);
  c.attach(&P::rotary_cos, F32, {7, 4});
  c.attach(&P::rotary_sin, F32, {7, 4});
  expect_nothing_written(c, {"rotary_cos: position 7 of new key 2 of sequence 1"});
}

TEST(NothingWritten, WhenTheLastAppendOverflows) {
  FwdCall c;
  c.add_new_tokens(2);
  c.cache_seqlens->set_i32({0, 15});
  expect_nothing_written(c, {"cache_seqlens[1] = 15 plus 2 new tokens of k exceeds the capacity 16"});
}

}  // namespace
}  // namespace kvattn_test
