// The decode cluster form's shape, C CTAs a cluster and S clusters a unit or the persistent kernel
// (src/cuda/decode_sm90/cluster_shape.hpp): the model's picks on an H100's and an H200's figures, the
// switches, and the conditions past the capacity bound. The H100 picks are the ones measured in
// bench/NOTES.md (sessions 46-47); the H200's are the model's predictions (132 SMs, 4.8 TB/s, assumed to
// hold the H100's 15 clusters of 8 and 7 of 16: the same die).
#include <gtest/gtest.h>

#include "cuda/decode_sm90/cluster_shape.hpp"

namespace {

using kvattn::DType;
using kvattn::FwdProblem;
using namespace kvattn::cuda;

constexpr ClusterCard kH100{132, 3352320, 15, 7};  // 2,619 MHz x 5,120 bits x 2
constexpr ClusterCard kH200{132, 4800000, 15, 7};

FwdProblem decode(int batch, int hk, int64_t keys) {
  FwdProblem p;
  p.batch = batch;
  p.num_q_heads = 4 * hk;
  p.num_kv_heads = hk;
  p.max_seqlen_q = 1;
  p.total_q = batch;
  p.head_dim = p.head_dim_v = 128;
  p.q_dtype = p.kv_dtype = DType::bf16;
  p.num_pages = batch;
  p.capacity = keys;
  return p;
}

ClusterShape pick(const FwdProblem& p, const ClusterCard& card = kH100, ClusterAsk ask = {},
                  bool tma_eligible = true) {
  return cluster_shape(p, tma_eligible, card, ask);
}

void expect_shape(ClusterShape got, int ctas, int splits) {
  EXPECT_EQ(got.ctas, ctas);
  EXPECT_EQ(got.splits, splits);
}

TEST(ClusterShape, FewKvHeadsAtBatchOneTakeManyClustersOfEight) {
  // W1's tensor-parallel shards (bench/NOTES.md, session 47, calls 80 / 83): 1 kv head 8 x 4 / 8 x 8 / 8 x
  // 15 at 16k / 32k / 128k (the TMA kernel's 512 keys a CTA cap S at 16k and 32k; 15 clusters of 8 at 128k).
  expect_shape(pick(decode(1, 1, 16384)), 8, 4);
  expect_shape(pick(decode(1, 1, 32768)), 8, 8);
  expect_shape(pick(decode(1, 1, 131072)), 8, 15);
  expect_shape(pick(decode(1, 2, 16384)), 8, 4);
  expect_shape(pick(decode(1, 2, 32768)), 8, 7);
  expect_shape(pick(decode(1, 2, 131072)), 8, 7);
  // 4 kv heads: 12 clusters of 8 (117 us at 128k on an H100) rather than 4 of 16 (140 us: one GPC each).
  expect_shape(pick(decode(1, 4, 32768)), 8, 3);
  expect_shape(pick(decode(1, 4, 131072)), 8, 3);
}

TEST(ClusterShape, EightKvHeadsByTheCardsBandwidth) {
  // 8 units: 8 clusters of 8 (eight of 16 do not fit), S 1 (16 would not be resident). Past the bound the
  // model compares them with the persistent kernel by the card's DRAM bandwidth: the H100 streams b1 x
  // 32k / 128k on the clusters (session 45: -13 to -17% / -4 to -6%); the H200 is predicted to take 32k
  // (134 MB) and leave 128k (537 MB) to the persistent kernel.
  expect_shape(pick(decode(1, 8, 32768)), 8, 1);
  expect_shape(pick(decode(1, 8, 131072)), 8, 1);
  expect_shape(pick(decode(1, 8, 32768), kH200), 8, 1);
  expect_shape(pick(decode(1, 8, 131072), kH200), 0, 1);
  expect_shape(pick(decode(1, 4, 131072), kH200), 8, 3);
}

TEST(ClusterShape, ShortCachesKeepOneClusterAUnit) {
  // Under the capacity bound: one cluster a unit (S > 1 needs 512 keys a CTA and pays the combine); 4
  // units take 16 CTAs each (64 CTAs, more than 32), 8 units 8 each, 32 units none (not one wave).
  expect_shape(pick(decode(2, 2, 300)), 16, 1);
  expect_shape(pick(decode(1, 8, 4096)), 8, 1);
  expect_shape(pick(decode(1, 1, 4096)), 16, 1);
  expect_shape(pick(decode(4, 8, 1024)), 0, 1);
  expect_shape(pick(decode(16, 8, 1024)), 0, 1);
}

TEST(ClusterShape, TheSwitches) {
  ClusterAsk eight;
  eight.max_ctas = 8;
  expect_shape(pick(decode(2, 2, 300), kH100, eight), 8, 1);
  ClusterAsk off;
  off.max_ctas = 0;
  expect_shape(pick(decode(2, 2, 300), kH100, off), 0, 1);
  // KVATTN_DECODE_CLUSTER_SPLITS: the first size from the largest with what fits of the asked S.
  ClusterAsk split3;
  split3.splits = 3;
  expect_shape(pick(decode(2, 2, 300), kH100, split3), 16, 1);  // 4 units x 16: one cluster of 16 each fits
  split3.max_ctas = 8;
  expect_shape(pick(decode(2, 2, 300), kH100, split3), 8, 3);
  // The capacity bound lifted: 16k over 1 kv head is short, and the model still picks S.
  ClusterAsk lifted;
  lifted.max_keys = int64_t{1} << 30;
  expect_shape(pick(decode(1, 1, 16384), kH100, lifted), 8, 4);
  // KVATTN_DECODE_CLUSTER_LONG=0: never past the bound; =1: without the model, for batch 1 on TMA layouts.
  ClusterAsk never;
  never.long_rule = 0;
  expect_shape(pick(decode(1, 1, 32768), kH100, never), 0, 1);
  ClusterAsk always;
  always.long_rule = 1;
  expect_shape(pick(decode(1, 8, 131072), kH200, always), 8, 1);
}

TEST(ClusterShape, UnknownBandwidthTakesTheFirstFitAndNoLongSequence) {
  const ClusterCard unknown{132, 0, 15, 7};
  expect_shape(pick(decode(2, 2, 300), unknown), 16, 1);
  expect_shape(pick(decode(1, 8, 4096), unknown), 8, 1);
  expect_shape(pick(decode(1, 1, 32768), unknown), 0, 1);
  ClusterAsk always;
  always.long_rule = 1;
  expect_shape(pick(decode(1, 1, 32768), unknown, always), 16, 1);
}

TEST(ClusterShape, LongSequencesOfABatchWhereOneAloneStreamsNoSlower) {
  // One sequence holding the capacity alone must stream on its units' clusters no slower than the
  // persistent kernel would over every SM: 4/1 b4 x 32k on 3 clusters of 8 a unit (24 CTAs: 12.7 + 4 us
  // against 5.9 + 11), b2 on 7; 8/2 b2 x 32k on 3 a unit; not 8/2 b4 x 32k (8 CTAs a unit: 38 us alone), nor
  // b4 x 128k.
  expect_shape(pick(decode(4, 1, 32768)), 8, 3);
  expect_shape(pick(decode(2, 1, 32768)), 8, 7);
  expect_shape(pick(decode(2, 2, 32768)), 8, 3);
  expect_shape(pick(decode(4, 2, 32768)), 0, 1);
  expect_shape(pick(decode(4, 1, 131072)), 0, 1);
  expect_shape(pick(decode(2, 1, 131072)), 8, 7);
  ClusterAsk always;  // KVATTN_DECODE_CLUSTER_LONG=1: batch 1 only
  always.long_rule = 1;
  expect_shape(pick(decode(4, 1, 32768), kH100, always), 0, 1);
}

TEST(ClusterShape, LongSequencesOnlyOnTmaLayouts) {
  // The persistent kernel for a layout the TMA kernel does not take (fp8, page 8: the caller's
  // tma_eligible); a paged cache with a leftpad takes the shape it takes without one (the TMA kernel starts
  // a unit's tiles at its first key's 16-slot run).
  expect_shape(pick(decode(1, 1, 32768), kH100, {}, false), 0, 1);
  FwdProblem paged = decode(1, 1, 32768);
  int32_t table = 0, leftpad = 0;
  paged.page_table = &table;
  paged.page_size = 16;
  paged.cache_leftpad = &leftpad;
  expect_shape(pick(paged), 8, 8);
  paged.cache_leftpad = nullptr;
  expect_shape(pick(paged), 8, 8);
}

TEST(ClusterShape, TheModelsTimes) {
  // 16.8 MB at 64 CTAs: the persistent kernel's rate caps 8 clusters of 8; 4 clusters of 16 stream what 4
  // GPCs do; S > 1 adds kSplitUs.
  const double bytes = 32768.0 * 512;
  const double capped = bytes / persistent_rate(kH100.dram_bytes_per_us);
  EXPECT_NEAR(cluster_us(bytes, 64, 8, 8, kH100.dram_bytes_per_us), capped + kSplitUs, 1e-9);
  EXPECT_NEAR(cluster_us(bytes, 64, 16, 4, kH100.dram_bytes_per_us),
              bytes / (4 * kClusterBytesPerUs) + kSplitUs, 1e-9);
  EXPECT_NEAR(cluster_us(bytes, 16, 16, 1, kH100.dram_bytes_per_us), bytes / (4 * kClusterBytesPerUs) * 4,
              1e-9);
  EXPECT_NEAR(capacity_bytes(decode(1, 1, 32768)), bytes, 1e-9);
}

}  // namespace
