#pragma once
// Private: the CUDA backend's FP8 entry points (core/Float8Cast.hpp), a base of the backend
// class (CudaBackend.cpp) kept in files of their own.

#include <cstddef>
#include <span>

#include <mlframework/core/DeviceScaling.hpp>

namespace mlframework::backends::cuda {

/// The FP8 kernels of TensorBackend over CUDA tensors. Core has checked the arguments (one
/// backend and one device for every tensor of a call, dtypes, counts, the per-tensor FP32
/// arrays), so these stage the lists and queue the kernels (Float8Cast.cuh) without waiting.
class CudaFloat8Backend : public DeviceScalingBackend {
 public:
  void AmaxInto(std::span<const ITensor* const> tensors, ITensor& amax) const override;
  void ScaledCastToFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst, const ITensor& scale,
                          ITensor* amax) const override;
  void DequantizeFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                        const ITensor& scale_inv) const override;

  /// The FP8 block gradient wire's encoder and decoding sum (Float8Wire.cuh, defined in
  /// CudaFloat8Wire.cpp): Float8BlockReduce.hpp's reductions have checked the tensors, so these
  /// queue one kernel each on the device's stream without waiting.
  void EncodeFloat8Blocks(const ITensor& values, const Float8BlockRuns& runs, ITensor& codes,
                          ITensor& scale_inv) const override;
  void DecodeSumFloat8Blocks(const ITensor& codes, const ITensor& scale_inv, std::size_t parts, std::size_t length,
                             ITensor& out, std::size_t offset) const override;
};

}  // namespace mlframework::backends::cuda
