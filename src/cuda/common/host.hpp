// Host-side helpers shared by the launchers: device selection, CUDA error -> status, device properties.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "api/status.hpp"
#include "cuda/common/device_error.cuh"

namespace kvattn::cuda {

// Makes `device_id` current for the scope and restores the previous device on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_id) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device_id) status_ = cudaSetDevice(device_id);
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && status_ == cudaSuccess) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
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

// The device's error record (device_errors.cu), for the kernels to write into.
kvattn_status device_error_record(DeviceErrorRecord** rec);

// Multiprocessors and opt-in shared memory per block of the current device.
struct DeviceLimits {
  int sm_count = 0;
  int max_smem_per_block = 0;
  int smem_per_sm = 0;
  int cc_major = 0;  // compute capability: 9 and up launch dependent kernels early (PDL)
};
kvattn_status current_device_limits(DeviceLimits* limits);

}  // namespace kvattn::cuda
