#pragma once
// Private, device code only (include from .cu files): what the fused optimizer kernels share
// (OptimizerSteps.cu for FP32 masters and states, LowBitSteps.cu for the other formats): the
// found-inf skip, the constants of a step whose count is kept on the device, and the FP16/BF16
// copy of an updated parameter.

#include <cstdint>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/OptimizerStep.hpp>

#include "mlframework/backends/cuda/ElementOps.hpp"

namespace mlframework::backends::cuda {

/// The entry holding index @p index of a list's table: the last of the @p count entries whose
/// first index, @p first_of(entry), is at most @p index (the entries are in increasing order).
template <class Entry, class FirstOf>
__device__ inline int EntryHolding(const Entry* entries, std::int32_t count, std::uint64_t index, FirstOf&& first_of) {
  int lo = 0;
  int hi = count;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first_of(entries[mid]) <= index) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/// True when the scaler found an overflow (@p skip_flag set): the step changes nothing.
__device__ inline bool StepSkipped(const std::int32_t* skip_flag) { return skip_flag != nullptr && *skip_flag != 0; }

/// The scalars of step `*step_count + 1` when the count is kept on the device (null: @p s as it
/// is): optimizers::AdamStepScalarsFor()'s arithmetic, doubles each rounded to FP32 once.
__device__ inline AdamStepScalars AdamScalarsAt(AdamStepScalars s, const float* step_count) {
  if (step_count != nullptr) {
    const double step = static_cast<double>(*step_count) + 1.0;
    const double bias_correction1 = 1.0 - pow(s.BiasCorrection.Beta1, step);
    const double bias_correction2 = 1.0 - pow(s.BiasCorrection.Beta2, step);
    s.StepSize = static_cast<float>(s.BiasCorrection.LearningRate / bias_correction1);
    s.BiasCorrection2Sqrt = static_cast<float>(sqrt(bias_correction2));
  }
  return s;
}

/// SGD's scalars with a device step count: the first step is the one that finds the count at 0.
__device__ inline SGDStepScalars SGDScalarsAt(SGDStepScalars s, const float* step_count) {
  if (step_count != nullptr) {
    s.FirstStep = *step_count == 0.0f;
  }
  return s;
}

/// The updated parameter @p w into element @p i of the FP16/BF16 copy @p low_precision (null:
/// none) of dtype @p dtype, rounded as the CPU backend's cast kernels.
__device__ inline void WriteCopy(void* low_precision, std::uint32_t dtype, std::uint64_t i, float w) {
  if (low_precision == nullptr) {
    return;
  }
  if (dtype == static_cast<std::uint32_t>(DataType::Float16)) {
    static_cast<StoredType<DataType::Float16>*>(low_precision)[i] = FromFloat<DataType::Float16>(w);
  } else {
    static_cast<StoredType<DataType::BFloat16>*>(low_precision)[i] = FromFloat<DataType::BFloat16>(w);
  }
}

}  // namespace mlframework::backends::cuda
