#include "mlframework/amp/UnscaleWorkspace.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/Validation.hpp"

namespace mlframework::amp::detail {

template <typename Allocate>
UnscaleWorkspace::Split UnscaleWorkspace::SplitList(const GradientMap& gradients, std::span<const TensorPtr> list,
                                                    Allocate&& allocate) {
  // The kept buffer each 16-bit gradient takes (null: a new one), chosen before anything changes.
  std::vector<Buffer*> chosen;
  std::vector<TensorPtr> like;
  std::size_t index = 0;
  for (const auto& [name, tensor] : gradients) {
    const TensorPtr& gradient = list[index++];
    if (gradient->GetDataType() == DataType::Float32) {
      continue;
    }
    Buffer* pick = nullptr;
    if (const auto cached = buffers_.find(name); cached != buffers_.end()) {
      for (Buffer& buffer : cached->second) {
        if (Free(buffer) && mlframework::detail::ScaleStateOwner::Fits(*buffer.tensor, *gradient)) {
          pick = &buffer;
          break;
        }
      }
    }
    chosen.push_back(pick);
    if (pick == nullptr) {
      like.push_back(gradient);
    }
  }
  std::vector<TensorPtr> fresh;
  if (!like.empty()) {
    fresh = allocate(std::span<const TensorPtr>(like));  // on failure nothing has changed
  }
  Split split;
  index = 0;
  std::size_t k = 0;
  std::size_t f = 0;
  for (const auto& [name, tensor] : gradients) {
    const TensorPtr& gradient = list[index++];
    if (gradient->GetDataType() == DataType::Float32) {
      split.in_place.push_back(gradient);
      split.result.emplace_hint(split.result.end(), name, gradient);
      continue;
    }
    Buffer* pick = chosen[k++];
    const TensorPtr buffer = pick != nullptr ? pick->tensor : std::move(fresh[f++]);
    if (pick != nullptr) {
      pick->step = step_;
    }
    std::vector<Buffer>& kept = buffers_[name];
    // Buffers of an earlier shape that nobody holds any more are dropped (the one taken is held by `buffer`).
    std::erase_if(kept, [&](const Buffer& b) {
      return b.tensor.use_count() == 1 && !mlframework::detail::ScaleStateOwner::Fits(*b.tensor, *gradient);
    });
    if (pick == nullptr) {
      kept.push_back(Buffer{.tensor = buffer, .step = step_});
    }
    split.src.push_back(gradient);
    split.dst.push_back(buffer);
    split.result.emplace_hint(split.result.end(), name, buffer);
  }
  return split;
}

UnscaledGradients UnscaleWorkspace::Run(const GradientMap& gradients, float inverse_scale, float* amax) {
  const std::vector<TensorPtr> list =
      mlframework::detail::LossScalingList(gradients);  // ArgumentNullError naming a null entry
  // One contiguous FP32 buffer per device for all new ones: the cast streams its output like one
  // flat tensor instead of thousands of scattered small ones (core/Tensor.hpp).
  Split split = SplitList(gradients, list,
                          [](std::span<const TensorPtr> like) { return ZerosContiguousLike(like, DataType::Float32); });
  bool overflow = false;
  if (amax != nullptr) {
    NonFiniteAndAmax in_place;
    NonFiniteAndAmax cast;
    if (!split.in_place.empty()) {
      in_place = UnscaleCheckAndAmax(split.in_place, inverse_scale);
    }
    if (!split.src.empty()) {
      cast = CastIntoAndAmax(split.src, split.dst, inverse_scale);
    }
    *amax = std::max(in_place.Amax, cast.Amax);
    return UnscaledGradients{std::move(split.result), in_place.FoundNonFinite || cast.FoundNonFinite};
  }
  if (!split.in_place.empty()) {
    overflow = UnscaleAndCheck(split.in_place, inverse_scale);
  }
  if (!split.src.empty()) {
    overflow = CastInto(split.src, split.dst, inverse_scale) || overflow;
  }
  return UnscaledGradients{std::move(split.result), overflow};
}

GradientMap UnscaleWorkspace::Run(const GradientMap& gradients, std::span<const TensorPtr> list,
                                  mlframework::detail::ScaleStateOwner& owner) {
  owner.Place(list, "gradients");
  Split split = SplitList(gradients, list, [](std::span<const TensorPtr> like) { return Float32OutputsLike(like); });
  owner.Unscale(split.in_place, split.src, split.dst);
  return std::move(split.result);
}

TensorPtr UnscaleWorkspace::RunOne(const TensorPtr& gradient, float inverse_scale, bool* overflow) {
  mlframework::detail::RequireLossScalable(gradient, "gradient");
  const std::vector<TensorPtr> src{gradient};
  const bool in_place = gradient->GetDataType() == DataType::Float32;
  const std::vector<TensorPtr> dst{in_place ? gradient
                                            : Zeros(gradient->GetShape(), DataType::Float32, gradient->GetDevice())};
  const bool found = in_place ? UnscaleAndCheck(src, inverse_scale) : CastInto(src, dst, inverse_scale);
  if (overflow != nullptr) {
    *overflow = found;
  }
  return dst[0];
}

void RequireScale(float scale, const char* parameter) {
  mlframework::detail::RequirePositive(scale, parameter);
  if (!std::isfinite(InverseScale(scale))) {
    throw ArgumentError(parameter,
                        "is so small that its inverse overflows float, got " + mlframework::detail::Show(scale));
  }
}

}  // namespace mlframework::amp::detail
