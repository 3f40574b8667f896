// The CUDA plan is a pure function of static shapes (heuristics.hpp): which kernel, which split schedule,
// how many CTAs and how much workspace; and the dispatch table's choice of a row (kernel_table.hpp).
// Tested here, without a GPU, with the H200's figures.
#include <gtest/gtest.h>

#include "cuda/heuristics.hpp"
#include "cuda/kernel_table.hpp"

namespace {

using kvattn::DType;
using kvattn::FwdProblem;
using namespace kvattn::cuda;

constexpr int kSms = 132;             // H200
constexpr int kSmemPerSm = 233472;    // bytes
constexpr int64_t kCapacity = 32768;  // keys a cache row can hold

FwdProblem decode(int batch, int hq = 32, int hk = 8, int sq = 1) {
  FwdProblem p;
  p.batch = batch;
  p.num_q_heads = hq;
  p.num_kv_heads = hk;
  p.max_seqlen_q = sq;
  p.total_q = static_cast<int64_t>(batch) * sq;
  p.head_dim = p.head_dim_v = 128;
  p.q_dtype = p.kv_dtype = DType::bf16;
  p.num_pages = batch;
  p.capacity = kCapacity;
  return p;
}

AttentionPlan plan_of(const FwdProblem& p) {
  return plan_attention(p, 128, 128, kSms, kSmemPerSm);
}

TEST(Heuristics, DecodeTakesTheBalancedScheduleWithThreeCtasAnSm) {
  const AttentionPlan plan = plan_of(decode(4));
  EXPECT_TRUE(plan.key_split);
  EXPECT_TRUE(plan.balanced);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.balanced_slots, 3 * kSms);  // 168 registers and ~76 KB of shared memory: 3 CTAs an SM
  EXPECT_EQ(plan.balanced_ctas, 3 * kSms);   // 32 units < 396 resident CTAs: one wave
  EXPECT_EQ(plan.rows_per_unit, 4);          // g x q = 4 x 1
  // partials (2, G, rows, dv) fp32, their lse (2, G, rows), then (batch, kv heads, 2) int32
  const size_t rows = 2 * 396 * 4;
  EXPECT_EQ(plan.lse_partial_offset, align_up(rows * 128 * 4, kWorkspaceAlign));
  EXPECT_EQ(plan.unit_pieces_offset, plan.lse_partial_offset + align_up(rows * 4, kWorkspaceAlign));
  EXPECT_EQ(plan.workspace_bytes, plan.unit_pieces_offset + align_up(4 * 8 * 2 * 4, kWorkspaceAlign));
}

TEST(Heuristics, BalancedGridIsWholeWavesUpToFour) {
  EXPECT_EQ(plan_of(decode(64)).balanced_ctas, 2 * 396);   // 512 units -> 2 waves
  EXPECT_EQ(plan_of(decode(128)).balanced_ctas, 3 * 396);  // 1024 units -> 3 waves
  EXPECT_EQ(plan_of(decode(256)).balanced_ctas, 4 * 396);  // 2048 units -> capped at 4 waves
  // The workspace does not grow with the batch past the cap (apart from the unit table).
  const AttentionPlan a = plan_of(decode(256)), b = plan_of(decode(512));
  EXPECT_EQ(a.lse_partial_offset, b.lse_partial_offset);
}

TEST(Heuristics, StaticSplitsWhereTheBalancedScheduleDoesNotApply) {
  FwdProblem p = decode(kBalancedMaxBatch + 1);  // the scan holds 512 sequences
  EXPECT_FALSE(plan_of(p).balanced);

  p = decode(4);
  p.num_splits = 3;  // an explicit count is honoured as at most that many static splits
  AttentionPlan plan = plan_of(p);
  EXPECT_FALSE(plan.balanced);
  EXPECT_GE(plan.splits, 1);
  EXPECT_LE(plan.splits, 3);

  p.num_splits = 1;  // no split: no workspace
  plan = plan_of(p);
  EXPECT_FALSE(plan.balanced);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.workspace_bytes, 0u);

  p.num_splits = 0;
  p.deterministic = true;  // fixed split points: batch-independent results
  plan = plan_of(p);
  EXPECT_FALSE(plan.balanced);
  EXPECT_EQ(plan.splits, static_cast<int>(kCapacity / kDeterministicSplitKeys));
  EXPECT_EQ(plan.chunk_keys, kDeterministicSplitKeys);
}

// Deterministic splits from the capacity alone: ~4096 keys each, whole tiles, at most `cap` (then longer).
TEST(Heuristics, DeterministicSplitsFromTheCapacityAlone) {
  const DeterministicSplits a = deterministic_splits(12000, 64, kMaxSplits);
  EXPECT_EQ(a.splits, 3);
  EXPECT_EQ(a.chunk_keys, 4032);  // ceil(12000 / 3) = 4000, rounded up to 64-key tiles
  const DeterministicSplits b = deterministic_splits(4096, 64, kMaxSplits);
  EXPECT_EQ(b.splits, 1);
  EXPECT_EQ(b.chunk_keys, 4096);
  const DeterministicSplits c = deterministic_splits(0, 64, kMaxSplits);  // an empty cache: one tile
  EXPECT_EQ(c.splits, 1);
  EXPECT_EQ(c.chunk_keys, 64);
  const DeterministicSplits d = deterministic_splits(int64_t{1} << 21, 128, 128);  // 2M keys, capped
  EXPECT_EQ(d.splits, 128);
  EXPECT_EQ(d.chunk_keys, 16384);
  for (int64_t keys : {1, 63, 4097, 100000, 1 << 20}) {
    const DeterministicSplits e = deterministic_splits(keys, 64, kMaxSplits);
    EXPECT_GE(static_cast<int64_t>(e.splits) * e.chunk_keys, keys);
    EXPECT_EQ(e.chunk_keys % 64, 0);
  }
  // The balanced schedule is for the non-deterministic decode; its deterministic variant is a predicate of
  // its own (the sm_90a decode kernel's A/B switch decides whether it runs).
  FwdProblem p = decode(4, 8, 2, 1);
  p.deterministic = true;
  EXPECT_FALSE(plan_balanced(p, true));
  EXPECT_TRUE(plan_balanced_deterministic(p, true));
  EXPECT_FALSE(plan_balanced_deterministic(p, false));
  p.num_splits = 4;
  EXPECT_FALSE(plan_balanced_deterministic(p, true));
}

TEST(Heuristics, MoreThanSixteenPackedRowsTakeTheGeneralKernel) {
  const AttentionPlan plan = plan_of(decode(8, 32, 8, 8));  // g x q = 32 rows
  EXPECT_FALSE(plan.key_split);
  EXPECT_FALSE(plan.balanced);
  EXPECT_EQ(plan.m_blocks, 1);  // 64-row CTAs
}

TEST(Heuristics, Fp8DecodeFitsTwoCtasAnSm) {
  FwdProblem p = decode(4);
  p.kv_dtype = DType::fp8_e4m3;  // the converted fp16/bf16 tile costs another 34 KB of shared memory
  const AttentionPlan plan = plan_of(p);
  EXPECT_TRUE(plan.balanced);
  EXPECT_EQ(plan.balanced_slots, 2 * kSms);
}

TEST(Heuristics, SharedMemoryOfTheDecodeKernelLeavesRoomForThreeCtas) {
  const size_t cta = attention_smem_bytes(128, 128, false, true) +
                     attention_static_smem_bytes(128, 128, true) + 1024;  // the runtime's reserve
  EXPECT_LE(3 * cta, static_cast<size_t>(kSmemPerSm));
}

TEST(Heuristics, HeadDim512FitsAnSm80BlockAndTwoCtasAnSm90Sm) {
  // d = dv = 512: 16-key tiles, O split over two warps per 16 rows. Every variant (qv, fp8 with its
  // converted tile) fits the 163 KiB an sm_80 block may opt in to; bf16 without qv fits two CTAs an H200 SM.
  const TileShape t = attention_tile(512, 512);
  EXPECT_EQ(t.block_n, 16);
  EXPECT_EQ(t.warps_dv, 2);
  EXPECT_FALSE(t.key_split_ok);
  constexpr size_t kSm80BlockLimit = 163 * 1024;
  for (bool qv : {false, true}) {
    for (bool fp8 : {false, true}) {
      EXPECT_LE(attention_smem_bytes(512, 512, qv, false, fp8) + attention_static_smem_bytes(512, 512, false),
                kSm80BlockLimit)
          << "qv " << qv << " fp8 " << fp8;
    }
  }
  FwdProblem p = decode(4, 32, 8);
  p.head_dim = p.head_dim_v = 512;
  const AttentionPlan plan = plan_attention(p, 512, 512, kSms, kSmemPerSm);
  EXPECT_FALSE(plan.balanced);
  EXPECT_GT(plan.splits, 1);  // 32 CTAs of one row block: split to fill the machine
  const size_t cta = plan.smem_bytes + plan.static_smem_bytes + 1024;
  EXPECT_LE(2 * cta, static_cast<size_t>(kSmemPerSm));
}

// ---- the dispatch table's arch column (kernel_table.hpp), with rows of its own

kvattn_status no_launch(const AttnParams&, const AttentionPlan&, CUstream_st*) {
  return KVATTN_OK;
}
bool decode_only(const FwdProblem& p) {
  return p.max_seqlen_q == 1;
}
AttentionKernel row(int arch, int d, bool built = true, bool (*supports)(const FwdProblem&) = nullptr) {
  return {arch, DType::bf16, DType::bf16, DType::bf16, d, d, built, supports, &plan_portable, &no_launch};
}

TEST(KernelTable, ArchSpecificCodeRunsOnItsArchOnlyAndPortableCodeEverywhere) {
  EXPECT_TRUE(arch_runs_on(kArchPortable, 80));
  EXPECT_TRUE(arch_runs_on(kArchPortable, 86));
  EXPECT_TRUE(arch_runs_on(kArchPortable, 90));
  EXPECT_TRUE(arch_runs_on(kArchPortable, 100));
  EXPECT_FALSE(arch_runs_on(kArchPortable, 75));
  EXPECT_TRUE(arch_runs_on(kArchSm90, 90));
  EXPECT_FALSE(arch_runs_on(kArchSm90, 80));
  EXPECT_FALSE(arch_runs_on(kArchSm90, 100));  // sm_90a features are not forward compatible
}

TEST(KernelTable, TheHighestArchTheDeviceRunsWinsUnlessPortableIsForced) {
  const AttentionKernel table[] = {row(kArchPortable, 128), row(kArchSm90, 128)};
  const FwdProblem p = decode(4);
  EXPECT_EQ(pick_kernel(table, 2, p, 90, false).kernel, &table[1]);
  EXPECT_EQ(pick_kernel(table, 2, p, 90, true).kernel, &table[0]);  // KVATTN_FORCE_PORTABLE=1
  EXPECT_EQ(pick_kernel(table, 2, p, 80, false).kernel, &table[0]);
  EXPECT_EQ(pick_kernel(table, 2, p, 100, false).kernel, &table[0]);
}

TEST(KernelTable, ARowThatDeclinesTheProblemLeavesItToThePortableRow) {
  const AttentionKernel table[] = {row(kArchSm90, 128, true, &decode_only), row(kArchPortable, 128)};
  EXPECT_EQ(pick_kernel(table, 2, decode(4), 90, false).kernel, &table[0]);
  EXPECT_EQ(pick_kernel(table, 2, decode(4, 32, 8, 4), 90, false).kernel, &table[1]);
}

TEST(KernelTable, AmongRowsOfOneArchAndDimsTheFirstThatSupportsTheProblemWins) {
  // dispatch.cu lists the sm_90 prefill rows before the decode rows: a problem both take runs on prefill.
  const AttentionKernel table[] = {row(kArchPortable, 128), row(kArchSm90, 128, true, &decode_only),
                                   row(kArchSm90, 128)};
  EXPECT_EQ(pick_kernel(table, 3, decode(4), 90, false).kernel, &table[1]);
  EXPECT_EQ(pick_kernel(table, 3, decode(4, 32, 8, 4), 90, false).kernel, &table[2]);
}

TEST(KernelTable, TheBalancedPredicateOfTheSm90DecodeRowsIsThePlans) {
  // decode_sm90_supports asks plan_balanced(p, plan_key_split(p, tile)) without making a plan.
  for (int batch : {1, 4, 512, 513}) {
    for (int sq : {1, 2, 4, 5}) {
      for (int splits : {0, 1, 3}) {
        for (bool deterministic : {false, true}) {
          FwdProblem p = decode(batch, 32, 8, sq);
          p.num_splits = splits;
          p.deterministic = deterministic;
          const AttentionPlan plan = plan_of(p);
          EXPECT_EQ(plan_key_split(p, attention_tile(128, 128)), plan.key_split);
          EXPECT_EQ(plan_balanced(p, plan.key_split), plan.balanced)
              << "batch " << batch << " sq " << sq << " splits " << splits << " det " << deterministic;
        }
      }
    }
  }
}

TEST(KernelTable, WithinAnArchTheSmallestCoveringDimsWin) {
  const AttentionKernel table[] = {row(kArchPortable, 256), row(kArchPortable, 128), row(kArchPortable, 64),
                                   row(kArchSm90, 256, false)};
  FwdProblem p = decode(4);
  p.head_dim = p.head_dim_v = 100;
  EXPECT_EQ(pick_kernel(table, 4, p, 90, false).kernel, &table[1]);
  p.head_dim = p.head_dim_v = 64;
  EXPECT_EQ(pick_kernel(table, 4, p, 90, false).kernel, &table[2]);
}

TEST(KernelTable, FailuresSayWhy) {
  const AttentionKernel table[] = {row(kArchPortable, 64), row(kArchPortable, 128, false)};
  FwdProblem p = decode(4);
  p.q_dtype = p.kv_dtype = DType::f16;
  EXPECT_EQ(pick_kernel(table, 2, p, 90, false).failure, PickFailure::dtypes);
  p.q_dtype = p.kv_dtype = DType::bf16;
  EXPECT_EQ(pick_kernel(table, 2, p, 90, false).failure, PickFailure::unbuilt);  // d 128: not compiled
  p.head_dim = p.head_dim_v = 512;
  EXPECT_EQ(pick_kernel(table, 2, p, 90, false).failure, PickFailure::dims);
  p.head_dim = p.head_dim_v = 64;
  const Pick ok = pick_kernel(table, 2, p, 90, false);
  EXPECT_EQ(ok.kernel, &table[0]);
  EXPECT_EQ(ok.failure, PickFailure::none);
}

TEST(KernelTable, ThePortablePlanIsTheHeuristicsPlan) {
  const AttentionKernel k = row(kArchPortable, 128);
  const DeviceShape h200{90, kSms, kSmemPerSm, 232448};
  const AttentionPlan a = k.plan(decode(4), k, h200), b = plan_of(decode(4));
  EXPECT_EQ(a.balanced_ctas, b.balanced_ctas);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
  EXPECT_EQ(a.smem_bytes + a.static_smem_bytes,
            attention_smem_bytes(128, 128, false, true) + attention_static_smem_bytes(128, 128, true));
}

}  // namespace
