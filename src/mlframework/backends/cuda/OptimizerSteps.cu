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

// Explicit rounding intrinsics throughout: PyTorch's single-tensor Adam and SGD op by op, with a
// fused multiply-add (__fmaf_rn) exactly where PyTorch's vectorised CPU kernels fuse one and
// everything else rounded on its own (no contraction, the IEEE square root and division): the
// CPU backend's AVX2/AVX-512 bits (AdamStepScalars, SGDStepScalars).
__global__ void __launch_bounds__(kBlockThreads)
    AdamKernel(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total, AdamStepScalars s,
               const std::int32_t* skip_flag, const float* step_count) {
  if (step_count != nullptr) {
    // optimizers::AdamStepScalarsFor()'s arithmetic: doubles, each constant rounded to FP32 once.
    const double step = static_cast<double>(*step_count) + 1.0;
    const double bias_correction1 = 1.0 - pow(s.BiasCorrection.Beta1, step);
    const double bias_correction2 = 1.0 - pow(s.BiasCorrection.Beta2, step);
    s.StepSize = static_cast<float>(s.BiasCorrection.LearningRate / bias_correction1);
    s.BiasCorrection2Sqrt = static_cast<float>(sqrt(bias_correction2));
  }
  const bool small_weight = fabsf(s.FirstMomentWeight) < 0.5f;
  const float first_weight_minus_one = __fsub_rn(s.FirstMomentWeight, 1.0f);
  const float neg_step_size = -s.StepSize;
  ForEachElementOfChunk(entries, count, total, skip_flag, [&](const OptimizerEntry& e, std::uint64_t i) {
    float w = e.parameter[i];
    const float g = e.gradient[i];
    const float d = s.L2 != 0.0f ? __fmaf_rn(w, s.L2, g) : g;
    if (s.Decay != 1.0f) {
      w = __fmul_rn(w, s.Decay);
    }
    const float m_old = e.first[i];
    const float diff = __fsub_rn(d, m_old);
    const float m =
        small_weight ? __fmaf_rn(s.FirstMomentWeight, diff, m_old) : __fmaf_rn(first_weight_minus_one, diff, d);
    const float v = __fmaf_rn(__fmul_rn(s.SecondMomentWeight, d), d, __fmul_rn(e.second[i], s.Beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.BiasCorrection2Sqrt), s.Epsilon);
    const float updated = __fadd_rn(w, __fdiv_rn(__fmul_rn(neg_step_size, m), denom));
    e.first[i] = m;
    e.second[i] = v;
    e.parameter[i] = updated;
    WriteCopy(e, i, updated);
  });
}

__global__ void __launch_bounds__(kBlockThreads)
    SGDKernel(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total, SGDStepScalars s,
              const std::int32_t* skip_flag, const float* step_count) {
  if (step_count != nullptr) {
    s.FirstStep = *step_count == 0.0f;
  }
  const float neg_lr = -s.LearningRate;
  ForEachElementOfChunk(entries, count, total, skip_flag, [&](const OptimizerEntry& e, std::uint64_t i) {
    const float w = e.parameter[i];
    const float g = e.gradient[i];
    float d = s.WeightDecay != 0.0f ? __fmaf_rn(w, s.WeightDecay, g) : g;
    if (e.first != nullptr) {
      const float b = s.FirstStep ? d : __fmaf_rn(d, s.GradientWeight, __fmul_rn(e.first[i], s.Momentum));
      e.first[i] = b;
      d = s.Nesterov ? __fmaf_rn(b, s.Momentum, d) : b;
    }
    const float updated = __fmaf_rn(d, neg_lr, w);
    e.parameter[i] = updated;
    WriteCopy(e, i, updated);
  });
}

__global__ void AdvanceStepCountKernel(float* step_count, const std::int32_t* skip_flag) {
  if (skip_flag == nullptr || *skip_flag == 0) {
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
