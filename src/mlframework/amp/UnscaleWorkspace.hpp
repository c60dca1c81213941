#pragma once
// Private: the unscale-and-check pass and the cached scale tensors shared by the built-in scalers.
//
// FP32 gradients are unscaled in place with the fused UnscaleAndCheck kernel; FP16/BF16
// gradients are written as FP32 (times the inverse scale) into buffers kept here and reused
// while names, shapes, devices and backends match, with the fused cast, which reports non-finite
// values it wrote. Each group is one multi-tensor call, so the whole list is read once and
// written once.

#include <map>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/ScaleStateOwner.hpp"

namespace mlframework::amp::detail {

class UnscaleWorkspace {
 public:
  // With a fixed @p inverse_scale on the host (a static scaler). With @p amax, the passes also
  // take the amax of the unscaled values (NonFiniteAndAmax) and write it there.
  UnscaledGradients Run(const GradientMap& gradients, float inverse_scale, float* amax = nullptr);
  // With the scale @p owner holds, read where it lives (placed on @p list, the tensors of
  // @p gradients, first); the overflow goes into the owner's record. No host synchronisation.
  GradientMap Run(const GradientMap& gradients, std::span<const TensorPtr> list,
                  mlframework::detail::ScaleStateOwner& owner);
  // A fresh FP32 result for one tensor (no buffer kept); @p overflow, when given, receives the check.
  static TensorPtr RunOne(const TensorPtr& gradient, float inverse_scale, bool* overflow = nullptr);

 private:
  // The split of @p gradients: FP32 ones in place, the others into their FP32 buffers.
  struct Split {
    std::vector<TensorPtr> in_place;
    std::vector<TensorPtr> src;
    std::vector<TensorPtr> dst;
    GradientMap result;
  };
  // Makes the FP32 buffers that are missing or no longer fit with @p allocate (all of them in
  // one call; on failure nothing changes) and splits the list.
  template <typename Allocate>
  Split SplitList(const GradientMap& gradients, std::span<const TensorPtr> list, Allocate&& allocate);

  std::map<std::string, TensorPtr> buffers_;
};

// A scalar tensor cached for one value; rebuilt only when the value changes.
struct CachedScalar {
  TensorPtr Get(float value) {
    if (!tensor || cached != value) {
      tensor = Scalar(value);
      cached = value;
    }
    return tensor;
  }
  TensorPtr tensor;
  float cached = 0.0f;
};

// The one definition (core/DeviceScaling.hpp).
using mlframework::InverseScale;
// "must be finite and > 0, got <value>" as an ArgumentError naming @p parameter.
void RequireScale(float scale, const char* parameter);

}  // namespace mlframework::amp::detail
