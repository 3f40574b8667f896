// Errors inside the library: a status plus a thread-local message, never an exception across the ABI.
#pragma once

#include <string>

#include "kvattn/kvattn.h"

namespace kvattn {

// Records `message` as this thread's last error and returns `status` (for `return fail(...)`).
kvattn_status fail(kvattn_status status, const std::string& message);
// Clears the last error (every entry point starts with this).
void clear_error();
const char* last_error();

}  // namespace kvattn
