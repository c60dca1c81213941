#include "mlframework/core/Validation.hpp"

#include <cmath>
#include <sstream>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

namespace mlframework::detail {

std::string Show(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

void RequirePositive(double value, const char* parameter) {
  if (!std::isfinite(value) || value <= 0.0) {
    throw ArgumentError(parameter, "must be finite and > 0, got " + Show(value));
  }
}

void RequireNonNegative(double value, const char* parameter) {
  if (!(value >= 0.0) || !std::isfinite(value)) {
    throw ArgumentError(parameter, "must be finite and >= 0, got " + Show(value));
  }
}

void RequireStepIndex(std::int64_t step) {
  if (step < 0) {
    throw ArgumentError("step", "must be >= 0 (the framework's step index), got " + std::to_string(step));
  }
}

void ThrowMovedFrom(std::string_view owner) {
  throw InvalidOperationError(std::string(owner) + " was moved from; use the object it was moved into");
}

namespace {

[[noreturn]] void ThrowNotLossScalable(DataType dtype, const std::string& parameter) {
  // FP8 training scales each tensor by its own amax (an fp8 scaling recipe), not the loss.
  throw ArgumentError(parameter, "is " + std::string(ToString(dtype)) +
                                     ": loss scaling refuses FP8 gradients (FP8 tensors need per-tensor "
                                     "scales, see fp8::DelayedScaling and fp8::CurrentScaling)");
}

}  // namespace

void RequireLossScalable(const ITensor& tensor, std::string_view parameter) {
  const DataType dtype = tensor.GetDataType();
  if (IsFloat8(dtype)) {
    ThrowNotLossScalable(dtype, std::string(parameter));
  }
}

void RequireLossScalable(const TensorPtr& tensor, std::string_view parameter) {
  if (!tensor) {
    throw ArgumentNullError(std::string(parameter));
  }
  RequireLossScalable(*tensor, parameter);
}

void RequireLossScalableGradient(const ITensor& tensor, const std::string& name) {
  const DataType dtype = tensor.GetDataType();
  if (IsFloat8(dtype)) {
    ThrowNotLossScalable(dtype, "gradients[\"" + name + "\"]");
  }
}

std::vector<TensorPtr> LossScalingList(const GradientMap& gradients) {
  std::vector<TensorPtr> list = TensorList(gradients);
  std::size_t index = 0;
  for (const auto& entry : gradients) {
    RequireLossScalableGradient(*list[index++], entry.first);
  }
  return list;
}

void RequireLossScalable(std::span<const TensorPtr> tensors, const char* name) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) {
      throw ArgumentNullError(std::string(name) + "[" + std::to_string(i) + "]");
    }
    const DataType dtype = tensors[i]->GetDataType();
    if (IsFloat8(dtype)) {
      ThrowNotLossScalable(dtype, std::string(name) + "[" + std::to_string(i) + "]");
    }
  }
}

}  // namespace mlframework::detail
