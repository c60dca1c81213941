#pragma once
// Private: the unscale-and-check pass and the cached scale tensors shared by the built-in scalers.
//
// FP32 gradients are unscaled in place with the fused UnscaleAndCheck kernel; FP16/BF16
// gradients are written as FP32 (times the inverse scale) into buffers kept here and reused
// while names, shapes, devices and backends match, with the fused cast, which reports non-finite
// values it wrote. Each group is one multi-tensor call, so the whole list is read once and
// written once.
//
// A buffer handed out is written again from the next step on (BeginStep(), the scaler's
// ScaleLoss()), or within the step once nobody but the workspace holds it: several unscales of
// one step (two optimizers whose gradients share names, the clipping flow's result kept while
// another list is unscaled) each get their own buffers, and the steps after reuse them all.

#include <cstdint>
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
  // A new step starts: every buffer may be written again, also one a caller still holds.
  void BeginStep() noexcept { ++step_; }

 private:
  // An FP32 buffer and the step it was last handed out in.
  struct Buffer {
    TensorPtr tensor;
    std::uint64_t step = 0;
  };
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

  // Whether @p buffer may be written now: handed out in an earlier step, or held by nobody else.
  bool Free(const Buffer& buffer) const { return buffer.step != step_ || buffer.tensor.use_count() == 1; }

  std::map<std::string, std::vector<Buffer>> buffers_;  // by gradient name: one per unscale of a step
  std::uint64_t step_ = 0;
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
