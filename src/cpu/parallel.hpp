// parallel_for: run body(i) for i in [0, n) on up to hardware_concurrency() threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace kvattn::cpu {

// Items are handed out one at a time from a shared counter, so uneven items (long and short sequences)
// balance, and the calling thread works too: if the OS refuses a thread, the others finish the range.
// An exception thrown by body stops the remaining items and is rethrown here after every thread joined
// (an exception escaping a std::thread would terminate the process).
template <class Body>
void parallel_for(int64_t n, const Body& body) {
  if (n <= 0) return;
  const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const int64_t num_threads = std::min(n, hardware);

  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto worker = [&] {
    for (int64_t i = next++; i < n && !stop.load(std::memory_order_relaxed); i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(num_threads - 1);
  for (int64_t t = 1; t < num_threads; ++t) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // fewer threads; the started ones and this one cover the range
    }
  }
  worker();
  for (std::thread& thread : threads) thread.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace kvattn::cpu
