#include <mlframework/core/Threads.hpp>

#include <atomic>
#include <cstdlib>
#include <string>

#include <omp.h>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/ParallelWork.hpp"

namespace mlframework {

namespace {

std::atomic<int> g_threads{0};  // SetNumThreads(); 0: OpenMP's count

}  // namespace

void SetNumThreads(int threads) {
  if (threads < 0) {
    throw ArgumentError("threads", "must be >= 0 (0: OpenMP's default count), got " + std::to_string(threads));
  }
  g_threads.store(threads, std::memory_order_relaxed);
}

int NumThreads() {
  const int threads = g_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : omp_get_max_threads();
}

namespace detail {

std::size_t ParallelMinElements() {
  static const std::size_t kThreshold = [] {
    const char* requested = std::getenv("MLFW_PARALLEL_MIN_ELEMENTS");
    if (requested == nullptr || *requested == '\0') {
      return kParallelMinElements;
    }
    char* end = nullptr;
    const unsigned long long value = std::strtoull(requested, &end, 10);
    return *end == '\0' ? static_cast<std::size_t>(value) : kParallelMinElements;
  }();
  return kThreshold;
}

}  // namespace detail

}  // namespace mlframework
