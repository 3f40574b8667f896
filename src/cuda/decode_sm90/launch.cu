// The Hopper decode kernel's host side: its table rows' supports predicate, plan and launch
// (decode_sm90.hpp).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/attention/launch.hpp"
#include "cuda/common/cache_rows.hpp"
#include "cuda/common/host.hpp"
#include "cuda/common/tensor_map.hpp"
#include "cuda/decode_sm90/cluster.cuh"
#include "cuda/decode_sm90/cluster_shape.hpp"
#include "cuda/decode_sm90/decode_sm90.hpp"
#include "cuda/decode_sm90/kernel.cuh"
#include "cuda/prefill_sm90/config.hpp"  // TmaGeometry

namespace kvattn::cuda {
namespace {

using DecodeKernel = void (*)(AttnParams);
using ClusterKernel = void (*)(AttnParams, DecodeKvMaps);

// A kernel variant and the devices it has opted into its shared memory on (set_max_dynamic_smem_once).
template <class Kernel>
struct Variant {
  Kernel kernel = nullptr;
  std::atomic<uint64_t>* opted_in = nullptr;
};
using DecodeVariant = Variant<DecodeKernel>;
using ClusterVariant = Variant<ClusterKernel>;

// groups: 16-row groups of a unit (DecodeCfg::kGroups); two only with 8 producer warps (the plan's rule).
// consumer_warps 8: fp8 caches, one group, 4 producer warps (decode_warps).
template <typename T, typename TKV, bool kFp8F16 = true>
DecodeVariant kernel_of(int producer_warps, int groups, int consumer_warps) {
  // per producer-warp count: 2, 4, 8; then 8 with 2 groups; then 8 consumer warps
  static std::atomic<uint64_t> opted_in[5] = {};
  if (consumer_warps == 8) {
    if constexpr (std::is_same_v<TKV, __nv_fp8_e4m3>) {
      if (producer_warps == 4 && groups == 1)
        return {sm90::decode_sm90_kernel<sm90::DecodeCfg<T, TKV, 4, kFp8F16, 1, 8>>, &opted_in[4]};
    }
    return {};
  }
  if (groups == 2) {
    if (producer_warps != 8) return {};
    return {sm90::decode_sm90_kernel<sm90::DecodeCfg<T, TKV, 8, kFp8F16, 2>>, &opted_in[3]};
  }
  switch (producer_warps) {
    case 2:
      return {sm90::decode_sm90_kernel<sm90::DecodeCfg<T, TKV, 2, kFp8F16>>, &opted_in[0]};
    case 4:
      return {sm90::decode_sm90_kernel<sm90::DecodeCfg<T, TKV, 4, kFp8F16>>, &opted_in[1]};
    default:
      return {sm90::decode_sm90_kernel<sm90::DecodeCfg<T, TKV, 8, kFp8F16>>, &opted_in[2]};
  }
}

// KVATTN_DECODE_SM90_FP8_BF16=1: fp8 caches under bf16 q convert K and V to bf16 (the first measured
// path) instead of computing in f16.
bool fp8_in_bf16() {
  const char* e = std::getenv("KVATTN_DECODE_SM90_FP8_BF16");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

// The kernel for (compute dtype, cache dtype, producer warps, row groups, consumer warps); its kernel is
// nullptr when this build has none.
DecodeVariant pick_kernel(DType compute, DType kv, int producer_warps, int groups, int consumer_warps) {
  if (!dtype_built(compute) || !head_dim_built(DecodeSm90Shape::kHeadDim)) return {};
  if (producer_warps != 2 && producer_warps != 4 && producer_warps != 8) return {};
  if (groups != 1 && groups != 2) return {};
  const bool fp8 = kv == DType::fp8_e4m3;
  if (!fp8 && kv != compute) return {};
  if constexpr (dtype_built(DType::bf16)) {
    if (compute == DType::bf16) {
      if (!fp8) return kernel_of<__nv_bfloat16, __nv_bfloat16>(producer_warps, groups, consumer_warps);
      return fp8_in_bf16()
                 ? kernel_of<__nv_bfloat16, __nv_fp8_e4m3, false>(producer_warps, groups, consumer_warps)
                 : kernel_of<__nv_bfloat16, __nv_fp8_e4m3, true>(producer_warps, groups, consumer_warps);
    }
  }
  if constexpr (dtype_built(DType::f16)) {
    if (compute == DType::f16) {
      return fp8 ? kernel_of<half, __nv_fp8_e4m3>(producer_warps, groups, consumer_warps)
                 : kernel_of<half, half>(producer_warps, groups, consumer_warps);
    }
  }
  return {};
}

// The cluster form's kernel (cluster.cuh) for (compute dtype, cache dtype) and the devices it has opted
// into its shared memory and its cluster size on; kernel nullptr when this build has none.
template <typename T, typename TKV, bool kFp8F16 = true, bool kSwizzled = false>
ClusterVariant cluster_kernel_of() {
  static std::atomic<uint64_t> opted_in{0};
  return {sm90::decode_cluster_kernel<sm90::DecodeCfg<T, TKV, 4, kFp8F16, 1, 4, kSwizzled>>, &opted_in};
}
// swizzled: the 16-bit caches' TMA kernel (DecodeClusterShape).
ClusterVariant pick_cluster_kernel(DType compute, DType kv, bool swizzled = false) {
  if (!dtype_built(compute) || !head_dim_built(DecodeSm90Shape::kHeadDim)) return {};
  const bool fp8 = kv == DType::fp8_e4m3;
  if (!fp8 && kv != compute) return {};
  if constexpr (dtype_built(DType::bf16)) {
    if (compute == DType::bf16) {
      if (!fp8) {
        return swizzled ? cluster_kernel_of<__nv_bfloat16, __nv_bfloat16, true, true>()
                        : cluster_kernel_of<__nv_bfloat16, __nv_bfloat16>();
      }
      return fp8_in_bf16() ? cluster_kernel_of<__nv_bfloat16, __nv_fp8_e4m3, false>()
                           : cluster_kernel_of<__nv_bfloat16, __nv_fp8_e4m3, true>();
    }
  }
  if constexpr (dtype_built(DType::f16)) {
    if (compute == DType::f16) {
      if (!fp8)
        return swizzled ? cluster_kernel_of<half, half, true, true>() : cluster_kernel_of<half, half>();
      return cluster_kernel_of<half, __nv_fp8_e4m3>();
    }
  }
  return {};
}

// The cluster kernel's shared memory and its non-portable cluster size (16), set once per (kernel,
// device) as set_max_dynamic_smem_once does.
kvattn_status cluster_opt_in(const ClusterVariant& v, int device, size_t smem) {
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (v.opted_in->load(std::memory_order_acquire) & bit) != 0) return KVATTN_OK;
  const void* kernel = reinterpret_cast<const void*>(v.kernel);
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err != cudaSuccess) return cuda_fail(err, "decode_cluster_kernel attributes");
  v.opted_in->fetch_or(bit, std::memory_order_acq_rel);
  return KVATTN_OK;
}

// Whether the library holds sm_90 machine code of the kernels (built with 90a in KVATTN_CUDA_ARCHS): asked
// once, on the first sm_90 device (an sm_80-only build would run them from compute_80 PTX, as stubs).
bool built_for_sm90(DecodeKernel kernel) {
  static std::atomic<int> known{-1};
  int v = known.load(std::memory_order_relaxed);
  if (v < 0) {
    cudaFuncAttributes a{};
    const cudaError_t err = cudaFuncGetAttributes(&a, kernel);
    if (err != cudaSuccess) cudaGetLastError();
    v = err == cudaSuccess && a.binaryVersion >= 90 && a.ptxVersion >= 90 ? 1 : 0;
    known.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

}  // namespace

// fp8 caches with one row group run 8 consumer warps (two a sub-partition, 208 registers each) and 4
// producer warps (88), whatever KVATTN_DECODE_SM90 asks (other than 0); KVATTN_DECODE_SM90_FP8_CONSUMERS=4
// keeps them on the 4-consumer kernel of KVATTN_DECODE_SM90's producer count. Measured (H200, session 26):
// W2 b128 uniform -12%, W1 within 1% (bench/NOTES.md).
static bool fp8_eight_consumers() {
  const char* e = std::getenv("KVATTN_DECODE_SM90_FP8_CONSUMERS");
  return e == nullptr || std::strcmp(e, "4") != 0;
}
// The consumer warps (and the producer warps they imply) of a problem on this kernel.
struct DecodeWarps {
  int producers, consumers;
};
static DecodeWarps decode_warps(DType kv, int rows) {
  const int producers = decode_sm90_producer_warps();
  if (producers != 0 && kv == DType::fp8_e4m3 && DecodeSm90Shape::row_groups(rows) == 1 &&
      fp8_eight_consumers())
    return {4, 8};
  return {producers, DecodeSm90Shape::kConsumerWarps};
}

int decode_sm90_producer_warps() {
  // Read on every call (a getenv): tests and bench/decode_ab.py switch it inside one process.
  const char* e = std::getenv("KVATTN_DECODE_SM90");
  if (e == nullptr) return 8;  // the default (bench/NOTES.md, 2026-12-01: 8 producers beat 2 and 4)
  if (std::strcmp(e, "0") == 0) return 0;
  if (std::strcmp(e, "2") == 0) return 2;
  if (std::strcmp(e, "4") == 0) return 4;
  return 8;
}

// Every sm_90 part opts a CTA into 227 KiB of shared memory (1 KiB of it reserved by the runtime): the ring
// of the largest configuration fits, so the rows need not ask the device.
// (1,536 bytes of static shared memory on top: the balanced scan's, with its known sequences: ptxas reports
// 1,280-1,408.)
static_assert(DecodeSm90Shape::smem_bytes(false, 2) + 1024 + 1536 <= 227 * 1024 &&
                  DecodeSm90Shape::smem_bytes(true, 2) + 1024 + 1536 <= 227 * 1024 &&
                  DecodeSm90Shape::smem_bytes(false, 8, 2) + 1024 + 1536 <= 227 * 1024 &&
                  DecodeSm90Shape::smem_bytes(true, 8, 2) + 1024 + 1536 <= 227 * 1024 &&
                  DecodeSm90Shape::smem_bytes(true, 4, 1, 8) + 1024 + 1536 <= 227 * 1024,
              "the decode ring fits an sm_90 CTA");
static_assert(DecodeClusterShape::smem_bytes(true) + 1024 <= 227 * 1024,
              "the cluster form's rings fit an sm_90 CTA");

// A tile count of the balanced schedule from the environment (read on every plan: A/B runs switch it
// inside one process), at least `floor`, else `fallback`.
static int64_t env_tiles(const char* name, int64_t fallback, int64_t floor) {
  const char* e = std::getenv(name);
  return e != nullptr ? std::max<int64_t>(floor, std::atoll(e)) : fallback;
}

// The balanced schedule takes every SM, not whole CTAs a unit, once each SM gets this many 64-key tiles
// (balance.hpp). H200 (bench/NOTES.md, session 7): 1,988 tiles an SM (b16 x 128k) 1.3% faster, ~500 (b4 x
// 128k, b16 x 32k) 0-1%, ~124 (b1 x 128k, b4 x 32k) 1-2.5% slower (a second piece in most CTAs).
// KVATTN_DECODE_WHOLE_GRID=n sets it (0: never).
static int64_t decode_sm90_whole_grid_tiles() {
  return env_tiles("KVATTN_DECODE_WHOLE_GRID", 1024, 0);
}

// A CTA's share of the balanced schedule is at least this many 64-key tiles (balance.hpp; the portable
// kernel keeps kMinCtaCost = 4). H200 (bench/NOTES.md, session 9), W1 32/8 b1, us at 4 / 2 / 1: 1k 21.4-21.8
// / 18.7-19.0 / 18.7-19.1, 2k 22.5 / 20.4 / 20.5, 4k and longer unchanged (their shares are longer): twice
// the CTAs read half the keys each, and the starts overlap. KVATTN_DECODE_MIN_CTA_COST=n sets it.
static int64_t decode_sm90_min_cta_tiles() {
  return env_tiles("KVATTN_DECODE_MIN_CTA_COST", 2, 1);
}

// A unit's fixed work on the balanced line, in 64-key tiles (balance.hpp), when the units outnumber the
// CTAs: a CTA then computes several pieces, and each switch (epilogue, next Q, the ring's refill) costs
// ~5.5 us on the H200, ~6 tiles on top of kUnitCost's 2 (bench/NOTES.md, session 13: W2 b128 uniform
// 390 -> 328 us at 8). With fewer units than CTAs every CTA computes one piece and pays one start, so the
// line keeps kUnitCost (a larger charge there only shortens the first CTA of each unit: W4 b8 4k q8 +2%
// at 8). fp8 caches take the same charge: 16 tiles paid while their consumers held 8 stages of 64 keys, but
// with 16 stages of 32 keys 8 wins again (W2 fp8 b64 / b128 uniform / b128 Zipf / b256 -5 / -7 / -14 / -5%
// against 16 on the H200, session 27; 7 and 6 within 2% of 8 for both caches). KVATTN_DECODE_UNIT_COST=n
// sets the many-unit charge.
static int64_t decode_sm90_unit_tiles(int64_t units, int64_t ctas) {
  return units >= ctas ? env_tiles("KVATTN_DECODE_UNIT_COST", 8, 1) : kUnitCost;
}

// Deterministic mode on this kernel: the balanced schedule over whole chunks of the static splits' keys
// (schedule.cuh, walk_balanced_pieces), instead of the portable kernel's static splits. H200 (bench/NOTES.md,
// session 25), us, default schedule / portable static splits / this: W1 b4 32k p16 139.8 / 163.5 / 148.2,
// b16 128k 1,904 / 2,071 / 1,980, W2 b128 Zipf 292.1 / 594.3 / 320.3. KVATTN_DECODE_SM90_DETERMINISTIC=0:
// the portable kernel's static splits (another kernel: other bits). Read on every call.
static bool decode_sm90_deterministic() {
  const char* e = std::getenv("KVATTN_DECODE_SM90_DETERMINISTIC");
  return e == nullptr || std::strcmp(e, "0") != 0;
}

// Keys a chunk of deterministic mode on this kernel, before the capacity scales it (deterministic_splits).
// H200 (session 25), W1 b4 32k / b16 128k / W2 b128 Zipf against 4096: 2048 +4% / +1.5% / +1%, 1024 +17% /
// +6% / +11%, 3072 level: a piece switch costs more than the finer balance gains.
// KVATTN_DECODE_SM90_DET_CHUNK sets it (an A/B knob).
static int64_t decode_sm90_det_chunk_keys() {
  return env_tiles("KVATTN_DECODE_SM90_DET_CHUNK", kDeterministicSplitKeys, 64);
}

// The cluster form (cluster.cuh) takes a balanced decode of <= 16 packed rows a unit whose units all fit
// one wave of clusters of C = 8 or 16 CTAs (S clusters a unit for few units of long sequences), when no
// sequence can hold more than decode_cluster_max_keys() keys (the capacity: static, so graph-safe) or the
// model says it streams them faster (cluster_shape.hpp: the picks and the measurements behind them). It
// removes the persistent kernel's start (the balanced scan, the walk) and, with S = 1, its combine kernel,
// what batch 1 at 1k-4k pays (H100, session 39: W1 32/8 b1 1k / 2k / 4k p16 18.4 / 20.0 / 23.2 -> 14.2 /
// 16.9 / 22.7 us; since session 42 with 4 consumer and 4 producer warps a CTA, since session 44 K / V by
// TMA where the rings refill). Not in deterministic mode (C depends on the batch) nor with sm_margin.
// KVATTN_DECODE_CLUSTER: 0 off, 8 at most 8 CTAs a unit; KVATTN_DECODE_CLUSTER_MAX_KEYS: the capacity bound
// (read on every plan).
static int decode_cluster_max_ctas() {
  const char* e = std::getenv("KVATTN_DECODE_CLUSTER");
  if (e == nullptr) return DecodeClusterShape::kMaxCtas;
  if (std::strcmp(e, "0") == 0) return 0;
  return std::strcmp(e, "8") == 0 ? 8 : DecodeClusterShape::kMaxCtas;
}
// Clusters of `ctas` CTAs of the kernel resident at once on device_id (cached per device < 64; 0 when the
// query fails).
// (Asked of the padded kernel: the swizzled one's shared memory is smaller, so as many of it fit.)
static int max_active_clusters(const ClusterVariant& v, int device_id, int ctas, bool fp8) {
  static std::atomic<int> cache[64][2][2] = {};  // [device][fp8][ctas == 16], value + 1
  const bool cacheable = device_id >= 0 && device_id < 64;
  std::atomic<int>* slot = cacheable ? &cache[device_id][fp8][ctas == 16] : nullptr;
  if (slot != nullptr && slot->load(std::memory_order_relaxed) > 0)
    return slot->load(std::memory_order_relaxed) - 1;
  DeviceGuard guard(device_id);
  const size_t smem = DecodeClusterShape::smem_bytes(fp8);
  int n = 0;
  if (guard.status() == cudaSuccess && cluster_opt_in(v, device_id, smem) == KVATTN_OK) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(ctas);
    config.blockDim = dim3(DecodeClusterShape::kThreads);
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = ctas;
    attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&n, reinterpret_cast<const void*>(v.kernel), &config) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
  } else {
    cudaGetLastError();
  }
  if (slot != nullptr) slot->store(n + 1, std::memory_order_relaxed);
  return n;
}
static int64_t decode_cluster_max_keys() {
  return env_tiles("KVATTN_DECODE_CLUSTER_MAX_KEYS", 4096, 0);
}
// The swizzled TMA kernel for 16-bit caches whose every ring holds at least kTmaMinStages stages at the
// cache's capacity (static shapes) and whose layout the maps take (cluster_kv_maps: paged with a page size
// a multiple of 16, contiguous, packed). W1 b1 4k (8 CTAs a unit, 4 stages a ring, the slots refill): H200
// p16 15.2 -> 13.2 us, contiguous 14.6 -> 13.6-13.8; H100 15.4 -> 13.9-14.0, 15.0-15.1 -> 14.3-14.4. With
// 1 or 2 stages a ring (1k, 2k: no refill) TMA's first boxes land later than cp.async's copies: 1k +3 to
// +6%, 2k contiguous +4 to +8% (bench/NOTES.md, session 44). KVATTN_DECODE_TMA (tests, A/B): "0" never;
// "force" whatever the stages; "copy" as force, without the maps (every stage by cp.async into the swizzled
// places).
static const char* decode_tma_env() {
  return std::getenv("KVATTN_DECODE_TMA");
}
// The layouts the cluster form's maps take (cluster_kv_maps): a page's 16-slot runs at multiples of 16.
static bool cluster_tma_layout(bool paged, int64_t page_size) {
  return !paged || (page_size > 0 && page_size % 16 == 0);
}
// A 16-bit cache whose layout the maps take, TMA not switched off.
static bool cluster_tma_eligible(const FwdProblem& p) {
  const char* env = decode_tma_env();
  if (p.kv_dtype == DType::fp8_e4m3 || (env != nullptr && std::strcmp(env, "0") == 0)) return false;
  return cluster_tma_layout(paged_cache(p), p.page_size);
}
static bool cluster_tma(const FwdProblem& p, int ctas) {
  if (ctas <= 0 || p.kv_dtype == DType::fp8_e4m3) return false;
  const char* env = decode_tma_env();
  if (env != nullptr && (std::strcmp(env, "force") == 0 || std::strcmp(env, "copy") == 0)) return true;
  if (!cluster_tma_eligible(p)) return false;
  const int64_t keys_a_cta = max_sequence_keys(p) / ctas;
  return keys_a_cta >= kClusterTmaKeys;
}

// KVATTN_DECODE_CLUSTER_LONG: -1 the model (unset), 0 never past the capacity bound, 1 without the model
// (tests, A/B). KVATTN_DECODE_CLUSTER_SPLITS=n: n clusters a unit wherever they fit (tests, A/B).
static int decode_cluster_long_rule() {
  const char* e = std::getenv("KVATTN_DECODE_CLUSTER_LONG");
  if (e == nullptr) return -1;
  return std::strcmp(e, "0") == 0 ? 0 : std::strcmp(e, "1") == 0 ? 1 : -1;
}
static int decode_cluster_splits_env() {
  const char* e = std::getenv("KVATTN_DECODE_CLUSTER_SPLITS");
  return e != nullptr ? std::max(0, std::min(kMaxClusterSplits, std::atoi(e))) : 0;
}
static_assert(kClusterTmaKeys == int64_t{DecodeClusterShape::kTmaMinStages} * DecodeClusterShape::kWarps *
                                     DecodeSm90Shape::stage_keys(false),
              "the model's keys a CTA for the TMA kernel: kTmaMinStages stages a ring");
static_assert(DecodeClusterShape::kMinCtas == 8 && DecodeClusterShape::kMaxCtas == 16, "the model's sizes");

// The cluster form's C and S for p (cluster_shape.hpp), or none: the kernel's own conditions here (a balanced
// decode of <= 16 packed rows a unit, not deterministic, no sm_margin: C depends on the batch), the device's
// resident clusters and the switches, then the model.
static ClusterShape decode_cluster_pick(const FwdProblem& p, const AttentionPlan& plan, int64_t sms,
                                        int64_t dram_bytes_per_us) {
  const int max_ctas = decode_cluster_max_ctas();
  if (max_ctas == 0 || p.deterministic || p.sm_margin > 0 || !plan.balanced ||
      plan.rows_per_unit > DecodeSm90Shape::kGroupRows) {
    return {};
  }
  const DType compute = p.q_dtype == DType::fp8_e4m3 ? DType::bf16 : p.q_dtype;
  const ClusterVariant v = pick_cluster_kernel(compute, p.kv_dtype);
  if (v.kernel == nullptr) return {};
  const bool fp8 = p.kv_dtype == DType::fp8_e4m3;
  const ClusterCard card{sms, dram_bytes_per_us, max_active_clusters(v, p.device_id, 8, fp8),
                         max_ctas == 16 ? max_active_clusters(v, p.device_id, 16, fp8) : 0};
  const ClusterAsk ask{max_ctas, decode_cluster_splits_env(), decode_cluster_max_keys(),
                       decode_cluster_long_rule()};
  return cluster_shape(p, cluster_tma_eligible(p), card, ask);
}

bool decode_sm90_supports(const FwdProblem& p) {
  using S = DecodeSm90Shape;
  if (p.head_dim != S::kHeadDim || p.head_dim_v != S::kHeadDim || p.qv.ptr != nullptr) return false;
  // The balanced schedule (<= 32 packed rows a unit, num_splits = 0; deterministic mode as whole chunks
  // unless KVATTN_DECODE_SM90_DETERMINISTIC=0); static splits stay on the portable kernel. 17-32 rows are two
  // row groups, a kernel that exists with 8 producer warps only (kernel_of: no kernel otherwise).
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * (p.num_q_heads / std::max(1, p.num_kv_heads));
  const DecodeWarps warps = decode_warps(p.kv_dtype, static_cast<int>(std::min<int64_t>(rows, S::kMaxRows)));
  if (warps.producers == 0) return false;
  const bool balanced = plan_balanced(p, rows <= S::kMaxRows) ||
                        (decode_sm90_deterministic() && plan_balanced_deterministic(p, rows <= S::kMaxRows));
  // The producer's row offsets are signed 64-bit with -1 for "no row" (a bad page id): a cache with a
  // negative stride (a reversed view) would have valid rows read as zeros.
  if (!balanced || !kv_rows_vec16(p) || !cache_strides_non_negative(p.k_cache) ||
      !cache_strides_non_negative(p.v_cache)) {
    return false;
  }
  const DType compute_dtype = p.q_dtype == DType::fp8_e4m3 ? DType::bf16 : p.q_dtype;
  const DecodeKernel kernel =
      pick_kernel(compute_dtype, p.kv_dtype, warps.producers, S::row_groups(rows), warps.consumers).kernel;
  return kernel != nullptr && built_for_sm90(kernel);
}

AttentionPlan plan_decode_sm90(const FwdProblem& p, const AttentionKernel& row, const DeviceShape& device) {
  using S = DecodeSm90Shape;
  AttentionPlan plan = plan_portable(p, row, device);
  const int64_t sms = std::max(1, device.sm_count - std::max(0, p.sm_margin));
  // 17-32 packed rows: the portable plan has static splits (its key-split variant stops at 16 rows); the
  // same balanced grid and workspace instead, for one CTA an SM.
  if (!plan.balanced) plan_balanced_grid(plan, p, sms);
  plan.balanced_ctas = std::max<int64_t>(1, std::min<int64_t>(sms, plan.balanced_ctas));
  plan.balanced_slots = plan.balanced_ctas;
  plan.balanced_whole_grid = decode_sm90_whole_grid_tiles();
  plan.balanced_min_cost = decode_sm90_min_cta_tiles();
  plan.balanced_unit_cost =
      decode_sm90_unit_tiles(static_cast<int64_t>(p.batch) * p.num_kv_heads, plan.balanced_ctas);
  if (p.deterministic) {
    // Whole chunks of the static splits' keys (decode_sm90_deterministic): their partials in the static
    // splits' layout (splits, total_q, hq, dv) and (splits, total_q, hq), then unit_pieces (unused).
    const int64_t max_keys = max_sequence_keys(p);
    const DeterministicSplits d =
        deterministic_splits(max_keys, S::kBlockN, kMaxSplits, decode_sm90_det_chunk_keys());
    plan.splits = d.splits;
    plan.chunk_keys = d.chunk_keys;
    plan_partials(plan, p, static_cast<size_t>(p.total_q) * p.num_q_heads * plan.splits, true);
  }
  if (const ClusterShape c = decode_cluster_pick(p, plan, sms, device.dram_bytes_per_us); c.ctas > 0) {
    // One cluster a unit: no partials, no combine, so none of the balanced schedule's workspace planned
    // above; S > 1: the static splits' partials (splits, total_q, hq, dv), merged by the split combine.
    plan.balanced = false;
    plan.workspace_bytes = plan.o_partial_offset = plan.lse_partial_offset = plan.unit_pieces_offset = 0;
    plan.cluster_ctas = c.ctas;
    plan.splits = c.splits;
    if (c.splits > 1)
      plan_partials(plan, p, static_cast<size_t>(p.total_q) * p.num_q_heads * c.splits, false);
    plan.cluster_tma = cluster_tma(p, c.ctas * c.splits);
    plan.smem_bytes = DecodeClusterShape::smem_bytes(p.kv_dtype == DType::fp8_e4m3, plan.cluster_tma);
    plan.static_smem_bytes = 0;
    return plan;
  }
  const DecodeWarps warps = decode_warps(p.kv_dtype, plan.rows_per_unit);
  plan.producer_warps = warps.producers;
  plan.consumer_warps = warps.consumers;
  plan.smem_bytes = S::smem_bytes(p.kv_dtype == DType::fp8_e4m3, plan.producer_warps,
                                  S::row_groups(plan.rows_per_unit), plan.consumer_warps);
  plan.static_smem_bytes = 0;
  return plan;
}

// The cluster form's K / V tensor maps (16-bit caches: its swizzled stages), boxes of 16 slots: paged
// caches whose page size is a multiple of 16, contiguous and packed caches of at least 16 slots (a stage's
// runs start anywhere there); tma = 0 for the padded kernel, or where the encoder declines (tensor_map.hpp:
// the swizzled kernel then copies every stage by cp.async).
static DecodeKvMaps cluster_kv_maps(const AttnParams& params, const AttentionPlan& plan, DType kv_dtype) {
  DecodeKvMaps maps{};
  const SeqParams& sp = params.seq;
  if (!plan.cluster_tma || kv_dtype == DType::fp8_e4m3) return maps;
  if (const char* env = decode_tma_env(); env != nullptr && std::strcmp(env, "copy") == 0) return maps;
  constexpr int kBoxSlots = 16;
  const bool packed = sp.cu_seqlens_k != nullptr, paged = sp.page_table != nullptr && !packed;
  constexpr int kD = DecodeSm90Shape::kHeadDim;
  if (!cluster_tma_layout(paged, sp.page_size) || params.head_dim != kD || params.head_dim_v != kD)
    return maps;
  const sm90::TmaGeometry g = sm90::tma_geometry(packed, paged, sp.num_pages, sp.page_size, kBoxSlots);
  const CUtensorMapDataType dtype =
      kv_dtype == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const KvMapShape shape{dtype, 2, g.slots, g.pages, params.num_kv_heads, packed, 64, kBoxSlots};
  maps.tma = encode_kv_maps(params.k_cache, kD, params.v_cache, kD, shape, &maps.k, &maps.v) ? 1 : 0;
  return maps;
}

// The cluster form: grid (C S, kv heads, batch) in clusters of C along x (S: plan.splits clusters a unit).
static kvattn_status launch_decode_cluster(const AttnParams& params, const AttentionPlan& plan,
                                           DType compute_dtype, DType kv_dtype, cudaStream_t stream) {
  const ClusterVariant v = pick_cluster_kernel(compute_dtype, kv_dtype, plan.cluster_tma);
  if (v.kernel == nullptr)
    return fail(KVATTN_ERROR_UNSUPPORTED, "decode_sm90: no cluster kernel for this dtype pair");
  static const bool debug_dispatch = std::getenv("KVATTN_DEBUG_DISPATCH") != nullptr;  // read once
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_fail(err, "decode_cluster_kernel device");
  }
  const DecodeKvMaps maps = cluster_kv_maps(params, plan, kv_dtype);
  if (debug_dispatch) {
    const bool fp8 = kv_dtype == DType::fp8_e4m3;
    std::fprintf(
        stderr,
        "kvattn: decode_sm90 cluster kernel, %d CTAs a unit, K/V by %s, clusters a unit: %d (clusters of "
        "16 / 8 resident: %d / %d, of %d: %d)\n",
        plan.cluster_ctas, maps.tma ? "TMA" : "cp.async", plan.splits,
        max_active_clusters(v, device, 16, fp8), max_active_clusters(v, device, 8, fp8), plan.cluster_ctas,
        max_active_clusters(v, device, plan.cluster_ctas, fp8));
  }
  if (const kvattn_status st = cluster_opt_in(v, device, plan.smem_bytes); st != KVATTN_OK) return st;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(plan.cluster_ctas * plan.splits),
                        static_cast<unsigned>(params.num_kv_heads), static_cast<unsigned>(params.seq.batch));
  config.blockDim = dim3(DecodeClusterShape::kThreads);
  config.dynamicSmemBytes = plan.smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = static_cast<unsigned>(plan.cluster_ctas);
  attributes[0].val.clusterDim.y = attributes[0].val.clusterDim.z = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attributes;
  config.numAttrs = plan.early_launch ? 2 : 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, v.kernel, params, maps);
  if (err != cudaSuccess) return cuda_fail(err, "launching decode_cluster_kernel");
  return check_launch("decode_cluster_kernel");
}

kvattn_status launch_decode_sm90(const AttnParams& params, const AttentionPlan& plan, DType compute_dtype,
                                 DType kv_dtype, cudaStream_t stream) {
  using S = DecodeSm90Shape;
  if (plan.cluster_ctas > 0) return launch_decode_cluster(params, plan, compute_dtype, kv_dtype, stream);
  // The plan's warps (its smem_bytes), not the environment's now.
  const int producer_warps = plan.producer_warps, consumer_warps = plan.consumer_warps;
  const DecodeVariant variant =
      pick_kernel(compute_dtype, kv_dtype, producer_warps, S::row_groups(plan.rows_per_unit), consumer_warps);
  if (variant.kernel == nullptr) {
    return fail(KVATTN_ERROR_UNSUPPORTED, "decode_sm90: no kernel for this dtype pair and row count");
  }
  static const bool debug_dispatch = std::getenv("KVATTN_DEBUG_DISPATCH") != nullptr;  // read once
  if (debug_dispatch) {
    std::fprintf(stderr, "kvattn: decode_sm90 kernel, %d producer warps, %d consumer warps\n", producer_warps,
                 consumer_warps);
  }
  const size_t smem = plan.smem_bytes;
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_fail(err, "decode_sm90_kernel device");
  }
  if (const kvattn_status st =
          set_max_dynamic_smem_once(reinterpret_cast<const void*>(variant.kernel), device,
                                    static_cast<int>(smem), variant.opted_in, "decode_sm90_kernel");
      st != KVATTN_OK) {
    return st;
  }
  const dim3 grid(static_cast<unsigned>(params.balanced_ctas));  // the plan's grid
  return launch_kernel(
      "decode_sm90_kernel", variant.kernel,
      {grid, dim3(S::threads(producer_warps, consumer_warps)), smem, stream, plan.early_launch}, params);
}

}  // namespace kvattn::cuda

#if KVATTN_DECODE_TIMELINE
// The developer timeline (timeline.cuh): `count` words of g_decode_timeline (kTlSlots a CTA) into host
// memory after the stream's work; returns the cudaError_t.
extern "C" __attribute__((visibility("default"))) int kvattn_debug_decode_timeline(unsigned long long* host,
                                                                                   int count) {
  using namespace kvattn::cuda::sm90;
  if (cudaDeviceSynchronize() != cudaSuccess) return static_cast<int>(cudaGetLastError());
  const int n = count < kTlMaxCtas * kTlSlots ? count : kTlMaxCtas * kTlSlots;
  return static_cast<int>(cudaMemcpyFromSymbol(host, g_decode_timeline, sizeof(unsigned long long) * n));
}
// The layout of those words: slots a CTA, pieces a CTA with stamps, slots a piece (the script checks it).
extern "C" __attribute__((visibility("default"))) void kvattn_debug_decode_timeline_layout(int* slots,
                                                                                           int* max_pieces,
                                                                                           int* per_piece) {
  using namespace kvattn::cuda::sm90;
  *slots = kTlSlots;
  *max_pieces = kTlMaxPieces;
  *per_piece = kTlPerPiece;
}
#endif
