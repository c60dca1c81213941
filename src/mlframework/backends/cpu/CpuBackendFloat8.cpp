// The CPU backend's FP8 entry points (TensorBackend.hpp, core/Float8Cast.hpp): core has checked
// every argument, so these read the per-tensor FP32 tensors' host memory and run the kernels.

#include <span>

#include "mlframework/backends/cpu/CpuBackend.hpp"
#include "mlframework/backends/cpu/Float8Kernels.hpp"

namespace mlframework::backends::cpu {

namespace {

const float* FloatsOf(const ITensor& tensor) { return reinterpret_cast<const float*>(tensor.HostBytes().data()); }

float* MutableFloatsOf(ITensor& tensor) { return reinterpret_cast<float*>(tensor.MutableHostBytes().data()); }

}  // namespace

void CpuBackend::AmaxInto(std::span<const ITensor* const> tensors, ITensor& amax) const {
  Float8AmaxKernel(tensors, MutableFloatsOf(amax));
}

void CpuBackend::ScaledCastToFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                    const ITensor& scale, ITensor* amax) const {
  ScaledCastToFloat8Kernel(src, dst, FloatsOf(scale), amax != nullptr ? MutableFloatsOf(*amax) : nullptr);
}

void CpuBackend::DequantizeFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                  const ITensor& scale_inv) const {
  DequantizeFloat8Kernel(src, dst, FloatsOf(scale_inv));
}

}  // namespace mlframework::backends::cpu
