#pragma once
// Private: when the library's CPU work forks threads, and how many (core/Threads.hpp).

#include <cstddef>

#include <mlframework/core/Threads.hpp>

namespace mlframework::detail {

// Elements below which a list runs on the calling thread: waking OpenMP's threads costs more
// than it saves on a smaller list. An estimate for an idle machine (about where one thread's
// pass pays for a fork); bench_multi_tensor's threads/ cases measure the crossover, and
// MLFW_PARALLEL_MIN_ELEMENTS (read once) overrides the threshold to do so (docs/cpu-backend.md,
// "Threads beside the framework's").
inline constexpr std::size_t kParallelMinElements = std::size_t{1} << 18;

// kParallelMinElements, or MLFW_PARALLEL_MIN_ELEMENTS when set to a number.
std::size_t ParallelMinElements();

// The threads for a parallel region over @p elements: NumThreads(), or 1 below ParallelMinElements().
inline int RegionThreads(std::size_t elements) { return elements < ParallelMinElements() ? 1 : NumThreads(); }

}  // namespace mlframework::detail
