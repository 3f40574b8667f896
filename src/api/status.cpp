// The thread-local last-error message behind kvattn_last_error().
#include "api/status.hpp"

namespace kvattn {
namespace {
// One message per thread: concurrent callers never see each other's errors.
thread_local std::string t_last_error;
}  // namespace

kvattn_status fail(kvattn_status status, const std::string& message) {
  t_last_error = message;
  return status;
}

void clear_error() {
  t_last_error.clear();
}

const char* last_error() {
  return t_last_error.c_str();
}

}  // namespace kvattn
