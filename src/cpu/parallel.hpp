// The CPU backend's threads: one persistent pool per process, and the interrupt flag long calls poll.
//
// Pool size: KVATTN_NUM_THREADS, else OMP_NUM_THREADS (its first entry), else the CPUs this process may
// run on (sched_getaffinity), read once, at the first call that needs the pool. The caller's thread is
// one of the workers, so a size of 1 starts no thread. A call whose work is smaller than a few thousand
// key rows never touches the pool (parallel_for runs it inline): a tiny call costs what its math costs.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>

namespace kvattn::cpu {

// Threads of the pool including the caller (>= 1); "" when the environment is valid, else the message.
int pool_size();
const std::string& pool_config_error();

// Runs body(ctx, i) for every i in [0, n) on up to max_threads threads of the pool (the caller is one),
// handing items out one at a time from a shared counter so that uneven items balance. An exception in
// body stops the remaining items and is rethrown here once every worker is done with the job. Calls
// from several threads at once are safe: a caller that finds the pool busy runs its items itself.
void run_parallel(int64_t n, int max_threads, void (*body)(void* ctx, int64_t i), void* ctx);

template <class Body>
void parallel_for(int64_t n, int max_threads, const Body& body) {
  if (n <= 0) return;
  if (n == 1 || max_threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  run_parallel(
      n, max_threads, [](void* ctx, int64_t i) { (*static_cast<const Body*>(ctx))(i); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// ---- interrupts (kvattn_interrupt): every CPU call running when it is called stops at its next poll.
// A call takes a ticket when it starts and polls whether the interrupt count moved past it, so an
// interrupt never leaks into a call that starts afterwards and nothing needs resetting.
extern std::atomic<uint64_t> g_interrupts;

struct InterruptTicket {
  uint64_t seen = g_interrupts.load(std::memory_order_relaxed);
  bool raised() const { return g_interrupts.load(std::memory_order_relaxed) != seen; }
};

}  // namespace kvattn::cpu
