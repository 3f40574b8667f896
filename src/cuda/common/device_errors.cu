// The device's error record and kvattn_device_errors: read it after a stream synchronization, clear it,
// and turn it into a message naming the argument, the index and the value.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "api/backend.hpp"
#include "cuda/common/device_error.cuh"
#include "cuda/common/host.hpp"

namespace kvattn::cuda {
namespace {

// One record per device (a __device__ variable exists once in each device's context).
__device__ DeviceErrorRecord g_device_error;

std::string s(int64_t x) {
  return std::to_string(x);
}

std::string format(const DeviceErrorRecord& r) {
  const std::string idx = "[" + s(r.index) + "]";
  switch (r.arg) {
    case ErrorArg::cu_seqlens_q:
    case ErrorArg::cu_seqlens_k_new:
    case ErrorArg::cu_seqlens_k: {
      const std::string name = r.arg == ErrorArg::cu_seqlens_q       ? "cu_seqlens_q"
                               : r.arg == ErrorArg::cu_seqlens_k_new ? "cu_seqlens_k_new"
                                                                     : "cu_seqlens_k";
      if (r.kind == ErrorKind::decreasing) {
        return name + idx + " = " + s(r.value) + " is smaller than the entry before it (" + s(r.bound) +
               "): must be non-decreasing";
      }
      if (r.kind == ErrorKind::out_of_range) return name + idx + " = " + s(r.value) + " is negative";
      if (r.aux == 1) {
        const char* max = r.arg == ErrorArg::cu_seqlens_q ? "max_seqlen_q" : "max_seqlen_k_new (s_new)";
        return name + idx + ": sequence length " + s(r.value) + " exceeds " + max + " = " + s(r.bound);
      }
      return name + idx + " = " + s(r.value) + " exceeds the number of rows (" + s(r.bound) + ")";
    }
    case ErrorArg::seqused_q:
      return "seqused_q" + idx + " = " + s(r.value) + " is outside [0, " + s(r.bound) +
             "] (the query length)";
    case ErrorArg::cache_batch_idx:
      if (r.kind == ErrorKind::duplicate) {
        return "cache_batch_idx" + idx + " = " + s(r.value) + " repeats cache_batch_idx[" + s(r.aux) +
               "]: duplicate rows are an error together with an append (k, v)";
      }
      return "cache_batch_idx" + idx + " = " + s(r.value) + " is outside [0, " + s(r.bound) + ")";
    case ErrorArg::cache_seqlens:
      if (r.value < 0) return "cache_seqlens" + idx + " = " + s(r.value) + " is negative";
      return "cache_seqlens" + idx + " = " + s(r.value) + " plus " + s(r.aux) +
             " new tokens = " + s(r.value + r.aux) + " exceeds " +
             (r.bound == kMaxSequenceKeys ? "the most keys a sequence may hold, " : "the capacity ") +
             s(r.bound);
    case ErrorArg::cache_leftpad:
      return "cache_leftpad" + idx + " = " + s(r.value) + " is outside [0, cache_seqlens" + idx + " = " +
             s(r.bound) + "]";
    case ErrorArg::page_table:
      return "page_table[" + s(r.aux) + ", " + s(r.index) + "] = " + s(r.value) +
             " is outside [0, num_pages = " + s(r.bound) + ")";
    case ErrorArg::rotary_seqlens: {
      const std::string name = r.aux == 1 ? "cache_seqlens (the default rotary_seqlens)" : "rotary_seqlens";
      return name + idx + ": rotary position " + s(r.value) + " is outside [0, seqlen_ro = " + s(r.bound) +
             ")";
    }
    case ErrorArg::slot_mapping:
      return "slot_mapping" + idx + " = " + s(r.value) +
             " is outside the cache (num_pages * page_size = " + s(r.bound) + ")";
    case ErrorArg::kv_indptr:
      return "kv_indptr" + idx + " = " + s(r.value) + " is outside [" + s(r.aux) + ", nnz = " + s(r.bound) +
             "] (the kv_indices entries; must be non-decreasing)";
    case ErrorArg::kv_indices:
      return "kv_indices" + idx + " = " + s(r.value) + " (a page of kv_indptr row " + s(r.aux) +
             ") is outside [0, num_pages = " + s(r.bound) + ")";
    case ErrorArg::none:
      break;
  }
  return "device-side index error (unknown argument " + s(static_cast<int>(r.arg)) + ")";
}

}  // namespace

kvattn_status device_error_record(DeviceErrorRecord** rec) {
  const cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(rec), g_device_error);
  if (err != cudaSuccess) return cuda_fail(err, "locating the device error record");
  return KVATTN_OK;
}

namespace {

constexpr int kCachedDevices = 64;

kvattn_status query_device(int device_id, DeviceInfo* info) {
  DeviceGuard guard(device_id);  // the error record's address is the current device's
  if (const kvattn_status s = device_status(guard, device_id); s != KVATTN_OK) return s;
  int major = 0, minor = 0;
  cudaError_t err = cudaDeviceGetAttribute(&info->shape.sm_count, cudaDevAttrMultiProcessorCount, device_id);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&info->shape.max_smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                 device_id);
  }
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&info->shape.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                 device_id);
  }
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id);
  if (err != cudaSuccess) return cuda_fail(err, "reading the properties of device_id " + s(device_id));
  info->shape.arch = 10 * major + minor;
  // Peak DRAM bandwidth for the plans that weigh it (left 0, unknown, where the driver does not say).
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device_id) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_id) == cudaSuccess) {
    info->shape.dram_bytes_per_us = static_cast<int64_t>(clock_khz) * bus_bits / 4000;  // x 2 (DDR) / 8 bits
  } else {
    cudaGetLastError();  // (only the failed query's error: a caller's pending one is not ours to clear)
  }
  return device_error_record(&info->errors);
}

}  // namespace

kvattn_status device_info(int device_id, const DeviceInfo** info) {
  // Filled once under the mutex, then read lock-free: a slot is published only complete.
  static std::atomic<const DeviceInfo*> cache[kCachedDevices] = {};
  static DeviceInfo storage[kCachedDevices];
  static std::mutex fill;
  if (device_id >= 0 && device_id < kCachedDevices) {
    if ((*info = cache[device_id].load(std::memory_order_acquire)) != nullptr) return KVATTN_OK;
    std::lock_guard<std::mutex> lock(fill);
    if ((*info = cache[device_id].load(std::memory_order_acquire)) != nullptr) return KVATTN_OK;
    DeviceInfo queried{};
    if (const kvattn_status st = query_device(device_id, &queried); st != KVATTN_OK) return st;
    storage[device_id] = queried;
    cache[device_id].store(*info = &storage[device_id], std::memory_order_release);
    return KVATTN_OK;
  }
  thread_local DeviceInfo uncached;  // a device id past the cache: queried every call
  *info = &uncached;
  return query_device(device_id, &uncached);
}

bool env_force_portable() {
  // Read on every call (a getenv, ~0.1 us): tests and A/B runs switch it inside one process.
  const char* v = std::getenv("KVATTN_FORCE_PORTABLE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

kvattn_status set_max_dynamic_smem_once(const void* kernel, int device_id, int bytes,
                                        std::atomic<uint64_t>* done, const char* what) {
  const uint64_t bit = device_id >= 0 && device_id < 64 ? uint64_t{1} << device_id : 0;
  if (bit != 0 && (done->load(std::memory_order_acquire) & bit) != 0) return KVATTN_OK;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return cuda_fail(err, std::string(what) + " shared memory");
  done->fetch_or(bit, std::memory_order_acq_rel);
  return KVATTN_OK;
}

}  // namespace kvattn::cuda

namespace kvattn {
using namespace cuda;

bool cuda_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

kvattn_status cuda_device_errors(int device_id, void* stream) {
  DeviceGuard guard(device_id);
  if (const kvattn_status s = device_status(guard, device_id); s != KVATTN_OK) return s;
  cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return cuda_fail(err, "synchronizing the stream");
  DeviceErrorRecord rec{};
  err = cudaMemcpyFromSymbol(&rec, g_device_error, sizeof(rec));
  if (err != cudaSuccess) return cuda_fail(err, "reading the device error record");
  if (!rec.set) return KVATTN_OK;
  const DeviceErrorRecord empty{};
  err = cudaMemcpyToSymbol(g_device_error, &empty, sizeof(empty));
  if (err != cudaSuccess) return cuda_fail(err, "clearing the device error record");
  return fail(KVATTN_ERROR_DEVICE_INDEX, format(rec));
}

}  // namespace kvattn
