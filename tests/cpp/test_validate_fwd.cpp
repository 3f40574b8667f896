// kvattn_fwd validation of shapes, dtypes, strides and scalars: each rule of CONTRACT.md that the host can
// decide is an error whose message names the argument, the expected and the given value; kvattn_check
// and kvattn_fwd agree on each.
#include "test_util.hpp"

namespace kvattn_test {
namespace {

using P = kvattn_fwd_params;

TEST(FwdValidation, BaselineIsValid) {
  FwdCall c;
  EXPECT_TRUE(ok(check(c.p)));
}

TEST(FwdValidation, BaselineIsValidInF16AndBf16) {
  for (kvattn_dtype dtype : {F16, BF16}) {
    FwdCall c(dtype);
    EXPECT_TRUE(ok(check(c.p))) << dtype;
  }
}

TEST(FwdValidation, QIsRequired) {
  FwdCall c;
  c.p.q.data = nullptr;
  EXPECT_TRUE(invalid(c.p, {"q: required"}));
}

TEST(FwdValidation, QNeedsFourDims) {
  FwdCall c;
  c.attach(&P::q, F32, {2, 4, 8});
  EXPECT_TRUE(invalid(c.p, {"q: expected 4 dims (b, sq, hq, d)", "shape (2, 4, 8)"}));
}

TEST(FwdValidation, LastDimensionMustBeContiguous) {
  FwdCall c;
  c.p.q.strides[3] = 2;
  EXPECT_TRUE(invalid(c.p, {"q: last dimension must be contiguous (stride 1), got stride 2"}));
  FwdCall c2;
  c2.p.cache_seqlens.strides[0] = 2;
  EXPECT_TRUE(invalid(c2.p, {"cache_seqlens: last dimension must be contiguous", "stride 2"}));
}

TEST(FwdValidation, OtherStridesAreFree) {
  FwdCall c;
  // HND cache through strides: (b, s_cache, hk, d) viewed over (b, hk, s_cache, d) storage.
  c.p.k_cache.strides[1] = FwdCall::d;
  c.p.k_cache.strides[2] = FwdCall::s_cache * FwdCall::d;
  EXPECT_TRUE(ok(check(c.p)));
}

TEST(FwdValidation, NegativeSizeAndTooManyDims) {
  FwdCall c;
  c.p.k.data = c.p.q.data;
  c.p.k.ndim = 6;
  EXPECT_TRUE(invalid(c.p, {"k: ndim must be in [0, 5], got 6"}));
  FwdCall c2;
  c2.p.q.shape[1] = -1;
  EXPECT_TRUE(invalid(c2.p, {"q: negative size"}));
}

TEST(FwdValidation, UnknownDtype) {
  FwdCall c;
  c.p.out.dtype = static_cast<kvattn_dtype>(42);
  EXPECT_TRUE(invalid(c.p, {"out: unknown dtype 42"}));
}

TEST(FwdValidation, QDtypeMustBeFloat) {
  FwdCall c;
  c.p.q.dtype = I32;
  EXPECT_TRUE(invalid(c.p, {"q: expected dtype float32, float16, bfloat16 or float8_e4m3fn, got int32"}));
}

TEST(FwdValidation, CacheDtypeMustMatchQ) {
  FwdCall c(F16);
  c.p.k_cache.dtype = BF16;
  EXPECT_TRUE(invalid(c.p, {"k_cache: dtype bfloat16 does not match q (float16)"}));
  FwdCall c2(F16);
  c2.p.v_cache.dtype = BF16;
  EXPECT_TRUE(invalid(c2.p, {"v_cache: dtype bfloat16 does not match k_cache (float16)"}));
}

TEST(FwdValidation, Fp8CacheRunsOnCpu) {
  FwdCall c(BF16);
  c.p.k_cache.dtype = FP8;
  c.p.v_cache.dtype = FP8;
  c.attach(&P::k_descale, F32, {2, 2}).fill_f32(0.5f);
  EXPECT_TRUE(ok(check(c.p)));
  EXPECT_TRUE(ok(fwd(c.p)));
  FwdCall q8(FP8);  // fp8 q under an fp8 cache: out is bf16
  q8.attach(&P::out, BF16, {FwdCall::b, FwdCall::sq, FwdCall::hq, FwdCall::dv});
  q8.attach(&P::q_descale, F32, {2, 2}).fill_f32(2.f);
  EXPECT_TRUE(ok(fwd(q8.p)));
}

TEST(FwdValidation, Fp8QNeedsAnFp8Cache) {
  FwdCall c(FP8);
  c.p.k_cache.dtype = c.p.v_cache.dtype = BF16;
  c.attach(&P::out, BF16, {FwdCall::b, FwdCall::sq, FwdCall::hq, FwdCall::dv});
  EXPECT_TRUE(invalid(c.p, {"k_cache: dtype bfloat16 does not match q (float8_e4m3fn)"}));
}

TEST(FwdValidation, Fp8CacheUnderF32QIsInvalid) {
  FwdCall c;
  c.p.k_cache.dtype = FP8;
  c.p.v_cache.dtype = FP8;
  EXPECT_TRUE(invalid(c.p, {"k_cache: dtype float8_e4m3fn does not match q (float32)"}));
}

TEST(FwdValidation, F32IsUnsupportedOnCuda) {
  FwdCall c;
  c.p.device_type = KVATTN_DEVICE_CUDA;
  EXPECT_TRUE(fwd_rejected(c.p, KVATTN_ERROR_UNSUPPORTED, {"q: dtype float32", "CPU backend only"}));
}

TEST(FwdValidation, Fp8PassesValidationOnCuda) {
  if (kvattn_has_backend(KVATTN_DEVICE_CUDA)) GTEST_SKIP() << "covered by the CUDA tests";
  FwdCall c(BF16);
  c.p.device_type = KVATTN_DEVICE_CUDA;
  c.p.k_cache.dtype = FP8;
  c.p.v_cache.dtype = FP8;
  c.attach(&P::k_descale, F32, {2, 2}).t.strides[0] = 0;  // a broadcast view
  c.p.k_descale.strides[0] = 0;
  c.p.k_descale.strides[1] = 0;
  const Result r = check(c.p);
  EXPECT_EQ(r.status, KVATTN_ERROR_UNSUPPORTED) << r.message;
  // Without a device: "built without the CUDA backend" or "no CUDA device is usable".
  EXPECT_NE(r.message.find("CUDA"), std::string::npos) << r.message;
}

TEST(FwdValidation, DescalesNeedFp8) {
  FwdCall c(BF16);
  c.attach(&P::k_descale, F32, {2, 2});
  EXPECT_TRUE(invalid(c.p, {"k_descale: must not be given with k_cache of dtype bfloat16"}));
  FwdCall c2(BF16);
  c2.attach(&P::q_descale, F32, {2, 2});
  EXPECT_TRUE(invalid(c2.p, {"q_descale: must not be given with q of dtype bfloat16"}));
}

TEST(FwdValidation, CacheHeadDimMustMatchQ) {
  FwdCall c;
  c.attach(&P::k_cache, F32, {2, 16, 2, 4});
  EXPECT_TRUE(
      invalid(c.p, {"k_cache: expected shape (b_cache, s_cache, hk, d) = (*, *, *, 8), got (2, 16, 2, 4)"}));
}

TEST(FwdValidation, VCacheMustMatchKCacheLayout) {
  FwdCall c;
  c.attach(&P::v_cache, F32, {2, 12, 2, 8});
  EXPECT_TRUE(invalid(
      c.p, {"v_cache: expected shape (b_cache, s_cache, hk, dv) = (2, 16, 2, *), got (2, 12, 2, 8)"}));
}

TEST(FwdValidation, HkMustDivideHq) {
  FwdCall c;
  c.attach(&P::k_cache, F32, {2, 16, 3, 8});
  c.attach(&P::v_cache, F32, {2, 16, 3, 8});
  EXPECT_TRUE(invalid(c.p, {"k_cache: hk = 3 kv heads does not divide hq = 4"}));
}

// 2^20 tokens x 2048 heads a kv head = 2^31 packed rows of one (sequence, kv head), past the kernels' 32-bit
// row index: an error (q a broadcast view, out a descriptor validation never reads through).
TEST(FwdValidation, PackedRowsOfASequenceAndKvHeadFit31Bits) {
  FwdCall c;
  const int64_t sq = int64_t{1} << 20, hq = 4096;
  for (kvattn_tensor* t : {&c.p.q, &c.p.out}) {
    t->shape[1] = sq;
    t->shape[2] = hq;
    t->strides[0] = t == &c.p.q ? 0 : sq * hq * 8;
    t->strides[1] = t == &c.p.q ? 0 : hq * 8;
    t->strides[2] = t == &c.p.q ? 0 : 8;
  }
  EXPECT_TRUE(
      invalid(c.p, {"q: sq * (hq / hk) = 1048576 * 2048 = 2147483648 packed rows of a sequence and kv "
                    "head, more than 2147483647"}));
  c.p.q.shape[1] = c.p.out.shape[1] = sq - 1;  // 2^31 - 2048 rows
  const Result r = check(c.p);
  EXPECT_EQ(r.message.find("packed rows"), std::string::npos) << r.message;
}

// 2^22 heads of 512 channels: a token's channels over its heads do not fit int32 (the 32-bit loop bounds of
// the q rotation and of the append kernels): q's hq * d, or v's hk * dv (hk * d <= hq * d). Descriptors only
// (broadcast views validation never reads through).
TEST(FwdValidation, ChannelsOfATokenFitInt32) {
  for (const bool v : {false, true}) {
    FwdCall c;
    const int64_t h = int64_t{1} << 22;
    for (kvattn_tensor* t : {&c.p.q, &c.p.k_cache, &c.p.v_cache, &c.p.out}) {
      t->shape[2] = h;
      const bool dv = t == &c.p.v_cache || t == &c.p.out;
      t->shape[3] = v ? (dv ? 512 : 8) : 512;
      for (int i = 0; i < 3; ++i) t->strides[i] = 0;
    }
    EXPECT_TRUE(invalid(c.p, {v ? "v_cache: hk * dv = 2147483648 does not fit in int32"
                                : "q: hq * d = 2147483648 does not fit in int32"}))
        << v;
  }
}

TEST(FwdValidation, OutIsRequiredWithDvAndQsDtype) {
  FwdCall c;
  c.p.out.data = nullptr;
  EXPECT_TRUE(invalid(c.p, {"out: required"}));
  FwdCall c2;
  c2.attach(&P::out, F32, {2, 1, 4, 6});
  EXPECT_TRUE(invalid(c2.p, {"out: expected shape (b, sq, hq, dv) = (2, 1, 4, 8), got (2, 1, 4, 6)"}));
  FwdCall c3(F16);
  c3.p.out.dtype = BF16;
  EXPECT_TRUE(invalid(c3.p, {"out: dtype bfloat16 does not match q (float16)"}));
}

TEST(FwdValidation, DvComesFromVCache) {
  FwdCall c;
  c.attach(&P::v_cache, F32, {2, 16, 2, 16});
  c.attach(&P::out, F32, {2, 1, 4, 16});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::qv, F32, {2, 1, 4, 8});
  EXPECT_TRUE(invalid(c.p, {"qv: expected shape (b, sq, hq, dv) = (2, 1, 4, 16), got (2, 1, 4, 8)"}));
}

TEST(FwdValidation, QvDtypeMatchesQ) {
  FwdCall c(F16);
  c.attach(&P::qv, BF16, {2, 1, 4, 8});
  EXPECT_TRUE(invalid(c.p, {"qv: dtype bfloat16 does not match q (float16)"}));
}

TEST(FwdValidation, LseShapeAndDtype) {
  FwdCall c;
  c.attach(&P::lse, F32, {2, 4, 1});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::lse, F32, {2, 1, 4});
  EXPECT_TRUE(invalid(c.p, {"lse: expected shape (b, hq, sq) = (2, 4, 1), got (2, 1, 4)"}));
  c.attach(&P::lse, F16, {2, 4, 1});
  EXPECT_TRUE(invalid(c.p, {"lse: expected dtype float32, got float16"}));
}

TEST(FwdValidation, TooFewCacheRowsWithoutCacheBatchIdx) {
  FwdCall c;
  c.attach(&P::k_cache, F32, {1, 16, 2, 8});
  c.attach(&P::v_cache, F32, {1, 16, 2, 8});
  EXPECT_TRUE(invalid(c.p, {"k_cache: has 1 rows, fewer than the batch size b = 2"}));
}

TEST(FwdValidation, PerSequenceArraysHaveLengthB) {
  FwdCall c;
  c.attach(&P::cache_batch_idx, I32, {3});
  EXPECT_TRUE(invalid(c.p, {"cache_batch_idx: expected shape (b,) = (2,), got (3,)"}));
  FwdCall c2;
  c2.attach(&P::cache_leftpad, I32, {2, 1});
  EXPECT_TRUE(invalid(c2.p, {"cache_leftpad: expected shape (b,) = (2,), got (2, 1)"}));
}

TEST(FwdValidation, IndexTensorsAreInt32) {
  FwdCall c;
  c.p.cache_seqlens.dtype = I64;
  EXPECT_TRUE(invalid(c.p, {"cache_seqlens: expected dtype int32, got int64"}));
  FwdCall c2;
  c2.make_paged(8, 4, 4).t.dtype = I64;
  c2.p.page_table.dtype = I64;
  EXPECT_TRUE(invalid(c2.p, {"page_table: expected dtype int32, got int64"}));
}

TEST(FwdValidation, CacheSeqlensValueConflictsWithCacheSeqlens) {
  FwdCall c;
  c.p.cache_seqlens_value = 4;
  EXPECT_TRUE(invalid(c.p, {"cache_seqlens_value: 4 given together with cache_seqlens"}));
}

TEST(FwdValidation, PagedLayout) {
  FwdCall c;
  c.make_paged(8, 4, 4);
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::k_cache, F32, {8, 4, 8});
  EXPECT_TRUE(invalid(c.p, {"k_cache: expected 4 dims (num_pages, page_size, hk, d) with page_table"}));
}

TEST(FwdValidation, PagedNeedsPageSizeAndEnoughRows) {
  FwdCall c;
  c.make_paged(8, 0, 4);
  EXPECT_TRUE(invalid(c.p, {"k_cache: page_size (dim 1) must be >= 1, got 0"}));
  FwdCall c2;
  c2.make_paged(8, 4, 4);
  c2.attach(&P::page_table, I32, {1, 4});
  EXPECT_TRUE(invalid(c2.p, {"page_table: has 1 rows, fewer than the batch size b = 2"}));
  FwdCall c3;
  c3.make_paged(8, 4, 4);
  c3.attach(&P::page_table, I32, {8});
  EXPECT_TRUE(invalid(c3.p, {"page_table: expected 2 dims (b_pt, pages_per_row)"}));
}

TEST(FwdValidation, PackedCacheExcludesPageTableAndCacheBatchIdx) {
  FwdCall c;
  c.attach(&P::k_cache, F32, {10, 2, 8});
  c.attach(&P::v_cache, F32, {10, 2, 8});
  c.attach(&P::cu_seqlens_k, I32, {3}).set_i32({0, 4, 10});
  c.p.cache_seqlens.data = nullptr;
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::cache_batch_idx, I32, {2});
  EXPECT_TRUE(invalid(c.p, {"cache_batch_idx: must not be given with cu_seqlens_k"}));
  c.p.cache_batch_idx.data = nullptr;
  c.attach(&P::page_table, I32, {2, 2});
  EXPECT_TRUE(invalid(c.p, {"page_table: must not be given with cu_seqlens_k"}));
}

TEST(FwdValidation, PackedCacheIsThreeDimensional) {
  FwdCall c;
  c.attach(&P::cu_seqlens_k, I32, {3}).set_i32({0, 4, 10});
  EXPECT_TRUE(invalid(c.p, {"k_cache: expected 3 dims (total_k, hk, d) with cu_seqlens_k", "got 4 dims"}));
  c.attach(&P::cu_seqlens_k, I32, {4});
  EXPECT_TRUE(invalid(c.p, {"cu_seqlens_k: expected shape (b + 1,) = (3,), got (4,)"}));
}

TEST(FwdValidation, VarlenQNeedsMaxSeqlenQAndThreeDims) {
  FwdCall c;
  c.attach(&P::q, F32, {3, 4, 8});
  c.attach(&P::out, F32, {3, 4, 8});
  c.attach(&P::cu_seqlens_q, I32, {3}).set_i32({0, 1, 3});
  EXPECT_TRUE(invalid(c.p, {"max_seqlen_q: must be > 0 with cu_seqlens_q, got 0"}));
  c.p.max_seqlen_q = 2;
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::lse, F32, {4, 3});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::lse, F32, {2, 4, 2});
  EXPECT_TRUE(invalid(c.p, {"lse: expected shape (hq, total_q) = (4, 3), got (2, 4, 2)"}));
  c.attach(&P::q, F32, {2, 2, 4, 8});
  EXPECT_TRUE(invalid(c.p, {"q: expected 3 dims (total_q, hq, d) with cu_seqlens_q"}));
}

TEST(FwdValidation, MaxSeqlenQWithoutVarlenMustMatchSq) {
  FwdCall c;
  c.p.max_seqlen_q = 1;
  EXPECT_TRUE(ok(check(c.p)));
  c.p.max_seqlen_q = 5;
  EXPECT_TRUE(invalid(c.p, {"max_seqlen_q: 5 given without cu_seqlens_q does not match sq = 1"}));
}

TEST(FwdValidation, NewKeysAndValuesTogether) {
  FwdCall c;
  c.attach(&P::k, F32, {2, 1, 2, 8});
  EXPECT_TRUE(invalid(c.p, {"v: must be given together with k (k is given, v is not)"}));
  FwdCall c2;
  c2.attach(&P::v, F32, {2, 1, 2, 8});
  EXPECT_TRUE(invalid(c2.p, {"k: must be given together with v"}));
}

TEST(FwdValidation, NewKeysShapeAndDtype) {
  FwdCall c;
  c.add_new_tokens(2);
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::k, F32, {2, 2, 1, 8});
  EXPECT_TRUE(invalid(c.p, {"k: expected shape (b, s_new, hk, d) = (2, *, 2, 8), got (2, 2, 1, 8)"}));
  c.attach(&P::k, F32, {2, 3, 2, 8});
  EXPECT_TRUE(invalid(c.p, {"v: expected shape (b, s_new, hk, dv) = (2, 3, 2, 8), got (2, 2, 2, 8)"}));
  FwdCall c2(F16);
  c2.add_new_tokens(1);
  c2.p.k.dtype = BF16;
  EXPECT_TRUE(invalid(c2.p, {"k: dtype bfloat16 does not match q (float16)"}));
}

TEST(FwdValidation, VarlenNewKeys) {
  FwdCall c;
  c.attach(&P::k, F32, {3, 2, 8});
  c.attach(&P::v, F32, {3, 2, 8});
  c.attach(&P::cu_seqlens_k_new, I32, {3}).set_i32({0, 1, 3});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::k, F32, {2, 3, 2, 8});
  EXPECT_TRUE(invalid(c.p, {"k: expected 3 dims (total_new, hk, d) with cu_seqlens_k_new"}));
  FwdCall c2;
  c2.attach(&P::cu_seqlens_k_new, I32, {3});
  EXPECT_TRUE(invalid(c2.p, {"cu_seqlens_k_new: must not be given without k and v"}));
}

TEST(FwdValidation, RotaryCosAndSinTogether) {
  FwdCall c;
  c.attach(&P::rotary_cos, F32, {32, 4});
  EXPECT_TRUE(invalid(c.p, {"rotary_sin: must be given together with rotary_cos"}));
}

TEST(FwdValidation, RotaryShapes) {
  FwdCall c;
  c.attach(&P::rotary_cos, F32, {32, 4});
  c.attach(&P::rotary_sin, F32, {32, 4});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::rotary_sin, F32, {32, 2});
  EXPECT_TRUE(
      invalid(c.p, {"rotary_sin: expected shape (seqlen_ro, rotary_dim / 2) = (32, 4), got (32, 2)"}));
  c.attach(&P::rotary_cos, F32, {32, 5});
  c.attach(&P::rotary_sin, F32, {32, 5});
  EXPECT_TRUE(invalid(c.p, {"rotary_cos: rotary_dim = 2 * 5 = 10 exceeds the head dim d = 8"}));
  c.attach(&P::rotary_cos, F32, {32});
  EXPECT_TRUE(invalid(c.p, {"rotary_cos: expected 2 dims (seqlen_ro, rotary_dim / 2)"}));
}

TEST(FwdValidation, RotaryDtypeIsF32OrQs) {
  FwdCall c(F16);
  c.attach(&P::rotary_cos, F32, {32, 2});
  c.attach(&P::rotary_sin, F32, {32, 2});
  EXPECT_TRUE(ok(check(c.p)));
  c.p.rotary_cos.dtype = BF16;
  EXPECT_TRUE(invalid(c.p, {"rotary_cos: expected dtype float32 or float16, got bfloat16"}));
  c.p.rotary_cos.dtype = F16;
  EXPECT_TRUE(invalid(c.p, {"rotary_sin: dtype float32 does not match rotary_cos (float16)"}));
}

TEST(FwdValidation, RotarySeqlensNeedsRotary) {
  FwdCall c;
  c.attach(&P::rotary_seqlens, I32, {2});
  EXPECT_TRUE(invalid(c.p, {"rotary_seqlens: must not be given without rotary_cos and rotary_sin"}));
}

TEST(FwdValidation, WindowAndChunkBounds) {
  FwdCall c;
  c.p.window_left = -2;
  EXPECT_TRUE(invalid(c.p, {"window_left: must be >= -1", "got -2"}));
  c.p.window_left = 3;
  c.p.window_right = -5;
  EXPECT_TRUE(invalid(c.p, {"window_right: must be >= -1", "got -5"}));
  c.p.window_right = 0;
  c.p.attention_chunk = -1;
  EXPECT_TRUE(invalid(c.p, {"attention_chunk: must be >= 0", "got -1"}));
  c.p.attention_chunk = 4;
  EXPECT_TRUE(ok(check(c.p)));
}

// FA3's rule: causal overrides the right window (window_right becomes 0), whatever was given.
TEST(FwdValidation, CausalOverridesAPositiveRightWindow) {
  FwdCall c;
  c.p.causal = 1;
  c.p.window_left = 4;
  c.p.window_right = 0;
  EXPECT_TRUE(ok(check(c.p)));
  c.p.window_right = 3;
  EXPECT_TRUE(ok(check(c.p)));
  c.p.window_right = -2;
  EXPECT_TRUE(invalid(c.p, {"window_right"}));
}

TEST(FwdValidation, SoftcapAndScaleMustBeFinite) {
  FwdCall c;
  c.p.softcap = -1.0;
  EXPECT_TRUE(invalid(c.p, {"softcap: must be finite and >= 0", "-1"}));
  c.p.softcap = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(invalid(c.p, {"softcap:"}));
  c.p.softcap = 30.0;
  c.p.softmax_scale = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(invalid(c.p, {"softmax_scale: must be finite"}));
}

TEST(FwdValidation, SpeedOptionBounds) {
  FwdCall c;
  c.p.num_splits = -1;
  EXPECT_TRUE(invalid(c.p, {"num_splits: must be >= 0", "got -1"}));
  c.p.num_splits = 3;
  c.p.pack_gqa = 2;
  EXPECT_TRUE(invalid(c.p, {"pack_gqa: expected -1 (choose), 0 or 1, got 2"}));
  c.p.pack_gqa = 1;
  c.p.sm_margin = -3;
  EXPECT_TRUE(invalid(c.p, {"sm_margin: must be >= 0", "got -3"}));
}

TEST(FwdValidation, AlibiSlopes) {
  FwdCall c;
  c.attach(&P::alibi_slopes, F32, {4});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::alibi_slopes, F32, {2, 4});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::alibi_slopes, F32, {3});
  EXPECT_TRUE(invalid(c.p, {"alibi_slopes: expected shape (hq,) = (4,), got (3,)"}));
  c.attach(&P::alibi_slopes, F16, {4});
  EXPECT_TRUE(invalid(c.p, {"alibi_slopes: expected dtype float32, got float16"}));
}

TEST(FwdValidation, Sinks) {
  FwdCall c;
  c.attach(&P::sinks, F32, {4});
  EXPECT_TRUE(ok(check(c.p)));
  c.attach(&P::sinks, F32, {2});
  EXPECT_TRUE(invalid(c.p, {"sinks: expected shape (hq,) = (4,), got (2,)"}));
  c.attach(&P::sinks, BF16, {4});
  EXPECT_TRUE(invalid(c.p, {"sinks: expected dtype float32, got bfloat16"}));
}

TEST(FwdValidation, EmptyBatchIsValid) {
  FwdCall c;
  c.attach(&P::q, F32, {0, 1, 4, 8});
  c.attach(&P::out, F32, {0, 1, 4, 8});
  c.attach(&P::cache_seqlens, I32, {0});
  EXPECT_TRUE(ok(check(c.p)));
  EXPECT_TRUE(ok(fwd(c.p)));
}

TEST(FwdValidation, HeadsAndHeadDimsAreAtLeastOne) {
  FwdCall c;
  c.attach(&P::q, F32, {2, 1, 0, 8});
  EXPECT_TRUE(invalid(c.p, {"q: hq (dim 2) must be >= 1, got 0"}));
  FwdCall c2;
  c2.attach(&P::v_cache, F32, {2, 16, 2, 0});
  EXPECT_TRUE(invalid(c2.p, {"v_cache: dv (dim 3) must be >= 1, got 0"}));
}

TEST(FwdValidation, SizesAboveInt32AreRejected) {
  FwdCall c;
  c.p.k_cache.shape[1] = int64_t{1} << 40;
  EXPECT_TRUE(invalid(c.p, {"k_cache: size 1099511627776 of dim 1 exceeds 2^31 - 1"}));
  FwdCall c2;
  c2.p.cache_seqlens.data = nullptr;
  c2.p.cache_seqlens_value = int64_t{1} << 62;
  EXPECT_TRUE(invalid(c2.p, {"cache_seqlens_value = 4611686018427387904 does not fit in int32"}));
}

}  // namespace
}  // namespace kvattn_test
