// The persistent thread pool of parallel.hpp.
//
// Workers sleep on a condition variable between jobs; after a job each spins for a short while first, so
// that the next call of a decode loop (milliseconds later) finds it awake. A job is published by bumping
// a generation number; the workers asked to help (the first `helpers` of them) enter it and claim items
// from the job's counter. When the caller has run out of items it closes the job: a helper that wakes
// later (the OS may not run it for milliseconds) stays out, and the caller waits only for those inside. The
// pool is never destroyed (workers may still be asleep in it at exit), and a child process made by fork()
// builds its own (the parent's threads are not in the child).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "cpu/parallel.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVATTN_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define KVATTN_CPU_RELAX() asm volatile("yield")
#else
#define KVATTN_CPU_RELAX() ((void)0)
#endif

namespace kvattn::cpu {

std::atomic<uint64_t> g_interrupts{0};

namespace {

constexpr int kMaxThreads = 1024;
constexpr int kSpinRounds = 4000;  // ~50-100 us of pause instructions before a worker sleeps

struct Job {
  void (*body)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  int64_t n = 0;
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  void work() {
    for (int64_t i = next++; i < n && !stop.load(std::memory_order_relaxed); i = next++) {
      try {
        body(ctx, i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  }
};

// "" and the value, or the message for an invalid value. Only a whole positive decimal number is taken.
bool parse_count(const char* text, int* value) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 1 || v > kMaxThreads) return false;
  *value = int(v);
  return true;
}

int affinity_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

class Pool {
 public:
  Pool() : pid_(getpid()) {
    const char* ours = std::getenv("KVATTN_NUM_THREADS");
    int size = 0;
    if (ours != nullptr && *ours != '\0') {
      if (!parse_count(ours, &size)) {
        error_ = "KVATTN_NUM_THREADS: expected a whole number in [1, " + std::to_string(kMaxThreads) +
                 "], got '" + ours + "' (it is read once, at the first CPU call)";
        size = 1;
      }
    } else {
      // OpenMP's variable: "8" or a nested list "8,2" whose first entry is the outer level.
      std::string omp = std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "";
      omp = omp.substr(0, omp.find(','));
      if (!parse_count(omp.c_str(), &size)) size = affinity_cpus();
    }
    size_ = size;
  }

  pid_t pid() const { return pid_; }
  int size() const { return size_; }
  const std::string& error() const { return error_; }

  void run(int64_t n, int max_threads, void (*body)(void*, int64_t), void* ctx) {
    Job job;
    job.body = body;
    job.ctx = ctx;
    job.n = n;
    const int64_t wanted = std::min<int64_t>({n, int64_t(max_threads), int64_t(size_)}) - 1;
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (wanted <= 0 || !busy.owns_lock()) {  // another thread's job holds the pool: run it here
      job.work();
    } else {
      start_workers(int(wanted));
      const int helpers = std::min(int(wanted), int(workers_.size()));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &job;
        helpers_ = helpers;
        const uint64_t generation = generation_.fetch_add(1, std::memory_order_release) + 1;
        admission_.store(tag(generation), std::memory_order_release);
      }
      wake_.notify_all();
      job.work();
      // The items are all claimed: close the job to helpers that have not woken yet (on a busy machine
      // that can take milliseconds) and wait only for the ones inside it.
      admission_.fetch_or(kClosed, std::memory_order_acq_rel);
      wait_for_helpers();
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  void start_workers(int wanted) {
    while (int(workers_.size()) < wanted) {
      const int index = int(workers_.size());
      try {
        // Never joined or destroyed: the pool lives as long as the process.
        // It starts from the generation before this job's, so it takes the job even if it starts late.
        const uint64_t seen = generation_.load(std::memory_order_relaxed);
        workers_.push_back(new std::thread([this, index, seen] { worker_loop(index, seen); }));
      } catch (const std::system_error&) {
        return;  // fewer helpers; the caller and the started ones cover every item
      }
    }
  }

  void worker_loop(int index, uint64_t seen) {
    for (;;) {
      uint64_t now = seen;
      for (int spin = 0; spin < kSpinRounds && now == seen; ++spin) {
        KVATTN_CPU_RELAX();
        now = generation_.load(std::memory_order_acquire);
      }
      Job* job = nullptr;
      int helpers = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
        seen = generation_.load(std::memory_order_relaxed);
        job = job_;
        helpers = helpers_;
      }
      if (index >= helpers || !enter(seen)) continue;  // not asked, or the job is over: never touch it
      job->work();
      const uint64_t after = admission_.fetch_sub(1, std::memory_order_acq_rel) - 1;
      if ((after & kClosed) && (after & kInside) == 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_one();
      }
    }
  }

  // admission_: the job's generation (low 32 bits) in the high half, kClosed, and the helpers inside.
  static constexpr uint64_t kClosed = uint64_t(1) << 31;
  static constexpr uint64_t kInside = kClosed - 1;
  static uint64_t tag(uint64_t generation) { return (generation & 0xffffffffu) << 32; }

  // A woken helper joins the job of `generation` unless the caller has closed it.
  bool enter(uint64_t generation) {
    uint64_t a = admission_.load(std::memory_order_acquire);
    while ((a & ~(kClosed | kInside)) == tag(generation) && !(a & kClosed)) {
      if (admission_.compare_exchange_weak(a, a + 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  }

  void wait_for_helpers() {
    auto done = [&] { return (admission_.load(std::memory_order_acquire) & kInside) == 0; };
    for (int spin = 0; spin < kSpinRounds; ++spin) {
      if (done()) return;
      KVATTN_CPU_RELAX();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, done);
  }

  const pid_t pid_;
  int size_ = 1;
  std::string error_;
  std::mutex busy_;   // held by the one caller whose job the workers run
  std::mutex mutex_;  // guards job_, helpers_ and the sleeping side of generation_
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};
  Job* job_ = nullptr;
  int helpers_ = 0;
  std::atomic<uint64_t> admission_{0};  // see kClosed
  std::vector<std::thread*> workers_;
};

std::mutex g_pool_mutex;
Pool* g_pool = nullptr;  // leaked on purpose (see the file comment)

Pool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (g_pool == nullptr || g_pool->pid() != getpid()) g_pool = new Pool();
  return *g_pool;
}

}  // namespace

int pool_size() {
  return pool().size();
}

const std::string& pool_config_error() {
  return pool().error();
}

void run_parallel(int64_t n, int max_threads, void (*body)(void*, int64_t), void* ctx) {
  pool().run(n, max_threads, body, ctx);
}

}  // namespace kvattn::cpu
