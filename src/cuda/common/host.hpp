// Host-side helpers shared by the launchers: device selection, CUDA error -> status, device properties,
// the kernel launch.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "api/status.hpp"
#include "cuda/common/device_error.cuh"
#include "cuda/kernel_table.hpp"

namespace kvattn::cuda {

// Makes `device_id` current for the scope and restores the previous device on exit; when it already was
// current (every call of a one-GPU process) that is one cudaGetDevice and nothing else.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_id) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device_id) {
      status_ = cudaSetDevice(device_id);
      switched_ = status_ == cudaSuccess && previous_ >= 0;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
  bool switched_ = false;  // made device_id current: restore previous_
};

inline kvattn_status cuda_fail(cudaError_t err, const std::string& what) {
  return fail(KVATTN_ERROR_CUDA, what + ": " + cudaGetErrorString(err));
}

// The status of making `device_id` current. No usable device at all is UNSUPPORTED (the caller asked for
// a backend this machine lacks); any other failure is a CUDA error naming the device.
inline kvattn_status device_status(const DeviceGuard& guard, int device_id) {
  if (guard.status() == cudaSuccess) return KVATTN_OK;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return fail(KVATTN_ERROR_UNSUPPORTED,
                std::string("device_type: CUDA, but no CUDA device is usable here (") +
                    (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")");
  }
  return cuda_fail(guard.status(), "device_id " + std::to_string(device_id));
}

// The launch error of the last kernel, if any (does not synchronize).
inline kvattn_status check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_fail(err, std::string("launching ") + kernel);
  return KVATTN_OK;
}

// A kernel launch's shape. early_launch: programmatic dependent launch (common/pdl.cuh), the kernel may
// start while the one ahead of it on the stream ends (the plan decides: AttentionPlan::early_launch).
struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem_bytes;  // dynamic shared memory
  cudaStream_t stream;
  bool early_launch;
};

// kernel(args...) launched with `shape`; the status names the kernel.
template <typename... Params, typename... Args>
kvattn_status launch_kernel(const char* name, void (*kernel)(Params...), const LaunchShape& shape,
                            Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.smem_bytes;
  config.stream = shape.stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = shape.early_launch ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) return cuda_fail(err, std::string("launching ") + name);
  return check_launch(name);
}

// The device's error record (device_errors.cu), for the kernels to write into.
kvattn_status device_error_record(DeviceErrorRecord** rec);

// What kvattn reads of a device, queried on the first call that uses it and cached for the process (the
// attributes cannot change; querying them cost ~0.5 us each per call).
struct DeviceInfo {
  DeviceShape shape;          // arch, SMs, shared memory (kernel_table.hpp)
  DeviceErrorRecord* errors;  // the device's error record (device_errors.cu), for the kernels to write
};

// The cached info of device_id; thread-safe. On failure (no usable device, bad id) fail() was called as
// device_status does.
kvattn_status device_info(int device_id, const DeviceInfo** info);

// The attention kernel table's switch for the portable kernels: KVATTN_FORCE_PORTABLE=1 in the environment
// (read on every call), or the params field force_portable.
bool env_force_portable();

// cudaFuncSetAttribute(max dynamic shared memory) once per (kernel, device): the call costs ~1 us and
// its value outlives the call. `done` is a per-kernel bit set of the devices already set (ids < 64; other
// devices set it every call).
kvattn_status set_max_dynamic_smem_once(const void* kernel, int device_id, int bytes,
                                        std::atomic<uint64_t>* done, const char* what);

}  // namespace kvattn::cuda
