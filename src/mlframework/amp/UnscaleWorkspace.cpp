#include "mlframework/amp/UnscaleWorkspace.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

namespace mlframework::amp::detail {

UnscaledGradients UnscaleWorkspace::Run(const GradientMap& gradients, float inverse_scale) {
  const std::vector<TensorPtr> list = TensorList(gradients);  // ArgumentNullError naming a null entry
  std::vector<TensorPtr> in_place;
  std::vector<TensorPtr> cast_src;
  std::vector<TensorPtr> cast_dst;
  UnscaledGradients result;
  AllocateBuffers(gradients, list);
  std::size_t index = 0;
  for (const auto& [name, tensor] : gradients) {
    const TensorPtr& gradient = list[index++];
    if (gradient->GetDataType() == DataType::Float32) {
      in_place.push_back(gradient);
      result.Gradients.emplace(name, gradient);
      continue;
    }
    const TensorPtr& buffer = buffers_.at(name);
    cast_src.push_back(gradient);
    cast_dst.push_back(buffer);
    result.Gradients.emplace(name, buffer);
  }
  bool overflow = false;
  if (!in_place.empty()) {
    overflow = UnscaleAndCheck(in_place, inverse_scale);
  }
  if (!cast_src.empty()) {
    overflow = CastInto(cast_src, cast_dst, inverse_scale) || overflow;
  }
  result.Overflow = overflow;
  return result;
}

void UnscaleWorkspace::AllocateBuffers(const GradientMap& gradients, std::span<const TensorPtr> list) {
  std::vector<std::string> names;
  std::vector<TensorPtr> like;
  std::size_t index = 0;
  for (const auto& [name, tensor] : gradients) {
    const TensorPtr& gradient = list[index++];
    if (gradient->GetDataType() == DataType::Float32) {
      continue;
    }
    const auto cached = buffers_.find(name);
    if (cached == buffers_.end() || cached->second->GetShape() != gradient->GetShape() ||
        cached->second->GetDevice() != gradient->GetDevice()) {
      names.push_back(name);
      like.push_back(gradient);
    }
  }
  // One contiguous FP32 buffer per device for all new ones: the cast streams its output like one
  // flat tensor instead of thousands of scattered small ones (core/Tensor.hpp).
  std::vector<TensorPtr> fresh = ZerosContiguousLike(like, DataType::Float32);
  for (std::size_t i = 0; i < names.size(); ++i) {
    buffers_[names[i]] = std::move(fresh[i]);
  }
}

GradientMap UnscaleWorkspace::RunOnDevice(const GradientMap& gradients, std::span<const TensorPtr> list,
                                          const DeviceScalingBackend& backend, DeviceScaleState& state) {
  std::vector<ITensor*> in_place;
  std::vector<const ITensor*> cast_src;
  std::vector<ITensor*> cast_dst;
  GradientMap result;
  std::size_t index = 0;
  for (const auto& [name, tensor] : gradients) {
    const TensorPtr& gradient = list[index++];
    if (gradient->GetDataType() == DataType::Float32) {
      in_place.push_back(gradient.get());
      result.emplace(name, gradient);
      continue;
    }
    TensorPtr& buffer = buffers_[name];
    if (!buffer || buffer->GetShape() != gradient->GetShape() || buffer->GetDevice() != gradient->GetDevice() ||
        DeviceScalingOf(*buffer) != &backend) {
      buffer = gradient->CastTo(DataType::Float32);  // same backend and device; overwritten below
    }
    cast_src.push_back(gradient.get());
    cast_dst.push_back(buffer.get());
    result.emplace(name, buffer);
  }
  if (!in_place.empty()) {
    backend.UnscaleWithState(in_place, state);
  }
  if (!cast_src.empty()) {
    backend.CastUnscaledWithState(cast_src, cast_dst, state);
  }
  return result;
}

TensorPtr UnscaleWorkspace::RunOne(const TensorPtr& gradient, float inverse_scale, bool* overflow) {
  if (!gradient) {
    throw ArgumentNullError("gradient");
  }
  const std::vector<TensorPtr> src{gradient};
  if (gradient->GetDataType() == DataType::Float32) {
    const bool found = UnscaleAndCheck(src, inverse_scale);
    if (overflow != nullptr) {
      *overflow = found;
    }
    return gradient;
  }
  const std::vector<TensorPtr> dst{Zeros(gradient->GetShape(), DataType::Float32, gradient->GetDevice())};
  const bool found = CastInto(src, dst, inverse_scale);
  if (overflow != nullptr) {
    *overflow = found;
  }
  return dst[0];
}

float InverseScale(float scale) { return static_cast<float>(1.0 / static_cast<double>(scale)); }

void RequireScale(float scale, const char* parameter) {
  if (!std::isfinite(scale) || scale <= 0.0f) {
    std::ostringstream text;
    text << "must be finite and > 0, got " << scale;
    throw ArgumentError(parameter, text.str());
  }
  if (!std::isfinite(InverseScale(scale))) {
    std::ostringstream text;
    text << "is so small that its inverse overflows float, got " << scale;
    throw ArgumentError(parameter, text.str());
  }
}

}  // namespace mlframework::amp::detail
