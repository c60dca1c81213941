#include "mlframework/backends/cuda/OptimizerSteps.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/ElementOps.hpp"
#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

namespace {

// The entry holding element `begin`: entries[lo].offset <= begin < entries[lo + 1].offset.
__device__ inline int EntryOf(const OptimizerEntry* entries, std::int32_t count, std::uint64_t begin) {
  int lo = 0;
  int hi = count;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (entries[mid].offset <= begin) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Calls fn(entry, i) for each element i of this block's chunk (thread-strided, entry by entry),
// unless *skip_flag is set.
template <typename Fn>
__device__ inline void ForEachElementOfChunk(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                                             const std::int32_t* skip_flag, Fn&& fn) {
  if (skip_flag != nullptr && *skip_flag != 0) {
    return;  // the scaler found an overflow: the step changes nothing
  }
  const std::uint64_t begin = static_cast<std::uint64_t>(blockIdx.x) * kOptimizerChunk;
  const std::uint64_t end = begin + kOptimizerChunk < total ? begin + kOptimizerChunk : total;
  for (int s = EntryOf(entries, count, begin); s < count && entries[s].offset < end; ++s) {
    const OptimizerEntry& e = entries[s];
    const std::uint64_t next = entries[s + 1].offset;
    const std::uint64_t lo = (begin > e.offset ? begin : e.offset) - e.offset;
    const std::uint64_t hi = (end < next ? end : next) - e.offset;
    for (std::uint64_t i = lo + threadIdx.x; i < hi; i += kBlockThreads) {
      fn(e, i);
    }
  }
}

// The updated parameter into the entry's FP16/BF16 copy (the CPU backend's rounding).
__device__ inline void WriteCopy(const OptimizerEntry& e, std::uint64_t i, float w) {
  if (e.low_precision == nullptr) {
    return;
  }
  if (e.low_precision_dtype == static_cast<std::uint32_t>(DataType::Float16)) {
    static_cast<StoredType<DataType::Float16>*>(e.low_precision)[i] = FromFloat<DataType::Float16>(w);
  } else {
    static_cast<StoredType<DataType::BFloat16>*>(e.low_precision)[i] = FromFloat<DataType::BFloat16>(w);
  }
}

// Explicit rounding intrinsics throughout: no contraction into FMAs and the IEEE square root and
// division, so the CPU kernels' (and the reference optimizers') bits.
__global__ void __launch_bounds__(kBlockThreads)
    AdamKernel(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total, AdamStepScalars s,
               const std::int32_t* skip_flag) {
  const float one_minus_beta1 = __fsub_rn(1.0f, s.Beta1);
  const float one_minus_beta2 = __fsub_rn(1.0f, s.Beta2);
  ForEachElementOfChunk(entries, count, total, skip_flag, [&](const OptimizerEntry& e, std::uint64_t i) {
    const float w = e.parameter[i];
    const float d = __fadd_rn(e.gradient[i], __fmul_rn(s.L2, w));
    const float decayed = __fmul_rn(w, s.Decay);
    const float m = __fadd_rn(__fmul_rn(s.Beta1, e.first[i]), __fmul_rn(one_minus_beta1, d));
    const float v = __fadd_rn(__fmul_rn(s.Beta2, e.second[i]), __fmul_rn(__fmul_rn(one_minus_beta2, d), d));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.BiasCorrection2Sqrt), s.Epsilon);
    const float updated = __fsub_rn(decayed, __fmul_rn(s.StepSize, __fdiv_rn(m, denom)));
    e.first[i] = m;
    e.second[i] = v;
    e.parameter[i] = updated;
    WriteCopy(e, i, updated);
  });
}

__global__ void __launch_bounds__(kBlockThreads)
    SGDKernel(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total, SGDStepScalars s,
              const std::int32_t* skip_flag) {
  ForEachElementOfChunk(entries, count, total, skip_flag, [&](const OptimizerEntry& e, std::uint64_t i) {
    const float w = e.parameter[i];
    const float d = __fadd_rn(e.gradient[i], __fmul_rn(s.WeightDecay, w));
    float step = d;
    if (e.first != nullptr) {
      const float b = s.FirstStep ? d : __fadd_rn(__fmul_rn(s.Momentum, e.first[i]), d);
      e.first[i] = b;
      step = s.Nesterov ? __fadd_rn(d, __fmul_rn(s.Momentum, b)) : b;
    }
    const float updated = __fsub_rn(w, __fmul_rn(s.LearningRate, step));
    e.parameter[i] = updated;
    WriteCopy(e, i, updated);
  });
}

unsigned Blocks(std::uint64_t total) { return static_cast<unsigned>((total + kOptimizerChunk - 1) / kOptimizerChunk); }

}  // namespace

void LaunchAdamStep(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                    const AdamStepScalars& scalars, const std::int32_t* skip_flag, cudaStream_t stream) {
  AdamKernel<<<Blocks(total), kBlockThreads, 0, stream>>>(entries, count, total, scalars, skip_flag);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchSGDStep(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                   const SGDStepScalars& scalars, const std::int32_t* skip_flag, cudaStream_t stream) {
  SGDKernel<<<Blocks(total), kBlockThreads, 0, stream>>>(entries, count, total, scalars, skip_flag);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
