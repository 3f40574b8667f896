// The device's error record and kvattn_device_errors: read it after a stream synchronization, clear it,
// and turn it into a message naming the argument, the index and the value.
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
             " new tokens = " + s(r.value + r.aux) + " exceeds the capacity " + s(r.bound);
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

kvattn_status current_device_limits(DeviceLimits* limits) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&limits->sm_count, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&limits->max_smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  }
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&limits->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  }
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&limits->cc_major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err != cudaSuccess) return cuda_fail(err, "reading the device properties");
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
