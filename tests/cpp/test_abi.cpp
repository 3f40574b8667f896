// The ABI itself: version, initializers, struct header checks, last-error behaviour, backend queries.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <thread>

#include "test_util.hpp"

namespace kvattn_test {
namespace {

TEST(Abi, VersionMatchesHeader) {
  EXPECT_EQ(kvattn_abi_version(), KVATTN_ABI_VERSION);
}

TEST(Abi, FwdParamsInitDefaults) {
  kvattn_fwd_params p;
  std::memset(&p, 0x5a, sizeof(p));
  kvattn_fwd_params_init(&p);
  EXPECT_EQ(p.struct_size, sizeof(kvattn_fwd_params));
  EXPECT_EQ(p.abi_version, static_cast<uint32_t>(KVATTN_ABI_VERSION));
  EXPECT_EQ(p.device_type, KVATTN_DEVICE_CPU);
  EXPECT_EQ(p.stream, nullptr);
  EXPECT_EQ(p.q.data, nullptr);
  EXPECT_EQ(p.page_table.data, nullptr);
  EXPECT_EQ(p.out.data, nullptr);
  EXPECT_EQ(p.cache_seqlens_value, -1);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_EQ(p.rotary_interleaved, 1);
  EXPECT_EQ(p.force_portable, 0);
  EXPECT_EQ(p.kv_indptr.data, nullptr);
  EXPECT_EQ(p.kv_indices.data, nullptr);
  EXPECT_EQ(p.pack_gqa, -1);
  EXPECT_EQ(p.causal, 0);
  EXPECT_EQ(p.softmax_scale, 0.0);
  EXPECT_EQ(p.softcap, 0.0);
  EXPECT_EQ(p.num_splits, 0);
  EXPECT_EQ(p.max_seqlen_q, 0);
  EXPECT_EQ(p.workspace, nullptr);
  EXPECT_EQ(p.workspace_bytes, 0u);
}

TEST(Abi, AppendAndCombineParamsInitDefaults) {
  kvattn_append_params a;
  std::memset(&a, 0x5a, sizeof(a));
  kvattn_append_params_init(&a);
  EXPECT_EQ(a.struct_size, sizeof(kvattn_append_params));
  EXPECT_EQ(a.abi_version, static_cast<uint32_t>(KVATTN_ABI_VERSION));
  EXPECT_EQ(a.key.data, nullptr);
  EXPECT_EQ(a.k_scale.data, nullptr);
  kvattn_combine_params c;
  std::memset(&c, 0x5a, sizeof(c));
  kvattn_combine_params_init(&c);
  EXPECT_EQ(c.struct_size, sizeof(kvattn_combine_params));
  EXPECT_EQ(c.abi_version, static_cast<uint32_t>(KVATTN_ABI_VERSION));
  EXPECT_EQ(c.sinks.data, nullptr);
  EXPECT_EQ(c.lse.data, nullptr);
}

TEST(Abi, InitWithNullIsANoOp) {
  kvattn_fwd_params_init(nullptr);
  kvattn_append_params_init(nullptr);
  kvattn_combine_params_init(nullptr);
}

// kvattn_fwd_params as first released ends before force_portable (kvattn.h's versioning rule).
constexpr size_t kFwdParamsFirstSize = offsetof(kvattn_fwd_params, force_portable);

TEST(Abi, StructSizeTooSmallIsRejected) {
  FwdCall c;
  c.p.struct_size = kFwdParamsFirstSize - 8;
  const std::string given = std::to_string(kFwdParamsFirstSize - 8);
  const std::string known = std::to_string(kFwdParamsFirstSize);
  EXPECT_TRUE(invalid(c.p, {"kvattn_fwd_params.struct_size", given.c_str(), known.c_str()}));
}

TEST(Abi, StructOfTheFirstReleaseRunsWithTheAppendedFieldsAtTheirDefaults) {
  FwdCall c;
  c.p.struct_size = kFwdParamsFirstSize;
  c.p.force_portable = 7;  // past the caller's struct: never read (7 would be rejected)
  EXPECT_TRUE(ok(check(c.p)));
  EXPECT_EQ(kvattn_fwd(&c.p), KVATTN_OK) << kvattn_last_error();
  c.p.struct_size = sizeof(kvattn_fwd_params);
  EXPECT_TRUE(invalid(c.p, {"force_portable", "0 or 1", "7"}));
}

// A struct from before the ragged index (kv_indptr, kv_indices): they read as absent.
TEST(Abi, StructBeforeTheRaggedIndexRunsWithoutIt) {
  FwdCall c;
  int32_t garbage[2] = {7, 7};
  c.p.kv_indptr = {garbage, KVATTN_DTYPE_I32, 1, {2}, {1}};  // past the caller's struct: never read
  c.p.struct_size = offsetof(kvattn_fwd_params, kv_indptr);
  EXPECT_TRUE(ok(check(c.p)));
  EXPECT_EQ(kvattn_fwd(&c.p), KVATTN_OK) << kvattn_last_error();
  c.p.struct_size = sizeof(kvattn_fwd_params);
  EXPECT_TRUE(invalid(c.p, {"kv_indices", "kv_indptr"}));  // given alone: an error at full size
}

TEST(Abi, ForcePortableIsZeroOrOne) {
  FwdCall c;
  c.p.force_portable = 1;
  EXPECT_TRUE(ok(check(c.p)));
  c.p.force_portable = -1;
  EXPECT_TRUE(invalid(c.p, {"force_portable", "0 or 1", "-1"}));
}

TEST(Abi, FwdSizedRunsAndReportsTheWorkspace) {
  FwdCall c;
  size_t needed = 123;
  ASSERT_EQ(kvattn_fwd_sized(&c.p, &needed), KVATTN_OK) << kvattn_last_error();
  EXPECT_EQ(needed, 0u);                      // the CPU backend needs none
  EXPECT_FALSE(std::isnan(c.out->f32()[0]));  // it ran: out was NaN-poisoned
  EXPECT_TRUE(rejected({kvattn_fwd_sized(&c.p, nullptr), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT,
                       {"workspace_bytes_needed"}));
  c.p.window_left = -7;
  needed = 5;
  EXPECT_TRUE(rejected({kvattn_fwd_sized(&c.p, &needed), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT,
                       {"window_left", "-7"}));
  EXPECT_EQ(needed, 0u);
}

TEST(Abi, StructSizeTooSmallIsRejectedForAppendAndCombine) {
  kvattn_append_params a;
  kvattn_append_params_init(&a);
  a.struct_size = 8;
  EXPECT_TRUE(rejected({kvattn_append_kv(&a), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT,
                       {"kvattn_append_params.struct_size: 8"}));
  kvattn_combine_params cp;
  kvattn_combine_params_init(&cp);
  cp.struct_size = 0;
  EXPECT_TRUE(rejected({kvattn_combine(&cp), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT,
                       {"kvattn_combine_params.struct_size: 0"}));
}

TEST(Abi, LargerStructSizeIsAccepted) {
  FwdCall c;
  c.p.struct_size = sizeof(kvattn_fwd_params) + 64;
  EXPECT_TRUE(ok(check(c.p)));
}

TEST(Abi, AbiVersionMismatchIsRejected) {
  FwdCall c;
  c.p.abi_version = KVATTN_ABI_VERSION + 1;
  EXPECT_TRUE(invalid(c.p, {"kvattn_fwd_params.abi_version: 2", "ABI version 1"}));
}

TEST(Abi, NullParamsAreRejected) {
  EXPECT_TRUE(
      rejected({kvattn_check(nullptr), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT, {"params"}));
  EXPECT_TRUE(
      rejected({kvattn_fwd(nullptr), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT, {"params"}));
  EXPECT_TRUE(rejected({kvattn_append_kv(nullptr), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT,
                       {"kvattn_append_params"}));
  EXPECT_TRUE(rejected({kvattn_combine(nullptr), kvattn_last_error()}, KVATTN_ERROR_INVALID_ARGUMENT,
                       {"kvattn_combine_params"}));
  size_t bytes = 1;
  EXPECT_TRUE(rejected({kvattn_fwd_workspace_size(nullptr, &bytes), kvattn_last_error()},
                       KVATTN_ERROR_INVALID_ARGUMENT, {"params"}));
}

TEST(Abi, WorkspaceSizeNeedsAnOutputPointer) {
  FwdCall c;
  EXPECT_TRUE(rejected({kvattn_fwd_workspace_size(&c.p, nullptr), kvattn_last_error()},
                       KVATTN_ERROR_INVALID_ARGUMENT, {"bytes"}));
}

TEST(Abi, WorkspaceSizeIsZeroOnCpu) {
  FwdCall c;
  size_t bytes = 123;
  EXPECT_EQ(kvattn_fwd_workspace_size(&c.p, &bytes), KVATTN_OK);
  EXPECT_EQ(bytes, 0u);
}

TEST(Abi, WorkspaceSizeValidatesLikeCheck) {
  FwdCall c;
  c.p.window_left = -7;
  size_t bytes = 0;
  EXPECT_TRUE(rejected({kvattn_fwd_workspace_size(&c.p, &bytes), kvattn_last_error()},
                       KVATTN_ERROR_INVALID_ARGUMENT, {"window_left", "-7"}));
}

TEST(Abi, LastErrorIsClearedByTheNextCall) {
  FwdCall c;
  c.p.num_splits = -1;
  EXPECT_NE(kvattn_check(&c.p), KVATTN_OK);
  EXPECT_STRNE(kvattn_last_error(), "");
  c.p.num_splits = 0;
  EXPECT_EQ(kvattn_check(&c.p), KVATTN_OK);
  EXPECT_STREQ(kvattn_last_error(), "");
}

TEST(Abi, LastErrorIsPerThread) {
  FwdCall c;
  c.p.num_splits = -1;
  ASSERT_NE(kvattn_check(&c.p), KVATTN_OK);
  std::string other_thread = "unset";
  std::thread([&] { other_thread = kvattn_last_error(); }).join();
  EXPECT_EQ(other_thread, "");
  EXPECT_NE(std::string(kvattn_last_error()).find("num_splits"), std::string::npos);
}

TEST(Abi, HasBackend) {
  EXPECT_EQ(kvattn_has_backend(KVATTN_DEVICE_CPU), 1);
  EXPECT_EQ(kvattn_has_backend(static_cast<kvattn_device_type>(7)), 0);
}

TEST(Abi, DeviceErrorsWithoutCudaIsOk) {
  if (kvattn_has_backend(KVATTN_DEVICE_CUDA)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(kvattn_device_errors(0, nullptr), KVATTN_OK);
}

TEST(Abi, UnknownDeviceTypeIsRejected) {
  FwdCall c;
  c.p.device_type = static_cast<kvattn_device_type>(9);
  EXPECT_TRUE(invalid(c.p, {"device_type", "9"}));
}

TEST(Abi, NegativeCudaDeviceIdIsRejected) {
  FwdCall c(BF16);
  c.p.device_type = KVATTN_DEVICE_CUDA;
  c.p.device_id = -1;
  EXPECT_TRUE(invalid(c.p, {"device_id", "-1"}));
}

TEST(Abi, CudaWithoutTheBackendIsUnsupported) {
  if (kvattn_has_backend(KVATTN_DEVICE_CUDA)) GTEST_SKIP() << "a CUDA device is present";
  FwdCall c(BF16);
  c.p.device_type = KVATTN_DEVICE_CUDA;
  const Result r = check(c.p);
  EXPECT_EQ(r.status, KVATTN_ERROR_UNSUPPORTED) << r.message;
  EXPECT_NE(r.message.find("CUDA"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace kvattn_test
