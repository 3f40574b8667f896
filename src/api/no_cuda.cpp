// The CUDA entry points of backend.hpp for a build without the CUDA backend: every one says so.
#ifndef KVATTN_WITH_CUDA

#include "api/backend.hpp"
#include "api/status.hpp"

namespace kvattn {
namespace {
kvattn_status no_cuda() {
  return fail(KVATTN_ERROR_UNSUPPORTED, "kvattn was built without the CUDA backend (device_type=CUDA)");
}
}  // namespace

bool cuda_available() {
  return false;
}
kvattn_status cuda_fwd_resolve(const FwdProblem&, CudaFwdCall*) {
  return no_cuda();
}
kvattn_status cuda_fwd(const FwdProblem&, const CudaFwdCall&) {
  return no_cuda();
}
kvattn_status cuda_append(const AppendProblem&) {
  return no_cuda();
}
kvattn_status cuda_combine(const CombineProblem&) {
  return no_cuda();
}
kvattn_status cuda_device_errors(int, void*) {
  return no_cuda();
}

}  // namespace kvattn

#endif  // KVATTN_WITH_CUDA
