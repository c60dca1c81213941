#pragma once
// Private: the unscale-and-check pass shared by the built-in scalers.
//
// FP32 gradients are unscaled in place with the fused UnscaleAndCheck kernel;
// FP16/BF16 gradients are written as FP32 (times the inverse scale) into
// buffers kept here and reused while names, shapes and devices match, with the
// fused CastInto, which reports non-finite values it wrote. Each group is one
// multi-tensor call, so the whole list is read once and written once.

#include <map>
#include <span>
#include <string>

#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::amp::detail {

class UnscaleWorkspace {
 public:
  UnscaledGradients Run(const GradientMap& gradients, float inverse_scale);
  // The same split on a device-scaling backend, with the inverse scale read on the device and
  // any non-finite value written ORed into the state's flag: no host synchronisation. Buffers
  // are made with CastTo (a tensor of the gradient's own backend), then reused.
  GradientMap RunOnDevice(const GradientMap& gradients, std::span<const TensorPtr> list,
                          const DeviceScalingBackend& backend, DeviceScaleState& state);
  // A fresh FP32 result for one tensor (no buffer kept); @p overflow, when given, receives the check.
  static TensorPtr RunOne(const TensorPtr& gradient, float inverse_scale, bool* overflow = nullptr);

 private:
  // Makes the FP32 buffers that are missing or no longer fit, for all of them in one allocation
  // per device; on failure nothing changes.
  void AllocateBuffers(const GradientMap& gradients, std::span<const TensorPtr> list);

  std::map<std::string, TensorPtr> buffers_;
};

// 1/scale computed in double, rounded to float once (exact for powers of two).
float InverseScale(float scale);
// "must be finite and > 0, got <value>" as an ArgumentError naming @p parameter.
void RequireScale(float scale, const char* parameter);

}  // namespace mlframework::amp::detail
