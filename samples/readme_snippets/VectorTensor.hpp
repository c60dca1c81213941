#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <mlframework/mlframework.hpp>

// Your framework's own tensor (here: FP32 in a std::vector) plugged into the library.
// Tensors without a fused backend (Backend() returns null) go through these virtuals.
class VectorTensor final : public mlframework::ITensor {
 public:
  explicit VectorTensor(std::vector<float> values) : values_(std::move(values)), shape_{values_.size()} {}
  mlframework::DataType GetDataType() const override { return mlframework::DataType::Float32; }
  mlframework::Device GetDevice() const override { return mlframework::Device::CPU(); }
  const mlframework::Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return values_.size(); }
  mlframework::TensorPtr Multiply(float factor) const override {
    auto copy = std::make_shared<VectorTensor>(values_);
    copy->MultiplyInPlace(factor);
    return copy;
  }
  mlframework::TensorPtr Divide(float divisor) const override { return Multiply(1.0f / divisor); }
  void MultiplyInPlace(float factor) override {
    for (float& v : values_) {
      v *= factor;
    }
  }
  mlframework::TensorPtr Clone() const override { return std::make_shared<VectorTensor>(values_); }
  mlframework::TensorPtr CastTo(mlframework::DataType dtype) const override {
    return mlframework::FromVector(values_, shape_, dtype);  // a CPU-backend tensor of the dtype
  }
  bool HasInf() const override {
    return std::any_of(values_.begin(), values_.end(), [](float v) { return std::isinf(v); });
  }
  bool HasNaN() const override {
    return std::any_of(values_.begin(), values_.end(), [](float v) { return std::isnan(v); });
  }
  double SumOfSquares() const override {
    double sum = 0.0;
    for (const float v : values_) {
      sum += static_cast<double>(v) * v;
    }
    return sum;
  }
  std::vector<float> ToFloatVector() const override { return values_; }
  void CopyFromFloats(std::span<const float> values) override {
    if (values.size() != values_.size()) {
      throw mlframework::ArgumentError(
          "values", "has " + std::to_string(values.size()) + " elements, expected " + std::to_string(values_.size()));
    }
    std::copy(values.begin(), values.end(), values_.begin());
  }

 private:
  std::vector<float> values_;
  mlframework::Shape shape_;
};
