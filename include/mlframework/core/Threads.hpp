#pragma once
/// @file Threads.hpp
/// @brief How many threads the library's CPU kernels use.

#include <mlframework/export.hpp>

namespace mlframework {

/// Sets how many threads the library's CPU work uses: the fused multi-tensor kernels (unscale,
/// check, cast, norms), the optimizers' fused steps, the FP8 kernels and list planning, each an
/// OpenMP parallel region of at most @p threads threads. @p threads = 0 returns to the default,
/// OpenMP's own count (`omp_get_max_threads()`: `OMP_NUM_THREADS` when set, else one per core).
/// The setting is the library's alone: the framework's OpenMP regions (and OpenBLAS', torch's)
/// keep theirs. Lists too small to pay for waking threads run on the calling thread whatever
/// the setting (see docs/cpu-backend.md, "Threads beside the framework's", for the threshold). Call it
/// between steps (a kernel already running keeps its count). ArgumentError naming `threads`
/// when negative, nothing changed.
MLFRAMEWORK_EXPORT void SetNumThreads(int threads);

/// The threads the library's CPU kernels use: the SetNumThreads() value, or OpenMP's count
/// (`omp_get_max_threads()` of the calling thread) when none is set.
MLFRAMEWORK_EXPORT int NumThreads();

}  // namespace mlframework
