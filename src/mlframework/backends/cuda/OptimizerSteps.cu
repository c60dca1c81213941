#include "mlframework/backends/cuda/OptimizerSteps.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/ElementOps.hpp"
#include "mlframework/backends/cuda/LaunchPlan.hpp"
#include "mlframework/backends/cuda/StepKernels.cuh"
#include "mlframework/core/StepElements.hpp"

namespace mlframework::backends::cuda {

namespace {

// Calls fn(entry, i) for each element i of this block's chunk (thread-strided, entry by entry),
// unless *skip_flag is set.
template <typename Fn>
__device__ inline void ForEachElementOfChunk(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                                             const std::int32_t* skip_flag, Fn&& fn) {
  if (StepSkipped(skip_flag)) {
    return;
  }
  const std::uint64_t begin = static_cast<std::uint64_t>(blockIdx.x) * kOptimizerChunk;
  const std::uint64_t end = begin + kOptimizerChunk < total ? begin + kOptimizerChunk : total;
  for (int s = EntryHolding(entries, count, begin, [](const OptimizerEntry& e) { return e.offset; });
       s < count && entries[s].offset < end; ++s) {
    const OptimizerEntry& e = entries[s];
    const std::uint64_t next = entries[s + 1].offset;
    const std::uint64_t lo = (begin > e.offset ? begin : e.offset) - e.offset;
    const std::uint64_t hi = (end < next ? end : next) - e.offset;
    for (std::uint64_t i = lo + threadIdx.x; i < hi; i += kBlockThreads) {
      fn(e, i);
    }
  }
}

// The element updates are StepElements.hpp's, every operation an explicit rounding intrinsic:
// the CPU backend's AVX2/AVX-512 bits (AdamStepScalars, SGDStepScalars).
__global__ void __launch_bounds__(kBlockThreads)
    AdamKernel(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total, AdamStepScalars s,
               const std::int32_t* skip_flag, const float* step_count) {
  const mlframework::detail::AdamElementConstants c =
      mlframework::detail::AdamConstantsOf(AdamScalarsAt(s, step_count));
  ForEachElementOfChunk(entries, count, total, skip_flag, [&](const OptimizerEntry& e, std::uint64_t i) {
    float w = e.parameter[i];
    float m = e.first[i];
    float v = e.second[i];
    mlframework::detail::AdamUpdate(w, e.gradient[i], m, v, c);
    e.first[i] = m;
    e.second[i] = v;
    e.parameter[i] = w;
    WriteCopy(e.low_precision, e.low_precision_dtype, i, w);
  });
}

__global__ void __launch_bounds__(kBlockThreads)
    SGDKernel(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total, SGDStepScalars s,
              const std::int32_t* skip_flag, const float* step_count) {
  const SGDStepScalars at = SGDScalarsAt(s, step_count);
  ForEachElementOfChunk(entries, count, total, skip_flag, [&](const OptimizerEntry& e, std::uint64_t i) {
    float w = e.parameter[i];
    mlframework::detail::SGDUpdate(w, e.gradient[i], e.first != nullptr ? e.first + i : nullptr, at);
    e.parameter[i] = w;
    WriteCopy(e.low_precision, e.low_precision_dtype, i, w);
  });
}

__global__ void AdvanceStepCountKernel(float* step_count, const std::int32_t* skip_flag) {
  if (!StepSkipped(skip_flag)) {
    *step_count += 1.0f;
  }
}

unsigned Blocks(std::uint64_t total) { return static_cast<unsigned>((total + kOptimizerChunk - 1) / kOptimizerChunk); }

}  // namespace

void LaunchAdamStep(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                    const AdamStepScalars& scalars, const std::int32_t* skip_flag, const float* step_count,
                    cudaStream_t stream) {
  AdamKernel<<<Blocks(total), kBlockThreads, 0, stream>>>(entries, count, total, scalars, skip_flag, step_count);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchSGDStep(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                   const SGDStepScalars& scalars, const std::int32_t* skip_flag, const float* step_count,
                   cudaStream_t stream) {
  SGDKernel<<<Blocks(total), kBlockThreads, 0, stream>>>(entries, count, total, scalars, skip_flag, step_count);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchAdvanceStepCount(float* step_count, const std::int32_t* skip_flag, cudaStream_t stream) {
  AdvanceStepCountKernel<<<1, 1, 0, stream>>>(step_count, skip_flag);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
