// kvattn_fwd validation of per-sequence index values. On the CPU backend index tensors are host memory and
// every value is checked; messages give the argument, the index and the value. On CUDA the host reads no
// index tensor and checks only what shapes and scalars fix.
#include "test_util.hpp"

namespace kvattn_test {
namespace {

using P = kvattn_fwd_params;

// Varlen q: total_q = 3 rows split {1, 2}, max_seqlen_q = 2.
void make_varlen_q(FwdCall& c, std::initializer_list<int32_t> cu) {
  c.attach(&P::q, F32, {3, 4, 8});
  c.attach(&P::out, F32, {3, 4, 8});
  c.attach(&P::cu_seqlens_q, I32, {3}).set_i32(cu);
  c.p.max_seqlen_q = 2;
}

TEST(FwdSequences, CuSeqlensQMustStartAtZero) {
  FwdCall c;
  make_varlen_q(c, {1, 1, 3});
  EXPECT_TRUE(invalid(c.p, {"cu_seqlens_q[0] = 1, expected 0"}));
}

TEST(FwdSequences, CuSeqlensQMustBeNonDecreasing) {
  FwdCall c;
  make_varlen_q(c, {0, 3, 2});
  EXPECT_TRUE(invalid(c.p, {"cu_seqlens_q[2] = 2 is less than cu_seqlens_q[1] = 3"}));
}

TEST(FwdSequences, CuSeqlensQMustEndAtTotalQ) {
  FwdCall c;
  make_varlen_q(c, {0, 1, 2});
  EXPECT_TRUE(invalid(c.p, {"cu_seqlens_q[2] = 2 does not match the total_q rows of q (3)"}));
}

TEST(FwdSequences, QLengthsAreBoundedByMaxSeqlenQ) {
  FwdCall c;
  make_varlen_q(c, {0, 0, 3});
  EXPECT_TRUE(invalid(c.p, {"cu_seqlens_q: sequence 1 has 3 query tokens, more than max_seqlen_q = 2"}));
}

TEST(FwdSequences, SequsedQWithinTheQueryLength) {
  FwdCall c;
  make_varlen_q(c, {0, 1, 3});
  Buf& used = c.attach(&P::seqused_q, I32, {2});
  used.set_i32({1, 0});
  EXPECT_TRUE(ok(check(c.p)));
  used.set_i32({2, 1});
  EXPECT_TRUE(invalid(c.p, {"seqused_q[0] = 2 is outside [0, 1]"}));
  used.set_i32({0, -1});
  EXPECT_TRUE(invalid(c.p, {"seqused_q[1] = -1 is outside [0, 2]"}));
}

TEST(FwdSequences, CacheBatchIdxWithinTheCacheRows) {
  FwdCall c;
  Buf& idx = c.attach(&P::cache_batch_idx, I32, {2});
  idx.set_i32({1, 0});
  EXPECT_TRUE(ok(check(c.p)));
  idx.set_i32({1, 5});
  EXPECT_TRUE(invalid(c.p, {"cache_batch_idx[1] = 5 is outside [0, 2) (rows b_cache of k_cache)"}));
  idx.set_i32({-1, 0});
  EXPECT_TRUE(invalid(c.p, {"cache_batch_idx[0] = -1 is outside [0, 2)"}));
}

TEST(FwdSequences, CacheBatchIdxAllowsFewerCacheRowsThanSequences) {
  FwdCall c;
  c.attach(&P::k_cache, F32, {1, 16, 2, 8});
  c.attach(&P::v_cache, F32, {1, 16, 2, 8});
  c.attach(&P::cache_batch_idx, I32, {2}).set_i32({0, 0});
  EXPECT_TRUE(ok(check(c.p)));
}

TEST(FwdSequences, DuplicateCacheBatchIdxIsAnErrorOnlyWithAppend) {
  FwdCall c;
  c.attach(&P::cache_batch_idx, I32, {2}).set_i32({1, 1});
  EXPECT_TRUE(ok(check(c.p)));
  c.add_new_tokens(1);
  EXPECT_TRUE(invalid(c.p, {"cache_batch_idx[1] = 1 repeats cache_batch_idx[0]", "append"}));
}

TEST(FwdSequences, CacheSeqlensMustBeNonNegative) {
  FwdCall c;
  c.cache_seqlens->set_i32({3, -2});
  EXPECT_TRUE(invalid(c.p, {"cache_seqlens[1] = -2 is negative"}));
}

TEST(FwdSequences, CacheSeqlensWithinCapacity) {
  FwdCall c;
  c.cache_seqlens->set_i32({16, 17});
  EXPECT_TRUE(
      invalid(c.p, {"cache_seqlens[1] = 17 exceeds the capacity 16 of sequence 1 (s_cache of k_cache)"}));
}

TEST(FwdSequences, AppendMustFitTheCapacity) {
  FwdCall c;
  c.add_new_tokens(3);
  c.cache_seqlens->set_i32({13, 14});
  EXPECT_TRUE(
      invalid(c.p, {"cache_seqlens[1] = 14 plus 3 new tokens of k exceeds the capacity 16 of sequence 1"}));
  c.cache_seqlens->set_i32({13, 13});
  EXPECT_TRUE(ok(check(c.p)));
}

TEST(FwdSequences, CacheSeqlensValueWithinCapacity) {
  FwdCall c;
  c.p.cache_seqlens.data = nullptr;
  c.p.cache_seqlens_value = 16;
  EXPECT_TRUE(ok(check(c.p)));
  c.p.cache_seqlens_value = 17;
  EXPECT_TRUE(invalid(c.p, {"cache_seqlens_value = 17 exceeds the capacity 16"}));
}

TEST(FwdSequences, AppendToADefaultFullCacheIsAnError) {
  FwdCall c;
  c.p.cache_seqlens.data = nullptr;
  c.add_new_tokens(1);
  EXPECT_TRUE(
      invalid(c.p, {"k: 1 new tokens of sequence 0 do not fit", "without cache_seqlens the cache is full"}));
}

TEST(FwdSequences, CacheLeftpadAtMostCacheSeqlens) {
  FwdCall c;
  Buf& leftpad = c.attach(&P::cache_leftpad, I32, {2});
  leftpad.set_i32({3, 0});
  EXPECT_TRUE(ok(check(c.p)));
  leftpad.set_i32({0, 6});
  EXPECT_TRUE(invalid(c.p, {"cache_leftpad[1] = 6 is outside [0, 5] (cache_seqlens[1] = 5)"}));
  leftpad.set_i32({-1, 0});
  EXPECT_TRUE(invalid(c.p, {"cache_leftpad[0] = -1 is outside [0, 3]"}));
}

TEST(FwdSequences, PageTableEntriesOfValidSlotsAreInRange) {
  FwdCall c;
  Buf& table = c.make_paged(8, 4, 4);  // cache_seqlens {3, 5}: row 0 uses page 0, row 1 pages 0..1
  table.i32()[1 * 4 + 1] = 99;
  EXPECT_TRUE(invalid(c.p, {"page_table[1, 1] = 99 is outside [0, 8) (num_pages of k_cache)"}));
  table.i32()[1 * 4 + 1] = -1;
  EXPECT_TRUE(invalid(c.p, {"page_table[1, 1] = -1 is outside [0, 8)"}));
}

TEST(FwdSequences, PageTableEntriesOfUnusedPagesAreNotChecked) {
  FwdCall c;
  Buf& table = c.make_paged(8, 4, 4);
  table.i32()[0 * 4 + 1] = 1000;  // row 0 holds 3 tokens: page 1 unused
  table.i32()[1 * 4 + 3] = -7;    // row 1 holds 5 tokens: page 3 unused
  EXPECT_TRUE(ok(check(c.p)));
  Buf& leftpad = c.attach(&P::cache_leftpad, I32, {2});
  table.i32()[1 * 4 + 0] = 555;  // row 1 with leftpad 4: page 0 unused
  leftpad.set_i32({0, 4});
  EXPECT_TRUE(ok(check(c.p)));
}

TEST(FwdSequences, PageTableEntriesOfAppendedSlotsAreChecked) {
  FwdCall c;
  Buf& table = c.make_paged(8, 4, 4);
  table.i32()[0 * 4 + 1] = 1000;  // row 0: slots 0..2 valid, slots 3..4 appended -> page 1 touched
  c.add_new_tokens(2);
  EXPECT_TRUE(invalid(c.p, {"page_table[0, 1] = 1000 is outside [0, 8)"}));
}

TEST(FwdSequences, PagedCapacityIsPagesPerRowTimesPageSize) {
  FwdCall c;
  c.make_paged(8, 4, 2);
  c.cache_seqlens->set_i32({8, 9});
  EXPECT_TRUE(
      invalid(c.p, {"cache_seqlens[1] = 9 exceeds the capacity 8", "pages_per_row * page_size = 2 * 4"}));
}

// A paged capacity past 2^31 keys (65537 pages of 32768 slots a row) is fine; a sequence holds at most
// 2^31 - 2^16 keys of it (the kernels' int32 key positions), whether its length is given or the default.
TEST(FwdSequences, ASequenceHoldsAtMost2To31Minus2To16Keys) {
  constexpr int64_t kMax = (int64_t{1} << 31) - (int64_t{1} << 16);
  FwdCall c;
  c.make_paged(2, 32768, 65537);
  EXPECT_TRUE(ok(check(c.p)));
  c.cache_seqlens->set_i32({3, static_cast<int32_t>(kMax)});
  EXPECT_TRUE(ok(check(c.p)));
  c.cache_seqlens->set_i32({3, static_cast<int32_t>(kMax + 1)});
  EXPECT_TRUE(
      invalid(c.p, {"cache_seqlens[1] = 2147418113 exceeds the most keys a sequence may hold, 2147418112"}));
  c.cache_seqlens->set_i32({3, static_cast<int32_t>(kMax - 1)});
  c.add_new_tokens(2);
  EXPECT_TRUE(invalid(c.p, {"cache_seqlens[1] = 2147418111 plus 2 new tokens of k exceeds the most keys"}));
  c.p.cache_seqlens.data = nullptr;  // the default: the full capacity, 65537 * 32768
  c.p.k.data = c.p.v.data = nullptr;
  EXPECT_TRUE(invalid(c.p, {"the default cache_seqlens (full capacity) = 2147516416 exceeds the most keys"}));
  c.p.cache_seqlens_value = kMax;
  EXPECT_TRUE(ok(check(c.p)));
}

TEST(FwdSequences, CacheBatchIdxIndexesPageTableRows) {
  FwdCall c;
  c.make_paged(8, 4, 4);
  c.attach(&P::cache_batch_idx, I32, {2}).set_i32({0, 2});
  EXPECT_TRUE(invalid(c.p, {"cache_batch_idx[1] = 2 is outside [0, 2) (rows b_pt of page_table)"}));
}

// Packed cache of total_k = 10 rows: sequence 0 owns rows [0, 4), sequence 1 rows [4, 10).
void make_packed(FwdCall& c, std::initializer_list<int32_t> cu) {
  c.attach(&P::k_cache, F32, {10, 2, 8});
  c.attach(&P::v_cache, F32, {10, 2, 8});
  c.attach(&P::cu_seqlens_k, I32, {3}).set_i32(cu);
}

TEST(FwdSequences, PackedCuSeqlensKEndsAtTotalK) {
  FwdCall c;
  make_packed(c, {0, 4, 9});
  EXPECT_TRUE(invalid(c.p, {"cu_seqlens_k[2] = 9 does not match the total_k rows of k_cache (10)"}));
}

TEST(FwdSequences, PackedAppendStaysInsideTheSequence) {
  FwdCall c;
  make_packed(c, {0, 4, 10});
  c.add_new_tokens(2);
  c.cache_seqlens->set_i32({2, 4});
  EXPECT_TRUE(ok(check(c.p)));
  c.cache_seqlens->set_i32({3, 4});
  EXPECT_TRUE(
      invalid(c.p, {"cache_seqlens[0] = 3 plus 2 new tokens of k exceeds the capacity 4 of sequence 0",
                    "cu_seqlens_k[1] - cu_seqlens_k[0]"}));
}

TEST(FwdSequences, VarlenNewKeysCuSeqlens) {
  FwdCall c;
  c.attach(&P::k, F32, {3, 2, 8});
  c.attach(&P::v, F32, {3, 2, 8});
  Buf& cu = c.attach(&P::cu_seqlens_k_new, I32, {3});
  cu.set_i32({0, 2, 1});
  EXPECT_TRUE(invalid(c.p, {"cu_seqlens_k_new[2] = 1 is less than cu_seqlens_k_new[1] = 2"}));
  cu.set_i32({0, 1, 3});
  c.cache_seqlens->set_i32({3, 15});
  EXPECT_TRUE(invalid(c.p, {"cache_seqlens[1] = 15 plus 2 new tokens of k exceeds the capacity 16"}));
}

// rotary_cos/sin of seqlen_ro = 8 positions.
void add_rotary(FwdCall& c, int64_t seqlen_ro) {
  c.attach(&P::rotary_cos, F32, {seqlen_ro, 4});
  c.attach(&P::rotary_sin, F32, {seqlen_ro, 4});
}

TEST(FwdSequences, RotaryPositionsOfNewKeys) {
  FwdCall c;
  add_rotary(c, 8);
  c.add_new_tokens(3);  // sequence 1: positions 5, 6, 7
  EXPECT_TRUE(ok(check(c.p)));
  c.cache_seqlens->set_i32({3, 6});
  EXPECT_TRUE(invalid(
      c.p, {"rotary_cos: position 8 of new key 2 of sequence 1", "cache_seqlens[1] = 6", "seqlen_ro = 8"}));
}

TEST(FwdSequences, RotaryPositionsOfQueriesPerTokenOnlyWhenCausalOrWindowed) {
  FwdCall c;
  add_rotary(c, 7);
  c.attach(&P::q, F32, {2, 3, 4, 8});
  c.attach(&P::out, F32, {2, 3, 4, 8});
  // Without causal/window every q token is at p_i = 5: fine; per token, the last one is at 7.
  EXPECT_TRUE(ok(check(c.p)));
  c.p.causal = 1;
  EXPECT_TRUE(invalid(c.p, {"rotary_cos: position 7 of query token 2 of sequence 1"}));
  c.p.causal = 0;
  c.p.window_left = 100;
  EXPECT_TRUE(invalid(c.p, {"rotary_cos: position 7 of query token 2 of sequence 1"}));
}

TEST(FwdSequences, RotarySeqlensGiveTheBase) {
  FwdCall c;
  add_rotary(c, 8);
  Buf& base = c.attach(&P::rotary_seqlens, I32, {2});
  base.set_i32({0, 7});
  EXPECT_TRUE(ok(check(c.p)));
  base.set_i32({8, 0});
  EXPECT_TRUE(
      invalid(c.p, {"rotary_cos: position 8 of query token 0 of sequence 0", "rotary_seqlens[0] = 8"}));
  base.set_i32({0, -1});
  EXPECT_TRUE(invalid(c.p, {"rotary_seqlens[1] = -1 is negative"}));
}

TEST(FwdSequences, RotaryOfUnusedQueryRowsIsNotChecked) {
  FwdCall c;
  add_rotary(c, 7);
  c.attach(&P::q, F32, {2, 3, 4, 8});
  c.attach(&P::out, F32, {2, 3, 4, 8});
  c.p.causal = 1;
  c.attach(&P::seqused_q, I32, {2}).set_i32({3, 2});  // sequence 1: tokens at 5, 6
  EXPECT_TRUE(ok(check(c.p)));
}

// On CUDA the index tensors are device memory: validation must not read them. These pointers would crash.
TEST(FwdSequences, CudaNeverReadsIndexTensors) {
  FwdCall c(BF16);
  c.p.device_type = KVATTN_DEVICE_CUDA;
  void* bogus = reinterpret_cast<void*>(uintptr_t{16});
  c.p.cache_seqlens.data = bogus;
  c.make_paged(8, 4, 4);
  c.p.page_table.data = bogus;
  c.attach(&P::cache_batch_idx, I32, {2}).t.data = bogus;
  c.p.cache_batch_idx.data = bogus;
  c.attach(&P::cache_leftpad, I32, {2});
  c.p.cache_leftpad.data = bogus;
  add_rotary(c, 8);
  c.attach(&P::rotary_seqlens, I32, {2});
  c.p.rotary_seqlens.data = bogus;
  c.add_new_tokens(2);
  const Result r = check(c.p);
  EXPECT_NE(r.status, KVATTN_ERROR_INVALID_ARGUMENT) << r.message;
}

TEST(FwdSequences, CudaChecksWhatScalarsFix) {
  FwdCall c(BF16);
  c.p.device_type = KVATTN_DEVICE_CUDA;
  c.p.cache_seqlens.data = nullptr;
  c.p.cache_seqlens_value = 15;
  c.add_new_tokens(2);
  EXPECT_TRUE(invalid(c.p, {"cache_seqlens_value = 15 plus 2 new tokens of k exceeds the capacity 16"}));
}

}  // namespace
}  // namespace kvattn_test
